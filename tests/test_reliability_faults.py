"""Faults from the library: error codes from every MSPTI function, malformed and unbalanced
callbacks, callbacks nobody asked for, and library files that are not a usable libmspti.

Anything that could crash the process (loading broken ELF files) runs in a child interpreter, so a
crash fails the test instead of killing pytest. The rest runs here against the simulator, which is
reset before and after every test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mspti_lens
from mspti_lens import MsptiCallError, PreloadRequiredError, SubscriberBusyError, _native
from mspti_lens.sim import ENTER, EXIT, FAULT_SLOTS, Simulator

from conftest import write_figures

# Every msptiResult error code (docs/reference.md: Result codes), plus values no release defines.
CODES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 999, 12345, 0x7FFFFFFF]
FIGURES: dict = {"faults_injected": 0, "injected_callbacks": 0, "bad_libraries": 0}


@pytest.fixture
def fsim(sim):
    """conftest's simulator, reset before and after."""
    return sim


@pytest.fixture(scope="module", autouse=True)
def _figures():
    yield
    write_figures("faults.json", FIGURES)


def fault(sim: Simulator, function: str, code: int) -> None:
    sim.set_fault(function, code)
    FIGURES["faults_injected"] += 1


def expected_class(code: int) -> type:
    return {2: SubscriberBusyError, 6: PreloadRequiredError}.get(code, MsptiCallError)


def check_error(e: BaseException, function: str, code: int) -> None:
    assert type(e) is expected_class(code), (type(e), e)
    msg, got_code, name, fn = e.args
    assert got_code == code and fn == function
    assert function in msg and str(code) in msg
    assert name.startswith("MSPTI_ERROR_") or name.startswith("an unknown msptiResult"), name


def launch(sim: Simulator, n: int = 10) -> None:
    sim.call("aclrtLaunchKernel", count=n)


# -------------------------------------------------------------------------------------------------
# Every MSPTI function returning every error code.


def test_fault_table_covers_every_mspti_function_the_core_calls():
    assert set(FAULT_SLOTS) == {
        "msptiSubscribe",
        "msptiUnsubscribe",
        "msptiEnableCallback",
        "msptiEnableDomain",
        "msptiGetTimestamp",
        "msptiGetVersion",
        "msptiGetResultString",
    }


@pytest.mark.parametrize("code", CODES)
def test_subscribe_error_on_the_simulator(fsim, code):
    fault(fsim, "msptiSubscribe", code)
    with pytest.raises(MsptiCallError) as ei:
        mspti_lens.Session(library="sim")
    check_error(ei.value, "msptiSubscribe", code)
    assert not fsim.subscribed
    fsim.clear_faults()
    # The process's one session slot was given back: a new Session works and records.
    with mspti_lens.Session(library="sim") as s:
        launch(fsim, 7)
        assert s.snapshot().total_calls == 7


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("function", ["msptiEnableDomain", "msptiEnableCallback"])
def test_enable_error_at_start_leaves_nothing_enabled_and_keeps_data_on_the_simulator(fsim, function, code):
    enable = ("runtime", "hccl") if function == "msptiEnableDomain" else ("LAUNCH", "ALLREDUCE")
    with mspti_lens.Session(library="sim", enable=enable) as s:
        launch(fsim, 5)
        s.stop()
        fault(fsim, function, code)
        with pytest.raises(MsptiCallError) as ei:
            s.start()
        check_error(ei.value, function, code)
        assert not s.running
        assert fsim.enabled_mask(1) == 0 and fsim.enabled_mask(2) == 0
        assert s.snapshot().total_calls == 5  # what was collected is kept
        launch(fsim, 3)  # nothing enabled, nothing recorded, no error
        fsim.clear_faults()
        s.start()
        launch(fsim, 4)
        assert s.snapshot().total_calls == 9


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("function", ["msptiEnableDomain", "msptiEnableCallback"])
def test_enable_error_while_running_keeps_state_consistent_on_the_simulator(fsim, function, code):
    with mspti_lens.Session(library="sim", enable=["LAUNCH"]) as s:
        launch(fsim, 5)
        before = s.enabled
        mask = fsim.enabled_mask(1), fsim.enabled_mask(2)
        fault(fsim, function, code)
        target = "hccl" if function == "msptiEnableDomain" else "MALLOC"
        with pytest.raises(MsptiCallError) as ei:
            s.enable(target)
        check_error(ei.value, function, code)
        off = "runtime" if function == "msptiEnableDomain" else "LAUNCH"
        with pytest.raises(MsptiCallError):
            s.disable(off)
        # The session's view and the library's bitmaps did not move; recording goes on.
        assert s.enabled == before
        assert (fsim.enabled_mask(1), fsim.enabled_mask(2)) == mask
        assert s.running
        launch(fsim, 5)
        assert s.snapshot().total_calls == 10
        fsim.clear_faults()


