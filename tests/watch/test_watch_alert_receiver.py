"""The receiver of Alertmanager's webhook: it reads version 4 payloads, captures a firing watch
rule once however often the alert comes (a resend, a restarted receiver, a second receiver on the
same run), keeps the rule's cool-down across restarts, and says in one line what it skipped and
why. Captures go to a real recorded process (paused, on the simulator) through the control path.
(A real Alertmanager sending them: test_watch_prometheus_alertmanager.py.)"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from mspti_lens.runs.control import read_processes
from mspti_lens.watch.alert_receiver import ALERTS_DIR, AlertReceiver, firings

pytestmark = pytest.mark.timeout(300)
WAIT_S = 120
RULE = "aclrtLaunchKernel p50 > 6us for 2 windows"


def alert(fingerprint: str = "a1", rank: str = "3", status: str = "firing", rule: str = RULE, **more) -> dict:
    labels = {"alertname": "MsptiLens_x", "mspti_lens_rule": rule, "host": "node-a", "rank": rank}
    return {
        "status": status,
        "labels": {**labels, **more.pop("labels", {})},
        "annotations": {"value": "7800", "baseline": "5100", "summary": "..."},
        "startsAt": more.pop("startsAt", "2026-12-04T19:10:00.123456789Z"),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://127.0.0.1:9090/graph",
        "fingerprint": fingerprint,
        **more,
    }


def payload(*alerts: dict) -> dict:
    common = {"groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": ""}
    return {"version": "4", "status": "firing", "receiver": "mspti-lens", "groupKey": "{}:{}", **common,
            "alerts": list(alerts)}  # fmt: skip


def test_a_payload_gives_its_firing_watch_alerts_and_says_what_it_skipped():
    found, skipped = firings(
        payload(
            alert(),
            alert("b2", status="resolved"),
            {"status": "firing", "labels": {"alertname": "DiskFull"}, "fingerprint": "c3"},
            alert("d4", rule="HcclAllReduse p99 > 5ms"),
            alert("e5", rank="three"),
            alert("f6", rule="hccl p99 > 1ms across ranks", labels={"rank": ""}),
        )
    )
    assert [(f.rule.text(), f.ranks, f.value, f.baseline) for f in found] == [
        (RULE, (("node-a", 3),), 7800.0, 5100.0),
        ("hccl p99 > 1ms across ranks for 2 windows", (), 7800.0, 5100.0),  # every rank
    ]
    assert found[0].at == pytest.approx(1796411400.123456)  # nanoseconds read to the microsecond
    assert found[0].key != found[1].key
    assert skipped[0] == "MsptiLens_x: resolved"
    assert skipped[1].startswith("DiskFull: not a watch rule's alert")
    assert "did you mean 'HcclAllReduce'?" in skipped[2] and "three" in skipped[3]
    with pytest.raises(ValueError, match="version 4"):
        firings({**payload(alert()), "version": "3"})
    with pytest.raises(ValueError, match="not an Alertmanager webhook payload"):
        firings([1, 2])


def test_the_same_alert_resent_later_has_the_same_key_and_a_new_firing_another():
    (a,), _ = firings(payload(alert()))
    (b,), _ = firings(payload({**alert(), "annotations": {"value": "9000"}}))
    (c,), _ = firings(payload(alert(startsAt="2026-12-04T20:00:00Z")))
    assert a.key == b.key != c.key


def post(url: str, body: bytes) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_server_answers_bad_input_in_one_line_and_releases_an_alert_it_could_not_capture(tmp_path):
    lines: list[str] = []
    with AlertReceiver(tmp_path, port=0, say=lines.append) as r:
        assert r.address == "127.0.0.1"
        assert post(r.url, b"{not json")[0] == 400
        code, text = post(r.url, json.dumps({"version": "4"}).encode())
        assert (
            code == 400
            and text.strip() == "not an Alertmanager webhook payload (a JSON object with 'alerts')"
        )
        big = http.client.HTTPConnection(r.address, r.port, timeout=30)
        big.putrequest("POST", "/")
        big.putheader("Content-Length", str(2 << 20))  # refused before a byte of it is read
        big.endheaders()
        assert big.getresponse().status == 413
        big.close()
        with urllib.request.urlopen(r.url, timeout=30) as got:
            assert got.status == 200
        # No live process in this run: not captured, and not claimed (a resend may try again).
        for _ in range(2):
            code, text = post(r.url, json.dumps(payload(alert())).encode())
            assert code == 200 and text.startswith(f"not captured: {RULE} on rank 3 (node-a): ")
            assert "has no controllable run" in text
        assert not list((tmp_path / ALERTS_DIR).glob("*.json"))
    assert len(lines) == 4 and all("\n" not in x for x in lines)


@pytest.fixture
def paused_job(tmp_path):
    """A recorded process (rank 3) that records nothing until told: the run's one live rank."""
    run = tmp_path / "run"
    prog = (
        "import time, mspti_lens.sim as s\nsim = s.Simulator()\n"
        "while True:\n    sim.call('aclrtLaunchKernel', 1000, 10)\n    time.sleep(0.05)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "mspti_lens", "record", "--out", str(run), "--paused", "--library", "sim",
         "--interval", "1", "--", sys.executable, "-c", prog],
        env={**os.environ, "RANK": "3"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: [q for q in read_processes(run) if q["live"]] if (run / "control").is_dir() else [])
        yield run
    finally:
        p.terminate()
        p.wait(timeout=60)


