"""A real browser: JupyterLab started here on localhost, driven by headless Chromium (Debian's
/usr/bin/chromium through Playwright; Playwright downloads nothing). Each test writes a small
notebook (or copies the quickstart), runs it as a user would and asserts on what is on the
screen. Screenshots are kept under test-artifacts/ (gitignored), one per finding.

Every wait is for a condition on the page (a cell's prompt numbered, a text shown), with generous
timeouts: the machine running the tests may be loaded."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = os.environ.get("MSPTI_LENS_CHROMIUM", "/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
WAIT_MS = int(os.environ.get("MSPTI_LENS_BROWSER_WAIT_MS", 240_000))
# The notebook on screen (JupyterLab may keep other, hidden panels around).
NB = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"
IDLE = ".jp-Notebook-ExecutionIndicator[data-status='idle']"
ACCEPT = ".jp-Dialog .jp-mod-accept"  # a JupyterLab dialog's accept button
LENS_KERNEL = "mspti-lens-browser-test"
SETUP = [
    ("load", "%load_ext mspti_lens"),
    (
        "setup",
        "%config MsptiMagics.library = 'sim'\nfrom mspti_lens import sim\ns = sim.Simulator()\ns.reset()",
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab for the module, serving a temporary folder."""
    pytest.importorskip("jupyterlab")
    pytest.importorskip("playwright.sync_api")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no Chromium at {CHROMIUM} (make system-deps installs Debian's chromium)")
    folder = tmp_path_factory.mktemp("lab")
    port, token = _free_port(), secrets.token_hex(16)
    # the kernel `install-kernel --library sim` writes, in a data folder of this lab's own
    from mspti_lens import kernelspec
    from mspti_lens.backend import simulator_path

    kernelspec.install(simulator_path(), LENS_KERNEL, prefix=str(folder / ".jupyter-prefix"))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(folder / ".jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(folder / ".jupyter-runtime"),
        "JUPYTER_PATH": str(folder / ".jupyter-prefix" / "share" / "jupyter"),
    }
    # no "would you like to get notified about news?" toast over the cells
    settings = folder / ".jupyter-config" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    with open(folder / "lab.log", "w") as log:
        yield from _serve(folder, port, token, env, log)
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(folder / "lab.log", ARTIFACTS / "browser-jupyterlab.log")


def _serve(folder, port, token, env, log):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={folder}",
            "--ServerApp.open_browser=False",
            "--LabApp.news_url=None",
            "--LabApp.extension_manager=readonly",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        cwd=folder,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("JupyterLab did not start:\n" + (folder / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield url, token, folder
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def chromium(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, lab, request):
    """A fresh page at device pixel ratio 2 (so the figures' sharpness is checked). After a test
    that failed (or every test, with MSPTI_LENS_BROWSER_SHOTS=all), the page and each of its cells
    are saved as screenshots named after the test: what the user saw. Shooting them after every
    test cost about 15 CPU seconds of Chromium's."""
    ARTIFACTS.mkdir(exist_ok=True)
    context = chromium.new_context(viewport={"width": 1400, "height": 1600}, device_scale_factor=2)
    pg = context.new_page()
    pg.set_default_timeout(WAIT_MS)
    yield pg
    reports = [getattr(request.node, f"rep_{when}", None) for when in ("setup", "call")]
    if (
        any(r is not None and r.failed for r in reports)
        or os.environ.get("MSPTI_LENS_BROWSER_SHOTS") == "all"
    ):
        save_screen(pg, request.node.name.removeprefix("test_"))
    context.close()
    shutdown_kernels(lab)


def save_screen(pg, name: str) -> None:
    """The whole page (a dialog over the notebook shows only there) and each cell, as screenshots."""
    try:
        pg.screenshot(path=str(ARTIFACTS / f"browser-{name}-page.png"), timeout=10_000)
    except Exception:
        pass
    try:
        cells = pg.locator(f"{NB} .jp-Cell")
        for i in range(cells.count()):
            cells.nth(i).scroll_into_view_if_needed(timeout=5_000)
            cells.nth(i).screenshot(path=str(ARTIFACTS / f"browser-{name}-cell{i}.png"), timeout=10_000)
    except Exception:
        pass


def shutdown_kernels(lab) -> None:
    """Shut every kernel down (through the server's REST API), so the next test starts clean."""
    url, token, _ = lab
    with urllib.request.urlopen(f"{url}/api/kernels?token={token}", timeout=30) as r:
        kernels = json.load(r)
    for k in kernels:
        req = urllib.request.Request(f"{url}/api/kernels/{k['id']}?token={token}", method="DELETE")
        try:
            urllib.request.urlopen(req, timeout=60).close()
        except OSError:
            pass


def write_notebook(folder: Path, name: str, cells: list[tuple[str, str]]) -> str:
    nb = {
        "cells": [
            {
                "cell_type": "code",
                # a cell meant to fail does not stop "Run All" (JupyterLab honours this tag)
                "metadata": {"tags": [tag, "raises-exception"] if tag.startswith("bad-") else [tag]},
                "source": src,
                "outputs": [],
                "execution_count": None,
            }
            for tag, src in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (folder / f"{name}.ipynb").write_text(json.dumps(nb))
    return f"{name}.ipynb"


def accept_dialog(page) -> None:
    """Accept the dialog an action asks (a kernel restart's confirmation), once it shows."""
    page.locator(ACCEPT).first.click()


def accept_dialogs(page, wait_ms: int) -> None:
    """Accept a JupyterLab dialog if one shows up within ``wait_ms``, and say which it was."""
    button = page.locator(ACCEPT).first
    try:
        button.wait_for(timeout=wait_ms)
    except Exception:
        return
    title = page.locator(".jp-Dialog-header").first.inner_text(timeout=5_000)
    print(f"accepted a JupyterLab dialog: {title!r}")
    button.click()


def start_kernel(lab, file: str, kernel: str = "python3") -> str:
    """A kernel session for the notebook, through the server's REST API, before the notebook opens:
    JupyterLab connects to it and asks nothing. Left to itself, JupyterLab shows its kernel choice
    when the kernel specs have not loaded yet (a loaded machine), or not at all."""
    url, token, _ = lab
    body = json.dumps({"path": file, "name": file, "type": "notebook", "kernel": {"name": kernel}})
    req = urllib.request.Request(
        f"{url}/api/sessions?token={token}",
        data=body.encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["kernel"]["id"]


def open_notebook(page, lab, file: str, kernel_name: str = "python3") -> None:
    url, token, _ = lab
    kernel = start_kernel(lab, file, kernel_name)
    page.goto(f"{url}/lab/tree/{file}?reset&token={token}")  # reset: no tabs restored from before
    page.locator(NB).first.wait_for()
    wait_idle(page)
    with urllib.request.urlopen(f"{url}/api/sessions?token={token}", timeout=30) as r:
        kernels = [s["kernel"]["id"] for s in json.load(r) if s["path"] == file]
    assert kernels == [kernel], f"the notebook did not take the kernel started for it: {kernels}"
    # the page is connected to it (its websocket open) before anything runs
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        with urllib.request.urlopen(f"{url}/api/kernels/{kernel}?token={token}", timeout=30) as r:
            model = json.load(r)
        if model.get("connections", 0) >= 1 and model.get("execution_state") == "idle":
            break
        assert time.monotonic() < deadline, f"the page never connected to its kernel: {model}"
        time.sleep(0.1)


def wait_idle(page) -> None:
    page.wait_for_function(
        "(s) => [...document.querySelectorAll(s)].some(e => e.offsetParent !== null)", arg=IDLE
    )


def run_menu(page, item: str) -> None:
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name=item, exact=False).first.click()
    accept_dialogs(page, 2_000)  # none should ask anything; one that does is accepted and named


def cell(page, index: int):
    return page.locator(f"{NB} .jp-Cell").nth(index)


def wait_executed(page, upto: int) -> None:
    """Wait until code cells 0..upto show a numbered prompt (`[3]:`, not `[*]:` or `[ ]:`)."""
    page.wait_for_function(
        """([nb, n]) => { const p = [...document.querySelectorAll(nb + ' .jp-Cell .jp-InputPrompt')];
             return p.length > n && p.slice(0, n + 1).every(e => /\\[\\d+\\]/.test(e.innerText)); }""",
        arg=[NB, upto],
    )


def select(page, index: int) -> None:
    """Make a cell the active one (a click on its prompt, outside the editor)."""
    cell(page, index).locator(".jp-InputPrompt").first.click()
    page.wait_for_function(
        "([nb, i]) => document.querySelectorAll(nb + ' .jp-Cell')[i].classList.contains('jp-mod-active')",
        arg=[NB, index],
    )


def outputs(page, index: int):
    return cell(page, index).locator(".jp-OutputArea-child")


def output_text(page, index: int) -> str:
    return cell(page, index).locator(".jp-Cell-outputArea").inner_text()


def shot(page, index: int, name: str) -> None:
    c = cell(page, index)
    c.scroll_into_view_if_needed()
    c.screenshot(path=str(ARTIFACTS / f"browser-{name}.png"))


def stderr_boxes(page, index: int) -> int:
    return cell(page, index).locator("[data-mime-type='application/vnd.jupyter.stderr']").count()


# -- the magics as a user meets them ---------------------------------------------------------------
MAGICS = SETUP + [
    ("profile", '%%mspti\ns.run_workload("training", steps=40, ranks=8, threads=2, progress=True)'),
    ("summary", "%mspti summary"),
    ("save", "%mspti save cell.parquet"),
    ("diff", "%%mspti -d runtime --display none -o small\ns.run_workload('training', steps=10, ranks=8)"),
    ("diff-show", "%mspti diff small cell.parquet"),
    ("bad-domain", "%mspti start -d foo"),
    ("bad-callback", "%mspti start -c aclrtLaunchKernl"),
    ("bad-save-dir", "import os; os.makedirs('adir', exist_ok=True)\n%mspti save adir"),
    ("status", "%mspti status"),
    ("help", "%mspti?"),
]


def idx(cells, tag: str) -> int:
    return [t for t, _ in cells].index(tag)


def test_magics_do_what_the_last_output_promised(page, lab):
    """The magics' output on the screen: tables, plots, errors, one output per cell, the help. One
    notebook for all of them: each notebook a test opens costs a kernel and a JupyterLab page load."""
    _, _, folder = lab
    open_notebook(page, lab, write_notebook(folder, "magics", MAGICS))
    run_menu(page, "Run All Cells")
    wait_executed(page, len(MAGICS) - 1)
    i = lambda tag: idx(MAGICS, tag)  # noqa: E731

    # 8: the progress bar is a widget, never an error-pink stderr box; it counts steps (40, not 80)
    p = i("profile")
    shot(page, p, "14.7-8-profile-cell")
    assert stderr_boxes(page, p) == 0, output_text(page, p)
    prof = output_text(page, p)
    assert re.search(r"40\s*/\s*40 steps", prof), prof
    # 7: one output for the cell's snapshot: the progress line and the snapshot (table + figure)
    assert outputs(page, p).count() == 2, prof
    assert cell(page, p).locator(".jp-OutputArea-child img").count() == 1
    calls = int(re.search(r"([\d,]+) calls", prof).group(1).replace(",", ""))
    assert calls > 1000

    # 1: line commands act on what the cell just showed, and say so
    summ = output_text(page, i("summary"))
    assert f"{calls:,} calls" in summ and "%%mspti cell" in summ, summ
    saved = output_text(page, i("save"))
    assert f"saved {calls:,} calls" in saved, saved
    shot(page, i("save"), "14.1-save-after-cell")

    # 5: the diff is a table with units and signed percentages, without scientific notation
    diff = output_text(page, i("diff-show"))
    shot(page, i("diff-show"), "14.5-diff")
    table = cell(page, i("diff-show")).locator("table")
    assert table.count() == 1, diff
    assert re.search(r"[+-]\d+(\.\d)? ?%", diff), diff
    assert not re.search(r"\de[+-]\d", diff), diff
    assert re.search(r"\d (ns|µs|ms)", diff), diff
    assert "str" not in table.first.locator("thead").inner_text().split()
    assert '"' not in table.first.inner_text()

    # 4: short errors with a suggestion
    for tag, want in (
        ("bad-domain", "valid domains: runtime, hccl"),
        ("bad-callback", "did you mean aclrtLaunchKernel?"),
        ("bad-save-dir", "is a folder"),
    ):
        text = output_text(page, i(tag))
        assert want in text, text
        assert len(text) < 300 and "Traceback" not in text, text
    shot(page, i("bad-callback"), "14.4-error")

    # 9: status is short: enabled callbacks per domain
    st = output_text(page, i("status"))
    shot(page, i("status"), "14.9-status")
    assert "runtime: 36 of 36" in st and "hccl: 12 of 12" in st, st
    assert len(st.strip().splitlines()) <= 10, st

    # 9: `%mspti?` lists every subcommand and setting (JupyterLab shows the pager inline below the cell)
    from mspti_lens.notebook.magics import SUBCOMMANDS

    text = output_text(page, i("help"))
    shot(page, i("help"), "14.9-help")
    for name in SUBCOMMANDS:
        assert re.search(rf"^\s*%mspti {name}\b.*\S", text, re.M), (name, text)
    for setting in ("unit", "top", "refresh", "display", "library"):
        assert f"MsptiMagics.{setting}" in text, text


# -- the panel ---------------------------------------------------------------------------------------
PANEL = SETUP + [
    ("profile", "%%mspti --display none\ns.run_workload('training', steps=5, ranks=8)"),
    (
        "panel",
        "panel = %mspti panel\njob = s.start_workload('training', steps=100_000, ranks=8, seed=3)\npanel",
    ),
]


def picker(page):
    return page.locator(".mspti-lens-panel .mspti-lens-picker input[type='checkbox']")


def checked(page) -> int:
    return page.evaluate(
        "() => [...document.querySelectorAll('.mspti-lens-picker input[type=checkbox]')]"
        ".filter(e => e.checked).length"
    )


def test_panel_opens_recording_and_its_picker_toggles_one_callback(page, lab):
    """The panel records at once, a click toggles one callback, a
    partly enabled domain shows a mixed state, labels are whole, the figure is sharp; `%%mspti`
    without -d then traces runtime and HCCL; closing leaves a static final view."""
    _, _, folder = lab
    cells = PANEL + [
        ("cell-after", "%%mspti --display summary\ns.run_workload('training', steps=3, ranks=8)"),
        ("close", "job.cancel(); job.join()\n%mspti close"),
    ]
    open_notebook(page, lab, write_notebook(folder, "panel", cells))
    select(page, idx(cells, "cell-after"))
    run_menu(page, "Run All Above Selected Cell")  # the rest runs after the clicks below
    wait_executed(page, idx(cells, "panel"))
    panel = page.locator(".mspti-lens-panel").first
    panel.wait_for()
    # 2: recording, and the counts grow while the job runs
    page.wait_for_function(
        "() => { const s = document.querySelector('.mspti-lens-panel .mspti-lens-status');"
        " return s && s.innerText.includes('running') && /[1-9][\\d,]* calls/.test(s.innerText); }"
    )
    panel.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "browser-14.2-panel-opens-recording.png"), full_page=False)

    # 3: a plain click toggles exactly one callback
    boxes = picker(page)
    assert boxes.count() == 48
    before = checked(page)
    assert before == 48
    launch = page.locator(".mspti-lens-picker label", has_text="aclrtLaunchKernel").first
    launch.click()
    page.wait_for_function(
        f"() => [...document.querySelectorAll('.mspti-lens-picker input[type=checkbox]')]"
        f".filter(e => e.checked).length === {before - 1}"
    )
    runtime = panel.locator(".mspti-lens-domain", has_text="runtime").first
    page.wait_for_function(
        "() => [...document.querySelectorAll('.mspti-lens-domain')]"
        ".some(b => /runtime.*35 of 36/.test(b.innerText))"
    )
    assert "mod-active" not in (runtime.get_attribute("class") or "")
    # labels are whole: no option's text is cut
    cut = page.evaluate(
        "() => [...document.querySelectorAll('.mspti-lens-picker label')]"
        ".filter(l => l.scrollWidth > l.clientWidth + 1).map(l => l.innerText)"
    )
    assert cut == [], cut
    panel.screenshot(path=str(ARTIFACTS / "browser-14.3-picker-one-click-mixed-domain.png"))

    # 6: the panel's figure is rendered for the device pixel ratio, not stretched
    page.wait_for_function(
        "() => { const i = document.querySelector('.mspti-lens-panel img');"
        " return i && i.naturalWidth > 0 && i.clientWidth > 0; }"
    )
    ratio = page.evaluate(
        "() => { const i = document.querySelector('.mspti-lens-panel img');"
        " return i.naturalWidth / i.clientWidth / window.devicePixelRatio; }"
    )
    assert ratio >= 0.99, ratio

    # 3: %%mspti without -d traces runtime and HCCL whatever the panel picked
    select(page, idx(cells, "cell-after"))
    run_menu(page, "Run Selected Cell and All Below")
    wait_executed(page, len(cells) - 1)
    after = output_text(page, idx(cells, "cell-after"))
    shot(page, idx(cells, "cell-after"), "14.3-cell-after-panel")
    assert "HcclAllReduce" in after and "aclrtLaunchKernel" in after, after

    # 2: after close the panel's output is a static final view, not blank
    c = cell(page, idx(cells, "panel"))
    page.wait_for_function(
        f"() => {{ const c = document.querySelectorAll('{NB} .jp-Cell')[{idx(cells, 'panel')}];"
        " return c.querySelector('.mspti-lens-final img') && !c.querySelector('.mspti-lens-panel'); }"
    )
    final = c.locator(".mspti-lens-final").inner_text()
    assert "session closed" in final and "APIs by total time" in final, final
    shot(page, idx(cells, "panel"), "14.2-panel-final-view")


# -- interrupts -------------------------------------------------------------------
def test_interrupting_a_profiled_cell_stops_its_job(page, lab):
    """The kernel's stop button during a long `%%mspti` cell: the workload stops, and the next
    cell's window holds its own five calls only."""
    _, _, folder = lab
    cells = SETUP + [
        ("long", "%%mspti -d runtime\ns.run_workload('training', steps=10**6, ranks=8, progress=True)"),
        ("next", "%%mspti -d runtime --display summary\ns.call('aclrtMalloc', 1000, 5)"),
        ("again", "%%mspti -d runtime --display summary\ns.call('aclrtFree', 1000, 3)"),
    ]
    open_notebook(page, lab, write_notebook(folder, "interrupt", cells))
    run_menu(page, "Run All Cells")
    wait_executed(page, 1)
    # the long cell is running and its bar moves
    page.wait_for_function(
        f"() => {{ const c = document.querySelectorAll('{NB} .jp-Cell')[2];"
        " return /[1-9]\\d* ?\\/ ?1,?000,?000 steps/.test(c.innerText); }"
    )
    page.get_by_role("menuitem", name="Kernel", exact=True).click()
    page.get_by_role("menuitem", name="Interrupt Kernel", exact=False).first.click()
    sent = time.monotonic()
    page.wait_for_function(
        f"() => /interrupted after/.test(document.querySelectorAll('{NB} .jp-Cell')[2].innerText)"
    )
    wait_idle(page)
    print(f"interrupt -> the cell's line and an idle kernel on screen: {time.monotonic() - sent:.2f} s")
    shot(page, 2, "9.14-interrupted-cell")
    # one line in place of the bar: how far it got and what the window holds; no traceback
    text = output_text(page, 2)
    assert outputs(page, 2).count() == 1, text
    assert re.search(r"training workload interrupted after [\d,]+ of 1,000,000 steps; the window holds", text)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text and "UsageError" not in text, text
    select(page, 3)
    run_menu(page, "Run Selected Cell and All Below")
    wait_executed(page, 4)
    nxt, again = output_text(page, 3), output_text(page, 4)
    shot(page, 3, "9.14-next-cell")
    assert "5 calls" in nxt and "aclrtMalloc" in nxt and "aclrtLaunchKernel" not in nxt, nxt
    assert "3 calls" in again and "aclrtLaunchKernel" not in again, again


# -- the quickstart, as shipped ----------------------------------------------------------------------
def test_quickstart_panel_in_jupyterlab(page, lab):
    """The quickstart without its clean-up cell (so the session and the simulated job still run
    when the test clicks in the panel): toggling HCCL in the panel adds HCCL rows."""
    _, _, folder = lab
    nb = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())
    nb["cells"] = [c for c in nb["cells"] if "cleanup" not in c.get("metadata", {}).get("tags", [])]
    (folder / "quickstart.ipynb").write_text(json.dumps(nb))
    open_notebook(page, lab, "quickstart.ipynb")
    run_menu(page, "Run All Cells")
    panel = page.locator(".mspti-lens-panel").first
    panel.wait_for()
    table = ".mspti-lens-panel .mspti-lens-table"
    # the background job runs with only the runtime domain traced
    page.wait_for_function(
        f"() => {{ const t = document.querySelector('{table}');"
        " return t && t.innerText.includes('aclrtLaunchKernel'); }"
    )
    before = page.locator(table).first.inner_text()
    assert "SIMULATED" in panel.inner_text()
    assert "HcclAllReduce" not in before and "runtime" in before
    panel.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "browser-quickstart-before.png"), full_page=True)

    toggle = panel.locator(".mspti-lens-domain", has_text="hccl").first
    toggle.click()
    # the toggle reached the kernel's session: HCCL rows appear at the next refreshes
    page.wait_for_function(f"() => document.querySelector('{table}').innerText.includes('HcclAllReduce')")
    after = page.locator(table).first.inner_text()
    assert "HcclAllReduce" in after and "hccl" in after and "aclrtLaunchKernel" in after
    assert "mod-active" in (toggle.get_attribute("class") or "")
    panel.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "browser-quickstart.png"), full_page=True)
    panel.screenshot(path=str(ARTIFACTS / "browser-panel.png"))
    assert (ARTIFACTS / "browser-quickstart.png").stat().st_size > 10_000