@pytest.mark.parametrize("code", CODES)
def test_unsubscribe_error_keeps_the_session_for_a_retry_on_the_simulator(fsim, code):
    s = mspti_lens.Session(library="sim")
    s.start()
    launch(fsim, 6)
    fault(fsim, "msptiUnsubscribe", code)
    with pytest.raises(MsptiCallError) as ei:
        s.close()
    check_error(ei.value, "msptiUnsubscribe", code)
    fsim.clear_faults()
    s.close()  # the retry releases MSPTI's subscriber slot
    assert s.closed and not fsim.subscribed
    with mspti_lens.Session(library="sim") as s2:
        launch(fsim, 2)
        assert s2.snapshot().total_calls == 2


@pytest.mark.parametrize("code", CODES)
def test_get_version_error_leaves_version_unknown_on_the_simulator(fsim, code):
    fault(fsim, "msptiGetVersion", code)
    info = mspti_lens.backend_info("sim")
    assert info.version is None and info.simulated
    with mspti_lens.Session(library="sim") as s:
        launch(fsim, 3)
        assert s.snapshot().total_calls == 3


@pytest.mark.parametrize("code", CODES)
def test_get_result_string_error_still_names_the_code_on_the_simulator(fsim, code):
    fault(fsim, "msptiGetResultString", code)
    fault(fsim, "msptiSubscribe", 1)
    with pytest.raises(MsptiCallError) as ei:
        mspti_lens.Session(library="sim")
    check_error(ei.value, "msptiSubscribe", 1)
    assert "MSPTI_ERROR_INVALID_PARAMETER" in ei.value.args[0]


@pytest.mark.parametrize("code", CODES)
def test_failed_timestamps_drop_their_pairs_and_count_them_on_the_simulator(fsim, code):
    fsim.set_clock("virtual")  # each good call measures exactly its work_ns
    with mspti_lens.Session(library="sim", clock="mspti") as s:
        assert s.clock == "mspti"
        fsim.call("aclrtLaunchKernel", work_ns=1000, count=2)
        e0 = _native.health()["clock_errors"]
        fault(fsim, "msptiGetTimestamp", code)
        fsim.call("aclrtLaunchKernel", work_ns=5000, count=4)
        fsim.clear_faults()
        assert _native.health()["clock_errors"] - e0 == 8  # two failed readings per call
        snap = s.snapshot()
        # The four calls whose readings failed are dropped and counted, never recorded as 0 ns.
        assert snap.counters["dropped"] == 4 and snap.counters["unmatched"] == 0
        row = snap.summary().row(0, named=True)
        assert (row["num_calls"], row["min_ns"], row["max_ns"]) == (2, 1000, 1000), row


def run_child(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints ``RESULT <json>``. For tests that leave a
    thread's histograms in a state later tests in this process must not inherit (a shard and its
    cumulative histograms live as long as the process)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MSPTI_LIBRARY", "LD_PRELOAD")}
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120
    )
    assert p.returncode == 0, f"child died ({p.returncode}):\n{p.stderr[-3000:]}"
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])


