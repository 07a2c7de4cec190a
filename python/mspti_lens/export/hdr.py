"""HdrHistogram V2 interval logs (log format 1.3), one tagged line per API and interval.

HdrHistogram is log-*linear* (2048 linear sub-buckets per power of two at 3 significant digits,
<= 0.05 % wide), so each of mspti-lens's exponential buckets (<= 0.27 % wide) is recorded at one
value: its upper bound, clamped to the exact [min, max] (the exact max for the top bucket, the
exact min for the bottom one); zero-ns calls at 0, calls beyond the range at the exact max.
A reader's quantile is therefore within one mspti-lens bucket of mspti-lens's own *at the same
rank*. The ranks differ: HdrHistogram's ``get_value_at_percentile(p)`` takes call
``int(p/100 * n + 0.5)`` (rounded to the nearest), mspti-lens ``ceil(q * n)`` (nearest rank), so
in a sparse tail the two p99s are neighbouring calls and may be far apart.

Encoding (big-endian): a 40-byte V2 header (cookie, payload length, normalizing index offset,
significant digits, lowest and highest trackable value, integer-to-double ratio), then the
counts as ZigZag LEB128 varints where -k stands for k empty buckets; compressed = cookie,
length, zlib stream; base64 in the log. Timestamps are seconds relative to ``#[BaseTime]``;
``Interval_Max`` is in ms (max value unit ratio 10^6 from ns), as HdrHistogram's tools expect.
"""

from __future__ import annotations

import base64
import datetime
import math
import os
import struct
import zlib
from typing import Any

from .series import Series, resource_of, series_of, upper_bound

V2_ENCODING_COOKIE = 0x1C849303 | 0x10
V2_COMPRESSED_COOKIE = 0x1C849304 | 0x10
SIGNIFICANT_DIGITS = 3
MAX_VALUE_UNIT_RATIO = 1e6  # ns -> ms in Interval_Max


class _Layout:
    """HdrHistogram's counts-array layout for lowest value 1 and ``highest``."""

    def __init__(self, highest: int, digits: int = SIGNIFICANT_DIGITS):
        self.highest = max(int(highest), 2)
        self.digits = digits
        largest_single_unit = 2 * 10**digits
        sub_bucket_count_magnitude = math.ceil(math.log2(largest_single_unit))
        self.half_count_magnitude = max(sub_bucket_count_magnitude, 1) - 1
        self.sub_bucket_count = 1 << (self.half_count_magnitude + 1)
        self.half_count = self.sub_bucket_count // 2
        self.mask = self.sub_bucket_count - 1
        smallest_untrackable, buckets = self.sub_bucket_count, 1
        while smallest_untrackable <= self.highest:
            if smallest_untrackable > (2**63 - 1) // 2:
                buckets += 1
                break
            smallest_untrackable <<= 1
            buckets += 1
        self.counts_len = (buckets + 1) * self.half_count

    def index(self, v: int) -> int:
        pow2ceiling = (v | self.mask).bit_length()
        bucket = pow2ceiling - (self.half_count_magnitude + 1)
        sub_bucket = v >> bucket
        return ((bucket + 1) << self.half_count_magnitude) + (sub_bucket - self.half_count)


def _zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _values(s: Series) -> dict[int, int]:
    """The value each bucket's calls are recorded at -> count (see the module's docstring)."""
    vals: dict[int, int] = {}
    if s.zero_count:
        vals[0] = s.zero_count
    for i, c in s.buckets.items():
        v = min(max(math.floor(upper_bound(i)), s.min_ns), s.max_ns)
        vals[v] = vals.get(v, 0) + c
    if s.overflow:
        vals[s.max_ns] = vals.get(s.max_ns, 0) + s.overflow
    return vals


def encode(s: Series) -> str:
    """One API's histogram as a base64 compressed HdrHistogram V2 blob."""
    layout = _Layout(max(s.max_ns, 1))
    counts: dict[int, int] = {}
    for v, c in _values(s).items():
        k = layout.index(v)
        counts[k] = counts.get(k, 0) + c
    payload = bytearray()
    last = -1
    for k in sorted(counts):
        gap = k - last - 1
        if gap == 1:
            payload += _zigzag_varint(0)
        elif gap > 1:
            payload += _zigzag_varint(-gap)
        payload += _zigzag_varint(counts[k])
        last = k
    header = struct.pack(
        ">iiiiqqd", V2_ENCODING_COOKIE, len(payload), 0, layout.digits, 1, layout.highest, 1.0
    )
    compressed = zlib.compress(header + bytes(payload))
    return base64.b64encode(struct.pack(">ii", V2_COMPRESSED_COOKIE, len(compressed)) + compressed).decode()


def _tagger(series: list[Series]):
    """The tag of each series: domain/api, or domain/callback/api for a (domain, api) that comes
    under two callbacks anywhere in the log (a tag names one histogram, the same one in every
    interval). Tags may not hold the log's separators."""
    callbacks: dict[tuple[str, str], set[str]] = {}
    for s in series:
        callbacks.setdefault((s.domain, s.api), set()).add(s.callback)

    def tag(s: Series) -> str:
        t = (
            f"{s.domain}/{s.callback}/{s.api}"
            if len(callbacks[(s.domain, s.api)]) > 1
            else f"{s.domain}/{s.api}"
        )
        return t.replace(",", "_").replace(" ", "_")

    return tag


def to_hdr_log(
    snap: Any,
    path: str | os.PathLike | None = None,
    *,
    intervals: list[tuple[float, float, Any]] | None = None,
) -> str:
    """A HdrHistogram interval log: by default one interval (the snapshot's window) with a
    tagged histogram per API; ``intervals`` = [(start_s, end_s, snapshot), ...] writes several
    (e.g. successive ``Session.reset()`` windows). With ``path``, also written there."""
    if intervals is None:
        r = resource_of(snap)
        intervals = [(r.start_unix_ns / 1e9, r.end_unix_ns / 1e9, snap)]
    if not intervals:
        raise ValueError("to_hdr_log() needs at least one interval")
    base = min(float(a) for a, _, _ in intervals)
    when = datetime.datetime.fromtimestamp(base, datetime.timezone.utc).strftime("%a %b %d %H:%M:%S UTC %Y")
    lines = [
        "#[Written by mspti-lens: per-API latency of MSPTI-traced calls, ns]",
        "#[Histogram log format version 1.3]",
        f"#[StartTime: {base:.3f} (seconds since epoch), {when}]",
        f"#[BaseTime: {base:.3f} (seconds since epoch)]",
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"',
    ]
    every = [(start, end, series_of(s)) for start, end, s in intervals]
    tag = _tagger([x for _, _, ss in every for x in ss])
    for start, end, ss in every:
        for series in ss:
            if not series.count:
                continue
            lines.append(
                f"Tag={tag(series)},{float(start) - base:.3f},{max(float(end) - float(start), 0.0):.3f},"
                f"{series.max_ns / MAX_VALUE_UNIT_RATIO:.3f},{encode(series)}"
            )
    text = "\n".join(lines) + "\n"
    if path is not None:
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            f.write(text)
    return text