# -- device time, whole jobs, exports, restarts ------------------------------------------------------
DEVICE = SETUP + [
    (
        "record",
        "import polars as pl\nfrom mspti_lens import Session, plots\n"
        "from mspti_lens.notebook.tables import Table\n"
        "with Session(library='sim', activity=['kernel', 'communication', 'memcpy']) as se:\n"
        "    s.run_workload('training', steps=3, ranks=8, seed=5)\n    snap = se.snapshot()",
    ),
    ("kernels", "Table(snap.kernels())"),
    ("launches", "Table(snap.launches())"),
    ("collectives", "Table(snap.collectives())"),
    ("events", "Table(snap.device_events(), top=8)"),
    ("table", "snap.table()"),
    ("diff", "%mspti diff snap snap"),
    ("split", "plots.launch_split(snap)"),
    ("plot-collectives", "plots.collectives(snap)"),
    (
        "cell-device",
        "%%mspti -a kernel --display summary\ns.run_workload('training', steps=1, ranks=2, seed=5)",
    ),
    ("bad-second-session", "Session(library='sim')"),
]


def sharpness(page, index: int) -> list[float]:
    """naturalWidth / shown width / devicePixelRatio of every image of a cell (1: sharp)."""
    return page.evaluate(
        f"""() => [...document.querySelectorAll('{NB} .jp-Cell')[{index}].querySelectorAll('img')]
              .map(i => i.naturalWidth / i.clientWidth / window.devicePixelRatio)"""
    )