def wait_for(check):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {WAIT_S} s")


def rank_state(run) -> tuple[str, list[str]]:
    (p,) = [q for q in read_processes(run) if q["live"]]
    return p["state"], p.get("activity") or []


def test_one_capture_per_alert_resent_restarted_or_received_twice_and_the_cool_down_holds(paused_job):
    run = paused_job
    lines: list[str] = []
    first, second = (
        AlertReceiver(run, port=0, for_s=3.0, cooldown_s=600, say=lines.append) for _ in range(2)
    )
    try:
        # Receiving, the run is watched: its ranks keep their flight recorders (the seconds
        # before a capture), as with a watcher of files; the marker's heartbeat is the receiver's.
        marker = run / "control" / "watched.json"
        assert json.loads(marker.read_text())["recorder"]["windows"] > 0
        assert first._heart.is_alive() and second._heart.is_alive()
        out: list[list[str]] = []
        both = [
            threading.Thread(target=lambda r=r: out.append(r.handle(payload(alert()))))
            for r in (first, second)
        ]
        for t in both:
            t.start()
        for t in both:
            t.join()
        said = sorted(x for o in out for x in o)
        assert said[0].startswith(f"captured: {RULE} on rank 3 (node-a) for 3 s (value 7800, baseline 5100")
        assert said[1].startswith(f"seen before: {RULE} on rank 3 (node-a)")
        # The paused rank records the capture's device records, then stops by itself: as before.
        wait_for(lambda: rank_state(run)[0] == "on" and {"kernel", "marker"} <= set(rank_state(run)[1]))
        wait_for(lambda: rank_state(run)[0] == "off" or None)
        assert first.handle(payload(alert()))[0].startswith("seen before:")  # Alertmanager's resend
    finally:
        first.close()
        second.close()
    assert not first._heart.is_alive()  # closed: it stops marking the run watched
    with AlertReceiver(run, port=0, for_s=3.0, cooldown_s=600, say=lines.append) as restarted:
        assert restarted.handle(payload(alert()))[0].startswith("seen before:")
        # The rule fires again (a new alert): within its cool-down, not captured, and said why.
        again = restarted.handle(payload(alert("z9", startsAt="2026-12-04T20:00:00Z")))
        assert again[0].startswith(f"not captured: {RULE} on rank 3 (node-a): cool-down: captured ")
        assert restarted.handle(payload(alert("z9", startsAt="2026-12-04T20:00:00Z")))[0].startswith(
            "seen before:"
        )
        # A rank that is not live: not captured, said with the live ones, released for a resend.
        elsewhere = payload(alert("q1", rank="7", rule="aclrtMalloc p50 > 6us"))
        (gone,) = restarted.handle(elsewhere)
        assert gone.startswith("not captured: aclrtMalloc p50 > 6us for 2 windows on rank 7 (node-a): ")
        assert "(live: 3@" in gone and restarted.handle(elsewhere) == [gone]
    assert sum(x.startswith("captured:") for x in lines) == 1
    issued = [json.loads(p.read_text()) for p in sorted((run / "control" / "issued").glob("*.json"))]
    # One start (the capture's activity on the paused rank), then the stop that put it back.
    assert [(c["command"], c.get("activity")) for c in issued[1:]] == [
        ("start", ["communication", "kernel", "marker"]),
        ("stop", None),
    ]
    (folder,) = [c for c in (run / "captures").iterdir() if c.is_dir()]  # the watch package's capture
    cap = json.loads((folder / "capture.json").read_text())
    assert cap["state"].startswith("done") and cap["ranks"] == [[read_processes(run)[0]["host"], 3]]
