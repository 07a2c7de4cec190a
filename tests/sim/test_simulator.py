"""The simulator follows MSPTI 26.x (its callback ids, subscriber rules) and its workloads look real."""

from __future__ import annotations

import ctypes
import subprocess
import threading

import polars as pl
import pytest
from _sim_activity import AHEAD_NS

from mspti_lens import Session, catalog
from mspti_lens.backend import simulator_path

from conftest import run_python


class CallbackData(ctypes.Structure):
    _fields_ = [
        ("callbackSite", ctypes.c_uint32),
        ("functionName", ctypes.c_char_p),
        ("functionParams", ctypes.c_void_p),
        ("functionReturnValue", ctypes.c_void_p),
        ("symbolName", ctypes.c_void_p),
        ("correlationId", ctypes.c_uint64),
        ("reserved1", ctypes.c_uint64),
        ("reserved2", ctypes.c_uint64),
        ("correlationData", ctypes.POINTER(ctypes.c_uint64)),
    ]


CALLBACK = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(CallbackData)
)
GARBAGE = 0xDEADBEEFDEAD0000


class Subscriber:
    """A ctypes subscriber on the simulator that records what each callback carried."""

    def __init__(self, sim, read_documented_fields: bool = False):
        self.sim, self.events = sim, []
        self.read_documented = read_documented_fields

        def cb(_ud, domain, cbid, data):
            d = data.contents
            ev = {
                "domain": domain,
                "cbid": cbid,
                "site": d.callbackSite,
                "name": d.functionName.decode(),
                "thread": threading.get_ident(),
                "corr": d.correlationId,
                "params": d.functionParams,
                "symbol": d.symbolName,
                "corr_data": ctypes.cast(d.correlationData, ctypes.c_void_p).value,
                "t": sim.lib.msimVirtualNow(),
            }
            if self.read_documented:
                if d.callbackSite == 0:
                    d.correlationData[0] = 0xC0FFEE + d.correlationId
                else:
                    ev["shared"] = d.correlationData[0]
                ev["symbol_text"] = ctypes.cast(d.symbolName, ctypes.c_char_p).value if d.symbolName else None
            self.events.append(ev)

        self.cb = CALLBACK(cb)
        self.handle = ctypes.c_void_p()
        L = sim.lib
        L.msptiSubscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), CALLBACK, ctypes.c_void_p]
        L.msptiEnableDomain.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32]
        L.msptiEnableCallback.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]
        L.msptiUnsubscribe.argtypes = [ctypes.c_void_p]
        assert L.msptiSubscribe(ctypes.byref(self.handle), self.cb, None) == 0

    def close(self):
        assert self.sim.lib.msptiUnsubscribe(self.handle) == 0


@pytest.fixture
def raw(sim):
    sub = Subscriber(sim)
    yield sub
    sub.close()


# -- subscriber and enable rules through ctypes -------------------------------------------------


def test_subscribe_rules(sim, raw):
    L = sim.lib
    other = ctypes.c_void_p()
    assert L.msptiSubscribe(None, raw.cb, None) == 1
    assert L.msptiSubscribe(ctypes.byref(other), raw.cb, None) == 2  # one subscriber, even the same caller
    assert L.msptiUnsubscribe(ctypes.c_void_p(raw.handle.value + 16)) == 1  # wrong handle


def test_unsubscribe_without_subscriber_and_enable_without_subscriber_are_silent(sim):
    L = sim.lib
    L.msptiUnsubscribe.argtypes = [ctypes.c_void_p]
    L.msptiEnableDomain.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32]
    assert not sim.subscribed
    assert L.msptiUnsubscribe(None) == 0
    assert L.msptiEnableDomain(1, None, 1) == 0 and sim.enabled_mask(1) == 0