def test_device_tables_and_plots_read_like_the_magics(page, lab):
    _, _, folder = lab
    open_notebook(page, lab, write_notebook(folder, "device", DEVICE))
    run_menu(page, "Run All Cells")
    wait_executed(page, len(DEVICE) - 1)
    i = lambda tag: idx(DEVICE, tag)  # noqa: E731
    for tag in ("kernels", "launches", "collectives", "events", "table", "diff"):
        shot(page, i(tag), f"views.1-{tag}")
        text = output_text(page, i(tag))
        table = cell(page, i(tag)).locator("table").first
        assert '"' not in text and not re.search(r"\d[eE][+-]?\d", text), (tag, text)
        head = table.locator("thead").inner_text().split()
        assert not {"str", "u64", "f64", "i64"} & set(head), (tag, head)
        assert re.search(r"\d (ns|µs|ms|s)\b", text), (tag, text)
        # every number sits right-aligned in its own cell
        aligned = page.evaluate(
            f"""() => [...document.querySelectorAll('{NB} .jp-Cell')[{i(tag)}].querySelectorAll('td')]
                  .filter(td => /^[+−-]?[\\d,.]+( [a-zA-Zµ/%]+)?$/.test(td.innerText.trim()))
                  .map(td => getComputedStyle(td).textAlign)"""
        )
        assert aligned and set(aligned) == {"right"}, (tag, set(aligned))
    assert "rows (top=0 for all)" in output_text(page, i("events"))  # a cut table says so
    assert "−0.0" not in output_text(page, i("diff"))
    for tag in ("split", "plot-collectives"):
        shot(page, i(tag), f"views.4-{tag}")
        ratios = sharpness(page, i(tag))
        assert ratios and min(ratios) >= 0.99, (tag, ratios)  # plots called directly: sharp at 2x
    # a cell that asks for activity shows device time under its host table
    text = output_text(page, i("cell-device"))
    shot(page, i("cell-device"), "30.2-cell-device-time")
    host, device = text.split("Device time")
    assert "aclrtLaunchKernel" in host and "launch split per launch function" in device, text
    assert "MatMulV2" in device and re.search(r"MatMulV2\s+KERNEL_AICORE\s+\d+\s+[\d.]+ %", device), device
    # a second Session while the magics' one is open names the way out the user has
    text = output_text(page, i("bad-second-session"))
    assert "`%mspti close`" in text and "session.close()" not in text, text


