"""A real browser: JupyterLab started here on localhost, driven by headless Chromium (Debian's
/usr/bin/chromium through Playwright; Playwright downloads nothing). It opens the quickstart
notebook, runs it, toggles the HCCL domain in the control panel and sees the table change.
The screenshots are kept under test-artifacts/."""

from __future__ import annotations

import json
import os
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
ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab serving a copy of the quickstart without its clean-up cell (so the session and
    the simulated job are still running when the test clicks in the panel)."""
    pytest.importorskip("jupyterlab")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no Chromium at {CHROMIUM} (make system-deps installs Debian's chromium)")
    nb = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())
    nb["cells"] = [c for c in nb["cells"] if "cleanup" not in c.get("metadata", {}).get("tags", [])]
    (tmp_path / "quickstart.ipynb").write_text(json.dumps(nb))
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / ".jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / ".jupyter-runtime"),
    }
    with open(tmp_path / "lab.log", "w") as log:
        yield from _serve(tmp_path, port, token, env, log)


def _serve(tmp_path, port, token, env, log):
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
            f"--ServerApp.root_dir={tmp_path}",
            "--ServerApp.open_browser=False",
            "--LabApp.news_url=None",
            "--LabApp.extension_manager=readonly",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("JupyterLab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield url, token, tmp_path
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def accept_dialogs(page, wait_ms: int = 8_000) -> None:
    """Accept a JupyterLab dialog (kernel choice) if one shows up within ``wait_ms``."""
    button = page.locator(".jp-Dialog .jp-mod-accept").first
    try:
        button.wait_for(timeout=wait_ms)
    except Exception:
        return
    button.click()


def table_text(page) -> str:
    return page.locator(".mspti-lens-panel .mspti-lens-table").first.inner_text()


def test_quickstart_panel_in_jupyterlab(lab):
    sync_api = pytest.importorskip("playwright.sync_api")
    url, token, folder = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1700})
        try:
            page.goto(f"{url}/lab/tree/quickstart.ipynb?token={token}")
            page.locator(".jp-Notebook").first.wait_for(timeout=120_000)
            accept_dialogs(page)  # JupyterLab may ask which kernel to start: the default one
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first.wait_for(
                timeout=120_000
            )
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=False).first.click()
            accept_dialogs(page)

            panel = page.locator(".mspti-lens-panel").first
            panel.wait_for(timeout=int(os.environ.get("MSPTI_LENS_BROWSER_WAIT_MS", 180_000)))
            # the background job runs with only the runtime domain traced
            page.wait_for_function(
                "() => { const t = document.querySelector('.mspti-lens-panel .mspti-lens-table');"
                " return t && t.innerText.includes('aclrtLaunchKernel'); }",
                timeout=120_000,
            )
            before = table_text(page)
            assert "SIMULATED" in panel.inner_text()
            assert "HcclAllReduce" not in before and "runtime" in before
            panel.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "browser-quickstart-before.png"), full_page=True)

            toggle = panel.locator("button", has_text="hccl").first
            toggle.click()
            # the toggle reached the kernel's session: HCCL rows appear at the next refreshes
            page.wait_for_function(
                "() => document.querySelector('.mspti-lens-panel .mspti-lens-table').innerText"
                ".includes('HcclAllReduce')",
                timeout=120_000,
            )
            after = table_text(page)
            assert "HcclAllReduce" in after and "hccl" in after and "aclrtLaunchKernel" in after
            assert "mod-active" in (toggle.get_attribute("class") or "")
            panel.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "browser-quickstart.png"), full_page=True)
            panel.screenshot(path=str(ARTIFACTS / "browser-panel.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "browser-failure.png"), full_page=True)
            shutil.copy(folder / "lab.log", ARTIFACTS / "browser-jupyterlab.log")
            raise
        finally:
            browser.close()
    assert (ARTIFACTS / "browser-quickstart.png").stat().st_size > 10_000
    shutil.copy(folder / "lab.log", ARTIFACTS / "browser-jupyterlab.log")
