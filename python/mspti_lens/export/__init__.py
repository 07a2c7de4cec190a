"""Exports to the fleet's formats, one function each:

- :func:`to_prometheus` (text or protobuf exposition) and :func:`serve` (a ``/metrics`` endpoint),
- :func:`to_otlp` (OTLP/JSON exponential histograms) and :func:`send_otlp` (OTLP/HTTP),
- :func:`to_hdr_log` (HdrHistogram V2 interval log),
- :func:`to_perfetto` (Chrome trace JSON of the slowest calls, MSTX ranges and kernels).

Each writes mspti-lens's own buckets (scale-7 exponential), never re-bucketed; see
:mod:`mspti_lens.export.series`. The CLI: ``python -m mspti_lens export FILE.parquet --format ...``.
"""

from __future__ import annotations

from .hdr import to_hdr_log
from .otlp import send_otlp, to_otlp
from .perfetto import to_perfetto
from .prometheus import to_prometheus
from .serve import MetricsServer, serve

__all__ = ["MetricsServer", "send_otlp", "serve", "to_hdr_log", "to_otlp", "to_perfetto", "to_prometheus"]
