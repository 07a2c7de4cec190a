"""The panel of a recorded run (``%mspti panel --run DIR``, ``%mspti run DIR``): one state line
(profiling on in how many ranks, or paused), the run's headline, the stragglers verdict, the
merged summary, every rank's status, the rank heat map and the latency distributions of what the
ranks trace now (the windows since it was turned on: ``Run.snapshot(current=True)``), re-read
from disk every few seconds while any rank is still running. It opens no
session: nothing of the notebook is recorded and the MSPTI subscriber slot stays free. For a job
recorded with ``record`` (``--paused`` or not) it steers the job's profiling: start and stop
buttons, the enable picker (domains and callbacks, as the session panel's), a duration and a
rank selection, each a command through the run directory (:mod:`mspti_lens.runs.control`).
Formatting only: every number comes from the Run (:mod:`mspti_lens.runs.run`).

:class:`RunView` builds what is shown (testable without a front end); :class:`RunPanel` is its
ipywidgets front end, ending in a static view like the control panel's."""

from __future__ import annotations

import html
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

import polars as pl

from ..plots.figure import render_figure
from ..runs.skew import lagging
from .snapshot_repr import SIMULATED_BANNER_HTML
from .tables import Table, count_of

RANK_COLUMNS = ("host", "rank", "status", "state", "windows", "calls", "age_s")
SUMMARY_COLUMNS = (
    "domain",
    "name",
    "num_calls",
    "time_pct",
    "total_ns",
    "avg_ns",
    "med_ns",
    "p99_ns",
    "max_ns",
)
SUMMARY_TOP = 10
WATCHED = ("running", "paused", "stale")  # rank statuses the panel keeps refreshing for
MAX_PLOT_WIDTH = 760  # CSS pixels
PLOT_EVERY_S = 5.0  # the heat map is redrawn at most this often (and only when the run changed)
# The latency distributions of what is on: the functions with the most total time, one figure
# each (a figure of several is two panels wide and shown shrunk to the panel's width).
DISTRIBUTIONS_TOP = 4
# ... redrawn at once when what is on changes, else at most this often (four figures at 2x cost
# about 1.5 s of the kernel's CPU on a loaded machine).
DISTRIBUTIONS_EVERY_S = 10.0


def verdict(run: Any) -> str:
    """One sentence: the slow rank by the stragglers rules, or why there is none (yet)."""
    try:
        s = run.slow_ranks()
    except Exception as e:  # noqa: BLE001 - said in the panel, never raised in a refresh
        return f"no stragglers verdict yet ({e})"
    named = s.filter(pl.col("slow_affect_count") > 0) if len(s) else s
    if not len(named):
        n = int(s["instances"].max()) if len(s) else 0  # type: ignore[arg-type]
        return (
            f"no slow rank: no rank was named in any of {count_of(n, 'collective instance')}"
            if n
            else "no collective instances compared yet (no rank has finished a collective)"
        )
    t = named.row(0, named=True)
    return (
        f"slow rank: {t['rank']} on {t['host']} (named in {t['slow_affect_count']} of "
        f"{count_of(int(t['instances']), 'collective instance')} by msprof-analyze's rule, the rank "
        f"whose collectives are short, and in {t['late_count']} by HTA's latest device start)"
    )


def heatmap_api(run: Any) -> str | None:
    """The function the heat map shows: the HCCL call with the most total time, else the call
    with the most total time, else None (nothing recorded yet)."""
    s = run.summary()
    if not len(s):
        return None
    hccl = s.filter(pl.col("domain") == "hccl")
    return str((hccl if len(hccl) else s).sort("total_ns", descending=True)["name"][0])


