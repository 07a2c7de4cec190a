"""Kernel > Interrupt during a `%%mspti` cell, in a real Jupyter kernel (jupyter_client): the
execute reply comes back promptly, as an error (so Run All stops there), and the cell shows one
line, in place of its progress bar: how far the workload got and what the window holds. No
traceback through the simulator driver. Evidence-driven: the interrupt is sent once the cell's
progress bar is on screen; the bound on the reply is generous (the machine may be loaded) and the
measured time is printed."""

from __future__ import annotations

import queue
import re
import time

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")
pytest.importorskip("ipywidgets")

BOUND_S = 30.0  # generous: the target is about 1 s; measured values are printed


def collect(kc, msg_id: str, until, timeout: float = 120.0) -> list[dict]:
    """iopub messages of one request until ``until(messages)`` holds."""
    out: list[dict] = []
    end = time.monotonic() + timeout
    while not until(out):
        left = end - time.monotonic()
        assert left > 0, [m["msg_type"] for m in out]
        try:
            m = kc.get_iopub_msg(timeout=min(left, 1.0))
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") == msg_id:
            out.append(m)
    return out


def reply_to(kc, msg_id: str, timeout: float) -> dict:
    end = time.monotonic() + timeout
    while True:
        m = kc.get_shell_msg(timeout=max(end - time.monotonic(), 0.01))
        if m["parent_header"].get("msg_id") == msg_id:
            return m


def run(kc, code: str) -> tuple[dict, list[dict]]:
    msg_id = kc.execute(code)
    msgs = collect(
        kc,
        msg_id,
        lambda ms: any(m["msg_type"] == "status" and m["content"]["execution_state"] == "idle" for m in ms),
    )
    return reply_to(kc, msg_id, 60), msgs


def test_interrupting_a_profiled_cell_in_a_kernel_returns_promptly_with_one_line():
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name="python3")
    try:
        reply, _ = run(
            kc,
            "%load_ext mspti_lens\n%config MsptiMagics.library = 'sim'\n"
            "from mspti_lens import sim\ns = sim.Simulator()\ns.reset()",
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        msg_id = kc.execute("%%mspti\ns.run_workload('training', steps=10**6, ranks=8, threads=2)")
        # the progress bar appears by itself (a job longer than about a second): interrupt then
        shown = collect(
            kc,
            msg_id,
            lambda ms: any(
                m["msg_type"] == "display_data"
                and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
                for m in ms
            ),
        )
        sent = time.monotonic()
        km.interrupt_kernel()
        reply = reply_to(kc, msg_id, BOUND_S)
        took = time.monotonic() - sent
        print(f"interrupt -> execute reply: {took:.2f} s")
        rest = collect(
            kc,
            msg_id,
            lambda ms: any(
                m["msg_type"] == "status" and m["content"]["execution_state"] == "idle" for m in ms
            ),
        )
        assert took < BOUND_S
        assert reply["content"]["status"] == "error"  # Run All stops at the interrupted cell
        assert reply["content"]["ename"] == "CellInterrupted"
        msgs = shown + rest
        assert not [m for m in msgs if m["msg_type"] == "error"], "a traceback was shown"
        streams = "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")
        assert "Traceback" not in streams and "driver.py" not in streams, streams
        # one output: the progress bar's display, replaced by the line
        displays = [m for m in msgs if m["msg_type"] == "display_data"]
        assert len(displays) == 1, [m["content"]["data"].keys() for m in displays]
        final = [m for m in msgs if m["msg_type"] == "update_display_data"][-1]["content"]["data"][
            "text/plain"
        ]
        assert re.fullmatch(
            r"training workload interrupted after [\d,]+ of 1,000,000 steps; the window holds the "
            r"[\d,]+ calls made until then \(\d+ APIs\): `mspti_interrupted`",
            final,
        ), final
        # the variable it names holds that cell's window
        calls = re.search(r"the ([\d,]+) calls", final).group(1)
        reply, msgs = run(kc, "print(f'{mspti_interrupted.total_calls:,}')")
        assert calls in "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")
        # the kernel is usable at once, and the next cell counts its own calls only
        reply, msgs = run(kc, "%%mspti --display summary -o nxt\ns.call('aclrtMalloc', 1000, 5)")
        assert reply["content"]["status"] == "ok"
        reply, msgs = run(kc, "print(dict(zip(*nxt.summary().select('name', 'num_calls'))))")
        text = "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")
        assert "{'aclrtMalloc': 5}" in text, text
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
