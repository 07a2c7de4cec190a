"""Which rank is slow: msprof-analyze's slow-rank rule and HTA's latest-start rule.

msprof-analyze (``cluster_analyse/recipes/slow_rank``): for one collective, compare the ranks'
communication times; the rank with an abnormally SHORT time is the slow one, because a collective
completes only when the last rank arrives, so the last to arrive waits least. Abnormal: Dixon's
Q test for up to 100 ranks (99.5 % critical values), else 3 sigma (a rank below mean - 3 sigma, or
the minimum if any rank is above mean + 3 sigma).

HTA (``hta/analyzers/straggler.py``): with device timestamps, the rank whose collective starts
last is the straggler; counted per rank over instances. It compares absolute timestamps across
ranks, so it assumes synchronised clocks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

from .instances import align

# The 99.5 % quantile of Dixon's ratio for the smallest of n normal values, n = 3..100
# (regenerate with `python -m mspti_lens.runs.dixon_table`: Monte Carlo, 400,000 samples per n).
DIXON_CONFIDENCE = 0.995
DIXON_MAX_RANKS = 100
DIXON_CRITICAL: dict[int, float] = {
    3: 0.9940,
    4: 0.9194,
    5: 0.8251,
    6: 0.7430,
    7: 0.6817,
    8: 0.7229,
    9: 0.6763,
    10: 0.6360,
    11: 0.7078,
    12: 0.6760,
    13: 0.6488,
    14: 0.6727,
    15: 0.6473,
    16: 0.6314,
    17: 0.6108,
    18: 0.5935,
    19: 0.5807,
    20: 0.5685,
    21: 0.5559,
    22: 0.5454,
    23: 0.5362,
    24: 0.5262,
    25: 0.5179,
    26: 0.5104,
    27: 0.5032,
    28: 0.4956,
    29: 0.4901,
    30: 0.4848,
    31: 0.4774,
    32: 0.4740,
    33: 0.4673,
    34: 0.4640,
    35: 0.4589,
    36: 0.4538,
    37: 0.4495,
    38: 0.4449,
    39: 0.4409,
    40: 0.4380,
    41: 0.4343,
    42: 0.4316,
    43: 0.4285,
    44: 0.4251,
    45: 0.4237,
    46: 0.4200,
    47: 0.4167,
    48: 0.4148,
    49: 0.4134,
    50: 0.4101,
    51: 0.4071,
    52: 0.4048,
    53: 0.4012,
    54: 0.3988,
    55: 0.3981,
    56: 0.3967,
    57: 0.3939,
    58: 0.3933,
    59: 0.3910,
    60: 0.3906,
    61: 0.3861,
    62: 0.3858,
    63: 0.3825,
    64: 0.3815,
    65: 0.3793,
    66: 0.3790,
    67: 0.3771,
    68: 0.3756,
    69: 0.3748,
    70: 0.3724,
    71: 0.3711,
    72: 0.3705,
    73: 0.3696,
    74: 0.3665,
    75: 0.3660,
    76: 0.3645,
    77: 0.3631,
    78: 0.3618,
    79: 0.3620,
    80: 0.3592,
    81: 0.3595,
    82: 0.3601,
    83: 0.3568,
    84: 0.3556,
    85: 0.3545,
    86: 0.3544,
    87: 0.3526,
    88: 0.3513,
    89: 0.3507,
    90: 0.3502,
    91: 0.3485,
    92: 0.3465,
    93: 0.3460,
    94: 0.3455,
    95: 0.3447,
    96: 0.3444,
    97: 0.3437,
    98: 0.3419,
    99: 0.3432,
    100: 0.3404,
}
SIGMAS = 3.0


def dixon_ratio(x: Sequence[float]) -> float:
    """Dixon's ratio of the smallest of the sorted values ``x`` (r10, r11, r21 or r22 by n)."""
    n = len(x)
    if n <= 7:
        num, den = x[1] - x[0], x[-1] - x[0]
    elif n <= 10:
        num, den = x[1] - x[0], x[-2] - x[0]
    elif n <= 13:
        num, den = x[2] - x[0], x[-2] - x[0]
    else:
        num, den = x[2] - x[0], x[-3] - x[0]
    return num / den if den > 0 else 0.0


def vote(values: Sequence[float]) -> tuple[int | None, str, float, float]:
    """The index of the abnormally short value, if any, with the test used, its statistic and the
    critical value it had to exceed. Fewer than 3 values: no vote."""
    n = len(values)
    if n < 3:
        return None, "none", math.nan, math.nan
    order = sorted(range(n), key=lambda i: values[i])
    lowest = order[0]
    if n <= DIXON_MAX_RANKS:
        q = dixon_ratio([values[i] for i in order])
        crit = DIXON_CRITICAL[n]
        return (lowest if q > crit else None), "dixon", q, crit
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    if sd == 0:
        return None, "3sigma", 0.0, SIGMAS
    z_low = (mean - values[lowest]) / sd
    z_high = (values[order[-1]] - mean) / sd
    hit = z_low > SIGMAS or z_high > SIGMAS
    return (lowest if hit else None), "3sigma", max(z_low, z_high), SIGMAS


def is_point_to_point(name: str) -> bool:
    """Send/receive are not collectives every rank joins: msprof-analyze leaves them out. Names are
    HCCL's functions (``HcclSend``) or, in COMMUNICATION records, its op names (``hcom_send_``,
    ``hcom_receive_``, ``hcom_batchSendRecv_``)."""
    n = name.lower()
    return "send" in n or "recv" in n or "receive" in n


STRAGGLER_COLUMNS = {
    "name": pl.String,
    "instance": pl.Int64,
    "ranks": pl.UInt32,
    "slow_host": pl.String,
    "slow_rank": pl.Int64,
    "slow_ns": pl.Float64,
    "median_ns": pl.Float64,
    "test": pl.String,
    "statistic": pl.Float64,
    "critical": pl.Float64,
    "rule": pl.String,
}


def slow_ranks(per_rank: pl.DataFrame) -> pl.DataFrame:
    """msprof-analyze's vote per (name, instance) over a frame of host, rank, name, instance,
    num_calls and mean_ns. ``instance`` null is the whole run: there, a collective whose call
    count differs between ranks is dropped, as msprof-analyze drops such groups. A window
    instance (the k-th interval of every rank) needs every rank of the run, not equal counts:
    window edges fall between different calls on different ranks."""
    rows = []
    ranks = per_rank.select("host", "rank").n_unique()
    for (name, instance), g in per_rank.group_by(["name", "instance"], maintain_order=True):
        if is_point_to_point(name):
            continue
        if instance is None and g["num_calls"].n_unique() != 1:
            continue
        if instance is not None and g.height != ranks:
            continue
        g = g.sort("host", "rank")
        values = g["mean_ns"].to_list()
        i, test, stat, crit = vote(values)
        rows.append(
            {
                "name": name,
                "instance": instance,
                "ranks": g.height,
                "slow_host": g["host"][i] if i is not None else None,
                "slow_rank": g["rank"][i] if i is not None else None,
                "slow_ns": values[i] if i is not None else None,
                "median_ns": float(sorted(values)[len(values) // 2]),
                "test": test,
                "statistic": stat,
                "critical": crit,
                "rule": "msprof-analyze: shortest collective time arrived last",
            }
        )
    return pl.DataFrame(rows, schema=STRAGGLER_COLUMNS).sort("name", "instance", nulls_last=False)


def latest_starters(starts: pl.DataFrame, top_k: int = 1) -> pl.DataFrame:
    """HTA's rule over device timestamps: per instance (columns host, rank, instance, start_ns), the
    ``top_k`` ranks that started last, counted per rank (column ``late_count``)."""
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive int, not {top_k!r}")
    late = (
        starts.with_columns(
            pl.col("start_ns").rank("ordinal", descending=True).over("instance").alias("order")
        )
        .filter(pl.col("order") <= top_k)
        .group_by("host", "rank")
        .agg(pl.len().cast(pl.UInt32).alias("late_count"))
    )
    return late.sort("late_count", "host", "rank", descending=[True, False, False])


# Stragglers(): one row per (collective, instance). On device events, `instance` is the job-wide
# instance number (runs/instances.py: the ranks' own numbers aligned by time) and `group` its
# communicator; on windows (no device events), `instance` is the window number and `group` null.
INSTANCE_COLUMNS = {
    # the verdicts first (which rank each rule names, and why there is none), so a notebook's
    # frame shows them without scrolling; the evidence after
    "name": pl.String,
    "instance": pl.Int64,
    "slow_host": pl.String,
    "slow_rank": pl.Int64,
    "late_host": pl.String,
    "late_rank": pl.Int64,
    "late_by_ns": pl.Int64,
    "note": pl.String,
    "basis": pl.String,
    "slow_ns": pl.Float64,
    "median_ns": pl.Float64,
    "test": pl.String,
    "statistic": pl.Float64,
    "critical": pl.Float64,
    "group": pl.String,
    "ranks": pl.UInt32,
    "group_ranks": pl.UInt32,
}
BASIS_EVENTS = "device events"
# short: it is a cell of every row of the table
BASIS_WINDOWS = "windows (no device events: record with --activity communication to vote per instance)"
MSPROF_RULE = "msprof-analyze: shortest collective time arrived last"
HTA_RULE = "HTA: latest start"


def instance_votes(events: pl.DataFrame) -> pl.DataFrame:
    """Both rules per collective instance, over device events of collectives (columns host, rank,
    group, name, sequence, start_ns, end_ns). Instances match across ranks by (group, name,
    instance), the ranks' own numbers aligned by time (runs/instances.py). A group's ranks are
    those with any event in it; an instance missing on some of them, or whose ranks' intervals
    do not overlap (no rank can finish an instance before every rank has started it, so its
    ranks' numbers could not be aligned), gets no vote and a note."""
    ev = events.filter(pl.col("group").is_not_null() & pl.col("sequence").is_not_null())
    # Job-wide instance numbers (runs/instances.py): a rank's own numbers restart at every on period.
    ev = align(ev).unique(["host", "rank", "group", "name", "instance"], keep="first", maintain_order=True)
    members = ev.group_by("group").agg(pl.struct("host", "rank").unique().alias("members"))
    members_of = {g: {(m["host"], m["rank"]) for m in ms} for g, ms in members.iter_rows()}
    rows = []
    for (group, name, seq), g in ev.group_by(["group", "name", "instance"], maintain_order=True):
        if is_point_to_point(name):
            continue
        g = g.sort("host", "rank")
        want = members_of[group]
        row: dict = {
            "group": group,
            "name": name,
            "instance": int(seq),
            "ranks": g.height,
            "group_ranks": len(want),
            "basis": BASIS_EVENTS,
            "note": None,
        }
        present = set(zip(g["host"].to_list(), g["rank"].to_list()))
        starts, ends = g["start_ns"].to_list(), g["end_ns"].to_list()
        if present != want:
            gone = sorted(want - present, key=lambda hr: (hr[0], hr[1]))
            row["note"] = "missing on " + ", ".join(f"rank {r} ({h})" for h, r in gone[:8])
        elif min(ends) < max(starts):
            first_end, last_start = ends.index(min(ends)), starts.index(max(starts))
            row["note"] = (
                f"sequences do not line up: rank {g['rank'][first_end]} ended instance {seq} before "
                f"rank {g['rank'][last_start]} started it"
            )
        if row["note"] is None:
            durations = [float(e - s) for s, e in zip(starts, ends)]
            i, test, stat, crit = vote(durations)
            row.update(
                slow_host=g["host"][i] if i is not None else None,
                slow_rank=g["rank"][i] if i is not None else None,
                slow_ns=durations[i] if i is not None else None,
                median_ns=float(sorted(durations)[len(durations) // 2]),
                test=test,
                statistic=stat,
                critical=crit,
            )
            order = sorted(range(len(starts)), key=lambda k: starts[k])
            # HTA names the last starter; a tie for last names nobody.
            if len(order) >= 2 and starts[order[-1]] > starts[order[-2]]:
                k = order[-1]
                row.update(
                    late_host=g["host"][k], late_rank=g["rank"][k], late_by_ns=starts[k] - starts[order[-2]]
                )
        rows.append(row)
    return pl.DataFrame(rows, schema=INSTANCE_COLUMNS).sort("group", "name", "instance")


def window_votes(per_rank: pl.DataFrame) -> pl.DataFrame:
    """The fallback without device events: msprof-analyze's vote per window (``slow_ranks``) in
    the columns of :func:`instance_votes`, saying so in ``basis``."""
    s = slow_ranks(per_rank).drop("rule")
    return s.with_columns(
        pl.lit(None, dtype=pl.String).alias("group"),
        pl.col("ranks").alias("group_ranks"),
        pl.lit(None, dtype=pl.String).alias("late_host"),
        pl.lit(None, dtype=pl.Int64).alias("late_rank"),
        pl.lit(None, dtype=pl.Int64).alias("late_by_ns"),
        pl.lit(BASIS_WINDOWS).alias("basis"),
        pl.lit(None, dtype=pl.String).alias("note"),
    ).select(list(INSTANCE_COLUMNS))


# What must agree for consecutive instances to fold into one row of fold_instances(): the
# verdicts and what they were reached on. The evidence (times, statistic) may differ.
VERDICT_COLUMNS = (
    "name",
    "group",
    "slow_host",
    "slow_rank",
    "late_host",
    "late_rank",
    "basis",
    "note",
    "test",
    "ranks",
    "group_ranks",
)
FOLDED_COLUMNS = {
    "name": pl.String,
    "instances": pl.String,
    "num_instances": pl.UInt32,
    **{c: t for c, t in INSTANCE_COLUMNS.items() if c not in ("name", "instance")},
    "late_by_ns": pl.Float64,  # a median over the folded instances
}


def fold_instances(votes: pl.DataFrame) -> pl.DataFrame:
    """The rows of :func:`instance_votes` / :func:`window_votes` with runs of consecutive
    instances that reached the same verdict (every :data:`VERDICT_COLUMNS` equal) folded into
    one row: ``instances`` names them ("0–19", or "7"), ``num_instances`` counts them; the times
    (``late_by_ns``, ``slow_ns``, ``median_ns``) are their medians and ``statistic`` the smallest
    (the weakest evidence of the run). A 20-step job whose every instance names one rank is one
    row instead of 20 identical ones."""
    if not votes.height:
        return pl.DataFrame(schema=FOLDED_COLUMNS)
    v = votes.sort("group", "name", "instance", nulls_last=False)
    changed = pl.any_horizontal(
        *(pl.col(c).ne_missing(pl.col(c).shift(1)) for c in VERDICT_COLUMNS),
        pl.col("instance").ne_missing(pl.col("instance").shift(1) + 1),
    )
    v = v.with_columns(changed.fill_null(True).cum_sum().alias("_run"))
    out = v.group_by("_run", maintain_order=True).agg(
        *(pl.col(c).first() for c in VERDICT_COLUMNS),
        pl.col("instance").min().alias("_first"),
        pl.col("instance").max().alias("_last"),
        pl.len().cast(pl.UInt32).alias("num_instances"),
        pl.col("late_by_ns").cast(pl.Float64).median(),
        pl.col("slow_ns").median(),
        pl.col("median_ns").median(),
        pl.col("statistic").min(),
        pl.col("critical").first(),
    )
    out = out.with_columns(
        pl.when(pl.col("_first").is_null())
        .then(pl.lit("whole run"))
        .when(pl.col("_first") == pl.col("_last"))
        .then(pl.col("_first").cast(pl.String))
        .otherwise(pl.format("{}–{}", pl.col("_first"), pl.col("_last")))
        .alias("instances")
    )
    return out.select([pl.col(c).cast(t) for c, t in FOLDED_COLUMNS.items()])


TALLY_COLUMNS = {
    "host": pl.String,
    "rank": pl.Int64,
    "slow_affect_count": pl.UInt32,
    "late_count": pl.UInt32,
    "instances": pl.UInt32,
}


def tally(votes: pl.DataFrame) -> pl.DataFrame:
    """Per rank named at least once: how many instances msprof-analyze's rule named it
    (``slow_affect_count``, its SlowRank table) and HTA's rule (``late_count``), out of
    ``instances`` (the instances either rule voted on)."""
    voted = votes.filter(pl.col("note").is_null() & pl.col("test").is_not_null())
    n = voted.height
    slow = (
        voted.drop_nulls("slow_rank")
        .group_by(pl.col("slow_host").alias("host"), pl.col("slow_rank").alias("rank"))
        .agg(pl.len().cast(pl.UInt32).alias("slow_affect_count"))
    )
    late = (
        voted.drop_nulls("late_rank")
        .group_by(pl.col("late_host").alias("host"), pl.col("late_rank").alias("rank"))
        .agg(pl.len().cast(pl.UInt32).alias("late_count"))
    )
    out = slow.join(late, on=["host", "rank"], how="full", coalesce=True).with_columns(
        pl.col("slow_affect_count").fill_null(0),
        pl.col("late_count").fill_null(0),
        pl.lit(n, dtype=pl.UInt32).alias("instances"),
    )
    out = pl.concat([pl.DataFrame(schema=TALLY_COLUMNS), out.select(list(TALLY_COLUMNS))])
    return out.sort(["slow_affect_count", "late_count", "rank"], descending=[True, True, False])