@dataclass
class RunView:
    """What one refresh of a run shows."""

    headline: str
    verdict: str
    summary_html: str
    ranks_html: str
    running: bool  # a rank still running or stale: keep refreshing
    finished: bool  # every rank complete
    simulated: bool
    calls: int
    heatmap: str | None  # the function of the heat map
    taken_at: float = 0.0
    control: str = ""  # the job's profiling state and its cost (a run recorded with control)
    waiting: bool = False  # no window yet: the job has started, its ranks have not written
    captures_html: str = ""  # what the run's watchers caught (watch/), newest first
    profiling_on: int = 0  # ranks with profiling on (a run recorded with control)
    # The functions live ranks trace now with a call in the windows since they were turned on
    # (Run.current), by total time there; since when, and after which commands.
    on_names: tuple[str, ...] = ()
    since: float | None = None
    generations: tuple[int, ...] = ()
    recorded_names: tuple[str, ...] = ()  # every recorded function, by total time
    paused: int = 0  # ranks alive with profiling off

    def state(self) -> str:
        """The panel's one state line: whether profiling is on, and where; never "running"
        while every live rank is paused."""
        live = self.profiling_on + self.paused
        if self.running and self.profiling_on:
            return f"● profiling on in {self.profiling_on} of {count_of(live, 'live rank')}"
        if self.running and self.paused:
            return f"❚❚ paused: profiling is off in every live rank ({self.paused}); the job runs on" + (
                "" if self.waiting else ", its windows so far below"
            )
        if self.running:
            return "● waiting for the run's first windows" if self.waiting else "● running"
        if self.finished:
            return "■ every rank has finished"
        return "■ no rank is running (some did not finish: see their status)"

    def html(self, png: bytes | None = None, width: int = 0) -> str:
        from .display import png_html

        img = png_html(png, width) if png else ""
        banner = SIMULATED_BANNER_HTML if self.simulated else ""
        return (
            f"<div class='mspti-lens-run-panel'>{banner}<div><b>{html.escape(self.headline)}</b></div>"
            f"<div class='mspti-lens-verdict' style='margin:4px 0'>{html.escape(self.verdict)}</div>"
            + (f"<div class='mspti-lens-run-cost'>{html.escape(self.control)}</div>" if self.control else "")
            + f"{self.summary_html}{img}{self.ranks_html}{self.captures_html}</div>"
        )


def run_view(run: Any) -> RunView:
    """The run as shown now (``run`` already refreshed by the caller)."""
    from ..runs.control import cost_sentence, read_processes
    from .run_view import headline

    ranks = run.ranks()
    summary = run.summary()
    files = run.files()
    cols = [c for c in SUMMARY_COLUMNS if c in summary.columns]
    procs = [] if "://" in run.root else read_processes(run.root.removeprefix("file://"))
    ranked = ranked_processes(procs)
    traced = traced_callbacks(ranked)
    now = run.snapshot(current=True)  # the windows of what is on now, merged by the Run
    on = now.summary()
    return RunView(
        headline=headline(run),
        # The arrival skew's live verdict follows the stragglers' (runs.skew.lagging).
        verdict=f"{verdict(run)} · {lagging(run)['sentence']}",
        summary_html=Table(
            summary.select(cols), f"every rank merged · top {SUMMARY_TOP} by total time", top=SUMMARY_TOP
        ).html()
        if len(summary)
        else "<p><i>(no calls recorded yet)</i></p>",
        ranks_html=Table(
            ranks.select([c for c in RANK_COLUMNS if c in ranks.columns]).rename({"age_s": "last update"}),
            "ranks, by rank",
            top=0,
            kinds={"last update": "age"},
        ).html(),
        # a stale rank may still write (a loaded machine) or hang: keep watching it
        running=bool(ranks["status"].is_in(WATCHED).any()) if len(ranks) else True,
        finished=bool((ranks["status"] == "complete").all()) if len(ranks) else False,
        simulated=bool(files["simulated"].any()) if len(files) else False,
        calls=int(summary["num_calls"].sum()) if len(summary) else 0,
        heatmap=heatmap_api(run),
        taken_at=time.time(),
        control=cost_sentence(ranked) if ranked else "",
        waiting=not len(files),
        captures_html=captures_html(run),
        profiling_on=_count(ranks, (pl.col("state") == "on") & (pl.col("status") != "complete")),
        paused=_count(ranks, pl.col("status") == "paused"),
        # With control files, what the live ranks applied; without, what the windows hold.
        on_names=names_traced(on, traced) if ranked else by_total(on),
        since=now.meta.get("since"),
        generations=tuple(int(g) for g in now.meta.get("generations") or ()),
        recorded_names=by_total(summary),
    )