def test_enable_rules(sim, raw):
    L, h = sim.lib, raw.handle
    assert sim.enabled_mask(1) == 0 and sim.enabled_mask(2) == 0  # subscribe clears the bits
    assert L.msptiEnableDomain(1, h, 1) == 0 and sim.enabled_mask(1) == ((1 << 37) - 1) & ~1
    assert L.msptiEnableDomain(1, h, 2) == 0 and sim.enabled_mask(2) == ((1 << 13) - 1) & ~1
    assert L.msptiEnableDomain(0, h, 2) == 0 and sim.enabled_mask(2) == 0
    assert L.msptiEnableCallback(1, h, 2, 63) == 0 and sim.enabled_mask(2) == 1 << 63  # 37-63 accepted
    assert L.msptiEnableCallback(1, h, 2, 64) == 1
    assert L.msptiEnableCallback(1, h, 3, 1) == 1 and L.msptiEnableDomain(1, h, 0) == 1
    assert L.msptiEnableCallback(1, ctypes.c_void_p(h.value + 8), 1, 10) == 1


def test_subscribe_and_unsubscribe_clear_the_enable_bits(sim):
    a = Subscriber(sim)
    assert sim.lib.msptiEnableDomain(1, a.handle, 1) == 0
    a.close()
    assert sim.enabled_mask(1) == 0
    b = Subscriber(sim)
    assert sim.enabled_mask(1) == 0
    b.close()


def test_preload_check_gives_6_until_ld_preload_names_libmspti(sim, raw, monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    sim.preload_check(True)
    assert sim.lib.msptiEnableDomain(1, raw.handle, 1) == 6
    assert sim.lib.msptiEnableCallback(1, raw.handle, 1, 10) == 6
    monkeypatch.setenv("LD_PRELOAD", "/opt/cann/lib64/libmspti.so")
    assert sim.lib.msptiEnableDomain(1, raw.handle, 1) == 6  # read once and cached, as the real one
    sim.preload_check(True)
    assert sim.lib.msptiEnableDomain(1, raw.handle, 1) == 0


def test_enable_calls_check_preload_then_subscriber_then_handle_then_domain(sim, monkeypatch):
    # callback_manager.cpp's EnableCallback and EnableDomain: HasLdPreload first, then init_, the
    # handle, the domain, and the cbid last.
    L = sim.lib
    L.msptiEnableDomain.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32]
    L.msptiEnableCallback.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    sim.preload_check(True)
    assert L.msptiEnableDomain(1, None, 1) == 6  # no subscriber: still the preload's 6 first
    s = Subscriber(sim)
    try:
        wrong = s.handle.value + 8
        assert L.msptiEnableDomain(1, wrong, 9) == L.msptiEnableCallback(1, s.handle, 9, 64) == 6
        sim.preload_check(False)
        assert L.msptiEnableCallback(1, wrong, 9, 64) == 1  # the handle before the domain and cbid
        assert L.msptiEnableCallback(1, s.handle, 9, 64) == 1  # the domain before the cbid
        assert L.msptiEnableCallback(1, s.handle, 1, 64) == 1
    finally:
        s.close()
    assert L.msptiEnableDomain(1, None, 9) == L.msptiEnableCallback(1, None, 9, 64) == 0  # nobody: 0


