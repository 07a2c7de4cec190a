"""atheris target: ``mspti_lens.Snapshot.load`` on arbitrary files.

Two modes, chosen by the first byte: raw bytes written as the file (mutating the seed Parquet
files goes deep, Parquet pages carry no checksum by default), or a structured snapshot table
built from fuzzed column values and metadata (reaches NativeSnapshot.from_state's checks).
Loading must give a Snapshot whose summary and histogram can be built, or raise ValueError:
anything else, a crash or a hang is a finding.

    python fuzz/fuzz_snapshot_load.py fuzz/corpus/snapshot -max_total_time=60
"""

from __future__ import annotations

import json
import os
import tempfile

import atheris
import pyarrow as pa
import pyarrow.parquet as pq

from _common import quiet, run, tolerated

with atheris.instrument_imports(include=["mspti_lens"]):
    from mspti_lens import Snapshot
    from mspti_lens.columns import FILE_COLUMNS

quiet()
TMP = tempfile.mkdtemp(prefix="fuzz-snapshot-")
PATH = os.path.join(TMP, "input.parquet")


def structured(fdp: atheris.FuzzedDataProvider) -> None:
    n = fdp.ConsumeIntInRange(0, 4)

    def u() -> int:
        return fdp.ConsumeIntInRange(0, 2**64 - 1) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 5000)

    cols = {
        "domain": pa.array([fdp.ConsumeIntInRange(0, 2**32 - 1) for _ in range(n)], pa.uint32()),
        "cbid": pa.array([fdp.ConsumeIntInRange(0, 2**32 - 1) for _ in range(n)], pa.uint32()),
        "name": pa.array([fdp.ConsumeUnicodeNoSurrogates(12) for _ in range(n)], pa.string()),
        "count": pa.array([u() for _ in range(n)], pa.uint64()),
        "sum": pa.array([u() for _ in range(n)], pa.uint64()),
        "sum_sq_hi": pa.array([u() for _ in range(n)], pa.uint64()),
        "sum_sq_lo": pa.array([u() for _ in range(n)], pa.uint64()),
        "zero": pa.array([u() for _ in range(n)], pa.uint64()),
        "min": pa.array([u() if fdp.ConsumeBool() else None for _ in range(n)], pa.uint64()),
        "max": pa.array([u() if fdp.ConsumeBool() else None for _ in range(n)], pa.uint64()),
        "overflow": pa.array([u() for _ in range(n)], pa.uint64()),
    }
    bl, cl = [], []
    for _ in range(n):
        k = fdp.ConsumeIntInRange(0, 4)
        bl.append([fdp.ConsumeIntInRange(-3, 5400) for _ in range(k)])
        cl.append([u() for _ in range(k if fdp.ConsumeProbability() < 0.9 else fdp.ConsumeIntInRange(0, 4))])
    cols["index"] = pa.array(bl, pa.list_(pa.int32()))
    cols["counts"] = pa.array(cl, pa.list_(pa.uint64()))
    for c in FILE_COLUMNS:
        if fdp.ConsumeProbability() < 0.03:
            del cols[c]
    head = {
        "format": "mspti-lens-snapshot",
        "version": 2 if fdp.ConsumeProbability() < 0.95 else fdp.ConsumeIntInRange(0, 3),
        "meta": {"label": fdp.ConsumeUnicodeNoSurrogates(8)},
        "counters": {"unmatched": u(), "in_flight": u()},
    }
    if fdp.ConsumeProbability() < 0.1:
        head["counters"] = {fdp.ConsumeUnicodeNoSurrogates(4): fdp.ConsumeUnicodeNoSurrogates(4)}
    if fdp.ConsumeProbability() < 0.05:
        head = fdp.ConsumeUnicodeNoSurrogates(30)
    t = pa.table(cols).replace_schema_metadata({"mspti_lens": json.dumps(head)})
    pq.write_table(t, PATH)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    if data[0] & 1:
        fdp = atheris.FuzzedDataProvider(data[1:])
        try:
            structured(fdp)
        except (pa.ArrowException, OverflowError, ValueError, TypeError):
            return  # the generator itself could not build this table
    else:
        with open(PATH, "wb") as f:
            f.write(data[1:])
    try:
        snap = Snapshot.load(PATH)
        # A file that loads must be a usable snapshot.
        snap.summary()
        snap.histogram()
        _ = snap.counters
        repr(snap)
    except Exception as e:
        if not tolerated(e):
            raise


if __name__ == "__main__":
    run(TestOneInput)
