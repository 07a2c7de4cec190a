"""Watch rules written out as Prometheus alerting rules: Prometheus's own checker accepts the group,
each rule's PromQL reads the rows the file watcher reads (a function, a callback id, a domain),
per rank or merged across ranks, with its baseline kept out of the windows that fire it; what
PromQL cannot say is one comment line. (A real Prometheus firing them:
test_watch_prometheus_alertmanager.py.)"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from mspti_lens.watch.prometheus_rules import (
    RULE_LABEL,
    alert_expression,
    alert_name,
    baseline_offset,
    duration,
    prometheus_rules,
)
from mspti_lens.watch.rules import parse_rule

PROMTOOL = shutil.which("promtool")
ISSUE_RULES = [
    "HcclAllReduce p99 > 3x baseline",
    "aclrtSynchronizeStream p50 > 20ms",
    "skew HcclAllReduce > 5ms",
    "dropped > 0",
    "LAUNCH rate < 100/s across ranks",
    "hccl count >= 10 for 3 windows",
    "aclrtLaunchKernel mean > 2x baseline across ranks",
    "aclrtMalloc max > 1s",
    "kernel MatMulV2 p99 > 2x baseline",
]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is missing (Debian: apt-get install prometheus)")
def test_promtool_accepts_the_group_and_counts_the_rules_promql_can_say(tmp_path):
    path = tmp_path / "rules.yml"
    path.write_text(prometheus_rules(ISSUE_RULES))
    p = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS: 6 rules found" in p.stdout


def test_what_promql_cannot_say_is_one_comment_line_each():
    text = prometheus_rules(ISSUE_RULES)
    said = [line for line in text.splitlines() if line.startswith("# not expressible")]
    assert [line.split(": ")[1] for line in said] == [
        "skew HcclAllReduce > 5ms for 2 windows",
        "dropped > 0 for 2 windows",
        "kernel MatMulV2 p99 > 2x baseline for 2 windows",
    ]
    assert "device records" in said[0] and "drop counters" in said[1] and "kernel device times" in said[2]
    assert prometheus_rules(["dropped > 0"]).endswith("groups: []\n")  # still a valid file


def test_the_label_matchers_are_the_rows_the_file_watcher_reads():
    function = alert_expression(parse_rule("aclrtLaunchKernel p50 > 6us"), 10)
    assert '{api="aclrtLaunchKernel"}[10s]' in function
    callback = alert_expression(parse_rule("LAUNCH p50 > 6us"), 10)
    assert '{domain="runtime",callback="LAUNCH"}' in callback
    assert '{domain="runtime",callback="LAUNCH"}' in alert_expression(
        parse_rule("MSPTI_CBID_RUNTIME_LAUNCH p50 > 6us"), 10
    )
    assert '{domain="hccl"}' in alert_expression(parse_rule("hccl p50 > 6us"), 10)


def test_a_statistic_reads_per_rank_or_merged_and_takes_the_worst_row():
    per_rank = alert_expression(parse_rule("hccl p99 > 1ms"), 10)
    assert per_rank.startswith("max by (host, rank) (histogram_quantile(0.99, sum by (host, rank, domain,")
    assert per_rank.endswith("> 1000000.0")
    merged = alert_expression(parse_rule("hccl p99.9 > 1ms across ranks"), 10)
    assert merged.startswith("max (histogram_quantile(0.999, sum by (domain, callback, api) (rate(")
    assert alert_expression(parse_rule("hccl p50 < 1ms"), 10).startswith("min by (host, rank)")
    assert "histogram_quantile(1, " in alert_expression(parse_rule("hccl max > 1ms"), 10)
    mean = alert_expression(parse_rule("hccl mean > 1ms"), 10)
    assert "(histogram_sum(sum by" in mean and ") / histogram_count(sum by" in mean
    count = alert_expression(parse_rule("hccl count > 5"), 4)
    assert count.startswith("sum by (host, rank) (histogram_count(") and count.endswith(" * 4.0) > 5.0")
    assert alert_expression(parse_rule("hccl rate > 5/s"), 4).endswith(")))) > 5.0")


def test_a_baseline_is_the_same_statistic_over_the_hour_before_the_rules_own_windows():
    rule = parse_rule("HcclAllReduce p99 > 3x baseline for 3 windows")
    assert baseline_offset(rule, 10) == 40  # the window and for: 3 windows
    expr = alert_expression(rule, 10, baseline_s=3600)
    value, base = expr.split(" > 3.0 * ")
    assert "[10s]" in value and "offset" not in value
    assert base == value.replace("[10s]", "[1h] offset 40s")
    text = prometheus_rules([rule], window_s=10)
    assert "        for: 30s" in text
    assert "baseline:" in text and "$labels.host $labels.rank | query" in text


def test_alerts_carry_the_rules_text_and_a_valid_name():
    rule = parse_rule("aclrtSynchronizeStream p99.9 > 1.5ms")
    assert alert_name(rule) == "MsptiLens_aclrtSynchronizeStream_p99_9_gt_1_5ms_for_2_windows"
    text = prometheus_rules([rule, rule])
    assert text.count(f'{RULE_LABEL}: "{rule.text()}"') == 2
    assert f"alert: {alert_name(rule)}\n" in text and f"alert: {alert_name(rule)}_\n" in text


def test_durations_are_prometheus_durations():
    assert [duration(s) for s in (3600, 90, 10, 2.5, 0.25)] == ["1h", "90s", "10s", "2500ms", "250ms"]
    with pytest.raises(ValueError):
        duration(0)
    with pytest.raises(ValueError, match="baseline longer"):
        prometheus_rules(["hccl p99 > 1ms"], window_s=10, baseline_s=5)