def test_cann8_without_ld_preload_enables_fine_and_delivers_nothing(sim, monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    sim.fidelity = "cann8"
    sim.preload_check(True)
    with Session(library="sim") as s:
        sim.call("aclrtLaunchKernel", 0, 10)
        assert sim.enabled_mask(1) != 0 and s.snapshot().total_calls == 0


def test_callbacks_are_synchronous_enter_before_and_exit_after_the_work(sim, raw):
    sim.set_clock("virtual")
    sim.lib.msimVirtualSet(AHEAD_NS + 1_000)
    assert sim.lib.msptiEnableCallback(1, raw.handle, 1, 22) == 0
    sim.call("aclrtMemcpy", 5_000)
    sim.call("aclrtMalloc", 7_000)  # not enabled: no callback
    me = threading.get_ident()
    assert [(e["site"], e["name"], e["t"], e["thread"]) for e in raw.events] == [
        (0, "aclrtMemcpy", AHEAD_NS + 1_000, me),
        (1, "aclrtMemcpy", AHEAD_NS + 6_000, me),
    ]
    # ENTER and EXIT are checked separately against the bitmap.
    raw.events.clear()
    sim.fire("aclrtMemcpy", 1)
    assert [e["site"] for e in raw.events] == [1]


# -- fidelity modes --------------------------------------------------------------------------


def test_documented_mode_fills_every_field(sim):
    sim.fidelity = "documented"
    sub = Subscriber(sim, read_documented_fields=True)
    try:
        assert sim.lib.msptiEnableDomain(1, sub.handle, 1) == 0
        sim.call("aclrtLaunchKernel", 0)
        sim.call("aclrtMemcpy", 0)
    finally:
        sub.close()
    enter, exit_, m_enter, m_exit = sub.events
    assert enter["corr"] == exit_["corr"] != 0 and m_enter["corr"] == enter["corr"] + 1
    assert exit_["shared"] == 0xC0FFEE + enter["corr"]  # correlationData carries ENTER -> EXIT
    assert enter["symbol_text"] == b"SimKernel_0" and m_enter["symbol"] is None
    assert enter["params"] not in (None, GARBAGE)


def test_cann26_mode_fills_only_site_and_name(sim, raw):
    assert sim.fidelity == "cann26"  # the default: what real libraries do
    assert sim.lib.msptiEnableDomain(1, raw.handle, 1) == 0
    sim.call("aclrtLaunchKernel", 0)
    for e in raw.events:
        assert e["name"] == "aclrtLaunchKernel"
        assert e["params"] & ~0xFFF == GARBAGE and e["corr_data"] & ~0xFFF == GARBAGE
        assert e["symbol"] & ~0xFFF == GARBAGE


def test_cann8_mode_uses_the_rt_names(sim):
    sim.fidelity = "cann8"
    with Session(library="sim") as s:
        assert s.backend.fidelity == "cann8"
        sim.call("aclrtLaunchKernel", 0, 3)
        sim.call("aclrtSynchronizeStream", 0, 2)
        sim.call("HcclAllReduce", 0, 1)
        sim.call("aclrtMemcpy2d", 0, 1)
        counts = dict(s.snapshot().summary().select("name", "num_calls").iter_rows())
    assert counts == {"rtKernelLaunch": 3, "rtStreamSynchronize": 2, "HcclAllReduce": 1, "rtMemcpy2d": 1}


def test_8x_only_functions_fire_nothing_in_26x(sim):
    with Session(library="sim") as s:
        sim.call("rtCpuKernelLaunch", 0, 4)  # cbid 11: never fired by 26.x
        assert s.snapshot().total_calls == 0
        sim.fidelity = "cann8"
        sim.call("rtCpuKernelLaunch", 0, 4)
        assert dict(s.snapshot().summary().select("name", "num_calls").iter_rows()) == {
            "rtCpuKernelLaunch": 4
        }


CRASH_PROBE = """
import mspti_lens
from mspti_lens import sim as msim
s = msim.Simulator()
s.fidelity = "cann26"
with mspti_lens.Session(library="sim") as session:
    s.run_workload("training", steps=3, threads=2, time_scale=0.01)
    s.call("aclrtLaunchKernel", 0, 10000)
    n = session.snapshot().total_calls
print("calls", n)
"""


def test_the_toolkit_never_reads_the_garbage_fields():
    # Any read through a garbage pointer faults (the address is non-canonical): a clean exit with
    # every call counted shows the callback read only callbackSite and functionName.
    r = run_python(CRASH_PROBE)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) > 10000


# -- entry points --------------------------------------------------------------------------------


def test_an_entry_point_for_every_api_that_fires_in_26x(sim, raw):
    assert sim.lib.msptiEnableDomain(1, raw.handle, 1) == 0
    assert sim.lib.msptiEnableDomain(1, raw.handle, 2) == 0
    expected = []
    for cb in catalog.enableable():
        for name in cb.names_26x:
            getattr(sim.lib, f"msim_{name}")(ctypes.c_uint64(0))
            expected += [(cb.domain, cb.cbid, 0, name), (cb.domain, cb.cbid, 1, name)]
    got = [(e["domain"], e["cbid"], e["site"], e["name"]) for e in raw.events]
    assert got == expected
    runtime_ids = sorted({c for d, c, _, _ in got if d == 1})
    assert runtime_ids == [1, 2, *range(5, 11), 15, 16, 17, 18, 20, 21, 22, *range(24, 37)]
    assert sorted({c for d, c, _, _ in got if d == 2}) == list(range(1, 13))


