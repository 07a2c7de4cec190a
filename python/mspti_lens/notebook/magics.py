"""IPython extension: ``%load_ext mspti_lens``, then ``%mspti`` (line) and ``%%mspti`` (cell).

``%%mspti [options]`` profiles one cell: the Runtime/HCCL calls the cell makes (on any thread)
are recorded, and the summary table and latency distribution appear under the cell; the
snapshot is returned, so ``_`` (or ``-o NAME``) holds it.

Line forms, with the same options::

    %mspti start [-d DOMAIN] [-c CALLBACK] [--library PATH|sim]   begin (or resume) recording
    %mspti stop                       stop recording (data kept)
    %mspti reset                      start a new window; returns the closed one
    %mspti status                     backend, state, enabled callbacks, counters
    %mspti summary [--all]            the current window (--all: with the windows reset closed)
    %mspti plot [-k KIND] [--density] distribution | cdf | hccl | launch
    %mspti panel                      the live control panel (ipywidgets)
    %mspti save PATH                  write the current window as Parquet
    %mspti diff A B                   compare two snapshots (variables or saved files)
    %mspti close                      stop and unsubscribe (also done by %unload_ext)

Settings (``%config MsptiMagics``): ``unit`` (auto, ns, us, ms, s), ``top`` (rows of the
table), ``refresh`` (seconds between panel refreshes), ``display`` (what ``%%mspti`` shows),
``library`` ('' for the discovery order, 'sim', or a path to libmspti.so).

Output goes through rich reprs (HTML with a plain-text fallback), never the pager.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from traitlets import Enum, Float, Int, Unicode

from ..catalog import DOMAINS, resolve
from ..errors import MsptiError, SessionError, SimulatedBackendWarning
from ..session import Session
from ..snapshot import Snapshot
from .display import ConfiguredSnapshot, Message, Status, figure_bundle
from .panel import PLOT_KINDS

COMMANDS = ("start", "stop", "reset", "status", "summary", "plot", "panel", "save", "diff", "close", "run")
DISPLAYS = ("both", "summary", "plot", "none")
UNITS = ("auto", "ns", "us", "ms", "s")


def _split(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


@magics_class
class MsptiMagics(Magics):
    """The ``%mspti`` / ``%%mspti`` magics; settings through ``%config MsptiMagics.<name>``."""

    unit = Enum(
        UNITS, default_value="auto", config=True, help="time unit of the tables (auto picks per value)"
    )
    top = Int(20, config=True, help="rows of the summary tables (APIs by total time)")
    refresh = Float(1.0, config=True, help="seconds between refreshes of the control panel")
    display = Enum(DISPLAYS, default_value="both", config=True, help="what %%mspti shows under the cell")
    library = Unicode(
        "",
        config=True,
        help="'' for the discovery order, 'sim' for the bundled simulator, or a path to libmspti.so",
    )

    def __init__(self, shell=None, **kw):
        super().__init__(shell=shell, **kw)
        self.session: Session | None = None
        self.windows: list[Snapshot] = []  # closed by reset (and by %%mspti), oldest first
        self.last: Snapshot | None = None
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
        if t is not None and t < 1:
            raise UsageError(f"--top must be a positive number of rows, not {t}")
        return t or self.top

    def _wrap(self, snap: Snapshot, args) -> ConfiguredSnapshot:
        return ConfiguredSnapshot(snap, self._unit(args), self._top(args))

    def _library(self, args) -> str | None:
        lib = args.library if getattr(args, "library", None) else self.library
        return lib or None

    def _targets(self, args) -> list:
        targets = [*_split(args.domain), *_split(args.callback)]
        for t in targets:
            resolve(t)  # ValueError naming the valid choices
        return targets

    def _ensure_session(self, args, targets: list) -> Session:
        if self.session is not None and not self.session.closed:
            if getattr(args, "library", None):
                raise UsageError(
                    f"a session is already open on {self.session.backend.label} ({self.session.backend.path}); "
                    "run `%mspti close` first to switch libraries"
                )
            return self.session
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SimulatedBackendWarning)
                self.session = Session(self._library(args), enable=targets or ("runtime", "hccl"))
        except SessionError as e:
            raise UsageError(
                f"{e}. Only one mspti_lens.Session may exist per process: close yours (session.close()) "
                "and retry, or keep using it directly"
            ) from None
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

    def _show_plot(self, snap: Snapshot, kind: str, density: bool = False) -> None:
        from .. import plots

        fig = plots.plot(snap, kind, density=density, top=min(self.top, 6))
        display(figure_bundle(fig), raw=True)

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
        "command",
        nargs="?",
        default=None,
        help="line form: one of " + ", ".join(COMMANDS) + ". The cell form takes no command.",
    )
    @argument(
        "paths",
        nargs="*",
        help="save: PATH of the Parquet file; diff: A B (variable names or files); run: DIR",
    )
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
        "--display", choices=DISPLAYS, default=None, help="what to show: both (default), summary, plot, none"
    )
    @argument("-k", "--kind", choices=PLOT_KINDS, default="distribution", help="plot kind")
    @argument("--density", action="store_true", help="plot the share of calls instead of counts")
    @argument(
        "-u", "--unit", choices=UNITS, default=None, help="time unit of the table (default: %%config unit)"
    )
    @argument("-t", "--top", type=int, default=None, help="rows of the table (default: %%config top)")
    @argument("-o", "--out", metavar="NAME", default=None, help="also store the snapshot in this variable")
    @argument("--all", action="store_true", help="summary/save: include the windows closed by reset")
    @argument(
        "--library", default=None, help="start: 'sim' or a path to libmspti.so (default: %%config library)"
    )
    @line_cell_magic
    def mspti(self, line: str = "", cell: str | None = None):
        """Record how long every Ascend Runtime / HCCL API call takes (MSPTI Callback API).

        %%mspti [options] profiles a cell; %mspti COMMAND [options] controls a session.
        """
        args = parse_argstring(self.mspti, line)
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
            if args.command not in COMMANDS:
                raise UsageError(
                    f"unknown command {args.command!r}; valid commands are {', '.join(COMMANDS)}"
                )
            want = {"save": 1, "diff": 2, "run": 1}.get(args.command, 0)
            if len(args.paths) != want:
                need = {0: "no arguments", 1: "one PATH", 2: "two snapshots A B"}[want]
                raise UsageError(f"%mspti {args.command} takes {need}, got {args.paths or 'none'}")
            return getattr(self, f"_cmd_{args.command}")(args)
        except (ValueError, TypeError, FileNotFoundError, MsptiError) as e:
            raise UsageError(str(e)) from None

    # -- cell form -------------------------------------------------------------------------------
    def _cell(self, args, cell: str):
        targets = self._targets(args)
        session = self._ensure_session(args, [])  # a new session keeps its defaults after the cell
        was_running = session.running
        before = session.enabled
        if targets:
            self._only(session, targets)
        try:
            closed = session.reset()  # the cell gets a window of its own; the one before is kept
            if len(closed) or closed.counters.get("unmatched"):
                self.windows.append(closed)
            if not was_running:
                session.start()
            self._shell.run_cell(cell, store_history=False)
            snap = self._wrap(session.reset(), args)
        finally:
            if not was_running and not session.closed:
                session.stop()
            if targets and not session.closed:
                session.disable(*DOMAINS)
                if before:
                    session.enable(*before)
        self.windows.append(snap)
        return self._present(snap, args, default=self.display)

    def _present(self, snap: Snapshot, args, default: str):
        self.last = snap
        if args.out:
            self._shell.user_ns[args.out] = snap
        show = args.display or default
        if show in ("both", "plot"):
            self._show_plot(snap, args.kind, args.density)
        if show in ("both", "summary"):
            return snap
        return None

    # -- line commands ---------------------------------------------------------------------------
    def _cmd_start(self, args):
        targets = self._targets(args)
        fresh = self.session is None or self.session.closed
        session = self._ensure_session(args, targets)
        if targets and not fresh:
            self._only(session, targets)
        session.start()
        b = session.backend
        what = (
            ", ".join(x.removeprefix("MSPTI_CBID_") for x in session.enabled) or "nothing (enable something)"
        )
        text = f"mspti-lens recording on {b.label} ({b.path}): {what}"
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
        snap = self._wrap(s.reset(), args)
        self.windows.append(snap)
        return self._present(snap, args, default="summary")

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

    def _current(self, args) -> Snapshot:
        snap = self._need_session().snapshot()
        if args.all:
            for w in self.windows:
                snap = w.merge(snap)
        return snap

    def _cmd_summary(self, args):
        return self._present(self._wrap(self._current(args), args), args, default="summary")

    def _cmd_plot(self, args):
        snap = self._current(args)
        self.last = snap
        self._show_plot(snap, args.kind, args.density)

    def _cmd_panel(self, args):
        from .widget import ControlPanel

        session = self._ensure_session(args, self._targets(args))
        panel = ControlPanel(session, interval=self.refresh, unit=self._unit(args), top=self._top(args))
        self.panels.append(panel)
        return panel

    def _cmd_run(self, args):  # issue 12: a recorded run's ranks, live (mspti_lens.runs.view)
        from ..runs.view import open_view

        view = open_view(args.paths[0], every=self.refresh)
        self.panels.append(view)
        return view

    def _cmd_save(self, args):
        path = os.path.expanduser(args.paths[0])
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise UsageError(f"cannot save to {path}: the folder {parent} does not exist")
        snap = self._current(args)
        snap.save(path)
        return Message(
            f"saved {snap.total_calls:,} calls ({len(snap)} APIs, {snap.label}) to {path}; "
            "mspti_lens.load(path) reads it back"
        )

    def _cmd_diff(self, args):
        a, b = (self._resolve_snapshot(r) for r in args.paths)
        show = args.display or "summary"
        if show in ("both", "plot"):
            from ..plots import before_after

            display(figure_bundle(before_after(a, b)), raw=True)
        return a.diff(b) if show in ("both", "summary") else None

    def _cmd_close(self, args):
        n = self.close()
        return Message("mspti-lens session closed (unsubscribed)" if n else "no session was open")

    def close(self) -> int:
        """Stop the panels' refresh threads and close the session. Returns 1 if one was open."""
        for p in self.panels:
            try:
                p.close()
            except Exception:
                pass
        self.panels = []
        if self.session is not None and not self.session.closed:
            self.session.close()
            return 1
        return 0


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
    if b.simulated:
        why = " (no libmspti.so was found)" if caught else ""
        return Message(
            f"mspti-lens: backend SIMULATED ({b.fidelity}){why}: the bundled simulator at {b.path}. "
            "Every result is simulated, not measured on an NPU. Magics: %mspti, %%mspti (see %mspti?).",
            "warning",
        )
    text = f"mspti-lens: backend {b.label} at {b.path}. Magics: %mspti, %%mspti (see %mspti?)."
    if b.preload_hint:
        return Message(text + "\nWARNING: " + b.preload_hint, "warning")
    return Message(text)


def load_ipython_extension(ipython) -> None:
    if any(isinstance(m, MsptiMagics) for m in ipython.configurables):
        return
    magics = MsptiMagics(shell=ipython)  # Magics adds itself to shell.configurables (%config)
    ipython.register_magics(magics)
    display(load_message(magics))


def unload_ipython_extension(ipython) -> None:
    for m in [m for m in ipython.configurables if isinstance(m, MsptiMagics)]:
        m.close()
        ipython.configurables.remove(m)
    registry = ipython.magics_manager.magics
    for kind in ("line", "cell"):
        registry[kind].pop("mspti", None)
    ipython.magics_manager.registry.pop("MsptiMagics", None)
