"""The run panel steers a running job, in JupyterLab driven by headless Chromium (the fixtures of
test_browser.py): a job recorded with `record --paused`, `%mspti run DIR`, then the panel's
enable picker, start and stop buttons. Every wait is for a condition on the page."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from test_browser import (  # noqa: F401 - lab, chromium and page are the fixtures used here
    NB,
    chromium,
    lab,
    open_notebook,
    output_text,
    page,
    run_menu,
    wait_executed,
    write_notebook,
)

from mspti_lens.__main__ import main as control_main

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_run_panel_starts_and_stops_profiling_in_a_paused_job(page, lab):  # noqa: F811
    _, _, folder = lab
    cells = [
        (
            "record",
            "import subprocess, sys, time\n"
            "from mspti_lens.runs import control\n"
            "cmd = [sys.executable, '-m', 'mspti_lens', 'record', '--paused', '--out', 'ctl-run',"
            " '--interval', '0.3', '--library', 'sim', '--activity', 'none', '--', sys.executable, '-m',"
            " 'mspti_lens.sim', 'job', '--steps', '100000', '--step-delay', '0.02', '--ranks', '2']\n"
            "job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,"
            " start_new_session=True)\n"
            "open('ctl-job.pid', 'w').write(str(job.pid))\n"
            "ranked = lambda: [p for p in control.read_processes('ctl-run') if p['rank_source'] != 'pid']\n"
            "while len(ranked()) < 2:\n    time.sleep(0.1)",
        ),
        ("load", "%load_ext mspti_lens"),
        ("panel", "%mspti run ctl-run"),
    ]
    try:
        open_notebook(page, lab, write_notebook(folder, "runcontrol", cells))
        run_menu(page, "Run All Cells")
        wait_executed(page, len(cells) - 1)
        panel = page.locator(f"{NB} .jp-Cell").nth(2)
        sel = f"document.querySelectorAll('{NB} .jp-Cell')[2]"
        page.wait_for_function(f"() => /paused/.test({sel}.innerText)")
        assert "profiling is off: it costs nothing" in output_text(page, 2)
        state = f"{sel}.querySelector('.mspti-lens-run-state')"
        said = page.evaluate(f"() => {state}.innerText")  # one truthful state line
        assert "paused: profiling is off in every live rank (2)" in said and "running" not in said, said
        controls = panel.locator(".mspti-lens-run-controls")
        message = f"{sel}.querySelector('.mspti-lens-run-message')"
        ranks = controls.get_by_placeholder("ranks: all, 0-3,7, host=NAME")
        duration = controls.get_by_placeholder("until stopped")
        start = controls.locator(".mspti-lens-run-start button, button.mspti-lens-run-start").first
        stop = controls.locator(".mspti-lens-run-stop button, button.mspti-lens-run-stop").first
        hccl = controls.get_by_role("button", name="hccl", exact=True)
        runtime = controls.get_by_role("button", name="runtime", exact=True)

        def refused(why: str) -> str:
            start.click()
            page.wait_for_function(f"() => {message}.innerText.includes({why!r})")
            return page.evaluate(f"() => {message}.innerText")

        def two_refreshes() -> None:  # the state line's time moves on twice
            for _ in range(2):
                now = page.evaluate(f"() => {state}.innerText")
                page.wait_for_function(f"() => {state}.innerText !== {now!r}")

        # What the command line refuses the panel refuses, and says it until the next press.
        ranks.fill("abc")
        error = refused("'abc' is not a rank, a range or a host")
        two_refreshes()
        assert page.evaluate(f"() => {message}.innerText") == error
        ranks.fill("7")
        assert "names 7: no live rank of the run" in refused("names 7")
        ranks.fill("")
        duration.fill("-5")
        assert "-5" in refused("--for must be a finite number of seconds > 0")
        duration.fill("")
        hccl.click()
        runtime.click()  # nothing picked
        refused("--enable names nothing")
        # Trace the runtime domain only, then start.
        runtime.click()
        start.click()
        page.wait_for_function(f"() => /applied by every live process/.test({sel}.innerText)")
        # the live distributions of what it turned on (the body, not the picker's labels)
        body = f"{sel}.querySelector('.mspti-lens-verdict').parentElement"
        page.wait_for_function(f"() => /aclrtLaunchKernel/.test({body}.innerText)")
        text = page.evaluate(f"() => {body}.innerText")
        assert "HcclAllReduce" not in text, text  # what it did not turn on is not counted
        assert "profiling is on in 2 process(es)" in text and "% of a core" in text, text
        # the processes' own measured cost, or the benchmark's estimate until one has measured
        assert "measured by" in text or "an estimate" in text, text
        assert "● profiling on in 2 of 2 live ranks" in page.evaluate(f"() => {state}.innerText")
        caption = f"{sel}.querySelector('.mspti-lens-run-distributions-caption')"
        page.wait_for_function(f"() => {caption} && /aclrtLaunchKernel/.test({caption}.innerText)")
        assert "latency of what is on now" in page.evaluate(f"() => {caption}.innerText")
        images = f"[...{sel}.querySelectorAll('.mspti-lens-run-distributions img')]"
        page.wait_for_function(
            f"() => {images}.length > 0 && {images}.every(i => i.complete && i.clientWidth)"
        )
        ratios = page.evaluate(f"() => {images}.map(i => i.naturalWidth / i.clientWidth / devicePixelRatio)")
        assert min(ratios) >= 0.99, ratios  # sharp at 2x, not shrunk

        # [ticked callbacks' labels, runtime toggle on, hccl toggle on]
        picker = (
            f"(() => {{ const c = {sel}.querySelector('.mspti-lens-run-controls');"
            " const on = n => [...c.querySelectorAll('button')].find(x => x.innerText.trim() === n)"
            ".classList.contains('mod-active');"
            " return [[...c.querySelectorAll('.mspti-lens-picker input:checked')]"
            ".map(i => i.closest('.widget-checkbox').innerText.trim()), on('runtime'), on('hccl')]; })()"
        )

        def picked() -> tuple[list[str], bool, bool]:
            return page.evaluate(f"() => {picker}")

        boxes, runtime_on, hccl_on = picked()
        assert runtime_on and not hccl_on and any("aclrtLaunchKernel" in b for b in boxes), boxes
        assert not any("HcclAllReduce" in b for b in boxes), boxes
        # A start from the command line: the picker and the distributions follow it.
        # (the command line's main, run in this process: no interpreter to start)
        assert control_main(["control", str(Path(folder, "ctl-run")), "start", "--enable", "hccl"]) == 0
        page.wait_for_function(f"() => /HcclAllReduce/.test({caption}.innerText)")
        page.wait_for_function(f"() => {{ const p = {picker}; return p[2] && !p[1]; }}")
        boxes, _, _ = picked()
        assert any("HcclAllReduce" in b for b in boxes) and not any(
            "aclrtLaunchKernel" in b for b in boxes
        ), boxes
        stop.click()
        page.wait_for_function(
            f"() => /generation 4: applied by every live process/.test({sel}.innerText)"
            f" && /profiling is off: it costs nothing/.test({body}.innerText)"
        )
        page.wait_for_function(f"() => /paused: profiling is off/.test({state}.innerText)")
        rows = page.evaluate(
            f"() => [...{sel}.querySelectorAll('tr')].map(r => [...r.querySelectorAll('td')]"
            ".map(td => td.innerText.trim())).filter(r => r.includes('paused'))"
        )
        assert len(rows) == 2 and all("off" in r for r in rows), rows  # the per-rank state column
    finally:
        pid = Path(folder, "ctl-job.pid")
        if pid.exists():
            try:
                os.killpg(int(pid.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
