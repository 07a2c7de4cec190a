"""Bus bandwidth against message size per op, the way nccl-tests' output is read: one line per
(communicator, op, data type), message size on a log2 axis, the median busbw with its p10-p90
band. Reads :meth:`Snapshot.collectives` ``(by="size")`` only; titles say when it is simulated."""

from __future__ import annotations

import numpy as np
import polars as pl

from ..collectives import NO_HCCL_NOTE
from ..snapshot import Snapshot
from .figure import _legend_outside, _new_figure, _title


def _size(b: int) -> str:
    """A power-of-two size as nccl-tests' readers say it (1K = 1024 bytes)."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def bandwidth(snap: Snapshot, ranks=None, stat: str = "busbw", title: str | None = None):
    """busbw (or ``stat="algbw"``) in GB/s against message size per (group, op, data type).
    ``ranks``: the communicators' rank count (Snapshot.collectives' argument); points without a
    bandwidth (unknown ranks or data type, zero duration) are left out and counted in the title."""
    if not isinstance(snap, Snapshot):
        raise TypeError(f"bandwidth plots take a Snapshot, not {type(snap).__name__}")
    if stat not in ("busbw", "algbw"):
        raise ValueError(f"unknown stat {stat!r}; valid stats are busbw, algbw")
    t = snap.collectives(by="size", ranks=ranks)
    fig, axes = _new_figure((9, 4.2))
    ax = axes[0][0]
    med, lo, hi = f"{stat}_gbps", f"{stat}_p10_gbps", f"{stat}_p90_gbps"
    good = t.filter(pl.col(med).is_not_null() & pl.col("bytes").is_not_null())
    if not good.height:
        why = (
            NO_HCCL_NOTE
            if not t.height
            else f"no {stat}: the rank count or data type is unknown (pass ranks=N)"
        )
        ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, wrap=True)
        ax.set_axis_off()
        return fig
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
    dropped = t.height - good.height
    base = title or f"Collectives: {stat} by message size"
    fig.suptitle(
        _title(base + (f" ({dropped} size buckets without {stat})" if dropped else ""), snap.simulated)
    )
    fig.tight_layout()
    return fig