def test_a_recorded_run_in_the_panel(page, lab):
    _, _, folder = lab
    cells = [
        (
            "record",
            "import subprocess, sys\n"
            "cmd = [sys.executable, '-m', 'mspti_lens', 'record', '--out', 'run', '--interval', '0.3',"
            " '--library', 'sim', '--clock', 'mspti', '--', sys.executable, '-m', 'mspti_lens.sim', 'job',"
            " '--steps', '40', '--step-delay', '0.05', '--ranks', '4', '--hosts', '2', '--slow-rank', '2']\n"
            "job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "import time, os\n"
            "while not any(os.scandir('run')) if os.path.isdir('run') else True:\n    time.sleep(0.1)",
        ),
        ("load", "%load_ext mspti_lens"),
        ("panel", "%mspti panel --run run"),
    ]
    open_notebook(page, lab, write_notebook(folder, "runpanel", cells))
    run_menu(page, "Run All Cells")
    wait_executed(page, len(cells) - 1)
    sel = f"document.querySelectorAll('{NB} .jp-Cell')[2]"
    page.wait_for_function(f"() => /every rank has finished/.test({sel}.innerText)")
    page.wait_for_function(f"() => {sel}.querySelector('img') && {sel}.querySelector('img').naturalWidth > 0")
    text = output_text(page, 2)
    shot(page, 2, "views.5-run-panel")
    assert "slow rank: 2 on sim-host-1" in text, text
    assert "4 ranks reporting on 2 host(s)" in text and "HcclAllReduce" in text, text
    assert "running · 0 calls" not in text  # nothing of the notebook is recorded
    # the rank status is a table of separate cells, not "sim-host-0 0"
    row = page.evaluate(
        f"() => [...{sel}.querySelectorAll('tr')].map(r => [...r.querySelectorAll('td')]"
        ".map(td => td.innerText.trim())).find(r => r.includes('sim-host-1'))"
    )
    assert row and ("2" in row or "3" in row), row
    gaps = page.evaluate(
        f"() => [...{sel}.querySelectorAll('td')].slice(0, 8)"
        ".map(td => parseFloat(getComputedStyle(td).paddingLeft))"
    )
    assert min(gaps) >= 4, gaps
    assert min(sharpness(page, 2)) >= 0.99