def traced_callbacks(procs: list[dict[str, Any]]) -> set[tuple[int, int]]:
    """Every (domain, cbid) a live process with profiling on traces (its applied enable set)."""
    from ..runs.control import resolved_callbacks

    out: set[tuple[int, int]] = set()
    for p in procs:
        if p.get("live") and p.get("state") == "on":
            try:
                out |= resolved_callbacks(list(p.get("enable") or []))
            except ValueError:  # a name this version does not know: nothing of it shown
                continue
    return out


def by_total(summary: pl.DataFrame) -> tuple[str, ...]:
    """The summary's functions, by total time."""
    return tuple(summary.sort("total_ns", descending=True)["name"]) if len(summary) else ()


def names_traced(summary: pl.DataFrame, traced: set[tuple[int, int]]) -> tuple[str, ...]:
    """The summary's functions (by total time, as it is sorted) whose callback is traced now."""
    from ..catalog import resolve

    if not traced or not len(summary):
        return ()
    out = []
    for name in summary.sort("total_ns", descending=True)["name"].to_list():
        try:
            if resolve(name) in traced:
                out.append(name)
        except ValueError:  # a function the catalog does not name: not a callback picked
            continue
    return tuple(out)


def _count(ranks: pl.DataFrame, where: pl.Expr) -> int:
    return int(ranks.select(where.fill_null(False).sum()).item()) if "state" in ranks.columns else 0


def captures_html(run: Any) -> str:
    """The run's captures (``run.captures()``), newest first: when, the rule, its value against
    its baseline, the ranks, and the folder (its trace.json opens in ui.perfetto.dev; its
    comparison.parquet is the diff with the baseline). Empty without any."""
    try:
        caps = run.captures()
    except Exception:  # noqa: BLE001 - a run at a URL, or no watch package: no captures shown
        return ""
    if not len(caps):
        return ""
    shown = caps.sort("fired_at", descending=True).select(
        "fired_at",
        "rule",
        "value",
        "baseline",
        pl.col("ranks").list.eval(pl.element().cast(pl.String)).list.join(",").alias("ranks"),
        "state",
        pl.col("path").alias("folder"),
    )
    title = "captures (watch): open a folder's trace.json in ui.perfetto.dev"
    return Table(shown, title, top=0).html()


