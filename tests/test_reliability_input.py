"""Bad input from users: every public entry point given wrong types, unknown names, out-of-range
ids, closed sessions, a second session, and corrupt or foreign files.

Each case must raise a clear exception (the right class, a message that names the valid choices
or says what is wrong) while a session holding data is running, and afterwards that data must be
intact and recording must go on: nothing already collected is lost.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mspti_lens
from mspti_lens import LibraryError, SessionError, catalog, plots
from mspti_lens.sim import Simulator
from mspti_lens.sim.replay import Trace

from conftest import stress, write_figures

FIGURES = {"inputs_tried": 0, "corrupt_files": 0}


@pytest.fixture(scope="module", autouse=True)
def _figures():
    yield
    write_figures("input.json", FIGURES)


class Live:
    """A running session with data in it, and the frame it must still show after bad input."""

    def __init__(self):
        self.sim = Simulator()
        self.sim.reset()
        self.session = mspti_lens.Session(library="sim")
        self.session.start()
        self.sim.call("aclrtLaunchKernel", count=50)
        self.sim.call("HcclAllReduce", count=7)
        self.snap = self.session.snapshot()
        self.before = self.snap.summary().drop("time_pct")

    def assert_intact(self):
        s = self.session
        assert not s.closed and s.running, "bad input must not stop or close the session"
        now = s.snapshot().summary().drop("time_pct")
        assert now.equals(self.before), f"collected data changed:\n{self.before}\n{now}"
        self.sim.call("aclrtLaunchKernel", count=3)
        assert s.snapshot().total_calls == 60, "recording must go on"

    def close(self):
        self.session.close()
        self.sim.reset()


@pytest.fixture
def live():
    lv = Live()
    yield lv
    lv.close()


# (label, call, exception classes, words the message must contain)
def _cases(tmp: Path):
    sim_path = str(mspti_lens.simulator_path())
    c = [
        # Session construction (a second session, bad library, bad targets, bad clock)
        (
            "second session",
            lambda L: mspti_lens.Session(library="sim"),
            SessionError,
            ["already active", "close"],
        ),
        ("library int", lambda L: mspti_lens.Session(library=123), ValueError, ["'sim'", "path"]),
        (
            "library missing",
            lambda L: mspti_lens.Session(library=str(tmp / "no" / "libmspti.so")),
            LibraryError,
            ["MSPTI_LIBRARY"],
        ),
        (
            "enable unknown",
            lambda L: mspti_lens.Session(library="sim", enable=["LAUNCHES"]),
            ValueError,
            ["'runtime'", "LAUNCH"],
        ),
        (
            "enable id range",
            lambda L: mspti_lens.Session(library="sim", enable=[("runtime", 99)]),
            ValueError,
            ["1-36"],
        ),
        (
            "enable bad domain",
            lambda L: mspti_lens.Session(library="sim", enable=[("gpu", 1)]),
            ValueError,
            ["'runtime'", "'hccl'"],
        ),
        (
            "enable short pair",
            lambda L: mspti_lens.Session(library="sim", enable=[(1,)]),
            ValueError,
            ["two"],
        ),
        (
            "clock unknown",
            lambda L: mspti_lens.Session(library="sim", clock="rdtscp"),
            ValueError,
            ["monotonic", "tsc"],
        ),
        ("clock int", lambda L: mspti_lens.Session(library="sim", clock=3), ValueError, ["monotonic"]),
        # enable/disable on a running session
        (
            "enable str",
            lambda L: L.session.enable("aclrtLaunchKernelV3"),
            ValueError,
            ["aclrtLaunchKernel", "hccl"],
        ),
        ("enable empty", lambda L: L.session.enable(""), ValueError, ["'runtime'"]),
        ("enable float", lambda L: L.session.enable(3.5), ValueError, ["float", "'runtime'"]),
        ("enable None", lambda L: L.session.enable(None), ValueError, ["'runtime'"]),
        ("enable list", lambda L: L.session.enable(["LAUNCH"]), ValueError, ["list", "'runtime'"]),
        ("enable bytes", lambda L: L.session.enable(b"LAUNCH"), ValueError, ["bytes"]),
        ("enable id 0", lambda L: L.session.enable(("runtime", 0)), ValueError, ["1-36"]),
        ("enable id 37", lambda L: L.session.enable(("runtime", 37)), ValueError, ["1-36"]),
        ("enable hccl 13", lambda L: L.session.enable(("hccl", 13)), ValueError, ["1-12"]),
        ("enable id -1", lambda L: L.session.enable(("runtime", -1)), ValueError, ["1-36"]),
        ("enable id 2**70", lambda L: L.session.enable(("runtime", 2**70)), ValueError, ["1-36"]),
        ("enable id bool", lambda L: L.session.enable(("runtime", True)), ValueError, ["int"]),
        ("enable id float", lambda L: L.session.enable(("runtime", 10.0)), ValueError, ["int"]),
        (
            "enable wrong domain",
            lambda L: L.session.enable(("runtime", "HcclAllReduce")),
            ValueError,
            ["'runtime'"],
        ),
        ("enable domain 3", lambda L: L.session.enable((3, 1)), ValueError, ["'runtime'", "'hccl'"]),
        ("enable domain bool", lambda L: L.session.enable((True, 1)), ValueError, ["'runtime'"]),
        ("disable unknown", lambda L: L.session.disable("nccl"), ValueError, ["'hccl'"]),
        ("disable partly bad", lambda L: L.session.disable("LAUNCH", "nope"), ValueError, ["'nope'"]),
        # Snapshot methods
        ("quantile 2", lambda L: L.snap.quantile(2), ValueError, ["[0, 1]"]),
        ("quantile -0.1", lambda L: L.snap.quantile(-0.1), ValueError, ["[0, 1]"]),
        ("quantile nan", lambda L: L.snap.quantile(float("nan")), ValueError, ["[0, 1]"]),
        ("diff int", lambda L: L.snap.diff(3), TypeError, ["Snapshot"]),
        ("merge str", lambda L: L.snap.merge("x"), TypeError, ["Snapshot"]),
        ("save int", lambda L: L.snap.save(3), TypeError, ["PathLike"]),
        ("save no folder", lambda L: L.snap.save(tmp / "no" / "x.parquet"), OSError, ["no"]),
        ("load None", lambda L: mspti_lens.load(None), TypeError, ["PathLike"]),
        (
            "load missing",
            lambda L: mspti_lens.load(tmp / "missing.parquet"),
            FileNotFoundError,
            ["missing.parquet"],
        ),
        # plots
        ("distribution str", lambda L: plots.distribution("x"), TypeError, ["Snapshot"]),
        ("cdf None", lambda L: plots.cdf(None), TypeError, ["Snapshot"]),
        ("compare_hccl dict", lambda L: plots.compare_hccl({}), TypeError, ["Snapshot"]),
        ("compare_launch list", lambda L: plots.compare_launch([]), TypeError, ["Snapshot"]),
        ("before_after int", lambda L: plots.before_after(L.snap, 3), TypeError, ["Snapshot"]),
        # catalogue and backend
        ("resolve None", lambda L: catalog.resolve(None), ValueError, ["'runtime'"]),
        ("resolve triple", lambda L: catalog.resolve(("runtime", 1, 2)), ValueError, ["two"]),
        ("backend_info int", lambda L: mspti_lens.backend_info(3), ValueError, ["'sim'"]),
        (
            "backend_info junk",
            lambda L: mspti_lens.backend_info(sim_path + ".nope"),
            LibraryError,
            ["MSPTI_LIBRARY"],
        ),
        # simulator driver
        ("sim fault name", lambda L: L.sim.set_fault("msptiSubscribeX", 1), ValueError, ["msptiSubscribe"]),
        ("sim fidelity", lambda L: setattr(L.sim, "fidelity", "cann9"), ValueError, ["cann26", "cann8"]),
        ("sim clock", lambda L: L.sim.set_clock("fast"), ValueError, ["real", "virtual"]),
        ("sim api", lambda L: L.sim.call("aclrtLaunch"), ValueError, ["aclrtLaunchKernel"]),
        ("sim api index", lambda L: L.sim.call(10_000), ValueError, ["outside"]),
        ("sim count", lambda L: L.sim.call(0, count=-1), ValueError, [">= 0"]),
        (
            "sim workload",
            lambda L: L.sim.start_workload("pretraining"),
            ValueError,
            ["training", "inference"],
        ),
        ("sim steps", lambda L: L.sim.start_workload(steps=-1), ValueError, ["steps"]),
        ("sim threads", lambda L: L.sim.start_workload(threads=0), ValueError, ["threads"]),
        ("sim ranks", lambda L: L.sim.start_workload(ranks=1.5), ValueError, ["ranks"]),
        (
            "sim time_scale",
            lambda L: L.sim.start_workload(time_scale=float("nan")),
            ValueError,
            ["time_scale"],
        ),
        ("sim replay empty", lambda L: L.sim.start_replay([]), ValueError, ["no threads"]),
        ("sim replay bad api", lambda L: L.sim.start_replay([[(10_000, 0, 0)]]), ValueError, ["unknown API"]),
        ("sim replay bad site", lambda L: L.sim.start_replay([[(0, 5, 0)]]), ValueError, ["site"]),
        ("sim replay missing", lambda L: L.sim.replay(tmp / "none.json"), FileNotFoundError, ["none.json"]),
        # traces
        ("trace missing", lambda L: Trace.read(tmp / "none.json"), FileNotFoundError, ["none.json"]),
        ("trace not json", lambda L: Trace.read(sim_path), ValueError, ["Kineto"]),
        ("trace doc int", lambda L: Trace.from_document(3), ValueError, ["traceEvents"]),
        ("trace doc no list", lambda L: Trace.from_document({"traceEvents": 3}), ValueError, ["traceEvents"]),
    ]
    return c


CASE_LABELS = [c[0] for c in _cases(Path("/nonexistent"))]


@pytest.mark.parametrize("label", CASE_LABELS)
def test_bad_input_gives_a_clear_error_and_loses_nothing(live, tmp_path, label):
    _, call, exc, words = next(c for c in _cases(tmp_path) if c[0] == label)
    with pytest.raises(exc) as ei:
        call(live)
    FIGURES["inputs_tried"] += 1
    msg = str(ei.value)
    for w in words:
        assert w in msg, f"{label}: {w!r} is not in the message {msg!r}"
    live.assert_intact()


@pytest.mark.parametrize(
    "label, call, words",
    [
        # Regressions: these gave Python's own TypeError/KeyError naming no valid choice.
        ("Session(enable=None)", lambda L: mspti_lens.Session(library="sim", enable=None), ["'runtime'"]),
        ("Session(enable=5)", lambda L: mspti_lens.Session(library="sim", enable=5), ["'runtime'"]),
        (
            "Session(enable=b'LAUNCH')",
            lambda L: mspti_lens.Session(library="sim", enable=b"LAUNCH"),
            ["'runtime'"],
        ),
        (
            "Session(enable={})",
            lambda L: mspti_lens.Session(library="sim", enable={"LAUNCH": 1}),
            ["'runtime'"],
        ),
        ("table(unit='h')", lambda L: L.snap.table(unit="h"), ["ns", "ms"]),
        ("table(top='x')", lambda L: L.snap.table(top="x"), ["top"]),
        ("table(top=0)", lambda L: L.snap.table(top=0), ["top"]),
        ("table(top=True)", lambda L: L.snap.table(top=True), ["top"]),
    ],
)
def test_bad_input_that_once_gave_a_vague_error(live, label, call, words):
    with pytest.raises(ValueError) as ei:
        call(live)
    FIGURES["inputs_tried"] += 1
    for w in words:
        assert w in str(ei.value), f"{label}: {w!r} is not in {str(ei.value)!r}"
    live.assert_intact()


def test_closed_session_refuses_clearly_and_keeps_its_last_window():
    sim = Simulator()
    sim.reset()
    s = mspti_lens.Session(library="sim")
    s.start()
    sim.call("aclrtLaunchKernel", count=5)
    s.close()
    for name, call in [
        ("enable", lambda: s.enable("LAUNCH")),
        ("disable", lambda: s.disable("hccl")),
        ("start", lambda: s.start()),
        ("reset", lambda: s.reset()),
    ]:
        with pytest.raises(SessionError, match="closed") as ei:
            call()
        assert "Session()" in str(ei.value), name  # says what to do instead
        FIGURES["inputs_tried"] += 1
    s.stop()  # harmless
    s.close()  # idempotent
    assert s.closed and "closed" in repr(s)
    # Regression: the data of a closed session used to be unreachable (SessionError).
    assert s.snapshot().total_calls == 5
    with mspti_lens.Session(library="sim") as s2:  # the slot is free
        sim.call("aclrtLaunchKernel", count=2)
        assert s2.snapshot().total_calls == 2
        assert s.snapshot().total_calls == 5  # and the old session's window is its own
    sim.reset()


def test_data_of_a_with_block_can_be_read_after_it():
    sim = Simulator()
    sim.reset()
    with mspti_lens.Session(library="sim") as s:
        sim.call("aclrtLaunchKernel", count=5)
    try:
        assert s.snapshot().total_calls == 5
        assert s.snapshot().summary()["num_calls"].to_list() == [5]
    finally:
        sim.reset()


# -------------------------------------------------------------------------------------------------
# Corrupt and foreign files given to mspti_lens.load().


def _good_file(tmp: Path) -> Path:
    sim = Simulator()
    sim.reset()
    with mspti_lens.Session(library="sim") as s:
        sim.call("aclrtLaunchKernel", count=20)
        sim.call("HcclAllReduce", count=3)
        snap = s.snapshot()
    p = tmp / "good.parquet"
    snap.save(p)
    return p


def _rewrite(src: Path, dst: Path, *, meta=None, table_fn=None) -> Path:
    t = pq.read_table(src)
    if table_fn is not None:
        t = table_fn(t)
    md = dict(t.schema.metadata or {})
    if meta is not None:
        md[b"mspti_lens"] = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    pq.write_table(t.replace_schema_metadata(md), dst)
    return dst


def _set_col(name, values, typ=None):
    def f(t):
        i = t.column_names.index(name)
        return t.set_column(i, name, pa.array(values, typ) if typ is not None else pa.array(values))

    return f


def _corrupt_files(tmp: Path) -> dict[str, Path]:
    good = _good_file(tmp)
    raw = good.read_bytes()
    head = json.loads(pq.read_table(good).schema.metadata[b"mspti_lens"])
    n = pq.read_table(good).num_rows
    files: dict[str, Path] = {}

    def w(name: str, data: bytes) -> None:
        files[name] = tmp / name
        files[name].write_bytes(data)

    w("empty", b"")
    w("junk", os.urandom(4096))
    w("par1_only", b"PAR1junkPAR1")
    w("truncated", raw[: len(raw) // 2])
    w("tail_cut", raw[:-10])
    w("json", json.dumps(head).encode())
    w("gzip", gzip.compress(raw))
    w("elf", mspti_lens.simulator_path().read_bytes()[:65536])
    flipped = bytearray(raw)
    for i in range(len(flipped) // 3, len(flipped) // 3 + 64):
        flipped[i] ^= 0xFF
    w("bit_flips", bytes(flipped))
    foreign = tmp / "foreign.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3]}), foreign)
    files["foreign_parquet"] = foreign
    files["meta_not_json"] = _rewrite(good, tmp / "m1.parquet", meta=b"{not json")
    files["meta_list"] = _rewrite(good, tmp / "m2.parquet", meta=[1, 2])
    files["meta_other_format"] = _rewrite(good, tmp / "m3.parquet", meta={**head, "version": 9})
    files["meta_counters_junk"] = _rewrite(
        good, tmp / "m4.parquet", meta={**head, "counters": {"unmatched": "many"}}
    )
    files["missing_column"] = _rewrite(good, tmp / "c1.parquet", table_fn=lambda t: t.drop_columns(["sum"]))
    files["counts_as_strings"] = _rewrite(good, tmp / "c2.parquet", table_fn=_set_col("count", ["x"] * n))
    files["bucket_len_mismatch"] = _rewrite(
        good, tmp / "c3.parquet", table_fn=_set_col("counts", [[1]] * n, pa.list_(pa.uint64()))
    )
    files["bucket_out_of_range"] = _rewrite(
        good,
        tmp / "c4.parquet",
        table_fn=lambda t: _set_col(
            "index", [[10**9] * len(b) for b in t.column("index").to_pylist()], pa.list_(pa.int32())
        )(t),
    )
    files["sum_sq_negative"] = _rewrite(
        good, tmp / "c5.parquet", table_fn=_set_col("sum_sq_lo", [-1] * n, pa.int64())
    )
    files["sum_sq_as_float"] = _rewrite(
        good, tmp / "c6.parquet", table_fn=_set_col("sum_sq_hi", [float("nan")] * n, pa.float64())
    )
    files["min_above_max"] = _rewrite(
        good,
        tmp / "c7.parquet",
        table_fn=lambda t: _set_col("min", [m + 10**6 for m in t.column("max").to_pylist()], pa.uint64())(t),
    )
    files["count_disagrees"] = _rewrite(
        good,
        tmp / "c8.parquet",
        table_fn=lambda t: _set_col("count", [c + 1 for c in t.column("count").to_pylist()], pa.uint64())(t),
    )
    files["null_buckets"] = _rewrite(
        good, tmp / "c9.parquet", table_fn=_set_col("index", [None] * n, pa.list_(pa.int32()))
    )
    files["negative_domain"] = _rewrite(
        good, tmp / "c10.parquet", table_fn=_set_col("domain", [-1] * n, pa.int64())
    )
    return files


CORRUPT = [
    "empty",
    "junk",
    "par1_only",
    "truncated",
    "tail_cut",
    "json",
    "gzip",
    "elf",
    "bit_flips",
    "foreign_parquet",
    "meta_not_json",
    "meta_list",
    "meta_other_format",
    "meta_counters_junk",
    "missing_column",
    "counts_as_strings",
    "bucket_len_mismatch",
    "bucket_out_of_range",
    "sum_sq_negative",
    "sum_sq_as_float",
    "min_above_max",
    "count_disagrees",
    "null_buckets",
    "negative_domain",
]


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory):
    return _corrupt_files(tmp_path_factory.mktemp("corrupt"))


def test_corrupt_case_list_matches_the_files(corrupt):
    assert sorted(corrupt) == sorted(CORRUPT)


@pytest.mark.parametrize("name", CORRUPT)
def test_corrupt_or_foreign_file_is_refused(live, corrupt, name):
    with pytest.raises(ValueError):
        mspti_lens.load(corrupt[name])
    FIGURES["corrupt_files"] += 1
    live.assert_intact()


@pytest.mark.parametrize("name", CORRUPT)
def test_corrupt_file_message_names_the_file(corrupt, name):
    with pytest.raises(ValueError) as ei:
        mspti_lens.load(corrupt[name])
    assert str(corrupt[name]) in str(ei.value), str(ei.value)


def test_good_file_still_loads(tmp_path):
    p = _good_file(tmp_path)
    snap = mspti_lens.load(p)
    assert snap.total_calls == 23 and snap.simulated


def test_a_directory_of_snapshots_is_not_loaded_as_one(tmp_path):
    """Regression: pyarrow reads a directory as a dataset, so a folder of two snapshot files used to
    load as one snapshot with every function twice."""
    p = _good_file(tmp_path)
    d = tmp_path / "dir"
    d.mkdir()
    shutil.copy(p, d / "a.parquet")
    shutil.copy(p, d / "b.parquet")
    with pytest.raises((ValueError, IsADirectoryError)):
        mspti_lens.load(d)


# -------------------------------------------------------------------------------------------------
# The magics: bad commands and options are UsageErrors (no traceback in a notebook).


@pytest.fixture
def shell(live):
    pytest.importorskip("IPython")
    from IPython.terminal.interactiveshell import TerminalInteractiveShell
    from IPython.testing.globalipapp import start_ipython
    from IPython.utils.capture import capture_output

    sh = start_ipython() or TerminalInteractiveShell.instance()
    with capture_output():
        sh.run_line_magic("load_ext", "mspti_lens")
    sh.run_line_magic("config", "MsptiMagics.library = 'sim'")
    yield sh
    with capture_output():
        sh.run_line_magic("unload_ext", "mspti_lens")


MAGIC_LINES = [
    ("", ["start", "stop"]),
    ("bogus", ["start", "summary"]),
    ("start -d gpu", ["valid domains: runtime, hccl"]),  # short, names the choices
    ("start -c NOPE", ["LAUNCH"]),
    ("start -c runtime,99", ["runtime, hccl"]),
    ("start", ["already active", "close"]),  # the test's own Session holds the slot
    ("start --library /nonexistent/libmspti.so", ["MSPTI_LIBRARY"]),
    ("save", ["PATH"]),
    ("save /nonexistent/dir/x.parquet", ["does not exist"]),
    ("diff onlyone", ["two"]),
    ("diff nope1 nope2", ["neither"]),
    ("summary", ["no mspti-lens session"]),
    ("plot -k pie", ["distribution"]),
    ("summary -u h", ["ns"]),
    ("summary -t x", ["int"]),
    ("stop extra", ["no arguments"]),
]


@pytest.mark.parametrize("line, words", MAGIC_LINES)
def test_magic_bad_line_is_a_usage_error(live, shell, line, words):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError) as ei:
        shell.run_line_magic("mspti", line)
    FIGURES["inputs_tried"] += 1
    msg = str(ei.value)
    assert any(w in msg for w in words), f"%mspti {line}: none of {words} in {msg!r}"
    live.assert_intact()


def test_magic_cell_with_a_command_is_a_usage_error(live, shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="cell form"):
        shell.run_cell_magic("mspti", "summary", "x = 1\n")
    live.assert_intact()


# -------------------------------------------------------------------------------------------------
# The control panel (the logic behind the widgets).


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda P, L: P.set_domain("gpu", True), ValueError, "runtime"),
        (lambda P, L: P.option("NOPE"), ValueError, "search"),
        (
            lambda P, L: P.select(["MSPTI_CBID_RUNTIME_LAUNCH"], ["MSPTI_CBID_RUNTIME_MALLOC"]),
            ValueError,
            "visible",
        ),
        (lambda P, L: P.set_unit("h"), ValueError, "ns"),
        (lambda P, L: P.set_plot_kind("pie"), ValueError, "distribution"),
        (lambda P, L: P.enable("nope"), ValueError, "'runtime'"),
        (lambda P, L: P.export("/nonexistent/dir/x.parquet"), ValueError, "does not exist"),
        (lambda P, L: type(P)("not a session"), TypeError, "Session"),
        (lambda P, L: type(P)(L.session, top=0), ValueError, "top"),
        (lambda P, L: type(P)(L.session, unit="h"), ValueError, "ns"),
    ],
)
def test_panel_bad_input(live, call, exc, word):
    from mspti_lens.notebook.panel import Panel

    p = Panel(live.session)
    with pytest.raises(exc) as ei:
        call(p, live)
    FIGURES["inputs_tried"] += 1
    assert word in str(ei.value), str(ei.value)
    live.assert_intact()


# -------------------------------------------------------------------------------------------------
# Regression tests of the fuzzers' findings (all three were fixed in sim/replay.py: infinite ts/dur are
# skipped as bad, thread ids are kept as text, non-dict args are skipped).

EV = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 10, "dur": 5}


def _replayable(doc) -> Trace:
    """What replay does with a trace: read it, split it into lanes, turn it into events."""
    tr = Trace.from_document(doc)
    assert sum(len(x) for x in tr.lanes()) == len(tr.calls)
    assert sum(len(x) for x in tr.events(Simulator())) == 2 * len(tr.calls)
    return tr


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e300, -1.0])
@pytest.mark.parametrize("field", ["ts", "dur"])
def test_fuzz_finding_infinite_timestamp(field, value):
    tr = _replayable({"traceEvents": [EV, {**EV, field: value}]})
    assert len(tr.calls) == 1 and tr.invalid["cudaLaunchKernel"] == 1 and not tr.skipped


@pytest.mark.parametrize("tid", [{"a": 1}, [1, 2], None, 3.5])
def test_fuzz_finding_unhashable_thread_id(tid):
    tr = _replayable({"traceEvents": [EV, {**EV, "tid": tid}]})
    assert len(tr.calls) == 2


@pytest.mark.parametrize("args", [3.5, "allreduce", [1], None])
def test_fuzz_finding_args_not_a_dict(args):
    comm = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 3, "ts": 1, "dur": 9}
    tr = _replayable(
        {"traceEvents": [{**comm, "args": {"Collective name": "allreduce"}}, {**comm, "args": args}]}
    )
    assert [c.api for c in tr.calls] == ["HcclAllReduce"]
    assert sum(tr.skipped.values()) == 1


def test_fuzz_finding_a_footer_claiming_billions_of_rows_is_refused_before_reading():
    """A 4 KB file (the snapshot fuzzer's, tests/data/fuzz/) whose one row group claims 5e10 rows
    in a file of 0: pyarrow sized its buffers by it (20 GB). Loaded under an 8 GB address-space
    limit, so a regression fails here instead of taking the machine's memory."""
    import subprocess
    import sys

    path = Path(__file__).resolve().parent / "data" / "fuzz" / "snapshot-footer-rows.parquet"
    child = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))\n"
        "from mspti_lens import Snapshot\n"
        "try:\n"
        "    Snapshot.load(sys.argv[1])\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    p = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "corrupt Parquet footer: row groups of [52455995005] rows for a file of 0" in p.stdout, p.stdout


@pytest.mark.slow
def test_fuzz_targets_find_nothing_new(tmp_path):
    """Each atheris target (fuzz/) runs a fixed number of inputs from a fixed seed, so every run
    explores the same inputs however fast the machine is (about 7 s per target on a quiet one;
    halved to keep `make test` within its 10 minutes);
    any finding not yet a regression test fails this test (the input is kept in the printed
    artifacts folder)."""
    pytest.importorskip("atheris")
    import subprocess
    import sys

    runs = {"snapshot": stress(3_500), "trace": stress(50_000)}
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run(
        [sys.executable, str(root / "fuzz" / "run.py"), "--out", str(tmp_path)]
        + [f"--runs={t}={n}" for t, n in runs.items()]
        + ["--seed", os.environ.get("MSPTI_LENS_FUZZ_SEED", "1")],
        capture_output=True,
        text=True,
    )
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    d = os.environ.get("MSPTI_LENS_FIGURES")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        Path(d, "fuzz.json").write_text(json.dumps(summary, indent=1))
    for t in summary["targets"]:
        assert t["exit"] == 0 and not t["findings"], (
            f"{t['target']} found something:\n{t.get('log_tail', '')}"
        )
        assert t["runs"] == runs[t["target"]], t
