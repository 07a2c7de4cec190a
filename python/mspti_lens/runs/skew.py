"""Arrival skew per collective instance across the ranks of a run.

Two bases, named in each row's ``basis``. ``device`` (preferred, when the run has COMMUNICATION or
HCCL records): an instance is one (communicator, op, instance) of the device event log: each
rank numbers its records of that op in that communicator from its Session's start (0 first),
and runs/instances.py aligns those numbers across ranks and on periods by time into one
job-wide number (``seq``); a rank's arrival is its collective's device start: HCCL's task
starts when the rank enters and waits on the device for the others (the last to arrive has the
shortest collective). ``callbacks`` (the Callback API alone, ``record --activity none``): an instance is
one (op, k), each rank's k-th call of that HCCL function (aligned the same way), and a rank's
arrival is the call's ENTER (runs/writer.py); callbacks do not name the communicator (``group``
is null), so a job that runs one op on several communicators should record device records.

Per instance: ``spread_ns`` (last arrival minus first), ``last_rank``, ``lead_ns`` (the last
arrival minus the second-last) and ``wait_ns`` (the sum
over ranks of the last arrival minus theirs: the time the job's ranks spent waiting for it). Data
are small and bounded: one event per collective per rank. Device records: at most the session's
``device_events`` per window and rank (65536 by default); past it events are dropped and counted
(``device_events_dropped``). ENTERs: at most ``ARRIVALS_PER_THREAD`` (8192) wait per thread
between two windows, past that dropped and counted (the windows' ``arrivals_dropped``), and a
process's arrivals file keeps its newest 65536. An instance missing on a rank gets no row.

Clocks: the records' timestamps are CLOCK_REALTIME ns. Ranks of one host share that clock (error
0). Across hosts they are as close as NTP (about a millisecond on a LAN) or PTP (about a
microsecond) keeps the hosts; msprof-analyze and HTA assume the clocks agree. ``skew`` names no
rank when the last arrival's lead over the second-last (``lead_ns``) is within the clock error,
however wide the spread: which of those two came last is then unknown, and ``note`` says so
(``clock_error_ns``: 0 on one host or on the simulator, else :data:`CROSS_HOST_CLOCK_ERROR_NS`
unless given). ENTER times taken on another
clock than MSPTI's (the TSC or CLOCK_MONOTONIC, bridged to CLOCK_REALTIME when a window is taken)
add the bridge's error: CLOCK_REALTIME's slew against the monotonic clock over one window (the
kernel slews by at most :data:`MAX_SLEW_PPM`), so a callbacks row's bound grows by that."""

from __future__ import annotations

from typing import Any

import polars as pl

from .instances import align
from .stragglers import is_point_to_point

CROSS_HOST_CLOCK_ERROR_NS = 1_000_000  # NTP on a LAN; PTP users pass ~1_000
MAX_SLEW_PPM = 500  # the most adjtimex slews CLOCK_REALTIME (Linux's MAXPHASE / MAXFREQ)
BASES = ("device", "callbacks")
RECENT_INSTANCES = 16  # the live verdict looks at this many latest instances
SKEW_COLUMNS = {
    "group": pl.String,
    "op": pl.String,
    "seq": pl.Int64,
    "ranks": pl.UInt32,
    "spread_ns": pl.Int64,
    "last_host": pl.String,
    "last_rank": pl.Int64,
    "lead_ns": pl.Int64,
    "wait_ns": pl.Int64,
    "first_start_ns": pl.Int64,
    "basis": pl.String,
    "note": pl.String,
}
NO_COLLECTIVES = (
    "no HCCL collectives in this run: record a job that runs them (device records with --activity "
    "communication, the default; the Callback API alone gives their ENTER times)"
)


def no_collectives(run: Any) -> str:
    """Why a run has no collective to compare, and how to get some: profiling has been off in
    every rank (a paused run), or what was on left HCCL out; else :data:`NO_COLLECTIVES`."""
    try:
        periods = run.periods()
        on = bool(run.processes().filter((pl.col("state") == "on") & ~pl.col("launcher")).height)
    except Exception:  # noqa: BLE001 - a run without periods (a stand-in, a URL): the general sentence
        return NO_COLLECTIVES
    root = str(getattr(run, "root", "DIR")).removeprefix("file://")
    how = f"`python -m mspti_lens control {root} start --enable runtime,hccl` or the run panel's start"
    if not periods.height:
        if on:
            return "no HCCL collectives yet: profiling is on, and no rank has written a window since"
        return (
            f"no HCCL collectives: profiling has been off in every rank (a paused run); turn it on with {how}"
        )
    enabled = {e for text in periods["enable"].drop_nulls() for e in text.split(",") if e}
    if enabled and not _traces_hccl(enabled):
        return (
            f"no HCCL collectives: HCCL was not enabled (on: {', '.join(sorted(enabled))}); turn it on "
            f"with {how}"
        )
    return NO_COLLECTIVES