class RunPanel:
    """ipywidgets view of a recorded run, refreshed every ``every`` seconds while a rank is
    running (then once more, and it stays as it is). ``finish()``/``close()`` stop it and leave
    a static view."""

    def __init__(self, run: Any, every: float = 2.0, auto_refresh: bool = True):
        import ipywidgets as w

        if not every > 0:
            raise ValueError(f"every must be > 0 seconds, not {every!r}")
        self.run, self.every = run, float(every)
        self._w = w
        self.body = w.HTML()
        self.plot = w.Image(format="png", layout=w.Layout(max_width="100%"))
        self.status = w.HTML()
        self.dist_caption = w.HTML()
        self.dist_caption.add_class("mspti-lens-run-distributions-caption")
        self.dists = w.HBox(layout=w.Layout(flex_flow="row wrap"))
        self.dists.add_class("mspti-lens-run-distributions")
        run.warn = False  # skipped files are said in the status line, not as Python warnings
        self.controls = RunControls(run, self) if _controllable(run) else None
        parts = [self.status, *([self.controls.widget] if self.controls else []), self.body, self.plot]
        parts += [self.dist_caption, self.dists]
        self.widget = w.VBox(parts)
        self.widget.add_class("mspti-lens-run-panel")
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._plotted: tuple[int, str | None] | None = None
        self._plotted_at = float("-inf")
        self._png: tuple[bytes, int] | None = None
        self._dists: list[tuple[bytes, int]] = []  # the distributions' PNGs and CSS widths
        self._dist_key: tuple[int, tuple[str, ...], float | None] | None = None
        self._dist_at = float("-inf")
        self._handles: list[Any] = []
        self.last: RunView | None = None
        self.errors: list[str] = []
        self.refreshes = 0
        self.finished = False
        self.refresh(force_plot=True)
        if self.controls is not None:
            self.controls.sync()  # the picker shows what the ranks apply from the first view on
        if auto_refresh:
            self._thread = threading.Thread(target=self._loop, name="mspti-lens-run-panel", daemon=True)
            self._thread.start()

    def refresh(self, force_plot: bool = False) -> RunView:
        """Re-read the run and redraw (the heat map when the run changed, at most every
        :data:`PLOT_EVERY_S` unless ``force_plot``)."""
        with self._lock:
            try:
                view = run_view(self.run.refresh())
            except Exception as e:  # noqa: BLE001 - a run being written may be unreadable a moment
                self.status.value = f"<i>cannot read the run now ({html.escape(str(e))}); retrying</i>"
                if self.last is None:
                    raise
                return self.last
            self.last = view
            state = view.state()
            skipped = len(self.run.skipped)
            self.status.value = (
                f"<span class='mspti-lens-run-state'>{state} · refreshed "
                f"{time.strftime('%H:%M:%S', time.localtime(view.taken_at))}"
                + (f" · {skipped} unreadable file(s) skipped (run.skipped says why)" if skipped else "")
                + "</span>"
            )
            self.body.value = view.html()
            key = (view.calls, view.heatmap)
            due = force_plot or time.monotonic() - self._plotted_at >= PLOT_EVERY_S
            if view.heatmap is not None and key != self._plotted and due:
                from .. import plots

                png, width, _ = render_figure(plots.rank_heatmap(self.run, view.heatmap))
                self._png = (png, min(width, MAX_PLOT_WIDTH))
                self.plot.value, self.plot.width = png, str(self._png[1])
                self._plotted, self._plotted_at = key, time.monotonic()
            self.plot.layout.display = "" if self._png else "none"
            self._draw_distributions(view, force_plot)
            self.refreshes += 1
            return view

    def _draw_distributions(self, view: RunView, force: bool) -> None:
        """The latency distributions of what the ranks trace now, from the windows since it was
        turned on (the whole run's of what was recorded when nothing is): redrawn at once when
        that changes (so they follow a start within a refresh or two), else every
        DISTRIBUTIONS_EVERY_S."""
        names = (view.on_names or view.recorded_names)[:DISTRIBUTIONS_TOP]
        key = (view.calls, names, view.since if view.on_names else None)
        changed = self._dist_key is None or key[1:] != self._dist_key[1:]
        due = force or changed or time.monotonic() - self._dist_at >= DISTRIBUTIONS_EVERY_S
        if key != self._dist_key and due:
            from .. import plots

            pngs = []
            if names:
                snap = self.run.snapshot(current=bool(view.on_names))
                title = f"every rank merged, {distributions_span(view)}"
                for name in names:
                    fig = plots.distribution(snap, names=[name], title=title)
                    png, width, _ = render_figure(fig)
                    pngs.append((png, min(width, MAX_PLOT_WIDTH)))
            self._dists, self._dist_key, self._dist_at = pngs, key, time.monotonic()
            self.dists.children = [
                self._w.Image(
                    value=png, format="png", width=str(width), layout=self._w.Layout(max_width="100%")
                )
                for png, width in pngs
            ]
        self.dist_caption.value = distributions_caption(view, DISTRIBUTIONS_TOP)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                view = self.refresh()
                if self.controls is not None:
                    self.controls.sync()
                if not view.running:
                    self.refresh(force_plot=True)  # the finished run, heat map included
                    break
            except Exception:  # keep the reason, keep the panel
                self.errors.append(traceback.format_exc())

    @property
    def auto_refreshing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def final_html(self, why: str) -> str:
        view = self.last
        assert view is not None
        png, width = self._png or (None, 0)
        head = f"<div><b>mspti-lens</b> · {html.escape(why)}</div>"
        from .display import png_html

        dists = "".join(png_html(p, w) for p, w in self._dists)
        caption = distributions_caption(view, DISTRIBUTIONS_TOP) if self._dists else ""
        return f"<div class='mspti-lens-final'>{head}{view.html(png, width)}{caption}{dists}</div>"

    def finish(self, why: str = "closed") -> None:
        """Stop refreshing and leave the static view (in the front end and the saved notebook)."""
        if self.finished:
            return
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5 * self.every + 5)
        page = self.final_html(why)
        self.widget.children = [self._w.HTML(page)]
        for h in self._handles:
            h.update({"text/html": page, "text/plain": f"mspti-lens run panel ({why})"}, raw=True)
        self.finished = True

    def close(self) -> None:
        self.finish("panel closed")

    def _repr_mimebundle_(self, **kw: Any):
        return self.widget._repr_mimebundle_(**kw)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        bundle = dict(self.widget._repr_mimebundle_())
        view = self.last
        bundle["text/plain"] = f"mspti-lens run panel: {view.headline if view else self.run.root}"
        self._handles.append(display(bundle, raw=True, display_id=True))

    def __repr__(self) -> str:
        v = self.last
        return f"<mspti_lens RunPanel {v.headline if v else ''}>"


