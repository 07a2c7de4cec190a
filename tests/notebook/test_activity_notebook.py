"""Activity kinds from the notebook side: `%%mspti -a kind`, `%mspti start -a kind` and
the control panel's device toggles, against the simulator."""

from __future__ import annotations

import pytest

pytest.importorskip("IPython")

from IPython.core.error import UsageError
from IPython.terminal.interactiveshell import TerminalInteractiveShell
from IPython.testing.globalipapp import start_ipython
from IPython.utils.capture import capture_output

pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")


@pytest.fixture
def ip(sim):
    shell = start_ipython() or TerminalInteractiveShell.instance()
    shell.user_ns["s"] = sim
    with capture_output():
        shell.run_line_magic("load_ext", "mspti_lens")
    shell.run_line_magic("config", "MsptiMagics.library = 'sim'")
    yield shell
    shell.run_line_magic("unload_ext", "mspti_lens")
    shell.config.MsptiMagics.pop("library", None) if "MsptiMagics" in shell.config else None
    assert not sim.subscribed


def test_the_cell_magic_collects_the_kinds_it_names_for_the_cell_on_the_simulator(ip):
    with capture_output():
        snap = ip.run_cell_magic(
            "mspti",
            "-a kernel -a marker --display none -o cell_snap",
            "s.run_workload('training', steps=2, seed=1)",
        )
        snap = ip.user_ns["cell_snap"]
    assert snap.kernels()["num_calls"].sum() > 0
    # The magic's session samples the join: every kernel is joined or counted unsampled.
    c = snap.activity.counters
    assert snap.launches()["kernel_num"].sum() + c["kernels_unsampled"] == snap.kernels()["num_calls"].sum()
    assert c["unjoined_kernels"] == c["kernels_pending"] == 0
    session = (
        ip.user_ns.get("_mspti_session")
        or next(m for m in ip.configurables if type(m).__name__ == "MsptiMagics").session
    )
    assert session.activity == []  # the kinds were for the cell only


def test_the_line_magic_starts_with_activity_and_bad_kinds_name_the_valid_ones_on_the_simulator(ip):
    with capture_output():
        ip.run_line_magic("mspti", "start -a kernel,communication")
    m = next(m for m in ip.configurables if type(m).__name__ == "MsptiMagics")
    assert sorted(m.session.activity) == ["communication", "kernel"]
    with pytest.raises(UsageError, match="valid kinds are kernel, api"):
        ip.run_cell_magic("mspti", "-a kernels", "pass")


def test_the_panel_toggles_activity_kinds_on_the_simulator(session, sim):
    pytest.importorskip("ipywidgets")
    from mspti_lens.notebook.panel import Panel
    from mspti_lens.notebook.widget import ControlPanel

    p = Panel(session)
    assert "kernel" in p.activity_kinds and not p.activity_enabled("kernel")
    p.start()
    p.set_activity("kernel", True)
    sim.run_workload("training", steps=1, seed=2)
    assert p.activity_enabled("kernel") and len(session.snapshot().kernels()) > 0
    with pytest.raises(ValueError, match="valid kinds"):
        p.set_activity("gpu", True)
    ui = ControlPanel(session, interval=0.05, auto_refresh=False)
    assert ui.activity["kernel"].value is True
    ui.activity["marker"].value = True
    assert "marker" in session.activity and not ui.errors
