"""SIGTERM while a recorded process writes its last window: the window is written once and whole,
the process still ends of the signal, and nothing waits forever.

Every process here has a watchdog timeout: a deadlock fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import mspti_lens
from mspti_lens.runs import hook

pytestmark = pytest.mark.timeout(240)
WATCHDOG_S = 90


def _env(out: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSPTI_LENS_")}
    env.update({hook.RECORD_VARIABLE: str(out), hook.LIBRARY_VARIABLE: "sim", hook.INTERVAL_VARIABLE: "3600"})
    env["PYTHONPATH"] = hook.SITE_DIR
    env.update(extra)
    return env


# A recorded process (the hook started it) whose final write sends SIGTERM to the process from
# inside the write, while the write holds its lock: the signal lands in the write every time.
SIGNAL_IN_THE_WRITE = """
import os, signal, mspti_lens.sim as s
from mspti_lens.runs import hook
w = hook._writer
s.Simulator().call("aclrtMalloc", 1000, 7)
reset = w.session.reset
def reset_and_signal():
    os.kill(os.getpid(), signal.SIGTERM)
    return reset()
w.session.reset = reset_and_signal
"""


def _windows(out: Path) -> list[Path]:
    return sorted(out.glob("host=*/rank=*/window-*.parquet"))


def _one_final_window_of(out: Path, calls: int) -> None:
    files = _windows(out)
    assert len(files) == 1, files
    r = mspti_lens.open_run(out).ranks().row(0, named=True)
    assert (r["rank"], r["complete"], r["calls"]) == (5, True, calls)
    assert mspti_lens.open_run(out).files()["final"].to_list() == [True]


def _ends_of_sigterm_with_one_final_window(tmp_path: Path, code: str) -> str:
    """Run `code` as a recorded rank 5 that made 7 calls: it must end of SIGTERM, with its final
    window written once (one summary line). Returns its stdout."""
    p = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(tmp_path, RANK="5"),
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )
    assert p.returncode == -signal.SIGTERM, p.stderr  # it still ends of the signal, after the write
    assert p.stderr.count("rank=5: 7 calls") == 1, p.stderr  # one final write, one summary line
    _one_final_window_of(tmp_path, 7)
    return p.stdout


def test_sigterm_during_the_final_write_at_exit_is_delivered_after_it(tmp_path):
    # The atexit write is under way when SIGTERM comes (Pool.terminate SIGTERMs workers already
    # exiting): the handler must not wait on the write it interrupted.
    code = SIGNAL_IN_THE_WRITE + "print('exiting', flush=True)\n"
    assert _ends_of_sigterm_with_one_final_window(tmp_path, code) == "exiting\n"


def test_a_second_sigterm_during_the_final_write_is_delivered_after_it(tmp_path):
    # The first SIGTERM's handler writes the final window; the second comes during that write
    # (a scheduler and a launcher both forwarding a stop).
    code = SIGNAL_IN_THE_WRITE + "os.kill(os.getpid(), signal.SIGTERM)\nprint('not reached', flush=True)\n"
    assert _ends_of_sigterm_with_one_final_window(tmp_path, code) == ""


def test_a_program_handler_sees_each_sigterm_once_after_the_final_write(tmp_path):
    # A program that handles SIGTERM itself goes on after it; each signal reaches its handler
    # once, the second one only when the final window is written.
    code = (
        "import os, signal, sys\n"
        "seen = []\n"
        "signal.signal(signal.SIGTERM, lambda n, f: seen.append(n))\n"
        "from mspti_lens.runs import hook\n"
        "hook.start()\n" + SIGNAL_IN_THE_WRITE + "os.kill(os.getpid(), signal.SIGTERM)\n"
        "import glob\n"
        "print(len(seen), len(glob.glob(sys.argv[1] + '/host=*/rank=*/window-*.parquet')), flush=True)\n"
    )
    env = _env(tmp_path, RANK="5")
    env.pop("PYTHONPATH")  # started by the program, after its own handler, as a library would be
    p = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )
    assert (p.returncode, p.stdout) == (0, "2 1\n"), p.stderr
    _one_final_window_of(tmp_path, 7)


# The main thread sleeps in a lock that nothing releases (a pool worker waiting for its task
# queue) and the SIGTERM goes to another thread, as the kernel may choose for a signal sent to
# the process. Python runs handlers only on the main thread once it is back in the interpreter,
# so without the native router the handler never runs and the process never ends.
SIGNAL_TO_ANOTHER_THREAD = """
import os, signal, threading, time, mspti_lens.sim as s
s.Simulator().call("aclrtMalloc", 1000, 7)
main = os.getpid()  # the main thread's id is the process id

