"""Watch rules: the text people write becomes one Rule, which writes itself back as text that
parses to the same Rule; a bad rule is one line naming the valid choices and the near word."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mspti_lens.watch.rules import (
    OPERATORS,
    STATISTICS,
    TIME_STATISTICS,
    Rule,
    RuleError,
    check_names,
    parse_rule,
    parse_rules,
)


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("HcclAllReduce p99 > 3x baseline", Rule("api", "HcclAllReduce", "p99", ">", 3.0, True)),
        ("aclrtSynchronizeStream p50 > 20ms", Rule("api", "aclrtSynchronizeStream", "p50", ">", 20e6)),
        ("skew HcclAllReduce > 5ms", Rule("skew", "HcclAllReduce", "spread", ">", 5e6, scope="job")),
        ("dropped > 0", Rule("dropped", "", "dropped", ">", 0.0)),
        (
            "kernel MatMulV2 p99.9 >= 1.5x baseline across ranks for 3 windows",
            Rule("kernel", "MatMulV2", "p99.9", ">=", 1.5, True, "job", 3),
        ),
        ("aclrtLaunchKernel rate < 100/s per rank", Rule("api", "aclrtLaunchKernel", "rate", "<", 100.0)),
        ("  LAUNCH   median>150 us  FOR 1 WINDOW ", Rule("api", "LAUNCH", "p50", ">", 150e3, windows=1)),
        ("collective HcclAllReduce max > 2s", Rule("collective", "HcclAllReduce", "max", ">", 2e9)),
        ("hccl count <= 10 across ranks", Rule("api", "hccl", "count", "<=", 10.0, scope="job")),
    ],
)
def test_the_issues_rules_and_their_kin_parse_and_write_themselves_back(text, rule):
    assert parse_rule(text) == rule
    assert parse_rule(rule.text()) == rule
    assert parse_rule(rule.text()).text() == rule.text()


def test_the_canonical_text_reads_like_what_was_written():
    assert (
        parse_rule("HcclAllReduce p99 > 3x baseline").text()
        == "HcclAllReduce p99 > 3x baseline for 2 windows"
    )
    assert parse_rule("skew HcclAllReduce > 5000us").text() == "skew HcclAllReduce > 5ms for 2 windows"
    assert parse_rule("aclrtMalloc mean > 0.25ms").text() == "aclrtMalloc mean > 250us for 2 windows"
    assert parse_rule("dropped > 0").slug() == "dropped-gt-0-for-2-windows"


def test_a_rule_holds_against_its_threshold_or_its_baseline_multiple():
    absolute = parse_rule("aclrtSynchronizeStream p50 > 20ms")
    assert absolute.holds(20e6 + 1) and not absolute.holds(20e6) and not absolute.holds(None)
    relative = parse_rule("HcclAllReduce p99 >= 3x baseline")
    assert relative.holds(300.0, baseline=100.0) and not relative.holds(299.0, baseline=100.0)
    assert not relative.holds(1e12, baseline=None)  # no baseline yet: never fires
    assert parse_rule("aclrtLaunchKernel rate < 100/s").holds(99.0)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("HcclAllReduse p99 > 5ms", "did you mean 'HcclAllReduce'?"),
        ("HcclAllReduce p98 > 5ms", "unknown statistic 'p98'; did you mean"),
        ("HcclAllReduce p99 > 5msec", "unknown time unit 'msec'; did you mean 'ms'?"),
        ("HcclAllReduce p99 > 5", "a time needs its unit (ns, us, µs, ms, s)"),
        ("HcclAllReduce > 5ms", "statistics: count, rate, mean, p50, p90, p99, p99.9, max"),
        ("HcclAllReduce p99 5ms", "compare with one of >=, <=, >, <"),
        ("HcclAllReduce count > 5ms", "count is compared with a count"),
        ("dropped > 2x baseline", "dropped takes a count"),
        ("skew aclrtMalloc > 5ms", "skew needs an HCCL function, not 'aclrtMalloc'"),
        ("skew HcclAllReduce > 5ms per rank", "across ranks, never per rank"),
        ("HcclAllReduce p99 > 3x baseline for two windows", "whole number of windows"),
        ("HcclAllReduce p99 > 3 baseline", "'Nx baseline'"),
        ("HcclAllReduce p99 > 1ms < 2ms", "one comparison per rule"),
    ],
)
def test_a_bad_rule_is_one_line_with_the_choices_and_the_near_word(text, says):
    with pytest.raises(RuleError) as e:
        parse_rule(text)
    msg = str(e.value)
    assert says in msg and "\n" not in msg and msg.startswith(f"bad rule {text!r}")


def test_one_bad_rule_of_several_rejects_them_all_and_none_is_no_rule():
    with pytest.raises(RuleError, match="HcclAllRedue"):
        parse_rules(["dropped > 0", "HcclAllRedue p99 > 1ms"])
    with pytest.raises(RuleError, match="no rule given"):
        parse_rules([])


def test_kernel_and_collective_names_are_checked_against_the_names_a_run_has_seen():
    rules = parse_rules(["kernel MatMulV2 p99 > 1ms"])
    check_names(rules, kernels=["MatMulV2", "Add"], collectives=[])
    check_names(rules, kernels=[], collectives=[])  # nothing seen yet: a young job is not refused
    with pytest.raises(RuleError, match=r"no kernel 'MatMulV3'; did you mean 'MatMulV2'\?"):
        check_names(parse_rules(["kernel MatMulV3 p99 > 1ms"]), kernels=["MatMulV2", "Add"], collectives=[])


_names = st.sampled_from(["HcclAllReduce", "aclrtLaunchKernel", "LAUNCH", "runtime"])


@st.composite
def rules(draw):
    kind = draw(st.sampled_from(["api", "kernel", "collective", "skew", "dropped"]))
    stat = {"skew": "spread", "dropped": "dropped"}.get(kind) or draw(st.sampled_from(list(STATISTICS)))
    if kind in ("dropped", "skew"):
        name = "" if kind == "dropped" else "HcclAllReduce"
    elif kind == "api":
        name = draw(_names)
    else:
        name = draw(st.sampled_from(["MatMulV2", "add_f32", "HcclAllReduce"]))
    baseline = kind != "dropped" and draw(st.booleans())
    if baseline:
        threshold = draw(st.floats(0.01, 1e3, allow_nan=False))
    elif stat in TIME_STATISTICS or kind == "skew":
        threshold = float(draw(st.integers(0, 10**12)))
    else:
        threshold = float(draw(st.integers(0, 10**9)))
    scope = "job" if kind == "skew" else draw(st.sampled_from(["rank", "job"]))
    return Rule(
        kind,
        name,
        stat,
        draw(st.sampled_from(OPERATORS)),
        threshold,
        baseline,
        scope,
        draw(st.integers(1, 99)),
    )


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules())
def test_every_rule_writes_text_that_parses_back_to_itself(rule):
    assert parse_rule(rule.text()) == rule