# What the simulator interposes when preloaded, as the real libmspti does (a subset of upstream's
# csrc/common/inject/acl_inject.cpp, acl_mem_inject.cpp and hccl_inject.cpp): nothing else of the
# runtime, and no CANN 8.x rt* name.
INTERPOSED = {
    *(
        "aclrtSetDevice aclrtResetDevice aclrtCreateContext aclrtDestroyContext aclrtCreateStream "
        "aclrtDestroyStream aclrtSynchronizeStream aclrtMalloc aclrtMallocHost aclrtMallocCached "
        "aclrtFree aclrtFreeHost aclrtGetMemInfo aclrtMemcpy aclrtMemcpyAsync aclrtMemset "
        "aclrtMemsetAsync aclrtLaunchKernel aclrtLaunchKernelV2 aclrtLaunchKernelWithConfig "
        "aclrtLaunchKernelWithHostArgs"
    ).split(),
    *"HcclAllReduce HcclBroadcast HcclAllGather HcclReduceScatter HcclBarrier".split(),
}


def test_only_the_interposed_runtime_symbols_are_exported():
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(simulator_path())], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    names = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
    assert "msptiSubscribe" in names and "msim_aclrtLaunchKernel" in names
    shadowing = [n for n in names if n.startswith(("aclrt", "Hccl", "rtKernel", "rtMalloc", "rtMemcpy"))]
    assert set(shadowing) == INTERPOSED and len(shadowing) == len(INTERPOSED)


