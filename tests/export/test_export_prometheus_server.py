"""A real Prometheus server (Debian's `prometheus`) scrapes `serve()` and its PromQL agrees with
mspti-lens: native histograms (`--enable-feature=native-histograms`, protobuf scrape) give
`histogram_quantile` within one bucket of the exact value and exact `histogram_count`/`_sum`;
a second server without the feature scrapes the text format's classic buckets.

Everything listens on 127.0.0.1; the servers are stopped at the end of the module. Waits poll
a bounded number of times and end as soon as the data is there."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from export_data import RANGE_END_NS, nearest_rank, otel_index, workload

from mspti_lens.export import serve

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="the prometheus binary is missing (Debian: apt-get install prometheus; `make system-deps`)",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, root: Path, target: str, native: bool):
        self.port = free_port()
        root.mkdir(parents=True)
        cfg = root / "prometheus.yml"
        cfg.write_text(
            # Generous timeout: on a loaded 2-core machine a render can take a while.
            "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\n"
            "scrape_configs:\n  - job_name: mspti_lens\n    metrics_path: /metrics\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        args = [
            PROMETHEUS,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        if native:
            args.append("--enable-feature=native-histograms")
        self.log = open(root / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, promql: str) -> list:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                doc = json.load(r)
        except OSError:
            return []
        return doc["data"]["result"] if doc.get("status") == "success" else []

    def wait_for(self, promql: str, tries: int = 600) -> list:
        for _ in range(tries):
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited ({self.proc.returncode}); see {self.log.name}")
            res = self.query(promql)
            if res:
                return res
            time.sleep(0.2)
        raise AssertionError(f"no result for {promql} after {tries} tries; scrape state: {self.targets()}")

    def targets(self) -> str:
        """What Prometheus says of its scrapes (health, last error), for failure messages."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/targets", timeout=30) as r:
                active = json.load(r)["data"]["activeTargets"]
            return "; ".join(f"{t['health']} {t.get('lastError', '')}" for t in active)
        except OSError as e:
            return f"unknown ({e})"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    snap = workload()
    root = tmp_path_factory.mktemp("prom")
    with serve(0, snap) as srv:
        target = f"127.0.0.1:{srv.port}"
        native = Prometheus(root / "native", target, native=True)
        classic = Prometheus(root / "classic", target, native=False)
        try:
            yield snap, native, classic, srv
        finally:
            native.stop()
            classic.stop()


def value(res: list) -> float:
    (series,) = res
    return float(series["value"][1])


def test_native_histogram_quantiles_agree_within_one_bucket(scraped):
    snap, prom, _classic, srv = scraped
    for (_d, _c, name), vals in snap.values.items():
        sel = f'mspti_lens_call_duration_nanoseconds{{api="{name}",rank="3",host="node-a"}}'
        assert value(prom.wait_for(f"histogram_count({sel})")) == len(vals)
        assert value(prom.wait_for(f"histogram_sum({sel})")) == float(sum(vals))
        for q in (0.5, 0.9, 0.99):
            exact = nearest_rank(vals, q)
            if exact > RANGE_END_NS or exact == 0:
                continue
            got = value(prom.wait_for(f"histogram_quantile({q}, {sel})"))
            i = otel_index(exact)
            # Prometheus interpolates inside the first bucket whose cumulative count reaches
            # q*n; counts are integers, so that is the bucket of the ceil(q*n)-th value, the
            # nearest-rank sample: the very bucket (within float rounding of its bounds).
            lo, hi = 2 ** (i / 128), 2 ** ((i + 1) / 128)
            assert lo * (1 - 1e-9) <= got <= hi * (1 + 1e-9), (name, q, got, exact)
    assert srv.answered.get(200, 0) >= 1


def test_classic_buckets_serve_a_scraper_without_native_support(scraped):
    snap, _native, prom, _srv = scraped
    for (_d, _c, name), vals in snap.values.items():
        sel = f'mspti_lens_call_duration_nanoseconds_bucket{{api="{name}"}}'
        got = value(prom.wait_for(f"histogram_quantile(0.5, {sel})"))
        exact = nearest_rank(vals, 0.5)
        lo = 2 ** max(exact.bit_length() - 1, 0)
        assert lo / 2 <= got <= 2 * lo, (name, got, exact)  # the classic bucket (2^(k-1), 2^k] of exact
        count = f'mspti_lens_call_duration_nanoseconds_count{{api="{name}"}}'
        assert value(prom.wait_for(count)) == len(vals)
    info = prom.wait_for('mspti_lens_info{source="simulated"}')
    assert value(info) == 1.0


@pytest.fixture(scope="module")
def workload_scraped(tmp_path_factory):
    """A simulated training workload recorded by a Session (virtual clock: exact durations), served
    live by serve(session) and scraped by a native-histogram Prometheus."""
    from mspti_lens import Session
    from mspti_lens.sim import Simulator

    sim = Simulator()
    sim.reset()
    sim.set_clock("virtual")
    session = Session(library="sim", clock="mspti")
    try:
        session.start()
        sim.run_workload("training", steps=10, threads=2, ranks=8, seed=3)
        session.stop()
        with serve(0, session, rank=0, host="sim-host") as srv:
            prom = Prometheus(
                tmp_path_factory.mktemp("prom-workload") / "native", f"127.0.0.1:{srv.port}", True
            )
            try:
                yield session.snapshot(), prom
            finally:
                prom.stop()
    finally:
        session.close()
        sim.set_clock("real")
        sim.reset()


def test_promql_quantiles_of_a_simulated_workload_agree_with_mspti_lens(workload_scraped):
    snap, prom = workload_scraped
    from mspti_lens.snapshot import bucket_index as index_of

    summary = snap.summary()
    assert len(summary) >= 3
    for row in summary.iter_rows(named=True):
        sel = f'mspti_lens_call_duration_nanoseconds{{api="{row["name"]}",rank="0",host="sim-host"}}'
        assert value(prom.wait_for(f"histogram_count({sel})")) == row["num_calls"]
        for q, col in ((0.5, "med_ns"), (0.99, "p99_ns")):
            mine = row[col]
            if mine is None or mine == 0:
                continue
            got = value(prom.wait_for(f"histogram_quantile({q}, {sel})"))
            # Within one bucket: PromQL interpolates inside the bucket mspti-lens's value stands for.
            assert abs(index_of(round(got)) - index_of(mine)) <= 1, (row["name"], q, got, mine)
