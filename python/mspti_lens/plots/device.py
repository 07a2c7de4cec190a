"""Figures of device time beside host time. They read the Snapshot's device frames
(:meth:`Snapshot.launches`, :meth:`~Snapshot.kernels`, :meth:`~Snapshot.collectives`) and the
device histograms; no statistics of their own. Titles say when the data is simulated."""

from __future__ import annotations

import numpy as np
import polars as pl

from .. import activity
from ..snapshot import Snapshot
from ..units import format_ns
from .figure import _legend_outside, _message_figure, _new_figure, _note_below, _ns_axis, _title

_SPLIT = (("api", "API (host)", "#4C72B0"), ("queue", "queue (ENTER to kernel start)", "#DD8452"),
          ("kernel", "kernel (device)", "#55A868"))  # fmt: skip


def _check(snap: Snapshot) -> None:
    if not isinstance(snap, Snapshot):
        raise TypeError(f"device plots take a Snapshot, not {type(snap).__name__}")


def missing_note(snap: Snapshot, what: str, kinds: tuple[str, ...]) -> str:
    """Why ``what`` (recorded by the activity ``kinds``, the first the one to ask for) is not in
    ``snap``, in one sentence: what the snapshot has instead, and how to record it."""
    info = snap.activity.info if snap.activity is not None else {}
    on = [str(k) for k in info.get("kinds", [])]
    k = kinds[0]
    how = (
        f"record them with %%mspti -a {k} in a notebook, Session(activity=['{k}']) in code, "
        f"or record --activity {k}"
    )
    if not on:
        return f"no {what}: this snapshot has no device activity; {how}"
    if not set(kinds) & set(on):
        has = " and ".join(on)
        return f"no {what}: this snapshot has {has} activity, not {' or '.join(kinds)}; {how}"
    return (
        f"no {what} in this snapshot: {' / '.join(kinds)} activity was on, but recorded none in this window"
    )


def queue_note(snap: Snapshot) -> str | None:
    """What a launch split cannot show by itself: when the queue delays of a window add up to
    more than its wall time, many launches waited at once (the host ran ahead of the device), so
    the sum is not time anyone spent; None otherwise."""
    la = snap.launches()
    wall_ns = snap.duration_s * 1e9
    if not len(la) or "queue_total_ns" not in la.columns or wall_ns <= 0:
        return None
    total = float(la["queue_total_ns"].fill_null(0).sum())
    if total <= wall_ns:
        return None
    return (
        f"queue delays add up to {format_ns(total)} in a {format_ns(wall_ns)} window: launches waited "
        "in the queue at the same time (the host ran ahead of the device), so read them per launch, "
        "not as a sum"
    )


def launch_split(snap: Snapshot, stat: str = "med", title: str | None = None):
    """Per launch function (and join): API time, queue delay and kernel time side by side, as
    nsys's cuda_kern_exec_sum splits them. ``stat`` is ``"med"``, ``"avg"`` or ``"p99"``.

    The queue delay of a launch is its kernel's device start minus the launch's ENTER: how long
    the work waited for the device. Far above the kernel time, it means the host ran ahead of the
    device (device-bound: faster launches would not help). A note under the title says when a
    window's queue delays add up to more than its wall time (:func:`queue_note`)."""
    _check(snap)
    if stat not in ("med", "avg", "p99"):
        raise ValueError(f"unknown stat {stat!r}; valid stats are med, avg, p99")
    la = snap.launches()
    if not len(la):
        why = missing_note(
            snap, "kernel launches (they need kernel activity and the LAUNCH callback)", ("kernel",)
        )
        return _message_figure(why)
    fig, axes = _new_figure((9, 1.6 + 0.6 * len(la)))
    ax = axes[0][0]
    labels = [f"{n}\n[{j}]" for n, j in zip(la["name"], la["join"])]
    y = np.arange(len(la))
    h = 0.26
    texts = []
    for k, (metric, label, color) in enumerate(_SPLIT):
        vals = la[f"{metric}_{stat}_ns"].fill_null(0).cast(pl.Float64).to_numpy()
        ax.barh(y + (k - 1) * h, np.where(vals > 0, vals, np.nan), height=h, label=label, color=color)
        texts += [(v, yi) for yi, v in zip(y + (k - 1) * h, vals) if v > 0]
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    ax.set_xlim(lo, hi * 6)  # room for the value labels inside the axes
    for v, yi in texts:
        ax.text(v, yi, " " + format_ns(v), va="center", fontsize=7, clip_on=True)
    _ns_axis(ax, f"{stat} per launch")
    _legend_outside(ax)
    ax.set_title(_title(title or "Where a launch's time goes: API, queue, kernel", snap.simulated))
    note = queue_note(snap)
    if note:
        _note_below(fig, "Note: " + note, color="#842029")
    else:
        fig.tight_layout()
    return fig