def distributions_span(view: RunView) -> str:
    """Which windows the distributions merge: since what is on now was turned on (local time,
    and the command that did it), or the whole run."""
    if not view.on_names:
        return "the whole run"
    since = "" if view.since is None else f" since {time.strftime('%H:%M:%S', time.localtime(view.since))}"
    gens = [g for g in view.generations if g]
    said = f" (generation{'s' if len(gens) > 1 else ''} {', '.join(map(str, gens))})" if gens else ""
    return f"the windows{since}{said}"


def distributions_caption(view: RunView, top: int) -> str:
    """The line above the distributions: what they show, in which order and over which windows
    (empty: none). What the ranks trace now, since it was turned on; else what was recorded over
    the whole run, saying why."""
    names = view.on_names or view.recorded_names
    if not names:
        return ""
    if view.on_names:
        what = "what is on now"
    elif view.running and view.profiling_on:
        what = "what was recorded (what is on now has no window yet)"
    else:
        what = "what was recorded (profiling is off now)"
    shown = min(len(names), top)
    more = f"the top {shown} of {len(names)} by total time" if len(names) > top else "by total time"
    return (
        f"<div class='mspti-lens-run-distributions-caption'><b>latency of {what}</b>: "
        f"{html.escape(', '.join(names[:top]))} ({more}); every rank merged, "
        f"{html.escape(distributions_span(view))}</div>"
    )


def _controllable(run: Any) -> bool:
    from ..runs.control import control_dir

    return "://" not in run.root and control_dir(run.root.removeprefix("file://")).is_dir()