def test_a_failed_enter_timestamp_drops_that_pair_only_on_the_simulator():
    FIGURES["faults_injected"] += 1
    r = run_child(
        """
        import json, mspti_lens
        from mspti_lens.sim import Simulator, ENTER, EXIT
        sim = Simulator()
        sim.set_clock("virtual")  # each good call measures exactly its work_ns
        with mspti_lens.Session(library="sim", clock="mspti") as s:
            sim.call("aclrtLaunchKernel", work_ns=2000, count=3)
            api = sim.api("aclrtLaunchKernel")
            sim.set_fault("msptiGetTimestamp", 4)
            sim.fire(api, ENTER)  # ENTER's reading fails
            sim.clear_faults()
            sim.fire(api, EXIT)  # EXIT's reading is good: the pair must not become a ~57-year call
            snap = s.snapshot()
            row = snap.summary().row(0, named=True)
            out = {k: int(row[k]) for k in ("num_calls", "min_ns", "max_ns")}
            print("RESULT " + json.dumps({**out, "dropped": snap.counters["dropped"]}))
        """
    )
    assert r == {"num_calls": 3, "min_ns": 2000, "max_ns": 2000, "dropped": 1}, r


def test_stddev_after_reset_is_not_spoiled_by_an_earlier_long_call_on_the_simulator():
    r = run_child(
        """
        import json, mspti_lens
        from mspti_lens.sim import Simulator
        sim = Simulator()
        sim.set_clock("virtual")  # each call measures exactly its work_ns, and takes no real time
        with mspti_lens.Session(library="sim", clock="mspti") as s:
            sim.call("aclrtLaunchKernel", work_ns=30 * 10**9)
            s.reset()
            for ns in (1000, 2000, 3000, 4000):
                sim.call("aclrtLaunchKernel", work_ns=ns)
            row = s.snapshot().summary().row(0, named=True)
        print("RESULT " + json.dumps({"n": row["num_calls"], "avg": row["avg_ns"], "std": row["stddev_ns"]}))
        """
    )
    assert r["n"] == 4 and r["avg"] == 2500
    assert r["std"] == pytest.approx(1290.994, rel=1e-3), r


# -------------------------------------------------------------------------------------------------
# Malformed, unbalanced and unwanted callbacks.


def inject_pair(sim, domain, cbid, name, garbage=True):
    assert sim.inject(domain, cbid, ENTER, name, garbage) == 0
    assert sim.inject(domain, cbid, EXIT, name, garbage) == 0
    FIGURES["injected_callbacks"] += 2


def test_null_function_name_is_recorded_under_a_placeholder_on_the_simulator(fsim):
    with mspti_lens.Session(library="sim") as s:
        inject_pair(fsim, 1, 10, None)
        summary = s.snapshot().summary()
        row = summary.filter(summary["name"] == "<null>")
        assert row["num_calls"].to_list() == [1] and row["callback"].to_list() == ["LAUNCH"]


@pytest.mark.parametrize("fidelity", ["cann26", "cann8", "documented"])
def test_garbage_fields_are_never_read_on_the_simulator(fsim, fidelity):
    # cann26/cann8 leave every field but callbackSite/functionName pointing at unmapped memory:
    # reading or writing any of them would crash this process.
    fsim.fidelity = fidelity
    with mspti_lens.Session(library="sim") as s:
        for _ in range(50):
            inject_pair(fsim, 1, 10, b"aclrtLaunchKernel", garbage=True)
        launch(fsim, 50)
        assert s.snapshot().total_calls == 100


def test_bad_site_is_counted_on_the_simulator(fsim):
    with mspti_lens.Session(library="sim") as s:
        for site in (2, 7, 0x7FFFFFFF):
            assert fsim.inject(1, 10, site, b"aclrtLaunchKernel") == 0
            FIGURES["injected_callbacks"] += 1
        snap = s.snapshot()
        assert snap.counters["bad_site"] == 3 and snap.total_calls == 0


