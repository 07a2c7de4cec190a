"""atheris target: the trace reader used by replay, ``mspti_lens.sim.replay.Trace``.

Two modes, chosen by the first byte: raw bytes through ``Trace.read`` (plain or gzip JSON), or a
JSON document built from fuzzed events through ``Trace.from_document``. A trace that is read must
also give its lanes and replay events (``Trace.events``); the only clean refusal is ValueError.

    python fuzz/fuzz_trace.py fuzz/corpus/trace -max_total_time=60
"""

from __future__ import annotations

import gzip
import os
import tempfile

import atheris
from _common import quiet, run, tolerated

with atheris.instrument_imports(include=["mspti_lens"]):
    from mspti_lens.sim import Simulator
    from mspti_lens.sim.replay import COLLECTIVE_MAP, RUNTIME_MAP, Trace

quiet()
TMP = tempfile.mkdtemp(prefix="fuzz-trace-")
PATH = os.path.join(TMP, "input.json")
SIM = Simulator()
NAMES = list(RUNTIME_MAP) + ["record_param_comms", "cudaEventQuery"] + [f"c10d::{k}_" for k in COLLECTIVE_MAP]
CATS = ["cuda_runtime", "cpu_op", "kernel", None]


def value(fdp: atheris.FuzzedDataProvider, depth: int = 0):
    k = fdp.ConsumeIntInRange(0, 9 if depth < 2 else 6)
    if k == 0:
        return fdp.ConsumeIntInRange(-(2**70), 2**70)
    if k == 1:
        return fdp.ConsumeFloat()  # includes inf and nan
    if k == 2:
        return fdp.ConsumeRegularFloat()
    if k == 3:
        return fdp.ConsumeUnicodeNoSurrogates(10)
    if k == 4:
        return None
    if k == 5:
        return fdp.ConsumeBool()
    if k == 6:
        return fdp.ConsumeIntInRange(0, 1000)
    if k == 7:
        return [value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    return {
        fdp.ConsumeUnicodeNoSurrogates(5): value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))
    }


def event(fdp: atheris.FuzzedDataProvider):
    if fdp.ConsumeProbability() < 0.05:
        return value(fdp)
    e = {
        "ph": "X" if fdp.ConsumeProbability() < 0.9 else value(fdp),
        "cat": fdp.PickValueInList(CATS) if fdp.ConsumeProbability() < 0.9 else value(fdp),
        "name": fdp.PickValueInList(NAMES) if fdp.ConsumeProbability() < 0.9 else value(fdp),
        "pid": fdp.ConsumeIntInRange(0, 3) if fdp.ConsumeProbability() < 0.9 else value(fdp),
        "tid": fdp.ConsumeIntInRange(0, 3) if fdp.ConsumeProbability() < 0.9 else value(fdp),
        "ts": fdp.ConsumeIntInRange(0, 10**6) if fdp.ConsumeProbability() < 0.8 else value(fdp),
        "dur": fdp.ConsumeIntInRange(0, 10**4) if fdp.ConsumeProbability() < 0.8 else value(fdp),
    }
    if fdp.ConsumeBool():
        e["args"] = (
            {"Collective name": fdp.PickValueInList(list(COLLECTIVE_MAP) + ["gather"])}
            if fdp.ConsumeProbability() < 0.8
            else value(fdp)
        )
    for k in list(e):
        if fdp.ConsumeProbability() < 0.05:
            del e[k]
    return e


def check(tr: Trace) -> None:
    tr.counts()
    lanes = tr.lanes()
    assert sum(len(x) for x in lanes) == len(tr.calls)
    ev = tr.events(SIM)
    assert sum(len(x) for x in ev) == 2 * len(tr.calls)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    try:
        if data[0] % 3 == 0:
            with open(PATH, "wb") as f:
                f.write(data[1:])
            tr = Trace.read(PATH)
        elif data[0] % 3 == 1:
            with open(PATH, "wb") as f:
                f.write(gzip.compress(data[1:]))
            tr = Trace.read(PATH)
        else:
            fdp = atheris.FuzzedDataProvider(data[1:])
            events = [event(fdp) for _ in range(fdp.ConsumeIntInRange(0, 12))]
            doc = {"traceEvents": events} if fdp.ConsumeProbability() < 0.9 else events
            tr = Trace.from_document(doc)
        check(tr)
    except Exception as e:
        if not tolerated(e):
            raise


if __name__ == "__main__":
    run(TestOneInput)
