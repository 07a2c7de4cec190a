"""No other user gets into a run directory: not through record's --out, not through control.

The attacker is a REAL second local user, ``mspti-lens-other`` (made with ``useradd`` when the
tests run as root; without root these tests are skipped, saying why). Its steps run as that user:
shell commands through ``setpriv``, and mspti-lens's own command line in a forked child that has
dropped to that user's uid and gid (this interpreter lives under root's home, which that user
cannot enter). Everything happens under a sticky, world-writable folder of ``/tmp``, as on a
shared machine.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import pytest

import mspti_lens.catalog  # noqa: F401 - imported before a child drops to the other user, who cannot
from mspti_lens.__main__ import build_parser
from mspti_lens.__main__ import main as cli
from mspti_lens.runs import control, hook
from mspti_lens.runs.writer import host_name

OTHER = "mspti-lens-other"
WATCHDOG_S = 240.0
build_parser()  # every subcommand's module imported now: the other user cannot read this interpreter's


@pytest.fixture(scope="module")
def other() -> tuple[int, int]:
    """The second user's (uid, gid), made if missing."""
    if os.geteuid() != 0:
        pytest.skip("needs root: to make a second local user (useradd) and act as it")
    if shutil.which("useradd") is None or shutil.which("setpriv") is None:
        pytest.skip("needs useradd and setpriv to make a second local user and act as it")
    try:
        pw = pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER],
            check=False,  # another test worker may have made it at the same moment
            capture_output=True,
        )
        pw = pwd.getpwnam(OTHER)
    return pw.pw_uid, pw.pw_gid


@pytest.fixture
def shared():
    """A folder like /tmp: world-writable and sticky."""
    d = Path(tempfile.mkdtemp(prefix="mspti-lens-shared-", dir="/tmp"))
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def as_other(other: tuple[int, int], script: str) -> subprocess.CompletedProcess:
    uid, gid = other
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "sh", "-euc", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=WATCHDOG_S,
    )


def cli_as_other(other: tuple[int, int], argv: list[str]) -> tuple[int, str]:
    """mspti-lens's command line run by the other user: (exit code, stderr)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the other user, run the command, report, exit
        code = 99
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(other[1])
            os.setuid(other[0])
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    code = cli(argv)
                except BaseException:  # noqa: BLE001 - a traceback is what the test looks for
                    traceback.print_exc()
                    code = 1
            os.write(w, err.getvalue().encode())
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        said = f.read().decode()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), said


def tree(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def record(out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mspti_lens", "record", "--out", str(out), "--library", "sim", *extra]
    cmd += ["--", sys.executable, "-c", "print('program ran')"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=WATCHDOG_S, env=env, check=False)


def test_record_refuses_a_run_directory_another_user_made_first(other, shared, tmp_path):
    # The attacker makes the run directory first under the shared /tmp, open to all, with a
    # host=H symlink into a folder of theirs and probe names that point at a private file.
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    secret = private / "secret"
    secret.write_text("precious\n")
    run, theirs = shared / "run", shared / "theirs"
    me = os.getpid()
    as_other(
        other,
        f"mkdir -m 777 {run} {theirs} && ln -s {theirs} '{run}/host={host_name()}' && "
        f"for i in $(seq {me} {me + 3000}); do ln -s {secret} {run}/.probe-$i; done",
    )
    planted = tree(run)
    p = record(run)
    assert p.returncode == 2 and "program ran" not in p.stdout, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"belongs to {OTHER}" in lines[0] and "choose a new --out" in lines[0], lines
    assert secret.read_text() == "precious\n"  # nothing truncated through a planted symlink
    assert tree(run) == planted and tree(theirs) == []  # and nothing written there or through it
    # A process started with the hook's variable by hand is refused the same way: it runs on,
    # unrecorded, and writes nothing.
    env = {**os.environ, hook.RECORD_VARIABLE: str(run), hook.LIBRARY_VARIABLE: "sim"}
    env["PYTHONPATH"] = os.pathsep.join([hook.SITE_DIR, env.get("PYTHONPATH", "")])
    q = subprocess.run(
        [sys.executable, "-c", "print('program ran')"], env=env, capture_output=True, text=True, check=False
    )
    assert q.stdout == "program ran\n" and f"not recording this process: --out {run} belongs to" in q.stderr
    assert secret.read_text() == "precious\n" and tree(run) == planted and tree(theirs) == []


def test_record_refuses_its_own_directory_when_others_can_write_it_and_says_the_fix(shared):
    for mode, said in [
        (0o777, "is writable by every user (mode 777)"),
        (0o775, "is writable by its group"),
    ]:
        run = shared / f"run-{mode:o}"
        run.mkdir()
        os.chmod(run, mode)
        p = record(run)
        assert p.returncode == 2 and said in p.stderr and p.stderr.count("\n") == 1, p.stderr
        assert tree(run) == []
    link = shared / "link"
    link.symlink_to(shared / "run-777")
    p = record(link)
    assert p.returncode == 2 and "is a symlink" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    # A new one is the user's alone: folders 0700, files 0600, all the way down.
    run = shared / "new"
    p = record(run)
    assert p.returncode == 0, p.stderr
    modes = {str(q.relative_to(run)): q.lstat().st_mode & 0o7777 for q in [run, *run.rglob("*")]}
    assert modes and all(m == (0o700 if (run / k).is_dir() else 0o600) for k, m in modes.items()), modes


def test_another_user_cannot_steer_the_job_or_read_files_through_control(other, shared, tmp_path):
    # The job's run, with an issued/ folder another user made (while the run was open to all, or
    # in a run directory they made first): it is theirs to write, whatever its mode. The attacker
    # watches it and drops the next generation, with their own enable set, the moment a
    # legitimate command lands; then a symlink to a private JSON file of the job's user as the
    # generation after.
    run = shared / "run"
    cdir = control.control_dir(run)
    cdir.mkdir(parents=True, mode=0o777)
    os.chmod(run, 0o777)
    os.chmod(cdir, 0o777)
    as_other(other, f"mkdir -m 755 {cdir}/issued")
    os.chmod(run, 0o755)
    os.chmod(cdir, 0o755)
    with contextlib.suppress(control.ControlError):
        control.issue(run, {"command": "stop", "ranks": None})  # the launch: generation 1
    applied: list[dict] = []
    proc = control.ProcessControl(
        run, host="h", rank=0, rank_source="RANK", apply=applied.append, state=lambda: {"state": "off"},
        tick=lambda: None, generation=1,
    )  # fmt: skip
    proc.start()
    private = tmp_path / "private.json"
    private.write_text(json.dumps({"generation": 4, "command": "start", "by": "the private file"}))
    issued = cdir / control.ISSUED_DIR
    evil = json.dumps({"generation": 3, "command": "start", "enable": ["runtime"], "by": "attacker"})
    done = shared / "done"
    uid, gid = other
    watcher = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "sh", "-uc",
         f"until [ -e {issued}/000002.json ] || [ -e {done} ]; do :; done; "
         f"[ -e {done} ] || printf '%s' '{evil}' > {issued}/000003.json"],
    )  # fmt: skip
    try:
        with contextlib.suppress(control.ControlError):  # a legitimate command
            control.issue(run, {"command": "start", "ranks": None})
    finally:
        done.touch()
        watcher.wait(timeout=WATCHDOG_S)
    planted = "" if (issued / "000003.json").exists() else f"printf '%s' '{evil}' > {issued}/000003.json && "
    as_other(other, planted + f"ln -s {private} {issued}/000004.json")
    proc.poll()
    try:
        assert not [c for c in applied if c.get("by") in ("attacker", "the private file")], applied
        row = json.loads((control.control_dir(run) / control.PROCESSES_DIR / proc.path.name).read_text())
        assert f"belongs to {OTHER}" in row["refused"]["why"]  # said in status, not obeyed
        # Nothing the attacker wrote, and nothing of the private file, was copied into the run.
        for f in run.rglob("*"):
            if f.is_file() and not f.is_symlink() and f.parent != issued:
                text = f.read_text(errors="replace")
                assert "attacker" not in text and "the private file" not in text, f
    finally:
        proc.end()


def test_control_of_a_run_the_caller_cannot_write_is_one_line_and_exit_2(other, shared):
    run = shared / "run"
    run.mkdir(mode=0o700)  # as record makes it
    control.issue(run, {"command": "stop", "ranks": None})
    proc = control.ProcessControl(
        run, host="h", rank=0, rank_source="RANK", apply=lambda c: None, state=lambda: {"state": "off"},
        tick=lambda: None, generation=1,
    )  # fmt: skip
    proc.start()
    try:
        before = tree(run)
        code, err = cli_as_other(other, ["control", str(run), "start"])  # a run of mode 0700
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert "cannot read the run" in err and "run control as that user" in err
        # Readable by all (a run made by an older mspti-lens), still not theirs to steer.
        os.chmod(run, 0o755)
        for d in [run / "control", *(run / "control").iterdir()]:
            os.chmod(d, 0o755)
        for f in (run / "control").rglob("*.json"):
            os.chmod(f, 0o644)
        code, err = cli_as_other(other, ["control", str(run), "start"])
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert "the run belongs to root (uid 0), not to you" in err
        assert tree(run) == before
    finally:
        proc.end()


def test_a_shared_group_run_is_steered_by_its_members_and_only_on_request(other, shared):
    uid, gid = other
    group = pwd.getpwuid(uid).pw_name  # the other user's own group: root may give the run to it
    run = shared / "run"
    from mspti_lens.runs import runfiles

    runfiles.create_run(run, runfiles.group_id(group))
    assert run.stat().st_mode & 0o7777 == 0o2770 and run.stat().st_gid == gid
    control.issue(run, {"command": "stop", "ranks": None})
    applied: list[dict] = []
    proc = control.ProcessControl(
        run, host="h", rank=0, rank_source="RANK", apply=applied.append, state=lambda: {"state": "off"},
        tick=lambda: None, generation=1,
    )  # fmt: skip
    proc.start()
    try:
        code, err = cli_as_other(other, ["control", str(run), "start", "--enable", "hccl"])
        assert code == 0, err
        proc.poll()
        assert [(c["generation"], c["enable"]) for c in applied] == [(2, ["hccl"])]
    finally:
        proc.end()


def test_a_name_planted_under_captures_or_alerts_is_refused_never_followed(other, shared, tmp_path):
    # The watch package's files (captures/, alerts/) with what another user could have left in
    # them: symlinks to the job user's private files and folders, and files of their own.
    from mspti_lens.runs import runfiles
    from mspti_lens.watch import capture, watcher
    from mspti_lens.watch.alert_receiver import AlertReceiver, firings
    from mspti_lens.watch.evaluate import Transition
    from mspti_lens.watch.rules import parse_rule

    uid, gid = other
    run = shared / "run"
    runfiles.create_run(run)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    secret = private / "secret.json"
    secret.write_text(json.dumps({"rule": "the private file", "fired_at": 1.0, "folder": "x", "pid": 1}))
    (private / "capture.json").write_text(json.dumps({"rule": "the private file", "fired_at": 2.0}))
    (private / "big").write_bytes(b"\0" * (1 << 20))
    caps = run / capture.CAPTURES_DIR
    caps.mkdir(mode=0o700)
    (caps / capture.CLAIM).symlink_to(secret)
    (caps / watcher.BASELINES_FILE).symlink_to(secret)
    (caps / "linked").symlink_to(private)  # a capture folder that is a symlink
    theirs = caps / "theirs"  # a capture folder of the other user's
    theirs.mkdir(mode=0o700)
    (theirs / "capture.json").write_text(json.dumps({"rule": "theirs", "fired_at": 3.0}))
    mine = caps / "mine"  # a folder of the job's user with the other user's capture.json in it
    mine.mkdir(mode=0o700)
    (mine / "capture.json").write_text(json.dumps({"rule": "planted", "fired_at": 4.0}))
    for p in (theirs / "capture.json", theirs, mine / "capture.json"):
        os.chown(p, uid, gid)
    before = secret.read_text()

    assert capture.read_captures(run) == []  # none of them is read
    assert watcher._read_baselines(run) == {}
    assert capture.captures_folder(run).size() < 1 << 20  # nothing counted through a symlink
    said: list[str] = []
    c = capture.Capturer(run, say=said.append)
    assert c.recover() is None and said and "is a symlink" in said[0]
    t = Transition(parse_rule("aclrtLaunchKernel p50 > 6us"), "h/0", "pending", "firing", 1, 1.0, 7.0, 5.0,
                   (("h", 0),))  # fmt: skip
    folder, why = c.take(t)
    assert folder is None and why and why.startswith("another capture of this run is running")
    assert not (run / "control").exists()  # no command issued
    # A window folder of the run: a planted symlink as a window is not linked into a capture,
    # and a capture's name planted beforehand (a link to another file) is refused.
    ranks = run / "host=h" / "rank=0"
    ranks.mkdir(parents=True, mode=0o700)
    os.chmod(run / "host=h", 0o700)
    (ranks / "window-000001-pid1.parquet").symlink_to(secret)
    (ranks / "window-000002-pid1.parquet").write_bytes(b"a window")
    os.chmod(ranks / "window-000002-pid1.parquet", 0o600)
    source = runfiles.open_run_folder(run, writer=True).child("host=h", "rank=0")
    into = runfiles.open_run_folder(run, writer=True).child("captures", "c1", "before")
    with pytest.raises(runfiles.UntrustedError, match="is a symlink"):
        into.link_from(source, "window-000001-pid1.parquet")
    into.make()
    os.link(secret, into.path / "window-000002-pid1.parquet")
    with pytest.raises(runfiles.UntrustedError, match="is not"):
        into.link_from(source, "window-000002-pid1.parquet")
    # Baselines written over the planted symlink replace the link, not what it names.
    capture.captures_folder(run, writer=True).write(watcher.BASELINES_FILE, b"{}")
    assert not (caps / watcher.BASELINES_FILE).is_symlink() and secret.read_text() == before

    # alerts/: a claim planted as a symlink is a name taken (the alert is not captured through
    # it) and never written through; claims of another user's are not counted as captures.
    labels = {"alertname": "x", "mspti_lens_rule": "aclrtLaunchKernel p50 > 6us", "host": "h", "rank": "0"}
    sent = {"version": "4", "alerts": [{"status": "firing", "fingerprint": "f", "labels": labels,
                                        "startsAt": "2026-12-04T19:10:00Z"}]}  # fmt: skip
    (found,), _ = firings(sent)
    alerts = run / "alerts"
    alerts.mkdir(mode=0o700)
    (alerts / f"{found.key}.json").symlink_to(secret)
    (alerts / "other.json").write_text(json.dumps({"rule": "planted", "captured_at": 5.0}))
    os.chown(alerts / "other.json", uid, gid)
    lines: list[str] = []
    with AlertReceiver(run, port=0, say=lines.append) as r:
        got = r.handle(sent)
        assert got[-1].startswith("seen before:") and r.captures() == []
    assert secret.read_text() == before and (alerts / f"{found.key}.json").is_symlink()