def test_odd_names_unknown_ids_and_domains_round_trip_on_the_simulator(fsim, tmp_path):
    keep = [b"\xff\xfe\xfd" * 100, b"x" * 1000, "\u8c03\u7528".encode(), b"weird"]
    with mspti_lens.Session(library="sim") as s:
        inject_pair(fsim, 1, 10, keep[0])
        inject_pair(fsim, 1, 10, keep[1])
        inject_pair(fsim, 2, 1, keep[2])
        inject_pair(fsim, 99, 200, keep[3])  # a domain and id MSPTI does not define
        inject_pair(fsim, 0, 0, keep[3])  # INVALID / INVALID
        snap = s.snapshot()
    summary = snap.summary()
    assert snap.total_calls == 5
    assert all(len(n) <= 255 for n in summary["name"])
    assert "\u8c03\u7528" in summary["name"].to_list()
    assert set(summary["callback"]) >= {"LAUNCH", "ALLREDUCE", "CBID_200"}
    snap.histogram()
    snap.table()
    snap._repr_html_()
    snap.save(tmp_path / "odd.parquet")
    back = mspti_lens.load(tmp_path / "odd.parquet")
    assert back.summary().drop("time_pct").equals(summary.drop("time_pct"))


KEY_SLOTS_CHILD = """
import json, threading
import mspti_lens
from mspti_lens.sim import Simulator, ENTER, EXIT
sim = Simulator()
names = [f"fn{i}".encode() for i in range(300)]  # kept alive: the core keys by the pointer
with mspti_lens.Session(library="sim") as s:
    for n in names:
        sim.inject(1, 10, ENTER, n)
        sim.inject(1, 10, EXIT, n)
    snap = s.snapshot()
    # another thread has a table of its own
    t = threading.Thread(target=lambda: sim.call("aclrtLaunchKernel", count=5))
    t.start(); t.join()
    after = s.snapshot()
print("RESULT " + json.dumps({"recorded": snap.total_calls, "keys": len(snap), **snap.counters,
                              "other_thread": after.total_calls - snap.total_calls}))
"""


def test_more_functions_than_key_slots_are_dropped_and_counted_on_the_simulator():
    # In a child: a shard's key table lives as long as the process (and passes to later threads),
    # so filling it here would drop every new function of this thread in the tests after this one.
    env = {k: v for k, v in os.environ.items() if k not in ("MSPTI_LIBRARY", "LD_PRELOAD")}
    p = subprocess.run(
        [sys.executable, "-c", KEY_SLOTS_CHILD], capture_output=True, text=True, env=env, timeout=60
    )
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    FIGURES["injected_callbacks"] += 600
    assert r["recorded"] + r["dropped"] == 300, r
    assert r["dropped"] > 0 and r["keys"] < 300, r
    assert r["other_thread"] == 5, r


def test_exit_without_enter_is_counted_unmatched_on_the_simulator(fsim):
    api = fsim.api("aclrtLaunchKernel")
    with mspti_lens.Session(library="sim") as s:
        for _ in range(5):
            fsim.fire(api, EXIT)
        launch(fsim, 2)
        snap = s.snapshot()
        assert snap.counters["unmatched"] == 5 and snap.total_calls == 2


def test_enter_without_exit_is_in_flight_and_does_not_disturb_pairing_on_the_simulator(fsim):
    m = fsim.api("aclrtMalloc")
    with mspti_lens.Session(library="sim") as s:
        fsim.fire(m, ENTER)
        launch(fsim, 10)
        snap = s.snapshot()
        assert snap.counters["in_flight"] == 1
        assert snap.total_calls == 10 and snap.counters["unmatched"] == 0
        fsim.fire(m, EXIT)  # it does end after all
        assert s.snapshot().total_calls == 11


def test_enters_without_exit_do_not_stop_a_thread_from_recording_on_the_simulator(fsim):
    m = fsim.api("aclrtMalloc")
    with mspti_lens.Session(library="sim") as s:
        for _ in range(70):
            fsim.fire(m, ENTER)
        try:
            launch(fsim, 10)
            assert s.snapshot().total_calls == 10
        finally:
            for _ in range(64):  # leave this thread's ENTER stack empty for the tests after this one
                fsim.fire(m, EXIT)