def _traces_hccl(names: set[str]) -> bool:
    from ..catalog import DOMAINS
    from .control import resolved_callbacks

    try:
        return any(d == DOMAINS["hccl"] for d, _ in resolved_callbacks(sorted(names)))
    except ValueError:  # a name this version does not know: nothing to say against HCCL
        return True


def clock_error_ns(events: pl.DataFrame, simulated: bool = False) -> int:
    """The error bound of comparing these ranks' timestamps: 0 on one host or on the simulator
    (its simulated hosts share one machine's clock, or its virtual clock), else
    CROSS_HOST_CLOCK_ERROR_NS."""
    if simulated or events.select("host").n_unique() <= 1:
        return 0
    return CROSS_HOST_CLOCK_ERROR_NS


def skew(events: pl.DataFrame, clock_error: int = 0, basis: str = "device") -> pl.DataFrame:
    """One row per complete collective instance (SKEW_COLUMNS) from events with host, rank,
    group, name, sequence, start_ns. Point-to-point ops are left out (not every rank joins).
    ``basis`` "device": an instance is complete when every rank seen in its communicator has it;
    "callbacks" (group null): when every rank that called that function has it."""
    if basis not in BASES:
        raise ValueError(f"basis is one of {', '.join(BASES)}, not {basis!r}")
    on_device = basis == "device"
    ev = events.filter(pl.col("sequence").is_not_null())
    if on_device:
        ev = ev.filter(pl.col("group").is_not_null())
    p2p = [n for n in ev["name"].unique().drop_nulls().to_list() if is_point_to_point(n)]
    ev = ev.filter(~pl.col("name").is_in(p2p))
    if not ev.height:
        return pl.DataFrame(schema=SKEW_COLUMNS)
    # Job-wide instance numbers (runs/instances.py): a rank's own numbers restart at every on period.
    ev = align(ev).unique(["host", "rank", "group", "name", "instance"], keep="first", maintain_order=True)
    member_of = ["group"] if on_device else ["group", "name"]
    members = ev.group_by(member_of).agg(pl.struct("host", "rank").n_unique().alias("members"))
    last = pl.col("start_ns").max()
    g = (
        ev.join(members, on=member_of, nulls_equal=True)
        .group_by("group", "name", "instance")
        .agg(
            pl.len().alias("ranks"),
            pl.col("members").first(),
            (last - pl.col("start_ns").min()).alias("spread_ns"),
            (last - pl.col("start_ns")).sum().alias("wait_ns"),
            pl.col("start_ns").min().alias("first_start_ns"),
            pl.col("host").sort_by("start_ns").last().alias("last_host"),
            pl.col("rank").sort_by("start_ns").last().alias("last_rank"),
            # The last arrival's lead over the next: only it tells who was last.
            (last - pl.col("start_ns").sort(descending=True).get(1, null_on_oob=True)).alias("lead_ns"),
            # A tie for last names nobody.
            (pl.col("start_ns") == last).sum().alias("_at_last"),
        )
        .filter(pl.col("ranks") == pl.col("members"))
    )
    # The last rank is named only when its lead over the second-last exceeds the clock error:
    # within it, the clocks cannot tell which of the two came last (however wide the spread).
    unnamed = (pl.col("_at_last") > 1) | (pl.col("lead_ns").fill_null(0) <= clock_error)
    why = (
        pl.when(pl.col("ranks") < 2)
        .then(pl.lit("one rank: none to compare with"))
        .when(pl.col("_at_last") > 1)
        .then(pl.lit("ranks tie for last"))
        .when(pl.col("lead_ns").fill_null(0) <= clock_error)
        .then(pl.lit(f"the last two arrivals are within the clock error ({clock_error} ns)"))
    )
    g = g.with_columns(
        pl.when(unnamed).then(None).otherwise(pl.col("last_host")).alias("last_host"),
        pl.when(unnamed).then(None).otherwise(pl.col("last_rank")).alias("last_rank"),
        why.alias("note"),
        pl.lit(basis).alias("basis"),
        pl.col("name").alias("op"),
        pl.col("instance").alias("seq"),
    )
    out = g.select(list(SKEW_COLUMNS)).cast(SKEW_COLUMNS)  # type: ignore[arg-type]
    return out.sort("group", "op", "seq", nulls_last=True)