def test_the_exports_notebook_runs_to_the_end(page, lab):
    _, _, folder = lab
    shutil.copy(ROOT / "notebooks" / "exports.ipynb", folder / "exports.ipynb")
    open_notebook(page, lab, "exports.ipynb")
    run_menu(page, "Run All Cells")
    # the last cell's output on screen (JupyterLab follows Run All), then the kernel idle
    page.wait_for_function(
        f"() => document.querySelector('{NB}').innerText"
        ".includes('# TYPE mspti_lens_call_duration_nanoseconds histogram')"
    )
    wait_idle(page)
    page.screenshot(path=str(ARTIFACTS / "browser-views.2-exports.png"), full_page=True)
    texts, stderr = [], []
    cells = page.locator(f"{NB} .jp-Cell")
    for k in range(cells.count()):  # JupyterLab renders only the cells near the view: visit each
        cells.nth(k).scroll_into_view_if_needed()
        area = cells.nth(k).locator(".jp-Cell-outputArea")
        texts.append(area.inner_text() if area.count() else "")
        boxes = cells.nth(k).locator("[data-mime-type='application/vnd.jupyter.stderr']")
        stderr += [boxes.nth(j).inner_text() for j in range(boxes.count())]
    body = "\n".join(texts)
    # as nbclient's check: no error output, no traceback; log lines on stderr (HTA's) are fine
    assert not [e for e in stderr if "Traceback" in e or "Error" in e], stderr
    assert "Traceback" not in body and "skipped" not in body, body[-2000:]
    assert "% from mspti-lens" in body and "calls in all ==" in body
    # each export read back by its format's own package: the outputs of this run, saved by
    # JupyterLab (tests/notebook/test_export_notebook.py checks them; no second kernel runs it)
    pytest.importorskip("prometheus_client")
    pytest.importorskip("opentelemetry.proto")
    pytest.importorskip("hdrh")
    from test_export_notebook import check_exports

    check_exports(saved_notebook(page, lab, "exports.ipynb", last_tag="cli"))