def kernel_distributions(snap: Snapshot, top: int = 8, title: str | None = None):
    """Device duration distributions of the ``top`` kernels by total time (one line each, bucket
    counts per bin on a log time axis)."""
    _check(snap)
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise ValueError(f"top must be a positive int, not {top!r}")
    k = snap.kernels().head(top)
    if not len(k):
        return _message_figure(missing_note(snap, "kernels", ("kernel",)))
    fig, axes = _new_figure((9, 4.5))
    ax = axes[0][0]
    hist = activity.histogram(snap).filter((pl.col("table") == "kernels") & (pl.col("metric") == "duration"))
    for name in k["name"]:
        sub = hist.filter(pl.col("key0") == name).sort("lower_ns")
        mid = np.sqrt(
            np.maximum(sub["lower_ns"].to_numpy(), 1.0) * np.maximum(sub["upper_ns"].to_numpy(), 1.0)
        )
        edges = np.logspace(np.log10(max(mid.min() / 1.5, 1)), np.log10(mid.max() * 1.5), 40)
        counts, _ = np.histogram(mid, bins=edges, weights=sub["count"].cast(pl.Float64).to_numpy())
        share = counts / max(counts.sum(), 1)
        ax.step(edges[:-1], share, where="post", label=name)
    _ns_axis(ax, "kernel duration on the device")
    ax.set_ylabel("share of launches", fontsize=9)
    _legend_outside(ax)
    ax.set_title(
        _title(title or f"Kernel duration distributions (top {len(k)} by total time)", snap.simulated)
    )
    fig.tight_layout()
    return fig


# The activity kinds that record collectives: COMMUNICATION records and HCCL's own (torch_npu's
# markers name them too, but only under torch_npu: not a kind to ask for).
COLLECTIVE_KINDS = ("communication", "hccl")


def collective_key(name: str) -> str:
    """One key for a collective's two spellings: HCCL's function (``HcclAllReduce``, what the
    callbacks and the summary carry), its op name in COMMUNICATION records (``hcom_allReduce_``,
    ``hccl_barrier_``) and torch_npu's (``HcclAllreduce``) all give ``allreduce``."""
    key = name.lower().replace("_", "")
    for prefix in ("hcom", "hccl"):
        key = key.removeprefix(prefix)
    return "recv" if key == "receive" else key


def collectives(snap: Snapshot, title: str | None = None):
    """Per (communicator, op): median device time beside median host time of the HCCL call (the
    summary's row of the same collective), and the bandwidth distribution's median (GB/s; "—"
    for an op that moves no data, such as a barrier). Both panels show the same rows."""
    _check(snap)
    col = snap.collectives()
    if not len(col):
        return _message_figure(missing_note(snap, "collectives", COLLECTIVE_KINDS))
    fig, axes = _new_figure((11, 1.5 + 0.6 * len(col)), 1, 2, sharey=True)
    ax, bx = axes[0]
    host = snap.summary().filter(pl.col("domain") == "hccl").select("name", "med_ns")
    host_of = {collective_key(n): v for n, v in zip(host["name"], host["med_ns"])}
    labels = [f"{op} [{g}]\n{src}" for g, op, src in zip(col["group"], col["op"], col["from"])]
    y = np.arange(len(col))
    dev = col["med_ns"].cast(pl.Float64).to_numpy()
    hst = np.array([host_of.get(collective_key(op), np.nan) for op in col["op"]], dtype=float)
    ax.barh(y - 0.2, dev, height=0.4, label="device (activity)", color="#55A868")
    ax.barh(y + 0.2, hst, height=0.4, label="host API (callback)", color="#4C72B0")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_ylim(len(col) - 0.5, -0.5)  # first row on top, on both panels (the y-axis is shared)
    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    ax.set_xlim(lo, hi * 4)  # room for the value labels inside the axes
    _ns_axis(ax, "median time per call")  # ticks for the whole range
    for yi, v in [(yi - 0.2, v) for yi, v in zip(y, dev)] + [(yi + 0.2, v) for yi, v in zip(y, hst)]:
        text = " " + format_ns(v) if np.isfinite(v) and v > 0 else " —"
        ax.text(v if np.isfinite(v) and v > 0 else lo, yi, text, va="center", fontsize=7, clip_on=True)
    bw = (
        col["bw_med_gbps"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        if "bw_med_gbps" in col.columns
        else np.full(len(col), np.nan)
    )
    bx.barh(y, np.nan_to_num(bw, nan=0.0), height=0.5, color="#8172B3")
    bx.tick_params(axis="y", labelleft=False)
    top = float(np.nanmax(bw)) if np.isfinite(bw).any() else 1.0
    bx.set_xlim(0, top * 1.3)
    for yi, v in zip(y, bw):
        bx.text(v if np.isfinite(v) else 0, yi, f" {v:,.1f} GB/s" if np.isfinite(v) else " —", va="center",
                fontsize=7, clip_on=True)  # fmt: skip
    bx.set_xlabel("median bandwidth, GB/s (waits included)", fontsize=9)
    fig.suptitle(_title(title or "Collectives: device time and bandwidth beside host time", snap.simulated))
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig
