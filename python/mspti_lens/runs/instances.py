"""One job-wide number per collective instance, whatever each rank's on/off history.

A rank numbers its collectives itself (``sequence``: its k-th of one op in one communicator, or
its k-th call of one HCCL function), counting from the start of its Session; ``control start``
on a paused process starts a new Session, so the numbers restart at every on period and ranks
that turned on at different moments number one collective differently. Numbers are therefore
compared only within one on period of one rank (a *segment*: a run of one rank's events of one
op, in time order, whose numbers keep rising; a new period starts over at 0). Segments of
different ranks are related by time, and every aligned instance gets one job-wide ``instance``.

How two segments A and B (different ranks, overlapping in time) are related: a candidate shift
``d`` pairs A's number ``k`` with B's ``k - d``. Every instance's intervals on all ranks share a
point (the last rank's start: no rank's collective ends before every rank has started it), so
the true shift makes the paired intervals overlap, and a wrong one pairs neighbouring instances,
which at most touch. The shift taken is the one whose pairs overlap most in total (a pair that
does not overlap counts its gap against it, up to its longer interval); candidates are the
shifts A's events name by their nearest start in B, and 0 (the numbers as recorded, kept on a
tie). A device record has its own
interval; an ENTER of the Callback API (no end) spans until the rank's next ENTER of that
function, so there the rule is that one instance's ENTERs are closer than half the time between
two instances. The evidence of a relation is its number of overlapping pairs. Across hosts the
clocks' error moves one rank's intervals against another's: alignment needs an instance's
intervals to overlap by more than that error (on one host, or on the simulator, it is 0).

Relations are joined strongest first (a maximum spanning forest), so they never contradict one
another. Each segment is related to the overlapping segments of the next
:data:`PARTNER_RANKS` ranks (in host, rank order, cyclic) that have one, which bounds the work on
large jobs. A connected set of segments keeps the numbers of its earliest segment; sets that
nothing relates (all ranks were off in between) are numbered after the ones before them in time,
so their instances never pair with another set's. The result depends on the set of events only
(not on their order or on how files were merged), so compacted and fine reads agree.
"""

from __future__ import annotations

import polars as pl

PARTNER_RANKS = 3  # each segment is related to the overlapping segments of this many other ranks
STREAM = ("group", "name")  # numbers count per op and communicator (group null: per function)
RANK = ("host", "rank")


def align(events: pl.DataFrame) -> pl.DataFrame:
    """``events`` (host, rank, group, name, sequence, start_ns, end_ns; end_ns may be null) with
    rows of null sequence left out, sorted by host, rank, group, name, start_ns, and two columns
    added: ``segment`` (the rank's on period, counted per op from 0) and ``instance`` (Int64, the
    job-wide instance number)."""
    ev = events.filter(pl.col("sequence").is_not_null())
    if "end_ns" not in ev.columns:
        ev = ev.with_columns(pl.lit(None, pl.Int64).alias("end_ns"))
    keys = [*RANK, *STREAM]
    # One event read twice (the same file listed under two names) is one event.
    ev = ev.unique([*keys, "sequence", "start_ns", "end_ns"], keep="first").sort(
        [*keys, "start_ns", "sequence", "end_ns"], nulls_last=True
    )
    restart = (pl.col("sequence") <= pl.col("sequence").shift(1)).over(keys).fill_null(False)
    ev = ev.with_columns(restart.cast(pl.Int64).cum_sum().over(keys).alias("segment"))
    if not ev.height:
        return ev.with_columns(pl.lit(None, pl.Int64).alias("instance"))
    # A segment's span: an ENTER without an end lasts until the rank's next one of that op.
    seg_keys = [*keys, "segment"]
    span_end = pl.coalesce(pl.col("end_ns"), pl.col("start_ns").shift(-1).over(seg_keys), pl.col("start_ns"))
    ev = ev.with_columns(pl.max_horizontal(span_end, pl.col("start_ns")).alias("_end"))
    offsets: list[pl.DataFrame] = []
    for _, stream in ev.group_by(list(STREAM), maintain_order=True):
        offsets.append(_stream_offsets(stream))
    off = pl.concat(offsets)
    out = ev.join(off, on=seg_keys, how="left", nulls_equal=True)
    out = out.with_columns((pl.col("sequence").cast(pl.Int64) + pl.col("_offset")).alias("instance"))
    return out.drop("_end", "_offset")


def _stream_offsets(stream: pl.DataFrame) -> pl.DataFrame:
    """Per segment of one op's events: the offset that turns its numbers into instances."""
    seg_keys = [*RANK, *STREAM, "segment"]
    parts = stream.partition_by(seg_keys, maintain_order=True, as_dict=False)
    segs = []
    for p in parts:
        segs.append(
            {
                "rank_key": (p["host"][0] or "", p["rank"][0]),
                "seq": p["sequence"].cast(pl.Int64).to_numpy(),
                "start": p["start_ns"].to_numpy(),
                "end": p["_end"].to_numpy(),
            }
        )
    n = len(segs)
    first = [int(s["start"].min()) for s in segs]
    last = [int(s["end"].max()) for s in segs]
    edges = _edges(segs, first, last)
    # Strongest relations first; each joins two sets of segments at most once (union-find that
    # keeps every segment's offset from its set's root).
    parent, diff = list(range(n)), [0] * n

    def find(x: int) -> tuple[int, int]:
        """x's root and o_x - o_root, pointing x's path straight at the root."""
        path = []
        while parent[x] != x:
            path.append(x)
            x = parent[x]
        to_root = 0
        for y in reversed(path):
            to_root += diff[y]
            parent[y], diff[y] = x, to_root
        return x, (diff[path[0]] if path else 0)

    for _, a, b, d in sorted(edges, key=lambda e: (-e[0], e[1], e[2])):
        ra, da = find(a)
        rb, db = find(b)
        if ra != rb:  # o_b - o_a = d
            parent[rb], diff[rb] = ra, d + da - db
    rel = [find(i) for i in range(n)]
    sets: dict[int, list[int]] = {}
    for i, (root, _) in enumerate(rel):
        sets.setdefault(root, []).append(i)
    # Sets in the time order of their earliest segment: the first keeps its earliest segment's
    # numbers, each next one starts after every instance before it.
    order = sorted(sets.values(), key=lambda m: min((first[i], segs[i]["rank_key"], i) for i in m))
    offset = [0] * n
    top: int | None = None
    for members in order:
        anchor = min(members, key=lambda i: (first[i], segs[i]["rank_key"], i))
        base = -rel[anchor][1]
        if top is not None:
            low = min(int(segs[i]["seq"].min()) + rel[i][1] for i in members) + base
            base += top + 1 - low
        for i in members:
            offset[i] = rel[i][1] + base
        high = max(int(segs[i]["seq"].max()) + offset[i] for i in members)
        top = high if top is None else max(top, high)
    cols = {k: [p[k][0] for p in parts] for k in seg_keys}
    return pl.DataFrame(
        {**cols, "_offset": offset}, schema={**stream.select(seg_keys).schema, "_offset": pl.Int64}
    )


def _edges(segs: list[dict], first: list[int], last: list[int]) -> list[tuple[int, int, int, int]]:
    """(evidence, a, b, d) for each related pair of segments: o_b - o_a = d."""
    ranks = sorted({s["rank_key"] for s in segs})
    where = {r: i for i, r in enumerate(ranks)}
    by_rank: dict[tuple, list[int]] = {}
    for i, s in enumerate(segs):
        by_rank.setdefault(s["rank_key"], []).append(i)
    edges, seen = [], set()
    for a, s in enumerate(segs):
        me, found = where[s["rank_key"]], 0
        for step in range(1, len(ranks)):
            if found >= PARTNER_RANKS:
                break
            near = [
                b
                for b in by_rank[ranks[(me + step) % len(ranks)]]
                if first[b] <= last[a] and first[a] <= last[b]
            ]
            found += bool(near)
            for b in near:
                x, y = min(a, b), max(a, b)
                if (x, y) in seen:
                    continue
                seen.add((x, y))
                rel = _relate(segs[x], segs[y])
                if rel is not None:
                    edges.append((rel[0], x, y, rel[1]))
    return edges


def _relate(a: dict, b: dict) -> tuple[int, int] | None:
    """(evidence, d) of the shift that pairs a's number k with b's k - d (module docstring), or
    None when no shift pairs overlapping events."""
    import numpy as np  # here, not at the top: every process importing mspti_lens paid its 0.3 s

    bs = b["start"]
    order = np.argsort(bs, kind="stable")
    bs_sorted, bseq_sorted = bs[order], b["seq"][order]
    i = np.searchsorted(bs_sorted, a["start"])
    lo, hi = np.clip(i - 1, 0, len(bs) - 1), np.clip(i, 0, len(bs) - 1)
    nearer = np.where(np.abs(a["start"] - bs_sorted[lo]) <= np.abs(bs_sorted[hi] - a["start"]), lo, hi)
    named = a["seq"] - bseq_sorted[nearer]
    values, counts = np.unique(named, return_counts=True)
    candidates = {0, *values[np.argsort(-counts, kind="stable")[:3]].tolist()}
    best: tuple[float, int, int, int] | None = None  # (overlap, evidence, -|d|, d)
    for d in sorted(candidates):
        # A segment's numbers rise (that is what makes it one), so they are unique.
        common, ia, ib = np.intersect1d(a["seq"], b["seq"] + d, assume_unique=True, return_indices=True)
        if not len(common):
            continue
        overlap = np.minimum(a["end"][ia], b["end"][ib]) - np.maximum(a["start"][ia], b["start"][ib])
        # A gap counts against the shift by at most the pair's longer interval: one event moved
        # far (a clock step) must not outweigh every other pair.
        longer = np.maximum(a["end"][ia] - a["start"][ia], b["end"][ib] - b["start"][ib])
        overlap = np.maximum(overlap, -longer)
        key = (float(overlap.sum(dtype=np.float64)), int((overlap > 0).sum()), -abs(d), d)
        if best is None or key[:3] > best[:3]:
            best = key
    if best is None or best[1] == 0:
        return None
    return best[1], best[3]