def main_is_asleep():
    with open(f"/proc/self/task/{main}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "S"

def main_sleeps_throughout(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not main_is_asleep():
            return False
        time.sleep(0.01)
    return True

def signal_this_thread_once_main_sleeps():
    while not main_sleeps_throughout(0.2):
        pass
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

threading.Thread(target=signal_this_thread_once_main_sleeps, daemon=True).start()
stuck = threading.Lock()
stuck.acquire()
stuck.acquire()
"""


# The SIGTERM lands on the main thread just before it begins to sleep in the lock: CPython's C
# handler has run (the test hook does that part), but the wait, begun after, is never interrupted.
SIGNAL_JUST_BEFORE_THE_WAIT = SIGNAL_TO_ANOTHER_THREAD.replace(
    "signal.pthread_kill(threading.get_ident(), signal.SIGTERM)",
    "from mspti_lens import _native; _native._trip_without_waking(signal.SIGTERM)",
)


@pytest.mark.parametrize(
    "prog",
    [SIGNAL_TO_ANOTHER_THREAD, SIGNAL_JUST_BEFORE_THE_WAIT],
    ids=["another_thread", "just_before_the_wait"],
)
def test_a_sigterm_the_main_thread_sleeps_through_still_ends_the_process_on_the_simulator(tmp_path, prog):
    assert _ends_of_sigterm_with_one_final_window(tmp_path, prog) == ""


# The same sleep and the same signal, in a child the recorded process forked after it routed
# SIGTERM (a fork pool's worker told to terminate as it begins to wait for its next task): the
# child inherits the router, not the relay thread that interrupts the wait.
IN_A_FORKED_CHILD = (
    "import os, signal, sys\n"
    "pid = os.fork()\n"
    "if pid:\n"
    "    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)\n"
    "    sys.exit(0)\n"
)


def test_a_sigterm_a_forked_child_sleeps_through_still_ends_the_child_on_the_simulator(tmp_path):
    code = IN_A_FORKED_CHILD + SIGNAL_JUST_BEFORE_THE_WAIT
    p = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(tmp_path, RANK="5"),
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )
    # The child ends of the signal (its handler leaves the files to the parent, which made no call).
    assert (p.returncode, p.stdout) == (0, f"{-signal.SIGTERM}\n"), p.stderr


def _record(out: Path, prog: Path, **popen: object) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--interval", "3600",
           "--library", "sim", "--", sys.executable, str(prog)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSPTI_LENS_")}
    env.update(popen.pop("env", {}))  # type: ignore[arg-type]
    # A session of its own: a hung grandchild (the program, its workers) holds the pipes open,
    # so the watchdog ends the whole group, not only `record` (see _end_group).
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    return subprocess.Popen(cmd, env=env, start_new_session=True, **pipes, **popen)  # type: ignore[call-overload]


def _end_group(rec: subprocess.Popen) -> None:
    if rec.poll() is None:
        os.killpg(rec.pid, signal.SIGKILL)
        rec.communicate()


@pytest.mark.slow
def test_record_around_a_spawn_pool_ends_and_keeps_the_workers_data_on_the_simulator(tmp_path):
    # Leaving a spawn Pool's `with` block terminates its workers (SIGTERM), some of them already
    # in their exit, writing their last window.
    prog = tmp_path / "prog.py"
    prog.write_text(
        textwrap.dedent(
            """
            import multiprocessing as mp
            import mspti_lens.sim as s

            def work(i):
                s.Simulator().call("aclrtMalloc", 1000, 5)
                return i

            if __name__ == "__main__":
                with mp.get_context("spawn").Pool(4) as p:
                    print(sum(p.map(work, range(8))), flush=True)
            """
        )
    )
    out = tmp_path / "run"
    rec = _record(out, prog)
    try:
        stdout, err = rec.communicate(timeout=WATCHDOG_S)
    finally:
        _end_group(rec)
    assert (rec.returncode, stdout) == (0, "28\n"), err
    ranks = mspti_lens.open_run(out).ranks()
    assert int(ranks["calls"].sum()) == 8 * 5, (ranks, err)  # every worker's calls are in the run
    assert ranks["complete"].all(), ranks


def test_sigterms_a_few_ms_apart_end_the_recorded_process_with_its_last_window_on_the_simulator(tmp_path):
    # SIGTERM again and again, 5 ms apart, until the process is gone: some land in its final
    # write. It must end, of the signal, with its final window written once and whole.
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import time, mspti_lens.sim as s\n"
        "s.Simulator().call('aclrtMalloc', 1000, 7)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    out = tmp_path / "run"
    child = subprocess.Popen(
        [sys.executable, str(prog)],
        env=_env(out, RANK="5"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        deadline = time.monotonic() + WATCHDOG_S
        sent = 0
        while child.poll() is None and time.monotonic() < deadline:
            try:
                os.kill(child.pid, signal.SIGTERM)
                sent += 1
            except ProcessLookupError:
                break
            try:
                child.wait(timeout=0.005)
            except subprocess.TimeoutExpired:
                pass
        _, err = child.communicate(timeout=WATCHDOG_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == -signal.SIGTERM, (sent, err)
    assert err.count("rank=5: 7 calls") == 1, err
    _one_final_window_of(out, 7)


def test_a_sigterm_to_record_alone_ends_the_job_with_its_last_window_on_the_simulator(tmp_path):
    # `kill <record's pid>` (or a scheduler's SIGTERM to the launcher only): record passes it on,
    # so the job does not run on unowned, and it writes its last window as with its own SIGTERM.
    prog = tmp_path / "prog.py"
    pid_file = tmp_path / "job.pid"
    prog.write_text(
        "import os, time, mspti_lens.sim as s\n"
        "s.Simulator().call('aclrtMalloc', 1000, 7)\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(600)\n"
    )
    out = tmp_path / "run"
    rec = _record(out, prog, env={"RANK": "5"})
    try:
        deadline = time.monotonic() + WATCHDOG_S
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        job = int(pid_file.read_text())
        rec.send_signal(signal.SIGTERM)
        _, err = rec.communicate(timeout=WATCHDOG_S)
    finally:
        _end_group(rec)
    assert rec.returncode == 128 + signal.SIGTERM, err
    with pytest.raises(ProcessLookupError):
        os.kill(job, 0)  # the job ended (record waited for it: not even a zombie is left)
    assert err.count("rank=5: 7 calls") == 1, err
    _one_final_window_of(out, 7)