def test_disabling_mid_call_leaves_a_counted_orphan_not_a_wrong_pair_on_the_simulator(fsim):
    m, lk = fsim.api("aclrtMalloc"), fsim.api("aclrtLaunchKernel")
    with mspti_lens.Session(library="sim", enable=["MALLOC", "LAUNCH"]) as s:
        fsim.fire(m, ENTER)
        s.disable("MALLOC")
        fsim.fire(m, EXIT)  # not delivered
        s.enable("MALLOC")
        fsim.fire(lk, ENTER)
        fsim.fire(lk, EXIT)
        snap = s.snapshot()
        assert snap.total_calls == 1 and snap.summary()["name"].to_list() == ["aclrtLaunchKernel"]
        assert snap.counters["in_flight"] == 1
        fsim.fire(m, EXIT)  # close the orphan: no open ENTER is left for later tests


def test_callback_for_an_id_never_enabled_is_recorded_under_its_own_key_on_the_simulator(fsim):
    """MSPTI decides what fires; the core records whatever arrives, under its own (domain, id,
    name), so an unexpected callback never lands in another API's histogram."""
    with mspti_lens.Session(library="sim", enable=["LAUNCH"]) as s:
        assert fsim.enabled_mask(2) == 0
        launch(fsim, 3)
        inject_pair(fsim, 1, 22, b"aclrtMemcpy")  # runtime id never enabled
        inject_pair(fsim, 2, 1, b"HcclAllReduce")  # domain never enabled
        summary = s.snapshot().summary()
    got = dict(zip(summary["name"], summary["num_calls"]))
    assert got == {"aclrtLaunchKernel": 3, "aclrtMemcpy": 1, "HcclAllReduce": 1}


def test_nothing_is_delivered_or_recorded_after_unsubscribe_on_the_simulator(fsim):
    fsim.counting(True)
    s = mspti_lens.Session(library="sim")
    s.start()
    launch(fsim, 4)
    snap = s.snapshot()
    s.close()
    launch(fsim, 10)
    assert fsim.inject(1, 10, ENTER, b"late") == 1  # nobody is subscribed
    assert fsim.delivered_total(EXIT) == 4
    assert snap.total_calls == 4


def test_a_call_straddling_two_sessions_is_not_measured_across_them_on_the_simulator(fsim):
    api = fsim.api("aclrtLaunchKernel")
    s1 = mspti_lens.Session(library="sim")
    s1.start()
    fsim.fire(api, ENTER)
    s1.close()
    with mspti_lens.Session(library="sim") as s2:
        fsim.fire(api, EXIT)  # its ENTER belonged to the first subscription
        snap = s2.snapshot()
        assert snap.total_calls == 0
        assert snap.counters["abandoned"] + snap.counters["unmatched"] == 1
        launch(fsim, 2)
        assert s2.snapshot().total_calls == 2


def test_stop_mid_call_then_start_does_not_pair_across_runs_on_the_simulator(fsim):
    api = fsim.api("aclrtLaunchKernel")
    with mspti_lens.Session(library="sim") as s:
        fsim.fire(api, ENTER)
        s.stop()
        s.start()
        fsim.fire(api, EXIT)
        snap = s.snapshot()
        assert snap.total_calls == 0 and snap.counters["abandoned"] == 1


# -------------------------------------------------------------------------------------------------
# Library files that are not a usable libmspti (each loaded in a child interpreter).

TINY_C = """
int msptiSubscribe(void **h, void *cb, void *ud) { (void)cb; (void)ud; *h = (void *)1; return 0; }
int msptiEnableDomain(unsigned e, void *h, unsigned d) { (void)e; (void)h; (void)d; return 0; }
"""

