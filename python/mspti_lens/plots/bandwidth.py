"""Bus bandwidth against message size per op, the way nccl-tests' output is read: one line per
(communicator, op, data type), message size on a log2 axis, the median busbw with its p10-p90
band. Reads :meth:`Snapshot.collectives` ``(by="size")`` only; titles say when it is simulated, and a
line under the plot which ops it leaves out and why."""

from __future__ import annotations

import numpy as np
import polars as pl

from ..collectives import NO_BYTES, NO_HCCL_NOTE, TIMES_RANKS, bus_factor
from ..snapshot import Snapshot
from .figure import _legend_outside, _message_figure, _new_figure, _note_below, _title


def _size(b: int) -> str:
    """A power-of-two size as nccl-tests' readers say it (1K = 1024 bytes)."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def left_out(dropped: pl.DataFrame, stat: str = "busbw") -> str | None:
    """One line naming the ops of ``dropped`` (rows of ``Snapshot.collectives(by="size")`` without
    ``stat``) per communicator, why each has none, and how to include those that can be."""
    if not dropped.height:
        return None
    reasons: dict[str, list[str]] = {}
    keys = dropped.select("group", "op", "ranks").unique(maintain_order=True)
    groups = keys["group"].n_unique() > 1  # one communicator: its name would only lengthen the line
    for group, op, ranks in keys.iter_rows():
        if op in NO_BYTES:
            why = "moves no data"
        elif ranks is None and (op in TIMES_RANKS or bus_factor(op, None) is None):
            why = "rank count unknown: pass it, plots.bandwidth(snap, ranks=8)"
        else:
            why = "data type or duration unknown"
        reasons.setdefault(why, []).append(f"{op} [{group}]" if groups else op)
    return f"Not drawn (no {stat}): " + "; ".join(f"{', '.join(ops)} ({why})" for why, ops in reasons.items())


def bandwidth(snap: Snapshot, ranks=None, stat: str = "busbw", title: str | None = None):
    """busbw (or ``stat="algbw"``) in GB/s against message size per (group, op, data type).
    ``ranks``: the communicators' rank count (Snapshot.collectives' argument: an int, or a dict
    group -> int); ops without a bandwidth (unknown rank count or data type, no data moved) are
    left out, and a line under the plot names them and how to include them (:func:`left_out`)."""
    if not isinstance(snap, Snapshot):
        raise TypeError(f"bandwidth plots take a Snapshot, not {type(snap).__name__}")
    if stat not in ("busbw", "algbw"):
        raise ValueError(f"unknown stat {stat!r}; valid stats are busbw, algbw")
    t = snap.collectives(by="size", ranks=ranks)
    med, lo, hi = f"{stat}_gbps", f"{stat}_p10_gbps", f"{stat}_p90_gbps"
    drawn = pl.col(med).is_not_null() & pl.col("bytes").is_not_null()
    good = t.filter(drawn)
    note = left_out(t.filter(~drawn), stat)
    if not good.height:
        return _message_figure(note if note else NO_HCCL_NOTE)
    fig, axes = _new_figure((9, 4.2))
    ax = axes[0][0]
    for (group, op, dt), g in good.sort("bytes").group_by(["group", "op", "data_type"], maintain_order=True):
        x = g["bytes"].cast(pl.Float64).to_numpy()
        (line,) = ax.plot(x, g[med].to_numpy(), marker="o", ms=3, label=f"{op} {dt or ''} [{group}]")
        ax.fill_between(x, g[lo].to_numpy(), g[hi].to_numpy(), color=line.get_color(), alpha=0.15, lw=0)
    ax.set_xscale("log", base=2)
    ticks = np.unique(good["bytes"].to_numpy())
    ax.set_xticks(ticks, [_size(int(b)) for b in ticks], fontsize=7, rotation=45)
    ax.set_xlabel("message size (nccl-tests' bytes)")
    ax.set_ylabel(f"{stat}, GB/s (median, p10-p90)")
    ax.grid(True, alpha=0.3)
    _legend_outside(ax)
    fig.suptitle(_title(title or f"Collectives: {stat} by message size", snap.simulated))
    if note:
        _note_below(fig, note, fontsize=8, color="#842029")
    else:
        fig.tight_layout()
    return fig