def saved_notebook(page, lab, file: str, last_tag: str):
    """The notebook on screen, saved (File > Save Notebook) and read back through the server, once
    the file holds the outputs of its cell tagged ``last_tag``."""
    import nbformat

    url, token, _ = lab
    page.get_by_role("menuitem", name="File", exact=True).click()
    page.get_by_role("menuitem", name="Save Notebook", exact=False).first.click()
    accept_dialogs(page, 2_000)
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        with urllib.request.urlopen(f"{url}/api/contents/{file}?content=1&token={token}", timeout=30) as r:
            nb = nbformat.from_dict(json.load(r)["content"])
        last = [c for c in nb.cells if last_tag in c.metadata.get("tags", [])]
        if last and last[0].get("outputs"):
            return nbformat.reads(json.dumps(nb), as_version=4)  # multi-line strings joined, as read
        assert time.monotonic() < deadline, f"{file} was not saved with its outputs"
        time.sleep(0.2)


def test_a_panel_says_it_is_disconnected_after_a_kernel_restart(page, lab):
    _, _, folder = lab
    cells = SETUP + [("panel", "panel = %mspti panel\npanel")]
    open_notebook(page, lab, write_notebook(folder, "restart", cells))
    run_menu(page, "Run All Cells")
    wait_executed(page, len(cells) - 1)
    page.locator(".mspti-lens-panel .mspti-lens-status").first.wait_for()
    badge = ".mspti-lens-panel .mspti-lens-disconnected"
    page.wait_for_selector(badge, state="attached")
    visible = (
        f"() => {{ const b = document.querySelector('{badge}');"
        " return b && getComputedStyle(b).visibility === 'visible'; }"
    )
    assert not page.evaluate(visible)  # alive: the beats keep it hidden
    page.get_by_role("menuitem", name="Kernel", exact=True).click()
    page.get_by_role("menuitem", name="Restart Kernel…", exact=False).first.click()
    accept_dialog(page)
    wait_idle(page)
    page.wait_for_function(visible)
    shot(page, 2, "views.8-disconnected-after-restart")
    assert "disconnected" in output_text(page, 2)
    running = page.evaluate(
        "() => [...document.querySelectorAll('.mspti-lens-panel .mspti-lens-running')]"
        ".map(e => e.getBoundingClientRect().width)"
    )
    assert running and max(running) == 0, running  # no "● running" of a dead kernel
    # whole labels: no button or toggle of the panel is cut ("re…", "runtime · 36 …")
    cut = page.evaluate(
        "() => [...document.querySelectorAll('.mspti-lens-panel button')]"
        ".filter(b => b.scrollWidth > b.clientWidth + 1).map(b => b.innerText)"
    )
    assert cut == [], cut


