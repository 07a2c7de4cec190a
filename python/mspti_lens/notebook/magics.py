"""IPython extension: ``%load_ext mspti_lens``, then ``%mspti`` (line) and ``%%mspti`` (cell).

``%%mspti [options]`` profiles one cell: the Runtime and HCCL calls the cell makes (on any thread;
``-d``/``-c`` name others) are recorded, and one output under the cell shows the summary table and
the latency distribution; the snapshot is returned, so ``_`` (or ``-o NAME``) holds it. Line
commands are listed in :data:`SUBCOMMANDS` (one table: the help, the argument check and the
dispatch to ``_cmd_<name>`` all come from it); settings in :data:`SETTINGS`.

Output goes through rich reprs (HTML with a plain-text fallback), never the pager.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from traitlets import Enum, Float, Int, Unicode

from .. import plots
from ..activity import JOIN_SAMPLE
from ..catalog import DOMAINS, enableable, resolve, suggest
from ..errors import MsptiError, SessionError, SimulatedBackendWarning
from ..plots.figure import figure_bundle
from ..session import Session
from ..snapshot import Snapshot
from .display import ConfiguredSnapshot, DiffTable, Message, Status
from .panel import PLOT_KINDS
from .tables import count_of, show_frames_as_tables

DISPLAYS = ("both", "summary", "plot", "none")
UNITS = ("auto", "ns", "us", "ms", "s")
DEFAULT_TARGETS = ("runtime", "hccl")  # what %%mspti traces without -d/-c
INTERRUPTED = "mspti_interrupted"  # the variable an interrupted %%mspti cell's window is kept in
SAVE_FORMATS = {".parquet": "the snapshot; mspti_lens.load reads it", ".csv": "the summary table, in ns"}


@dataclass(frozen=True)
class Subcommand:
    """One ``%mspti NAME``: its arguments as shown in the help, how many positional PATHS it
    takes, and one line of help. Its code is ``MsptiMagics._cmd_<name>``."""

    usage: str
    paths: int
    help: str


SUBCOMMANDS: dict[str, Subcommand] = {
    "start": Subcommand(
        "[-d|-c ...]", 0, "begin (or resume) recording; --library PATH|sim picks the library"
    ),
    "stop": Subcommand("", 0, "stop recording; the data is kept"),
    "reset": Subcommand("", 0, "start a new window and show the one just closed"),
    "status": Subcommand("", 0, "state, enabled callbacks per domain, calls, counters"),
    "summary": Subcommand("[--all]", 0, "the table of the last %%mspti cell or of the current window"),
    "plot": Subcommand("[-k KIND] [--density]", 0, "a figure of it: " + " | ".join(PLOT_KINDS)),
    "panel": Subcommand(
        "[--run DIR]",
        0,
        "the live control panel (starts recording); --run DIR: a recorded run's panel instead",
    ),
    "save": Subcommand(
        "PATH", 1, "write it as .parquet (a snapshot mspti_lens.load reads) or .csv (the table)"
    ),
    "diff": Subcommand("A B", 2, "compare two snapshots (variable names or saved files)"),
    "close": Subcommand("", 0, "stop and unsubscribe (also done by %unload_ext)"),
    "run": Subcommand("DIR", 1, "a recorded job's ranks, live (python -m mspti_lens record --out DIR)"),
}
COMMANDS = tuple(SUBCOMMANDS)

SETTINGS = {
    "unit": "time unit of the tables: auto (per value), ns, us, ms, s",
    "top": "rows of the summary tables, APIs by total time (0: every row)",
    "refresh": "seconds between refreshes of the control panel",
    "display": "what %%mspti shows: both (table and plot), summary, plot, none",
    "library": "'' for the discovery order, 'sim' for the bundled simulator, or a path to libmspti.so",
}


def _help() -> str:
    width = max(len(f"%mspti {n} {c.usage}".rstrip()) for n, c in SUBCOMMANDS.items())
    lines = [
        "Record how long every Ascend Runtime / HCCL API call takes (MSPTI Callback API).",
        "",
        f"{'%%mspti [options]':<{width}}  profile one cell: runtime and HCCL, or what -d/-c name",
        *(f"{f'%mspti {n} {c.usage}'.rstrip():<{width}}  {c.help}" for n, c in SUBCOMMANDS.items()),
        "",
        "Settings (%config MsptiMagics.NAME = VALUE):",
        *(f"  MsptiMagics.{k:<8} {v}" for k, v in SETTINGS.items()),
    ]
    return "\n".join(lines)


def _with_doc(text: str):
    def set_doc(fn):
        fn.__doc__ = text
        return fn

    return set_doc


def _split(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def _suggest(word: str, choices: list[str]) -> str:
    """ "; did you mean X?" for the closest choice (case-insensitive), or ""."""
    return suggest(word, choices).replace("'", "")


def _check_domain(d: str) -> str:
    if d.strip().lower() in DOMAINS:
        return d
    raise UsageError(
        f"unknown domain {d!r}{_suggest(d, list(DOMAINS)) or '; valid domains: ' + ', '.join(DOMAINS)}"
    )


def _check_kinds(kinds: list[str]) -> list[str]:
    from ..activity import KINDS

    for k in kinds:
        if k.strip().lower() not in KINDS:
            valid = f"valid kinds are {', '.join(KINDS)}"
            hint = _suggest(k, list(KINDS))
            raise UsageError(
                f"unknown activity kind {k!r}{hint} ({valid})"
                if hint
                else f"unknown activity kind {k!r}; {valid}"
            )
    return kinds


def _parse(magic, line: str):
    """parse_argstring, with "did you mean" for a mistyped option (--domian) or choice (-k cfd)."""
    try:
        return parse_argstring(magic, line)
    except UsageError as e:
        text = str(e)
        import re

        m = re.search(r"unrecognized arguments: (\S+)", text)
        if m:
            options = [o for a in magic.parser._actions for o in a.option_strings if o.startswith("--")]
            raise UsageError(
                f"unknown option {m.group(1)}{_suggest(m.group(1), options)} (see %mspti?)"
            ) from None
        m = re.search(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)", text)
        if m:
            choices = [c.strip(" '") for c in m.group(3).split(",")]
            hint = _suggest(m.group(2), choices) or "; valid choices: " + ", ".join(choices)
            raise UsageError(f"{m.group(1)}: unknown choice {m.group(2)!r}{hint}") from None
        raise


def _check_callback(c: str) -> str:
    try:
        resolve(c)
        return c
    except ValueError:
        pass
    names = [n for x in enableable() for n in (*x.names_26x, *x.names_8x, x.short)]
    hint = _suggest(c, names) or (
        "; name a function (aclrtLaunchKernel), a short name (LAUNCH) or a domain (runtime, hccl)"
    )
    raise UsageError(f"unknown callback {c!r}{hint}")


@magics_class
class MsptiMagics(Magics):
    """The ``%mspti`` / ``%%mspti`` magics; settings through ``%config MsptiMagics.<name>``."""

    unit = Enum(UNITS, default_value="auto", config=True, help=SETTINGS["unit"])
    top = Int(20, min=0, config=True, help=SETTINGS["top"])
    refresh = Float(1.0, config=True, help=SETTINGS["refresh"])
    display = Enum(DISPLAYS, default_value="both", config=True, help=SETTINGS["display"])
    library = Unicode("", config=True, help=SETTINGS["library"])

    def __init__(self, shell=None, **kw):
        super().__init__(shell=shell, **kw)
        self.session: Session | None = None
        self.windows: list[Snapshot] = []  # closed by reset (and by %%mspti), oldest first
        self.last: Snapshot | None = None  # what was shown last
        self.cell: Snapshot | None = None  # the last %%mspti cell's snapshot
        self.panels: list[Any] = []

    # -- helpers ---------------------------------------------------------------------------------
    @property
    def _shell(self):
        if self.shell is None:  # pragma: no cover - magics are always registered on a shell
            raise UsageError("the mspti magics are not attached to an IPython shell")
        return self.shell

    def _unit(self, args) -> str | None:
        u = getattr(args, "unit", None) or self.unit
        return None if u == "auto" else u

    def _top(self, args) -> int:
        t = getattr(args, "top", None)
        if t is not None and t < 0:
            raise UsageError(f"--top takes 0 (every row) or a positive number of rows, not {t}")
        return self.top if t is None else t

    def _wrap(self, snap: Snapshot, args, where: str = "") -> ConfiguredSnapshot:
        cut_by_option = getattr(args, "top", None) is not None
        all_rows = "`-t 0`" if cut_by_option else "`%config MsptiMagics.top = 0`"
        return ConfiguredSnapshot(snap, self._unit(args), self._top(args), where, all_rows)

    def _interval_text(self) -> str:
        assert self.session is not None
        i = self.session.interval
        return "no timeline" if i is None else f"a timeline every {i:g} s"

    def _library(self, args) -> str | None:
        lib = args.library if getattr(args, "library", None) else self.library
        return lib or None

    def _targets(self, args) -> list:
        """The -d/-c targets, checked: a short error with a suggestion for anything unknown."""
        return [*map(_check_domain, _split(args.domain)), *map(_check_callback, _split(args.callback))]

    def _ensure_session(self, args, targets: list) -> Session:
        if self.session is not None and not self.session.closed:
            if getattr(args, "interval", None) is not None and self.session.interval != args.interval:
                raise UsageError(
                    f"the open session keeps {self._interval_text()}; run `%mspti close` first to start "
                    f"one with --interval {args.interval:g}"
                )
            sample = getattr(args, "join_sample", None)
            if sample is not None and self.session.join_sample != sample:
                raise UsageError(
                    f"the open session joins launches over {self.session.join_sample:g} of its time; "
                    f"run `%mspti close` first to start one with --join-sample {sample:g}"
                )
            if getattr(args, "library", None):
                raise UsageError(
                    f"a session is already open on {self.session.backend.label} "
                    f"({self.session.backend.path}); run `%mspti close` first to switch libraries"
                )
            return self.session
        sample = getattr(args, "join_sample", None)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SimulatedBackendWarning)
                self.session = Session(
                    self._library(args),
                    enable=targets or DEFAULT_TARGETS,
                    interval=getattr(args, "interval", None),
                    **({} if sample is None else {"join_sample": sample}),
                )
            self.session.close_hint = ("the %mspti magics' session", "run `%mspti close`")
        except SessionError as e:
            raise UsageError(f"{e} (the magics need their own)") from None
        self.windows = []
        return self.session

    def _only(self, session: Session, targets: list) -> None:
        """Trace exactly ``targets``."""
        session.disable(*DOMAINS)
        session.enable(*targets)

    def _need_session(self) -> Session:
        if self.session is None or self.session.closed:
            raise UsageError(
                "no mspti-lens session is open; start one with `%mspti start` (or use %%mspti on a cell)"
            )
        return self.session

    def _window(self, args) -> tuple[Snapshot, str]:
        """What summary, plot and save act on, and its name: every window (--all), the current
        window while recording, else the last %%mspti cell's snapshot if nothing was recorded
        since, else the current (stopped) window."""
        s = self.session
        have = s is not None and (not s.closed or self.cell is None)
        if not have and self.cell is None:
            self._need_session()
        current = s.snapshot() if have and s is not None else None
        if args.all:
            merged = current
            for w in reversed(self.windows):
                merged = w if merged is None else w.merge(merged)
            assert merged is not None
            return merged, "every window of the session"
        if current is not None and s is not None and not s.closed and s.running:
            return current, "the current window (recording)"
        if self.cell is not None and (current is None or current.total_calls == 0):
            return self.cell, "the last %%mspti cell"
        assert current is not None
        return current, "the current window (stopped)"

    def _show_plot(self, snap: Snapshot, args) -> None:
        top = self._top(args) or 6
        fig = plots.plot(snap, args.kind, density=args.density, top=min(top, 6))
        data, metadata = figure_bundle(fig)
        display(data, raw=True, metadata=metadata)

    def _resolve_snapshot(self, ref: str) -> Snapshot:
        ns = self._shell.user_ns
        if ref in ns:
            value = ns[ref]
            if isinstance(value, Snapshot):
                return value
            raise UsageError(f"{ref!r} is a {type(value).__name__}, not a mspti_lens Snapshot")
        path = os.path.expanduser(ref)
        if os.path.exists(path):
            return Snapshot.load(path)
        raise UsageError(
            f"{ref!r} is neither a Snapshot variable nor a snapshot file (written by %mspti save)"
        )

    # -- the magic -------------------------------------------------------------------------------
    @magic_arguments()
    @argument(
        "command", nargs="?", default=None, help="line form: one of " + ", ".join(COMMANDS) + " (see above)"
    )
    @argument("paths", nargs="*", help="save: PATH; diff: A B (variable names or files)")
    @argument(
        "-d",
        "--domain",
        action="append",
        metavar="DOMAIN",
        help="trace this domain: runtime or hccl (repeat it or separate with commas)",
    )
    @argument(
        "-c",
        "--callback",
        action="append",
        metavar="NAME",
        help="trace this callback: a function name (aclrtLaunchKernel, HcclAllReduce), short name (LAUNCH), "
        "or enum name (MSPTI_CBID_RUNTIME_LAUNCH); repeat it or separate with commas. With -d/-c only "
        "what is named is traced (default: runtime and hccl).",
    )
    @argument(
        "-a",
        "--activity",
        action="append",
        metavar="KIND",
        help="also collect this activity kind (device time): kernel, marker, communication, hccl, "
        "memcpy, ... (repeat it or separate with commas); see snapshot.kernels(), .launches()",
    )
    @argument(
        "--display", choices=DISPLAYS, default=None, help="what to show: both (default), summary, plot, none"
    )
    @argument("-k", "--kind", choices=PLOT_KINDS, default="distribution", help="plot kind")
    @argument("--density", action="store_true", help="plot the share of calls instead of counts")
    @argument(
        "-u", "--unit", choices=UNITS, default=None, help="time unit of the table (default: %%config unit)"
    )
    @argument(
        "-t", "--top", type=int, default=None, help="rows of the table, 0 for all (default: %%config top)"
    )
    @argument("-o", "--out", metavar="NAME", default=None, help="also store the snapshot in this variable")
    @argument(
        "--run",
        metavar="DIR",
        default=None,
        help="panel: show this recorded run (python -m mspti_lens record --out DIR) instead of recording",
    )
    @argument(
        "--interval",
        type=float,
        metavar="SECONDS",
        default=None,
        help="start, %%%%mspti: a new session keeps latency over time, one histogram per SECONDS "
        "(for -k timeline)",
    )
    @argument(
        "--join-sample",
        type=float,
        metavar="FRACTION",
        default=None,
        help="start, %%%%mspti: a new session joins launches to kernels (-a kernel) over this fraction "
        f"of its time, in (0, 1]; 1 joins every launch (default {JOIN_SAMPLE:g}, labelled sampled)",
    )
    @argument("--all", action="store_true", help="summary/plot/save: every window of the session")
    @argument(
        "--library", default=None, help="start: 'sim' or a path to libmspti.so (default: %%config library)"
    )
    @line_cell_magic
    @_with_doc(_help())
    def mspti(self, line: str = "", cell: str | None = None):
        args = _parse(self.mspti, line)
        try:
            if cell is not None:
                if args.command is not None:
                    raise UsageError(
                        f"the cell form %%mspti takes options only, not a command ({args.command!r}); "
                        "use the line form %mspti " + args.command
                    )
                return self._cell(args, cell)
            if args.command is None:
                raise UsageError("%mspti needs a command: " + ", ".join(COMMANDS) + " (see %mspti?)")
            sub = SUBCOMMANDS.get(args.command)
            if sub is None:
                raise UsageError(
                    f"unknown command {args.command!r}{_suggest(args.command, list(COMMANDS))} "
                    f"(valid commands are {', '.join(COMMANDS)})"
                )
            if len(args.paths) != sub.paths:
                need = {0: "no arguments", 1: "one PATH", 2: "two snapshots A B"}[sub.paths]
                raise UsageError(f"%mspti {args.command} takes {need}, got {args.paths or 'none'}")
            out = getattr(self, f"_cmd_{args.command}")(args)
            if args.command in ("start", "stop"):  # shown even when more code follows in the cell
                display(out)
                return None
            return out
        except (ValueError, TypeError, FileNotFoundError, MsptiError) as e:
            raise UsageError(str(e)) from None

    # -- cell form -------------------------------------------------------------------------------
    def _cell(self, args, cell: str):
        targets = self._targets(args) or list(DEFAULT_TARGETS)  # whatever a panel picked before
        session = self._ensure_session(args, [])
        was_running = session.running
        before = session.enabled
        self._only(session, targets)
        kinds = _check_kinds(_split(args.activity))
        if kinds:
            session.enable_activity(*kinds)  # before the cell, so its launches' kernels are seen
        try:
            closed = session.reset()  # the cell gets a window of its own; the one before is kept
            if len(closed) or closed.counters.get("unmatched"):
                self.windows.append(closed)
            if not was_running:
                session.start()
            result = self._run_body(cell)
            snap = session.reset()
        finally:
            if not was_running and not session.closed:
                session.stop()
            if not session.closed:
                session.disable(*DOMAINS)
                if before:
                    session.enable(*before)
            if kinds and not session.closed:
                session.disable_activity(*kinds)
        self.windows.append(snap)
        self.cell = snap
        error = result.error_in_exec
        if not isinstance(error, KeyboardInterrupt):
            return self._present(snap, args, self.display)
        # Interrupted: one line (how far the job got, what the window holds), no table or plot
        # to render and no traceback, so the prompt is back at once.
        # The hint names a variable holding this cell's window: `%mspti summary` would show the
        # live window instead while a session records (a panel, %mspti start), and `_` is not set
        # by a cell that raised.
        wrapped = self._wrap(snap, args, "interrupted")
        self.last = wrapped
        self._shell.user_ns[args.out or INTERRUPTED] = wrapped
        job = getattr(error, "mspti_lens_job", "the cell was interrupted")
        name = f"`{args.out or INTERRUPTED}`"
        text = (
            f"{job}; the window holds the {count_of(snap.total_calls, 'call')} made until then "
            f"({count_of(len(snap), 'API')}): {name}"
        )
        raise CellInterrupted(text, getattr(error, "mspti_lens_bar", None))

    def _run_body(self, cell: str):
        """Run the cell's code as IPython would, but without displaying its last value (the
        cell's one output is the snapshot), and without a traceback for a KeyboardInterrupt:
        the magic says in one line what was interrupted."""
        shell = self._shell
        old = shell.ast_node_interactivity
        old_exc = (shell.custom_exceptions, shell.CustomTB)
        shell.ast_node_interactivity = "none"
        shell.set_custom_exc((KeyboardInterrupt,), lambda *a, **k: [])
        try:
            return shell.run_cell(cell, store_history=False)
        finally:
            shell.ast_node_interactivity = old
            shell.custom_exceptions, shell.CustomTB = old_exc
            _expect_interrupt(shell)

    def _present(self, snap: Snapshot, args, default: str, where: str = ""):
        """One output: the snapshot's table with its figure under it (or only one of them)."""
        wrapped = self._wrap(snap, args, where)
        self.last = wrapped
        if args.out:
            self._shell.user_ns[args.out] = wrapped
        show = args.display or default
        if show == "plot":
            self._show_plot(snap, args)
            return None
        if show == "both":
            top = self._top(args) or 6
            wrapped.attach_figure(plots.plot(snap, args.kind, density=args.density, top=min(top, 6)))
        return wrapped if show in ("both", "summary") else None

    # -- line commands ---------------------------------------------------------------------------
    def _cmd_start(self, args):
        targets = self._targets(args)
        fresh = self.session is None or self.session.closed
        kinds = _check_kinds(_split(args.activity))
        session = self._ensure_session(args, targets)
        was_running = not fresh and session.running
        if targets and not fresh:
            self._only(session, targets)
        if kinds:
            session.enable_activity(*kinds)
        if not was_running:
            session.start()
        self.cell = None  # from now on line commands act on this recording
        b = session.backend
        from .display import enabled_per_domain

        if was_running:  # what a panel switched off stays off unless -d/-c/-a say otherwise
            changed = "traced as asked" if targets or kinds else "nothing changed; -d/-c pick what to trace"
            text = f"mspti-lens is already recording ({changed}): {enabled_per_domain(session.enabled)}"
            return Message(text)
        text = f"mspti-lens recording on {b.label} ({b.path}): {enabled_per_domain(session.enabled)}"
        if b.simulated:
            text += "\nSIMULATED: the calls are those of the mspti-lens simulator, not of an NPU."
        return Message(text)

    def _cmd_stop(self, args):
        s = self._need_session()
        s.stop()
        return Message(
            f"mspti-lens stopped; {s.snapshot().total_calls:,} calls in this window are kept "
            "(`%mspti summary`, `%mspti start` resumes)"
        )

    def _cmd_reset(self, args):
        s = self._need_session()
        snap = s.reset()
        self.windows.append(snap)
        self.cell = None
        return self._present(snap, args, "summary", "the window just closed by reset")

    def _cmd_status(self, args):
        if self.session is None or self.session.closed:
            from ..backend import backend_info

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SimulatedBackendWarning)
                b = backend_info(self._library(args))
            return Status(backend=b.label, library=b.path, session="none (start one with %mspti start)")
        st = self.session.status()
        out = Status(
            backend=st.pop("backend"),
            library=st.pop("library"),
            state="running" if st.pop("running") else "stopped",
            windows_kept=len(self.windows),
        )
        out.update(st)
        return out

    def _cmd_summary(self, args):
        snap, where = self._window(args)
        return self._present(snap, args, "summary", where)

    def _cmd_plot(self, args):
        snap, _ = self._window(args)
        self.last = snap
        self._show_plot(snap, args)

    def _cmd_panel(self, args):
        if args.run is not None:  # a recorded run: its files only, no session of the notebook
            return self._run_panel(args.run)
        from .widget import ControlPanel

        session = self._ensure_session(args, self._targets(args))
        if not session.running:
            session.start()  # a panel is for watching calls arrive
        self.cell = None
        panel = ControlPanel(
            session, interval=self.refresh, unit=self._unit(args), top=self._top(args) or 10**6
        )
        self.panels.append(panel)
        return panel

    def _cmd_run(self, args):
        return self._run_panel(args.paths[0])

    def _run_panel(self, path: str):
        """A recorded run's panel: read from its folder, refreshed while ranks run; it opens no
        session (nothing of the notebook is recorded, the subscriber slot stays free)."""
        from ..runs.run import open_run
        from .runpanel import RunPanel

        run = open_run(os.path.expanduser(path))
        panel = RunPanel(run, every=max(self.refresh, 1.0))
        self.panels.append(panel)
        return panel

    def _cmd_save(self, args):
        path = os.path.expanduser(args.paths[0])
        if os.path.isdir(path):
            raise UsageError(
                f"{path} is a folder; give a file name, e.g. {os.path.join(path, 'window.parquet')}"
            )
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise UsageError(f"cannot save to {path}: the folder {parent} does not exist")
        ext = os.path.splitext(path)[1].lower()
        if ext and ext not in SAVE_FORMATS:
            formats = " or ".join(f"{k} ({v})" for k, v in SAVE_FORMATS.items())
            raise UsageError(f"%mspti save writes {formats}, not {ext!r}")
        snap, where = self._window(args)
        if ext == ".csv":
            snap.summary().write_csv(path)
            back = "polars.read_csv(path) reads it back"
        else:
            snap.save(path)
            back = "mspti_lens.load(path) reads it back"
        return Message(
            f"saved {count_of(snap.total_calls, 'call')} ({count_of(len(snap), 'API')}) of {where} "
            f"to {path}; {back}"
        )

    def _cmd_diff(self, args):
        refs = tuple(args.paths)
        a, b = (self._resolve_snapshot(r) for r in refs)
        for ref, side in zip(refs, (a, b)):
            if not len(side):
                display(Message(f"{ref} has no calls, so its side of the diff is empty", "warning"))
        show = args.display or "summary"
        if show in ("both", "plot"):
            from ..plots import before_after

            names = (os.path.basename(refs[0]) or refs[0], os.path.basename(refs[1]) or refs[1])
            data, metadata = figure_bundle(before_after(a, b, labels=names))
            display(data, raw=True, metadata=metadata)
        if show not in ("both", "summary"):
            return None
        return DiffTable(a.diff(b), labels=refs, simulated=a.simulated or b.simulated)

    def _cmd_close(self, args):
        n = self.close()
        return Message("mspti-lens session closed (unsubscribed)" if n else "no session was open")

    def close(self) -> int:
        """Leave the panels' final views, stop their threads and close the session. Returns 1 if
        one was open."""
        open_ = self.session is not None and not self.session.closed
        if open_:
            assert self.session is not None
            self.session.close()
        for p in self.panels:
            try:
                p.finish("session closed")
            except Exception:
                pass
        self.panels = []
        return 1 if open_ else 0


