"""Every error path of loading and of MSPTI calls, from Python: a clear exception with what was
tried and how to fix it, never a crash."""

from __future__ import annotations

import json

import pytest

import mspti_lens
from mspti_lens import (
    LibraryError,
    MsptiCallError,
    PreloadRequiredError,
    Session,
    SessionError,
    SubscriberBusyError,
)
from mspti_lens.sim import FAULT_SLOTS

from conftest import compile_c, run_python

ALL_CODES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 999]


def test_missing_library_says_what_was_tried(tmp_path):
    missing = tmp_path / "nowhere" / "libmspti.so"
    with pytest.raises(LibraryError) as e:
        Session(library=missing)
    msg = str(e.value)
    assert str(missing) in msg and "set_env.sh" in msg and "MSPTI_LIBRARY" in msg


def test_a_file_that_is_not_a_shared_library(tmp_path):
    bogus = tmp_path / "libmspti.so"
    bogus.write_text("this is not an ELF file\n")
    with pytest.raises(LibraryError, match="could not be loaded as a shared library") as e:
        Session(library=bogus)
    assert "not an ELF file" in str(e.value) and "libmspti.so for this machine" in str(e.value)


def test_a_library_without_the_required_symbols(tmp_path):
    src = tmp_path / "partial.c"
    src.write_text("int msptiSubscribe(void **h, void *cb, void *ud) { return 0; }\n")
    lib = compile_c(src, tmp_path / "libpartial.so")
    with pytest.raises(LibraryError, match="lacks the required symbol msptiUnsubscribe"):
        Session(library=lib)


def test_wrong_type_for_library():
    with pytest.raises(ValueError, match="library must be a path"):
        Session(library=42)  # type: ignore[arg-type]


@pytest.mark.parametrize("code", ALL_CODES)
def test_every_result_code_becomes_an_exception_with_name_text_and_fix(sim, code):
    sim.set_fault("msptiSubscribe", code)
    with pytest.raises(MsptiCallError) as e:
        Session(library="sim")
    err = e.value
    message, got_code, name, function = err.args
    assert got_code == code and function == "msptiSubscribe"
    expected = {c: (n, t) for c, n, t in mspti_lens._native.results()}[code]
    assert name == expected[0] and expected[0] in message
    assert f'"{expected[1]}"' in message  # the library's own msptiGetResultString
    if code == 2:
        assert isinstance(err, SubscriberBusyError)
        assert "torch_npu" in message and "msMonitor" in message
    elif code == 6:
        assert isinstance(err, PreloadRequiredError)
        assert "LD_PRELOAD" in message and "install-kernel" in message
    # The failed subscribe left nothing behind: a session works once the fault is gone.
    sim.clear_faults()
    Session(library="sim").close()


def test_unknown_result_code(sim):
    sim.set_fault("msptiSubscribe", 12345)
    with pytest.raises(MsptiCallError, match="unknown msptiResult 12345"):
        Session(library="sim")


@pytest.mark.parametrize("function", ["msptiEnableDomain", "msptiEnableCallback"])
def test_enable_failures_leave_nothing_enabled(sim, function):
    s = Session(library="sim", enable=["hccl", "LAUNCH"])
    try:
        sim.set_fault(function, 999)
        with pytest.raises(MsptiCallError, match=function):
            s.start()
        assert not s.running
        sim.clear_faults()
        assert sim.enabled_mask(1) == 0 and sim.enabled_mask(2) == 0
        s.start()
        assert sim.enabled_mask(2) == ((1 << 13) - 1) & ~1 and sim.enabled_mask(1) == 1 << 10
    finally:
        s.close()


def test_preload_check_gives_the_fix_and_passes_with_ld_preload(sim, monkeypatch):
    sim.preload_check(True)
    s = Session(library="sim")
    try:
        with pytest.raises(PreloadRequiredError) as e:
            s.start()
        assert "LD_PRELOAD=$ASCEND_HOME_PATH/lib64/libmspti.so" in str(e.value)
        monkeypatch.setenv("LD_PRELOAD", "/usr/local/Ascend/cann/lib64/libmspti.so")
        sim.preload_check(True)  # the library reads LD_PRELOAD once; make it read again
        s.start()
        assert s.running
    finally:
        s.close()


def test_unsubscribe_failure_is_reported_and_close_can_be_retried(sim):
    s = Session(library="sim")
    sim.set_fault("msptiUnsubscribe", 1)
    with pytest.raises(MsptiCallError, match="msptiUnsubscribe"):
        s.close()
    assert not s.closed and sim.subscribed  # it still holds MSPTI's slot
    sim.clear_faults()
    s.close()
    assert s.closed and not sim.subscribed
    Session(library="sim").close()


def test_fault_slots_cover_the_callback_api():
    assert {"msptiSubscribe", "msptiUnsubscribe", "msptiEnableCallback", "msptiEnableDomain"} <= set(
        FAULT_SLOTS
    )