LOADER = textwrap.dedent(
    """
    import json, sys, warnings
    warnings.simplefilter("error")
    import mspti_lens
    from mspti_lens.sim import Simulator
    out = {}
    try:
        s = mspti_lens.Session(library=sys.argv[1])
        out["load"] = ["loaded", ""]
        s.start()
        s.close()
    except Exception as e:
        out["load"] = [type(e).__name__, str(e)]
    with mspti_lens.Session(library="sim") as s:  # the process is alive and the slot is free
        Simulator().call("aclrtLaunchKernel", count=3)
        out["after"] = s.snapshot().total_calls
    print("RESULT " + json.dumps(out))
    """
)


def load_in_child(path: str, env_library: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("MSPTI_LIBRARY", "LD_PRELOAD")}
    if env_library:
        env["MSPTI_LIBRARY"] = env_library
    p = subprocess.run(
        [sys.executable, "-c", LOADER, path], capture_output=True, text=True, env=env, timeout=120
    )
    FIGURES["bad_libraries"] += 1
    assert p.returncode == 0, (
        f"loading {path} killed the process (status {p.returncode}):\n{p.stderr[-3000:]}"
    )
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])


def _last_load_end(elf: bytes) -> int:
    """End (file offset) of the last PT_LOAD segment of a 64-bit little-endian ELF."""
    import struct

    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    end = 0
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type == 1:
            end = max(end, p_offset + p_filesz)
    return end


def _elf_with(tmp_path: Path, name: str, patch: dict[int, bytes]) -> Path:
    p = tmp_path / name
    shutil.copy(mspti_lens.simulator_path(), p)
    with open(p, "r+b") as f:
        for off, b in patch.items():
            f.seek(off)
            f.write(b)
    return p


@pytest.fixture(scope="module")
def bad_libraries(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("badlibs")
    sim = mspti_lens.simulator_path().read_bytes()
    libs = {}
    libs["missing"] = d / "nowhere" / "libmspti.so"
    (d / "empty.so").write_bytes(b"")
    libs["empty"] = d / "empty.so"
    (d / "truncated.so").write_bytes(sim[:4096])
    libs["truncated"] = d / "truncated.so"
    (d / "truncated_100k.so").write_bytes(sim[:100_000])
    libs["truncated_100k"] = d / "truncated_100k.so"
    (d / "cut_in_last_segment.so").write_bytes(sim[: _last_load_end(sim) - 100])
    libs["cut_in_last_segment"] = d / "cut_in_last_segment.so"
    (d / "debug_info_cut.so").write_bytes(sim[: _last_load_end(sim) + 16])  # only non-loaded sections lost
    libs["debug_info_cut"] = d / "debug_info_cut.so"
    (d / "text.so").write_text("this is not an ELF file\n")
    libs["not_elf"] = d / "text.so"
    libs["directory"] = d
    libs["aarch64"] = _elf_with(d, "aarch64.so", {18: (183).to_bytes(2, "little")})  # e_machine = EM_AARCH64
    libs["elf32"] = _elf_with(d, "elf32.so", {4: b"\x01"})  # EI_CLASS = ELFCLASS32
    libs["big_endian"] = _elf_with(d, "be.so", {5: b"\x02"})  # EI_DATA = ELFDATA2MSB
    libs["executable"] = Path(sys.executable).resolve()
    if shutil.which("gcc"):
        src = d / "tiny.c"
        src.write_text(TINY_C)
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "libtiny.so"), str(src)], check=True)
        libs["lacks_symbols"] = d / "libtiny.so"
    return {k: str(v) for k, v in libs.items()}


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "empty",
        "not_elf",
        "directory",
        "aarch64",
        "elf32",
        "big_endian",
        "executable",
        # Regressions: these killed the process with SIGBUS inside dlopen before the loader checked
        # that every PT_LOAD segment lies inside the file.
        "truncated",
        "truncated_100k",
        "cut_in_last_segment",
    ],
)
def test_unusable_library_file_gives_a_clear_error(bad_libraries, case):
    r = load_in_child(bad_libraries[case])
    kind, msg = r["load"]
    assert kind == "LibraryError", (kind, msg)
    assert bad_libraries[case] in msg or Path(bad_libraries[case]).resolve().as_posix() in msg, msg
    assert "MSPTI_LIBRARY" in msg or "set_env.sh" in msg, msg  # says what to do next
    assert r["after"] == 3  # the process lived on and the simulator still works