def test_calls_from_many_threads(sim):
    with Session(library="sim") as s:
        ts = [threading.Thread(target=sim.call, args=("HcclBroadcast", 0, 5_000)) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        snap = s.snapshot()
    assert snap.total_calls == 40_000 and snap.unmatched == 0


# -- workloads -------------------------------------------------------------------------------------


def test_training_workload_counts_exactly_under_concurrency(sim):
    sim.counting(True)
    with Session(library="sim") as s:
        r = sim.run_workload("training", steps=6, ranks=8, threads=3, time_scale=0.02, seed=5)
        snap = s.snapshot()
    assert r.done == r.total == 18
    delivered = {(d, c): sim.delivered(d, c) for d in (1, 2) for c in range(1, 37)}
    got = {}
    for row in snap.summary().iter_rows(named=True):
        cb = catalog.resolve(row["name"])
        got[cb] = got.get(cb, 0) + row["num_calls"]
    assert got == {k: v for k, v in delivered.items() if v}
    assert snap.total_calls == r.calls == sim.delivered_total()
    assert snap.unmatched == 0 and snap.in_flight == 0
    names = set(snap.summary()["name"])
    assert {"HcclAllReduce", "HcclBroadcast", "aclrtLaunchKernel", "aclrtSynchronizeStream"} <= names


def test_workload_latencies_look_like_the_real_priors(sim):
    sim.set_clock("virtual")  # the modelled durations exactly, whatever else the machine runs
    with Session(library="sim", clock="mspti") as s:
        sim.run_workload("training", steps=20, ranks=8, threads=1, seed=1)
        df = s.snapshot().summary()
    row = {r["name"]: r for r in df.iter_rows(named=True)}
    launch = row["aclrtLaunchKernel"]
    assert 2_000 < launch["med_ns"] < 12_000  # a few µs ...
    assert launch["p999_ns"] > 10 * launch["med_ns"]  # ... with a long right tail
    sync = row["aclrtSynchronizeStream"]
    assert 250_000 < sync["med_ns"] < 20_000_000  # each step waits for the device's tail, in ms
    ar = row["HcclAllReduce"]
    assert 10_000 < ar["med_ns"] < 200_000 and ar["max_ns"] > 2_000_000  # enqueue cost, slow first calls


def test_seeded_workloads_repeat_exactly_on_the_virtual_clock(sim):
    sim.set_clock("virtual")
    frames = []
    for _ in range(2):
        with Session(library="sim", clock="mspti") as s:
            sim.run_workload("inference", steps=3, ranks=4, threads=2, seed=42)
            frames.append(s.snapshot().histogram().sort("name", "lower_ns"))
    assert frames[0].equals(frames[1])


def test_workload_arguments_are_checked(sim):
    with pytest.raises(ValueError, match="valid workloads are training, inference"):
        sim.start_workload("pretraining")
    with pytest.raises(ValueError, match="threads must be an int in 1..256"):
        sim.start_workload(threads=0)
    with pytest.raises(ValueError, match="unknown fidelity 'cann9'"):
        sim.fidelity = "cann9"
    with pytest.raises(ValueError, match="no API 'cudaMalloc'"):
        sim.call("cudaMalloc")


def test_workload_progress_and_cancel(sim):
    job = sim.start_workload("training", steps=10_000, ranks=2, time_scale=0.01)
    seen = []
    job.cancel()
    r = job.join(progress=lambda d, t: seen.append((d, t)))
    assert r.done < r.total == 10_000 and seen[-1][1] == 10_000


@pytest.mark.slow
def test_main_job_prints_the_table_and_writes_plots(tmp_path):
    r = subprocess.run(
        [__import__("sys").executable, "-m", "mspti_lens", "demo", "--steps", "5", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "SIMULATED" in r.stdout and "HcclAllReduce" in r.stdout and "aclrtLaunchKernel" in r.stdout
    for name in ("distribution.png", "cdf.png", "hccl.png", "launch.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    snap = __import__("mspti_lens").load(tmp_path / "snapshot.parquet")
    assert snap.simulated and snap.total_calls > 1000
    assert pl.DataFrame(snap.summary()).height > 5


FORK_WHILE_INTERNING = r"""
import ctypes, os, sys, threading, time
from mspti_lens.backend import simulator_path
L = ctypes.CDLL(simulator_path())
L.msimLaunch.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64,
                         ctypes.c_uint32, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32]
stop, spun = threading.Event(), [0]
def spin():  # every call interns a kernel name never seen before
    while not stop.is_set():
        L.msimLaunch(API, 0, 0, 0, 1, b"spinner_%d" % spun[0], None, 0)
        spun[0] += 1
API = int(sys.argv[1])
t = threading.Thread(target=spin)
t.start()
while spun[0] < 100:
    time.sleep(0.001)
kids = []
for c in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        os._exit(0 if L.msimLaunch(API, 0, 0, 0, 1, b"child_%d" % c, None, 0) == 0 else 1)
    kids.append(pid)
deadline, hung, failed = time.monotonic() + 60, 0, 0  # generous: each child needs microseconds
while kids and time.monotonic() < deadline:
    for pid in list(kids):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            kids.remove(pid)
            failed += os.waitstatus_to_exitcode(status) != 0
    time.sleep(0.005)
for pid in kids:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
stop.set()
t.join()
print(len(kids), failed)
"""


def test_forked_children_can_launch_while_another_thread_interns_names(sim, tmp_path):
    # The record-name cache was a mutex: a child forked while another thread held it hung in its
    # first launch with a new kernel name (1 in 60 in the report; most children here).
    script = tmp_path / "fork_interning.py"
    script.write_text(FORK_WHILE_INTERNING)
    cmd = [__import__("sys").executable, "-W", "ignore", str(script), str(sim.api("aclrtLaunchKernel")), "80"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)  # watchdog
    assert out.returncode == 0, out.stderr
    hung, failed = map(int, out.stdout.split())
    assert (hung, failed) == (0, 0), f"of 80 forked children {hung} hung and {failed} failed in msimLaunch"


def test_the_simulators_command_line_lists_job_and_cann_and_hides_rank():
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "mspti_lens.sim", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    listed = [
        line.split()[0] for line in out.stdout.split("positional arguments:")[1].splitlines()[2:] if line
    ]
    assert "{job,cann}" in out.stdout and listed[:2] == ["job", "cann"]
    assert "rank" not in out.stdout and "SUPPRESS" not in out.stdout
    cann = subprocess.run(
        [sys.executable, "-m", "mspti_lens.sim", "cann", "--help"], capture_output=True, text=True, timeout=60
    )
    assert cann.returncode == 0 and "usage: python -m mspti_lens.sim cann" in cann.stdout