# -- the run views cut nothing; the launcher shows the kernel's logo ------------------------------------
WIDE = [
    (
        "imports",
        "import polars as pl\nfrom mspti_lens.notebook.tables import Table\nfrom mspti_lens import plots",
    ),
    (
        "summary",
        "from mspti_lens import Session, sim\ns = sim.Simulator(); s.reset()\n"
        "with Session(library='sim') as session:\n"
        "    s.run_workload('training', steps=4, ranks=8)\n    snap = session.snapshot()\n"
        "Table(snap.summary())   # a run's summary has these columns",
    ),
    (
        "heatmap",
        # 300 windows of 8 ranks, as a live 300-step run has: binned, shown at its own size
        "class LongRun:\n"
        "    def timeline(self):\n"
        "        rows = [('h', r, w, 1000.0 + w * 0.5, 1000.5 + w * 0.5, 'hccl', 'HcclAllReduce', 4,\n"
        "                 4_000_000 // (2 if r == 6 else 1), 1, 2) for r in range(8) for w in range(300)]\n"
        "        t = pl.DataFrame(rows, orient='row', schema=['host', 'rank', 'window', 'window_start',\n"
        "            'window_end', 'domain', 'name', 'num_calls', 'total_ns', 'min_ns', 'max_ns'])\n"
        "        return t.with_columns((pl.col('total_ns') / pl.col('num_calls')).alias('avg_ns'))\n"
        "    def files(self):\n"
        "        return pl.DataFrame({'interval_s': [0.5], 'simulated': [True]})\n"
        "    def slow_ranks(self):\n"
        "        return pl.DataFrame({'host': ['h'], 'rank': [6], 'slow_affect_count': [300]})\n"
        "plots.rank_heatmap(LongRun(), 'HcclAllReduce')",
    ),
]