def test_library_cut_after_its_loaded_segments_still_works(bad_libraries):
    # Only section data past the last PT_LOAD (debug info, symbol tables) is gone: that is a
    # usable library, not a truncated one.
    r = load_in_child(bad_libraries["debug_info_cut"])
    assert r["load"] == ["loaded", ""] and r["after"] == 3, r


def test_library_lacking_symbols_names_the_missing_one(bad_libraries):
    if "lacks_symbols" not in bad_libraries:
        pytest.skip("gcc is not installed")
    r = load_in_child(bad_libraries["lacks_symbols"])
    kind, msg = r["load"]
    assert kind == "LibraryError", (kind, msg)
    assert "msptiUnsubscribe" in msg or "msptiEnableCallback" in msg, msg
    assert r["after"] == 3


def test_bad_library_through_mspti_library_variable(bad_libraries):
    r = load_in_child("sim", env_library=bad_libraries["not_elf"])
    assert r["load"][0] == "loaded"  # an explicit library="sim" wins over MSPTI_LIBRARY
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["MSPTI_LIBRARY"] = bad_libraries["not_elf"]
    code = (
        "import mspti_lens\n"
        "try:\n    mspti_lens.Session()\nexcept mspti_lens.LibraryError as e:\n    print('RESULT', e)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "RESULT" in p.stdout and bad_libraries["not_elf"] in p.stdout


# -------------------------------------------------------------------------------------------------
# Every unsafe block says why it is sound.


def test_every_unsafe_block_has_a_safety_comment():
    """Each `unsafe { ... }` and `unsafe impl` in rust/ is directly preceded by (or on the same
    line as) a `// SAFETY:` comment (the clippy lint undocumented_unsafe_blocks is only a
    warning, and clippy is not part of `make test`)."""
    import re

    root = Path(__file__).resolve().parents[1] / "rust"
    missing, seen = [], 0
    for p in sorted(root.rglob("*.rs")):
        lines = p.read_text().splitlines()
        for i, line in enumerate(lines):
            if not re.search(r"\bunsafe\s*(\{|impl\b)", line.split("//")[0]):
                continue
            seen += 1
            ok, j = "SAFETY" in line, i - 1
            while not ok and j >= 0 and lines[j].strip().startswith("//"):
                ok = "SAFETY" in lines[j]
                j -= 1
            if not ok:
                missing.append(f"{p.relative_to(root.parent)}:{i + 1}: {line.strip()}")
    assert seen > 20
    assert not missing, "unsafe without a SAFETY comment:\n" + "\n".join(missing)


# -------------------------------------------------------------------------------------------------
# Callbacks after unsubscribe, deterministically: a tiny stand-in library that keeps the callback
# pointer it was given and can call it at any time, as a real library may for a call already in
# flight when msptiUnsubscribe returns.

LATE_C = r"""
#include <stdint.h>
typedef void (*cb_t)(void *, uint32_t, uint32_t, const void *);
typedef struct {
    uint32_t site, pad; const char *name; const void *p[3]; uint64_t c, r1, r2; uint64_t *cd;
} data_t;
static cb_t saved; static void *saved_ud; static int subscribed; static uint64_t enabled[3];
static const char *NAME = "aclrtLaunchKernel";
int msptiSubscribe(void **h, cb_t cb, void *ud) {
    if (subscribed) return 2;
    saved = cb; saved_ud = ud; subscribed = 1; *h = (void *)&saved; return 0;
}
int msptiUnsubscribe(void *h) { (void)h; subscribed = 0; enabled[1] = enabled[2] = 0; return 0; }
int msptiEnableCallback(uint32_t e, void *h, uint32_t d, uint32_t c) {
    (void)h; if (d < 1 || d > 2 || c > 63) return 1;
    if (e) enabled[d] |= 1ull << c; else enabled[d] &= ~(1ull << c); return 0;
}
int msptiEnableDomain(uint32_t e, void *h, uint32_t d) {
    (void)h; if (d < 1 || d > 2) return 1; enabled[d] = e ? ~1ull : 0; return 0;
}
static void fire(uint32_t d, uint32_t c, uint32_t site) {
    data_t x = {0}; x.site = site; x.name = NAME;
    x.p[0] = x.p[1] = x.p[2] = (const void *)0xdeadbeefdead0000ull; x.cd = (uint64_t *)0xdeadbeefdead0008ull;
    saved(saved_ud, d, c, &x);
}
/* a normal intercepted call: only when subscribed and enabled */
void lib_call(uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (subscribed && (enabled[1] >> 10 & 1)) { fire(1, 10, 0); fire(1, 10, 1); }
}
/* the library's callback pointer used regardless of subscription and enable bits */
void late_fire(uint32_t site) { if (saved) fire(1, 10, site); }
void late_calls(uint32_t n) {
    for (uint32_t i = 0; i < n; i++) if (saved) { fire(1, 10, 0); fire(1, 10, 1); }
}
"""

LATE_CHILD = r"""
import ctypes, json, sys, threading, warnings
warnings.simplefilter("ignore")
import mspti_lens
from mspti_lens import _native
lib_path = sys.argv[1]
L = ctypes.CDLL(lib_path)
for f in ("lib_call", "late_fire", "late_calls"):
    getattr(L, f).argtypes = [ctypes.c_uint32]
out = {}
s = mspti_lens.Session(library=lib_path, enable=["LAUNCH"])
s.start()
L.lib_call(5)
L.late_fire(0)          # a call in flight ...
s.close()               # ... when the subscriber goes away
L.late_fire(1)          # its EXIT arrives after msptiUnsubscribe returned
L.late_calls(100)       # and whole calls, too
out["closed_window"] = s.snapshot().total_calls
s2 = mspti_lens.Session(library=lib_path, enable=["LAUNCH"])
s2.start()
L.late_fire(0)
s2.stop()
s2.start()
L.late_fire(1)          # an ENTER of an earlier run never pairs with a later EXIT
L.lib_call(3)
snap = s2.snapshot()
out["second"] = snap.total_calls
out["second_abandoned"] = snap.counters["abandoned"]
# late callbacks from 4 threads while sessions come and go
stop = threading.Event()
def hammer():
    while not stop.is_set():
        L.late_calls(200)
ts = [threading.Thread(target=hammer) for _ in range(4)]
for t in ts:
    t.start()
s2.close()
for i in range(50):
    with mspti_lens.Session(library=lib_path, enable=["LAUNCH"]) as s3:
        if i % 2:
            s3.snapshot()
stop.set()
for t in ts:
    t.join()
s4 = mspti_lens.Session(library=lib_path, enable=["LAUNCH"])
s4.start()
L.lib_call(7)
out["after_churn"] = s4.snapshot().total_calls
s4.close()
out["health"] = _native.health()
print("RESULT " + json.dumps(out))
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_callbacks_after_unsubscribe_are_harmless_on_a_c_stand_in(tmp_path):
    src = tmp_path / "late.c"
    src.write_text(LATE_C)
    so = tmp_path / "liblate.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MSPTI_LIBRARY", "LD_PRELOAD")}
    p = subprocess.run(
        [sys.executable, "-c", LATE_CHILD, str(so)], capture_output=True, text=True, env=env, timeout=120
    )
    assert p.returncode == 0, f"late callbacks killed the process ({p.returncode}):\n{p.stderr[-3000:]}"
    r = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    FIGURES["injected_callbacks"] += 4 + 200
    assert r["closed_window"] == 5, r  # the closed session keeps what it recorded
    assert r["second"] == 3 and r["second_abandoned"] == 1, r
    assert r["after_churn"] == 7, r
    assert not r["health"]["poisoned"] and not r["health"]["forked"], r