def bridge_error_ns(files: pl.DataFrame) -> int:
    """The bound on ENTER times bridged from another clock to CLOCK_REALTIME (module docstring):
    0 when every window of the run took MSPTI's clock, else MAX_SLEW_PPM of the longest window."""
    if not files.height:
        return 0
    bridged = files.filter(pl.col("clock") != "mspti")
    if not bridged.height:
        return 0
    longest = max(float(bridged["interval_s"].max() or 0.0), 0.0)  # type: ignore[arg-type]
    return int(longest * 1e9 * MAX_SLEW_PPM / 1e6)


def run_skew(run: Any, clock_error: int | None = None) -> pl.DataFrame:
    """Run.skew(): the run's instances from its device records, else from its HCCL calls' ENTER
    times (clock error from the run's hosts and clocks unless given)."""
    ev, basis = run.collective_events(), "device"
    if not ev.height and hasattr(run, "collective_arrivals"):
        ev, basis = run.collective_arrivals(), "callbacks"
    files = run._files
    simulated = bool(files.height and files["simulated"].any())
    if clock_error is None:
        clock_error = clock_error_ns(ev, simulated) + (bridge_error_ns(files) if basis == "callbacks" else 0)
    return skew(ev, clock_error, basis)


def lagging(run: Any, recent: int = RECENT_INSTANCES) -> dict[str, Any]:
    """The live verdict: the rank last most often among the ``recent`` latest instances, and the
    total wait it cost the job over every instance where it was last. Keys: sentence, host, rank,
    last_count, instances, wait_ns."""
    try:
        s = run.skew()
    except Exception as e:  # noqa: BLE001 - said in the panel, never raised in a refresh
        return {"sentence": f"no arrival skew yet ({e})", "rank": None}
    if not s.height:
        has = run.collective_events().height if hasattr(run, "collective_events") else 0
        has = has or (run.collective_arrivals().height if hasattr(run, "collective_arrivals") else 0)
        return {
            "sentence": no_collectives(run) if not has else "no complete collective instance yet",
            "rank": None,
        }
    latest = s.sort("first_start_ns").tail(recent)
    named = latest.filter(pl.col("last_rank").is_not_null())
    if not named.height:
        return {
            "sentence": f"no rank arrives last: the latest {latest.height} instances' spreads are within "
            "the clock error or tie",
            "rank": None,
        }
    top = (
        named.group_by("last_host", "last_rank")
        .len()
        .sort(["len", "last_rank"], descending=[True, False])
        .row(0)
    )
    host, rank, count = top
    wait = int(s.filter((pl.col("last_host") == host) & (pl.col("last_rank") == rank))["wait_ns"].sum())
    return {
        "sentence": (
            f"rank {rank} ({host}) arrives last most often: {count} of the latest {latest.height} "
            f"collective instances; waiting for it cost the job {wait / 1e6:.3f} ms in all"
        ),
        "host": host,
        "rank": int(rank),
        "last_count": int(count),
        "instances": latest.height,
        "wait_ns": wait,
    }


def by_op(s: pl.DataFrame) -> pl.DataFrame:
    """The skew's distribution per (group, op) of a :func:`skew` frame: instances, spread median /
    p10 / p90 / max, total wait, and the rank last most often (null when none was named)."""
    if not s.height:
        return pl.DataFrame(
            schema={
                "group": pl.String,
                "op": pl.String,
                "instances": pl.UInt32,
                "spread_med_ns": pl.Float64,
                "spread_p10_ns": pl.Float64,
                "spread_p90_ns": pl.Float64,
                "spread_max_ns": pl.Int64,
                "wait_total_ns": pl.Int64,
                "last_rank_mode": pl.Int64,
            }  # fmt: skip
        )
    return (
        s.group_by("group", "op")
        .agg(
            pl.len().cast(pl.UInt32).alias("instances"),
            pl.col("spread_ns").median().alias("spread_med_ns"),
            pl.col("spread_ns").quantile(0.1, "linear").alias("spread_p10_ns"),
            pl.col("spread_ns").quantile(0.9, "linear").alias("spread_p90_ns"),
            pl.col("spread_ns").max().alias("spread_max_ns"),
            pl.col("wait_ns").sum().alias("wait_total_ns"),
            pl.col("last_rank").drop_nulls().mode().sort().first().alias("last_rank_mode"),
        )
        .sort("group", "op")
    )
