"""A rank's window interval under control: fine windows while a command asks for them.

A ``start`` command may carry ``interval_s`` (runs/control.py checks it: finite, within
:data:`~mspti_lens.runs.control.INTERVAL_BOUNDS_S`): the rank's writer takes a window that often
while the command holds, so a capture's "during" is in windows of a second, not of the run's
interval. The rank's own interval (record's ``--interval``) is kept here, and every command that
names the rank without one (a restore, a stop) and a ``start --for`` that runs out put it back,
exactly: no command has to know what the rank's own interval was. A change of interval takes effect
at once: the next window is due at most one new interval from now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class IntervalHold:
    """The window interval of one rank's writer (runs/writer.py) as its commands set it."""

    def __init__(self, writer: Any):
        self.writer = writer
        self.own = float(writer.interval)  # record's --interval: what every release goes back to

    def after(self, apply: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        """``apply`` (the recorder's), then the command's interval: a refused command (``apply``
        raised) changes no interval."""

        def applied(command: dict[str, Any]) -> None:
            apply(command)
            self.apply(command)

        return applied

    def apply(self, command: dict[str, Any]) -> None:
        """After ``command`` (naming this rank) was applied: its interval, or the rank's own."""
        asked = command.get("interval_s") if command.get("command") == "start" else None
        self.writer.set_interval(self.own if asked is None else float(asked))

    def release(self) -> None:
        """The command that asked for an interval ended by itself (its ``--for`` ran out)."""
        self.writer.set_interval(self.own)

    def state(self) -> dict[str, float]:
        """For the process file: the interval in use and the rank's own (a capture records both,
        and puts back an interval another command had set)."""
        return {"interval_s": float(self.writer.interval), "own_interval_s": self.own}