class CellInterrupted(KeyboardInterrupt):
    """A ``%%mspti`` cell was interrupted: the workload stopped and its window is kept. IPython
    shows it as its one line (no traceback), and Jupyter stops a Run All at it."""

    def __init__(self, text: str, bar: Any = None):
        super().__init__(text)
        self.text, self.bar = text, bar


def _expect_interrupt(shell) -> None:
    """Let the shell show a :class:`CellInterrupted` as one line, if no other custom exception
    handler is set (the user's own stays in charge)."""
    if shell.custom_exceptions not in ((), (CellInterrupted,)):
        return

    def one_line(shell_, etype, value, tb, tb_offset=None):
        message = Message(value.text, "warning")
        if value.bar is not None and hasattr(value.bar, "replace"):
            value.bar.replace(message)  # in place of the progress bar: one output
        else:
            display(message)
        return []

    shell.set_custom_exc((CellInterrupted,), one_line)


# -- extension entry points --------------------------------------------------------------------------
def load_message(magics: MsptiMagics) -> Message:
    """What ``%load_ext`` says: the backend, and on a real library whether callbacks can fire."""
    from ..backend import backend_info

    lib = magics.library or None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SimulatedBackendWarning)
        try:
            b = backend_info(lib)
        except (MsptiError, ValueError, OSError) as e:
            return Message(f"mspti-lens loaded, but no MSPTI library could be loaded: {e}", "error")
    preloaded = " (preloaded: callbacks fire)" if b.preloaded else ""
    if b.simulated:
        why = " (no libmspti.so was found)" if caught else ""
        from ..backend import simulator_path

        bundled = os.path.realpath(str(b.path)) == os.path.realpath(simulator_path())
        what = "the bundled simulator" if bundled else "a simulated libmspti (a simulated CANN tree's)"
        return Message(
            f"mspti-lens: backend SIMULATED ({b.fidelity}){why}: {what} at {b.path}{preloaded}. "
            "Every result is simulated, not measured on an NPU. Magics: %mspti, %%mspti (see %mspti?).",
            "warning",
        )
    text = f"mspti-lens: backend {b.label} at {b.path}{preloaded}. Magics: %mspti, %%mspti (see %mspti?)."
    if b.preload_hint:
        return Message(text + "\nWARNING: " + b.preload_hint, "warning")
    return Message(text)


def load_ipython_extension(ipython) -> None:
    if any(isinstance(m, MsptiMagics) for m in ipython.configurables):
        return
    magics = MsptiMagics(shell=ipython)  # Magics adds itself to shell.configurables (%config)
    ipython.register_magics(magics)
    show_frames_as_tables(ipython)
    display(load_message(magics))


def unload_ipython_extension(ipython) -> None:
    if ipython.custom_exceptions == (CellInterrupted,):
        ipython.set_custom_exc((), None)
    for m in [m for m in ipython.configurables if isinstance(m, MsptiMagics)]:
        m.close()
        ipython.configurables.remove(m)
    show_frames_as_tables(ipython, on=False)
    registry = ipython.magics_manager.magics
    for kind in ("line", "cell"):
        registry[kind].pop("mspti", None)
    ipython.magics_manager.registry.pop("MsptiMagics", None)
