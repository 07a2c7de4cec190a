"""Shared by the atheris targets: what counts as a clean refusal, and the seed corpora."""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The Kineto traces of the replay tests: the synthetic job's, and real ones where
# $MSPTI_LENS_TRACES names a directory of them (none are in the repository).
sys.path.insert(0, str(ROOT / "tests"))
from kineto_traces import job_trace, real_traces  # noqa: E402

# A target may refuse bad input with these; anything else escaping is a finding.
CLEAN = (ValueError, FileNotFoundError)


def known(e: BaseException) -> bool:
    """Whether ``e`` is a finding already recorded as a regression test. FUZZ_KNOWN lists them as
    ``ExceptionName:message part`` entries separated by ``|``, so a run looks for new ones only."""
    for entry in os.environ.get("FUZZ_KNOWN", "").split("|"):
        name, _, part = entry.partition(":")
        if name and type(e).__name__ == name and part in str(e):
            return True
    return False


def tolerated(e: BaseException) -> bool:
    """A clean refusal, or a finding already recorded."""
    return isinstance(e, CLEAN) or known(e)


def run(test_one_input) -> None:
    """The atheris entry point shared by every target."""
    import atheris

    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


def small_trace_doc() -> dict:
    """A tiny Kineto-shaped document with every kind of event the reader maps."""
    ev = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 2,
            "ts": 10.0,
            "dur": 3.5,
        },
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 2, "ts": 20, "dur": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventQuery", "pid": 1, "tid": 2, "ts": 22, "dur": 1},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": 1,
            "tid": 3,
            "ts": 5,
            "dur": 40,
            "args": {"Collective name": "allreduce"},
        },
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 3, "ts": 6, "dur": 30},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaStreamSynchronize",
            "pid": 1,
            "tid": 2,
            "ts": 12,
            "dur": 50,
        },
    ]
    return {"traceEvents": ev}


def write_seeds(target: str, corpus: Path) -> None:
    """Seed corpus: valid inputs the mutator starts from."""
    corpus.mkdir(parents=True, exist_ok=True)
    if any(corpus.iterdir()):
        return
    if target == "snapshot":
        import mspti_lens
        from mspti_lens.sim import Simulator

        sim = Simulator()
        sim.reset()
        with mspti_lens.Session(library="sim") as s:
            sim.call("aclrtLaunchKernel", count=5)
            sim.call("HcclAllReduce", work_ns=1000, count=2)
            snap = s.snapshot()
        snap.save(corpus / "seed.parquet")
        with mspti_lens.Session(library="sim") as s:
            empty = s.snapshot()
        empty.save(corpus / "empty.parquet")
    else:
        doc = small_trace_doc()
        (corpus / "small.json").write_bytes(json.dumps(doc).encode())
        (corpus / "small.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
        (corpus / "list.json").write_bytes(json.dumps(doc["traceEvents"]).encode())
        (corpus / "job_rank1.json").write_bytes(json.dumps(job_trace(1)).encode())
        for p in sorted(real_traces().values())[:1]:  # one real trace, cut to its first events: fast runs
            real = json.loads(gzip.decompress(p.read_bytes()))
            real["traceEvents"] = real.get("traceEvents", [])[:300]
            (corpus / "real_head.json").write_bytes(json.dumps(real).encode())


def quiet() -> None:
    import warnings

    warnings.simplefilter("ignore")
    os.environ.setdefault("POLARS_MAX_THREADS", "1")
    sys.setrecursionlimit(10000)
