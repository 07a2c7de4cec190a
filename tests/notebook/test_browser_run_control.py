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
        controls = panel.locator(".mspti-lens-run-controls")
        # Trace the runtime domain only: HCCL off in the picker, then start.
        controls.get_by_role("button", name="hccl", exact=True).click()
        controls.locator(".mspti-lens-run-start button, button.mspti-lens-run-start").first.click()
        page.wait_for_function(f"() => /applied by every live process/.test({sel}.innerText)")
        # the live distributions of what it turned on (the body, not the picker's labels)
        body = f"{sel}.querySelector('.mspti-lens-verdict').parentElement"
        page.wait_for_function(f"() => /aclrtLaunchKernel/.test({body}.innerText)")
        text = page.evaluate(f"() => {body}.innerText")
        assert "HcclAllReduce" not in text, text  # what it did not turn on is not counted
        assert "profiling is on in 2 process(es)" in text and "% of a core" in text, text
        # the processes' own measured cost, or the benchmark's estimate until one has measured
        assert "measured by" in text or "an estimate" in text, text
        controls.locator(".mspti-lens-run-stop button, button.mspti-lens-run-stop").first.click()
        page.wait_for_function(
            f"() => /generation 3: applied by every live process/.test({sel}.innerText)"
            f" && /profiling is off: it costs nothing/.test({body}.innerText)"
        )
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