@pytest.mark.parametrize(
    "what,pattern",
    [
        ("gpu", "unknown callback or domain 'gpu'.*'runtime', 'hccl'.*LAUNCH"),
        ("cudaLaunchKernel", "unknown callback or domain"),
        (("runtime", 37), "out of range.*1-36"),
        (("hccl", 0), "out of range.*1-12"),
        (("npu", 1), "unknown domain 'npu'.*'runtime'"),
        ((1, 2, 3), "two items"),
        (3.5, "cannot enable 3.5"),
    ],
)
def test_unknown_names_list_the_valid_ones(session, what, pattern):
    with pytest.raises(ValueError, match=pattern):
        session.enable(what)
    with pytest.raises(ValueError, match=pattern):
        session.disable(what)


def test_bad_clock_and_closed_and_second_session(sim):
    with pytest.raises(ValueError, match="valid clocks are auto, tsc, monotonic, mspti"):
        Session(library="sim", clock="rdtsc")
    s = Session(library="sim")
    with pytest.raises(SessionError, match="already active"):
        Session(library="sim")
    s.close()
    for call in (s.start, s.reset, lambda: s.enable("hccl")):
        with pytest.raises(SessionError, match="closed"):
            call()
    assert s.snapshot().total_calls == 0  # the last window stays readable
    s.close()  # idempotent


# -- discovery order, in fresh processes (the order depends on process-wide state) --------------

PROBE = (
    "import warnings, json, mspti_lens\n"
    "with warnings.catch_warnings(record=True) as w:\n"
    "    warnings.simplefilter('always')\n"
    "    try:\n"
    "        b = mspti_lens.backend_info({arg})\n"
    "        out = dict(origin=b.origin, path=b.path, simulated=b.simulated, preloaded=b.preloaded)\n"
    "    except mspti_lens.LibraryError as e:\n"
    "        out = dict(error=str(e))\n"
    "out['warnings'] = [str(x.message) for x in w]\n"
    "print(json.dumps(out))\n"
)


def probe(arg: str = "None", **env) -> dict:
    r = run_python(PROBE.format(arg=arg), env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_discovery_falls_back_to_the_simulator_loudly():
    out = probe()
    assert out["origin"] == "simulator" and out["simulated"] is True
    assert any("SIMULATOR" in w and "simulated" in w for w in out["warnings"])


def test_discovery_finds_cann_locations(fake_cann_root):
    out = probe(ASCEND_HOME_PATH=str(fake_cann_root))
    assert out["origin"] == "CANN" and out["simulated"] is False
    assert out["path"] == str((fake_cann_root / "lib64" / "libmspti.so").resolve())
    assert out["warnings"] == []
    out = probe(ASCEND_TOOLKIT_HOME=str(fake_cann_root))
    assert out["origin"] == "CANN"


def test_mspti_library_beats_cann_and_explicit_beats_both(fake_cann_root, fake_lib_path):
    lib = str(fake_cann_root / "lib64" / "libmspti.so")
    out = probe(MSPTI_LIBRARY=str(fake_lib_path), ASCEND_HOME_PATH=str(fake_cann_root))
    assert out["origin"] == "MSPTI_LIBRARY" and out["path"] == str(fake_lib_path.resolve())
    out = probe(repr(lib), MSPTI_LIBRARY=str(fake_lib_path))
    assert out["origin"] == "explicit" and out["path"] == lib
    out = probe(MSPTI_LIBRARY="/nonexistent/libmspti.so")
    assert "/nonexistent/libmspti.so" in out["error"]


def test_a_preloaded_libmspti_is_found_and_named_by_ld_preload(fake_cann_root):
    lib = str(fake_cann_root / "lib64" / "libmspti.so")
    out = probe(LD_PRELOAD=lib)
    assert out["origin"] == "preloaded" and out["preloaded"] is True and out["path"] == lib


def test_the_simulator_can_be_chosen_on_purpose_without_a_warning():
    out = probe("'sim'")
    assert out["origin"] == "simulator" and out["warnings"] == []


def test_the_c_stand_in_has_no_result_strings(fake_lib_path, fake):
    import ctypes

    h = ctypes.c_void_p()
    assert fake.lib.msptiSubscribe(ctypes.byref(h), None, None) == 0
    try:
        with pytest.raises(SubscriberBusyError) as e:
            Session(library=fake_lib_path)
        assert "Multiple subscribers are not supported." not in str(e.value)
    finally:
        fake.lib.msptiUnsubscribe(h)


def test_package_root_exports_the_documented_api():
    documented = {"Session", "Snapshot", "load", "backend_info", "simulator_path", "__version__"}
    errors = {
        "MsptiError",
        "LibraryError",
        "MsptiCallError",
        "SubscriberBusyError",
        "PreloadRequiredError",
        "SessionError",
    }
    names = mspti_lens.__all__
    assert documented | errors <= set(names) and len(set(names)) == len(names)
    for name in names:
        assert hasattr(mspti_lens, name), name
    # One base class catches every error of the native core (errors.py).
    assert all(issubclass(getattr(mspti_lens, e), mspti_lens.MsptiError) for e in errors)


def test_doctor_after_set_env_says_what_to_install_not_to_source_set_env_again(monkeypatch, tmp_path):
    import importlib.util

    from mspti_lens import doctor

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # no `mspti` importable
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path))
    text = doctor._mspti_package().detail
    assert "set_env.sh" not in text and str(tmp_path / "python" / "site-packages") in text, text
    assert "install it" in text, text
    monkeypatch.delenv("ASCEND_HOME_PATH")
    assert "source set_env.sh" in doctor._mspti_package().detail
