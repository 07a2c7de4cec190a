"""The watch rules kept by a real Prometheus, woken through a real Alertmanager (Debian's
packages, everything on 127.0.0.1): a recorded simulated job serves /metrics per rank, Prometheus
scrapes the native histograms and evaluates `watch --prometheus-rules`' group, Alertmanager's
webhook reaches `receive`'s server, and the capture lands on the rank the rule names and on no
other, once, however often Alertmanager resends the alert.

Every wait polls a bounded number of times and ends as soon as its condition holds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from mspti_lens import open_run
from mspti_lens.runs.control import read_processes
from mspti_lens.snapshot import Snapshot
from mspti_lens.watch.alert_receiver import AlertReceiver
from mspti_lens.watch.capture import read_captures
from mspti_lens.watch.prometheus_rules import prometheus_rules

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        PROMETHEUS is None or ALERTMANAGER is None,
        reason="prometheus or alertmanager is missing (apt-get install prometheus prometheus-alertmanager; "
        "`make system-deps`)",
    ),
]
WAIT_S = 240
SLOW_RANK = 1
# The simulated job's launches take 5 us, the slow rank's 1.5x: a threshold between the two.
RULE = "aclrtLaunchKernel p50 > 6us for 2 windows"
WINDOW_S = 4.0  # rate()'s range: four scrapes of a second


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.load(r)
    except (OSError, ValueError):
        return None


def wait(what: str, check, *, proc: list[subprocess.Popen], logs: Path):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for p in proc:
            if p.poll() is not None:
                raise AssertionError(
                    f"{p.args[0]} exited ({p.returncode}) while waiting for {what}; logs in {logs}"
                )
        got = check()
        if got:
            return got
        time.sleep(0.25)
    raise AssertionError(f"no {what} after {WAIT_S} s; logs in {logs}")


def start(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)


def alertmanager(root: Path, port: int, webhook: str) -> subprocess.Popen:
    """Alertmanager sending every alert to ``webhook`` at once, and again every 2 s."""
    (root / "am.yml").write_text(
        "route:\n  receiver: mspti-lens\n  group_by: [alertname]\n  group_wait: 1s\n"
        "  group_interval: 1s\n  repeat_interval: 2s\n"
        f"receivers:\n  - name: mspti-lens\n    webhook_configs:\n      - url: '{webhook}'\n"
    )
    return start(
        [ALERTMANAGER, f"--config.file={root / 'am.yml'}", f"--storage.path={root / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"],
        root / "alertmanager.log",
    )  # fmt: skip


def prometheus(root: Path, port: int, rules: Path, am_port: int, targets: list[str]) -> subprocess.Popen:
    """Prometheus scraping ``targets`` every second (native histograms) and keeping ``rules``."""
    (root / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: ['{rules}']\n"
        f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['127.0.0.1:{am_port}']\n"
        "scrape_configs:\n  - job_name: mspti_lens\n    static_configs:\n"
        f"      - targets: {json.dumps(targets)}\n"
    )
    return start(
        [PROMETHEUS, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'prom-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--enable-feature=native-histograms",
         "--log.level=warn"],
        root / "prometheus.log",
    )  # fmt: skip


def test_prometheus_fires_the_rule_and_alertmanager_starts_one_capture_on_the_slow_rank(tmp_path):
    run, logs = tmp_path / "run", tmp_path
    job = start(
        [sys.executable, "-m", "mspti_lens", "record", "--out", str(run), "--interval", "2",
         "--library", "sim", "--clock", "mspti", "--prometheus", "0", "--",
         sys.executable, "-m", "mspti_lens.sim", "job", "--ranks", "2", "--steps", "6000",
         "--step-delay", "0.02", "--slow-rank", str(SLOW_RANK)],
        logs / "job.log",
    )  # fmt: skip
    procs = [job]
    lines: list[str] = []
    receiver = None
    try:
        # Each rank writes the address it serves beside its windows; the launcher (a Python
        # process too, ranked by its pid) serves nothing worth scraping.
        def urls() -> list[str]:
            found = [p.read_text().strip() for p in run.glob("host=*/rank=[01]/metrics-pid*.url")]
            return found if len(found) == 2 and all(found) else []

        targets = [
            u.removeprefix("http://").removesuffix("/metrics")
            for u in wait("ranks' /metrics", urls, proc=procs, logs=logs)
        ]
        receiver = AlertReceiver(run, port=0, for_s=4.0, cooldown_s=600.0, say=lines.append)

        am_port, prom_port = free_port(), free_port()
        procs.append(alertmanager(tmp_path, am_port, receiver.url))
        rules = tmp_path / "rules.yml"
        rules.write_text(prometheus_rules([RULE], window_s=WINDOW_S, baseline_s=60))
        procs.append(prometheus(tmp_path, prom_port, rules, am_port, targets))

        def firing() -> list[dict]:
            doc = get_json(f"http://127.0.0.1:{prom_port}/api/v1/alerts") or {}
            return [a for a in doc.get("data", {}).get("alerts", []) if a["state"] == "firing"]

        alerts = wait("firing alert in Prometheus", firing, proc=procs, logs=logs)
        assert {(a["labels"]["mspti_lens_rule"], a["labels"]["rank"]) for a in alerts} == {
            (RULE, str(SLOW_RANK))
        }
        assert float(alerts[0]["value"]) > 6000  # ns: the slow rank's median launch

        captured = wait(
            "capture", lambda: [x for x in lines if x.startswith("captured:")], proc=procs, logs=logs
        )
        assert captured == [x for x in lines if x.startswith("captured:")]
        assert f"on rank {SLOW_RANK} (" in captured[0], lines

        def applied() -> list[dict]:
            rows = [p for p in read_processes(run) if p["live"] and int(p["rank"]) == SLOW_RANK]
            return [p for p in rows if "kernel" in (p.get("activity") or [])]

        wait("the slow rank recording kernels", applied, proc=procs, logs=logs)
        assert not [
            p
            for p in read_processes(run)
            if int(p["rank"]) != SLOW_RANK and "kernel" in (p.get("activity") or [])
        ]
        # Alertmanager resends the firing alert every 2 s: it is seen, not captured again.
        wait("a resend", lambda: [x for x in lines if x.startswith("seen before:")], proc=procs, logs=logs)

        def restored() -> list[dict]:
            rows = [p for p in read_processes(run) if p["live"] and int(p["rank"]) == SLOW_RANK]
            return [p for p in rows if p.get("activity") == ["communication"]]

        wait("the slow rank back to what it recorded before", restored, proc=procs, logs=logs)
    finally:
        if receiver is not None:
            receiver.close()
        for p in procs:
            stop(p)
    assert sum(x.startswith("captured:") for x in lines) == 1, lines
    issued = [json.loads(p.read_text()) for p in sorted((run / "control" / "issued").glob("*.json"))]
    capture = [c for c in issued if "kernel" in (c.get("activity") or [])]
    assert len(capture) == 1 and capture[0]["ranks"] == {"ranks": [[SLOW_RANK, SLOW_RANK]], "hosts": []}
    kernels = open_run(run).device_events(("kernel",))
    assert kernels.height and set(kernels["rank"].to_list()) == {SLOW_RANK}  # the capture's device records
    # The seconds before the alert: the slow rank's flight recorder (the receiver kept the run
    # marked watched; the rank serves /metrics and keeps one all the same), its fine windows in
    # the capture's before/.
    (cap,) = read_captures(run)
    fine = [Snapshot.load(Path(cap["path"]) / f).meta for f in cap["before_fine"]]
    assert fine and all(m["flight"] and m["rank"] == SLOW_RANK and m["interval_s"] == 1.0 for m in fine)
    fine.sort(key=lambda m: m["window_start"])
    assert all(a["window_end"] == b["window_start"] for a, b in zip(fine, fine[1:]))  # they tile time
    assert fine[0]["window_start"] < cap["started"]  # from before the capture's start