def test_wide_tables_scroll_in_their_box_and_a_long_runs_heatmap_is_not_scaled_down(page, lab):
    _, _, folder = lab
    page.set_viewport_size({"width": 1000, "height": 1400})  # a laptop's notebook: the summary is wider
    open_notebook(page, lab, write_notebook(folder, "wide", WIDE))
    run_menu(page, "Run All Cells")
    wait_executed(page, len(WIDE) - 1)
    i = idx(WIDE, "summary")
    shot(page, i, "views.9-wide-summary")
    # every column reachable: the table scrolls in its own box (a scrollbar), and scrolled to
    # its end the last column (max, source) lies inside the box, not cut at the output's edge
    seen = page.evaluate(
        f"""() => {{ const c = document.querySelectorAll('{NB} .jp-Cell')[{i}];
              const t = c.querySelector('.mspti-lens-table'); const box = t.closest('.mspti-lens-table-box');
              if (!box) return {{box: false}};
              box.scrollLeft = box.scrollWidth;
              const last = [...t.querySelectorAll('th')].pop().getBoundingClientRect();
              const b = box.getBoundingClientRect();
              return {{box: true, overflow: getComputedStyle(box).overflowX,
                       wider: box.scrollWidth > box.clientWidth,
                       lastInside: last.right <= b.right + 1 && last.left >= b.left - 1,
                       boxInside: b.right <= c.getBoundingClientRect().right + 1}}; }}"""
    )
    assert seen == {"box": True, "overflow": "auto", "wider": True, "lastInside": True, "boxInside": True}, (
        seen
    )
    # the heat map of 300 intervals: at its CSS size (labels stay 8 pt) and sharp at 2x
    j = idx(WIDE, "heatmap")
    shot(page, j, "views.10-heatmap-300-intervals")
    ratios = sharpness(page, j)
    assert ratios and min(ratios) >= 0.99, ratios


def test_the_launcher_tile_of_the_mspti_lens_kernel_has_its_logo(page, lab):
    url, token, _ = lab
    page.goto(f"{url}/lab?reset&token={token}")
    card = page.locator(".jp-LauncherCard", has_text="mspti-lens").first
    card.wait_for()
    card.scroll_into_view_if_needed()
    card.screenshot(path=str(ARTIFACTS / "browser-views.11-launcher-logo.png"))
    img = card.locator(".jp-LauncherCard-icon img")
    assert img.count() == 1, card.inner_html()
    img.first.wait_for()
    page.wait_for_function("(e) => e.complete && e.naturalWidth > 0", arg=img.first.element_handle())
    assert "logo" in (img.first.get_attribute("src") or "")
    # and the kernel of that tile is what install-kernel promised: the banner says preloaded
    _, _, folder = lab
    cells = [("load", "%load_ext mspti_lens")]
    open_notebook(page, lab, write_notebook(folder, "lens-kernel", cells), kernel_name=LENS_KERNEL)
    run_menu(page, "Run All Cells")
    wait_executed(page, 0)
    text = output_text(page, 0)
    assert "backend SIMULATED" in text and "the bundled simulator" in text, text
    assert "(preloaded: callbacks fire)" in text, text