class RunControls:
    """The run panel's steering: start (or retarget) and stop buttons, the enable picker
    (domain toggles and the session panel's callback list with its search), a duration in
    seconds (empty: until stopped), a rank selection (``0-3,7``, ``host=NAME``, empty: all), and a
    line saying what was issued or why not. Each button issues one command to the run, checked
    by the command line's own checks (``RunControl.start``/``stop``): the panel refuses what
    ``control`` refuses, and its refusal stays until the next button press, as on a terminal.

    The picker mirrors what the live ranks applied, whoever issued it (this panel, ``control``,
    another notebook): when their applied set changes, the toggles and boxes are set to it (a
    domain toggle is on when every callback of its domain is); between changes they are the
    user's, for the next start."""

    def __init__(self, run: Any, panel: RunPanel):
        import ipywidgets as w

        from ..catalog import DOMAINS
        from ..runs.hook import DEFAULT_ENABLE
        from .panel import options

        self.run, self.panel = run, panel
        self._lock = threading.RLock()
        self._mirroring = False  # set while the picker is set from the ranks (no observer acts)
        self._applied: tuple[Any, ...] | None = None  # the ranks' applied state last mirrored
        self.error: str | None = None  # the last refusal, shown until the next button press
        default = set(DEFAULT_ENABLE.split(","))
        self.domains = {
            d: w.ToggleButton(
                value=d in default, description=d, layout=w.Layout(width="auto", min_width="90px")
            )
            for d in DOMAINS
        }
        self.search = w.Text(
            placeholder="search callbacks: launch, HcclAll, memcpy...", layout=w.Layout(width="340px")
        )
        self.options = options()
        self.checkboxes = {
            o.key: w.Checkbox(
                value=o.callback.domain_name in default,
                description=o.label,
                indent=False,
                tooltip=o.key,
                layout=w.Layout(width="max-content"),
            )
            for o in self.options
        }
        self.callbacks = w.VBox(
            list(self.checkboxes.values()),
            layout=w.Layout(height="120px", overflow="hidden auto", width="max-content", min_width="340px"),
        )
        self.callbacks.add_class("mspti-lens-picker")
        self.search.observe(lambda ch: self._filter(), names="value")
        for d, t in self.domains.items():
            t.observe(lambda ch, d=d: self._domain_toggled(d, ch["new"]), names="value")
        for cb in self.checkboxes.values():
            cb.observe(lambda ch: self._box_toggled(), names="value")
        # Text, not a bounded number box: a bound would turn -5 into 0 silently; the command
        # line's check says why it refuses it.
        self.duration = w.Text(
            placeholder="until stopped", description="for (s)", layout=w.Layout(width="190px")
        )
        self.ranks = w.Text(placeholder="ranks: all, 0-3,7, host=NAME", layout=w.Layout(width="220px"))
        self.start = w.Button(description="start", icon="play", tooltip="turn profiling on (or retarget it)")
        self.stop = w.Button(description="stop", icon="stop", tooltip="write the last window, unsubscribe")
        self.start.add_class("mspti-lens-run-start")
        self.stop.add_class("mspti-lens-run-stop")
        self.start.on_click(lambda _: self._issue("start"))
        self.stop.on_click(lambda _: self._issue("stop"))
        self.applied = w.HTML()  # what the picker shows: the ranks' applied set, or the next start's
        self.applied.add_class("mspti-lens-run-applied")
        self.message = w.HTML()
        self.message.add_class("mspti-lens-run-message")
        row = w.HBox([*self.domains.values(), self.duration, self.ranks, self.start, self.stop])
        self.widget = w.VBox([self.applied, row, self.search, self.callbacks, self.message])
        self.widget.add_class("mspti-lens-run-controls")
        self.generation = 0

    def _filter(self) -> None:
        q = self.search.value
        for o in self.options:
            self.checkboxes[o.key].layout.display = "" if o.matches(q) else "none"

    def _domain_toggled(self, domain: str, on: bool) -> None:
        """A domain toggle is all its callbacks: it ticks or unticks every box of its domain."""
        if self._mirroring:
            return
        self._mirroring = True
        try:
            for o in self.options:
                if o.callback.domain_name == domain:
                    self.checkboxes[o.key].value = on
        finally:
            self._mirroring = False

    def _box_toggled(self) -> None:
        """A box changed: a domain toggle is on exactly when every box of its domain is ticked."""
        if self._mirroring:
            return
        self._mirroring = True
        try:
            self._set_domains()
        finally:
            self._mirroring = False

    def _set_domains(self) -> None:
        for d, t in self.domains.items():
            mine = [self.checkboxes[o.key].value for o in self.options if o.callback.domain_name == d]
            t.value = bool(mine) and all(mine)

    def enable(self) -> list[str]:
        """The enable set the picker says: each domain whose callbacks are all ticked, then the
        ticked callbacks of the other domains."""
        on = [d for d, t in self.domains.items() if t.value]
        return on + [
            o.key for o in self.options if self.checkboxes[o.key].value and o.callback.domain_name not in on
        ]

    def _issue(self, what: str) -> None:
        ctl = self.run.control
        ranks = self.ranks.value.strip() or None
        with self._lock:
            self.error = None  # a new action: the last refusal is answered
            try:
                if what == "start":
                    enable = self.enable()
                    text = self.duration.value.strip()
                    for_s: Any = None
                    if text:
                        try:
                            for_s = float(text)  # as the command line's --for reads it
                        except ValueError:
                            for_s = text  # not a number: refused by the command line's check
                    gen = ctl.start(enable, for_s=for_s, ranks=ranks)
                    what = f"start ({', '.join(enable)}" + (f", for {for_s:g} s)" if for_s else ")")
                else:
                    gen = ctl.stop(ranks=ranks)
            except Exception as e:  # noqa: BLE001 - said in the panel, the job and its data untouched
                self.error = str(e).splitlines()[0] if str(e) else type(e).__name__
                self.message.value = f'<span style="color:#b02a37">{html.escape(self.error)}</span>'
                return
            self.generation = gen
            self.message.value = f"issued {html.escape(what)} as generation {gen}; waiting for the ranks"
        self.sync()

    def sync(self) -> None:
        """Mirror the ranks' applied state in the picker and say how many ranks applied the
        latest command (called after each refresh); a refusal stays until the next press."""
        with self._lock:
            try:
                procs = self.run.control.processes()
            except Exception:  # noqa: BLE001 - the next refresh reads them again
                return
            self._mirror(procs)
            if self.error is not None or not self.generation:
                return
            try:
                left = self.run.control.pending(self.generation)
            except Exception:  # noqa: BLE001 - the next refresh says it again
                return
            refused = [p for p in left if p.get("why") != "pending"]
            if not left:
                self.message.value = f"generation {self.generation}: applied by every live process"
            elif refused:  # a rank that refused its command: say which and why
                p = refused[0]
                self.message.value = html.escape(
                    f"generation {self.generation}: rank {p['rank']} on {p['host']} {p['why']}"
                    + (f" (and {len(left) - 1} more)" if len(left) > 1 else "")
                )
            else:
                self.message.value = f"generation {self.generation}: {len(left)} process(es) not there yet"

    def _mirror(self, procs: list[dict[str, Any]]) -> None:
        from ..runs.control import resolved_callbacks

        live = [p for p in ranked_processes(procs) if p.get("live")]
        on = [p for p in live if p.get("state") == "on"]
        sets = [frozenset(resolved_callbacks(list(p.get("enable") or []))) for p in on]
        applied = frozenset().union(*sets)
        state = (applied, len(on), len(live), len(set(sets)))
        if state == self._applied:
            return  # unchanged: the picker is the user's until the ranks change
        self._applied = state
        if on:
            self._mirroring = True
            try:
                for o in self.options:
                    self.checkboxes[o.key].value = (o.callback.domain, o.callback.cbid) in applied
                self._set_domains()
            finally:
                self._mirroring = False
            mixed = " (not the same in every rank: control status says which)" if len(set(sets)) > 1 else ""
            self.applied.value = html.escape(
                f"on in {len(on)} of {count_of(len(live), 'live rank')}: the picker shows what they "
                f"trace{mixed}; change it and press start to retarget"
            )
        elif live:
            self.applied.value = html.escape(
                f"off in every live rank ({len(live)}): start turns on what the picker shows"
            )
        else:
            self.applied.value = "no live rank: nothing to steer"


def ranked_processes(procs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The processes that are ranks: a rank variable, or windows written (a launcher or a helper
    without either is not a rank)."""
    return [p for p in procs if p.get("rank_source") != "pid" or p.get("windows")]


__all__ = ["RunControls", "RunPanel", "RunView", "heatmap_api", "run_view", "verdict"]
