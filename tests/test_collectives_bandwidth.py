"""nccl-tests' bandwidth (bytes, algbw, busbw) per message-size bucket on the simulator's virtual
clock: known counts, types and ranks give bytes exactly, and algbw/busbw are bytes over the
recorded device time times nccl-tests' bus factor; bad input gets no bandwidth."""

from __future__ import annotations

import polars as pl
import pytest
from _sim_activity import bind
from polars.testing import assert_frame_equal

from mspti_lens import Session, Snapshot, plots
from mspti_lens.collectives import (
    NO_HCCL_NOTE,
    WORLD_GROUP,
    bus_factor,
    by_size,
    format_gbps,
    note,
    op_of,
    ranks_from_records,
    ranks_of,
    size_bucket,
)
from mspti_lens.export.otlp import to_otlp
from mspti_lens.export.prometheus import to_prometheus

pytestmark = pytest.mark.filterwarnings("ignore::mspti_lens.errors.SimulatedBackendWarning")
FP16, FP32 = 3, 4


def test_bus_factors_and_names_are_nccl_tests():
    assert bus_factor("all_reduce", 8) == 2 * 7 / 8
    assert (
        bus_factor("all_gather", 4) == bus_factor("reduce_scatter", 4) == bus_factor("all_to_all", 4) == 0.75
    )
    assert bus_factor("broadcast", None) == bus_factor("send", 8) == 1.0
    assert bus_factor("all_reduce", None) is None
    assert [op_of(n) for n in ("HcclAllReduce", "hcom_allGather_", "hcom_receive_", "Weird")] == [
        "all_reduce",
        "all_gather",
        "recv",
        "Weird",
    ]
    assert [size_bucket(b) for b in (None, 0, 1, 1023, 1024, 1025)] == [None, None, 1, 512, 1024, 1024]


def test_by_size_is_exact_on_the_virtual_clock(sim, tmp_path):
    sim.reset()
    L = bind(sim.lib)
    sim.set_clock("virtual")
    L.msimSetDeviceModel(2000, 0, 1000)
    calls = [
        ("HcclAllReduce", 1 << 18, FP32),
        ("HcclAllGather", 1 << 10, FP16),
        ("HcclBroadcast", 1 << 20, FP16),
    ]
    try:
        with Session(
            library="sim", enable=["LAUNCH"], clock="mspti", activity=["communication", "hccl"]
        ) as s:
            L.msimSetThreadStream(0, 9)
            L.msimSetCommName(b"tp0")
            for op, count, dt in calls * 3:
                assert L.msimCallCollective(sim.api(op), 30_000, count, dt, 8) == 0
            snap = s.snapshot()
    finally:
        L.msimSetCommName(None)
        L.msimSetThreadStream(0, 0)
    ev = snap.device_events().filter(pl.col("kind") == "communication")
    t = snap.collectives(by="size", ranks=8)
    assert t["op"].to_list() == ["all_gather", "all_reduce", "broadcast"]
    assert t["data_type"].to_list() == ["fp16", "fp32", "fp16"]
    want_bytes = {"all_reduce": (1 << 18) * 4, "all_gather": (1 << 10) * 2 * 8, "broadcast": (1 << 20) * 2}
    factor = {"all_reduce": 2 * 7 / 8, "all_gather": 7 / 8, "broadcast": 1.0}
    for r in t.iter_rows(named=True):
        name = {
            "all_reduce": "hcom_allReduce_",
            "all_gather": "hcom_allGather_",
            "broadcast": "hcom_broadcast_",
        }
        d = ev.filter(pl.col("name") == name[r["op"]])["duration_ns"]
        assert r["num_calls"] == 3 and r["bytes"] == want_bytes[r["op"]] and r["ranks"] == 8
        assert r["med_ns"] == float(d.median())  # type: ignore[arg-type]
        assert r["algbw_gbps"] == pytest.approx(want_bytes[r["op"]] / d.median())  # type: ignore[operator]
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * factor[r["op"]])
        assert r["algbw_p10_gbps"] <= r["algbw_gbps"] <= r["algbw_p90_gbps"]
    # HCCL's own bandWidth (hccl_calculator.cpp: x rankSize for all-gather) agrees with algbw.
    for r in t.iter_rows(named=True):
        assert r["hccl_bw_gbps"] == pytest.approx(r["algbw_gbps"], rel=1e-9), r["op"]
    # Not given, the rank count is HCCL's rankSize: its all-gather bytes over COMMUNICATION's.
    assert ranks_from_records(ev_all := snap.device_events()) == {"tp0": 8}
    assert_frame_equal(snap.collectives(by="size"), t)
    assert by_size(ev_all.filter(pl.col("kind") == "communication"))["ranks"].is_null().all()
    c = snap.collectives()
    assert {"algbw_gbps", "busbw_gbps", "bytes"} <= set(c.columns) and c.height == 6
    with pytest.raises(ValueError, match="'size' or None"):
        snap.collectives(by="sizes")
    # The data type survives a file, and the series are exported from the same table.
    path = tmp_path / "snap.parquet"
    snap.save(path)
    back = Snapshot.load(path)
    assert_frame_equal(back.collectives(by="size", ranks=8).drop("source"), t.drop("source"))
    prom = to_prometheus(snap)
    bc = t.filter(pl.col("op") == "broadcast").row(0, named=True)
    line = (
        f'mspti_lens_collective_busbw_gbps{{group="tp0",op="broadcast",data_type="fp16",bytes="{bc["bytes"]}"'
    )
    assert any(x.startswith(line) and float(x.split()[-1]) == bc["busbw_gbps"] for x in prom.splitlines())
    assert isinstance(to_prometheus(snap, "protobuf"), bytes)
    metrics = to_otlp(snap)["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
    busbw = next(m for m in metrics if m["name"] == "mspti_lens.collective.busbw")["gauge"]["dataPoints"]
    assert sorted(p["asDouble"] for p in busbw) == sorted(
        snap.collectives(by="size").filter(pl.col("busbw_gbps").is_not_null())["busbw_gbps"].to_list()
    )
    # A window without collectives gets one sentence, in the table's place and in the plot.
    with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["kernel"]) as s:
        none = s.snapshot()
    assert none.collectives(by="size").height == 0
    assert plots.bandwidth(none).axes[0].texts[0].get_text().replace("\n", " ") == NO_HCCL_NOTE
    fig = plots.bandwidth(snap, ranks=8)
    assert {ln.get_label() for ln in fig.axes[0].get_lines()} == {
        "all_gather fp16 [tp0]", "all_reduce fp32 [tp0]", "broadcast fp16 [tp0]"
    }  # fmt: skip


def test_unknown_type_or_zero_duration_gets_no_bandwidth_and_no_hccl_is_one_sentence():
    ev = pl.DataFrame(
        {
            "kind": ["communication", "communication", "hccl"],
            "name": ["hcom_allReduce_", "hcom_allReduce_", "HcclAllReduce"],
            "group": ["g"] * 3,
            "duration_ns": [0, 100, 100],
            "bytes": [1024, 0, None],
            "data_type": ["fp16", "unknown:99", None],
        },
        schema_overrides={"bytes": pl.UInt64, "duration_ns": pl.Int64},
    )
    t = by_size(ev, ranks=4)
    assert t["algbw_gbps"].is_null().all() and t["busbw_gbps"].is_null().all()
    assert format_gbps(None) == "—" and format_gbps(float("inf")) == "—" and format_gbps(1.5) == "1.50"
    assert note(ev.clear()) == NO_HCCL_NOTE and note(ev) is None
    with pytest.raises(ValueError, match="rank count"):
        by_size(ev, ranks=0)


def test_without_hccl_records_the_rank_count_is_the_world_size_or_unknown(sim, monkeypatch):
    """COMMUNICATION records alone do not say the rank count: HCCL's world group has the job's
    world size (the window's, else the launcher's variables); another communicator's is unknown,
    and its all-reduce busbw and all-gather bytes are null; broadcast needs no rank count."""
    sim.reset()
    L = bind(sim.lib)
    sim.set_clock("virtual")
    L.msimSetDeviceModel(2000, 0, 1000)
    for var in (
        "WORLD_SIZE",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_SIZE",
        "MV2_COMM_WORLD_SIZE",
        "RANK_SIZE",
    ):
        monkeypatch.delenv(var, raising=False)
    try:
        with Session(library="sim", enable=["LAUNCH"], clock="mspti", activity=["communication"]) as s:
            L.msimSetThreadStream(0, 9)
            for group in (WORLD_GROUP, "tp0"):
                L.msimSetCommName(group.encode())
                for op, count, dt in [("HcclAllReduce", 1 << 18, FP32), ("HcclAllGather", 1 << 10, FP16),
                                      ("HcclBroadcast", 1 << 20, FP16)]:  # fmt: skip
                    assert L.msimCallCollective(sim.api(op), 30_000, count, dt, 4) == 0
            snap = s.snapshot()
    finally:
        L.msimSetCommName(None)
        L.msimSetThreadStream(0, 0)
    assert ranks_of(snap) == {}
    unknown = snap.collectives(by="size")
    assert unknown.filter(pl.col("op") != "broadcast")["busbw_gbps"].is_null().all()
    assert unknown["ranks"].is_null().all()
    assert unknown.filter(pl.col("op") == "broadcast")["busbw_gbps"].is_not_null().all()
    assert format_gbps(unknown.filter(pl.col("op") == "all_reduce")["busbw_gbps"][0]) == "—"
    # The launcher says the world size: the world group's rank count, nothing else's.
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert ranks_of(snap) == {WORLD_GROUP: 4}
    snap = snap.with_meta(world_size=4)  # as a recorded window says it
    monkeypatch.delenv("WORLD_SIZE")
    assert ranks_of(snap) == {WORLD_GROUP: 4}
    t = snap.collectives(by="size", ranks=ranks_of(snap))
    world = t.filter(pl.col("group") == WORLD_GROUP)
    assert (world["ranks"] == 4).all()
    ar = world.filter(pl.col("op") == "all_reduce").row(0, named=True)
    assert ar["busbw_gbps"] == pytest.approx(ar["algbw_gbps"] * 2 * 3 / 4)
    ag = world.filter(pl.col("op") == "all_gather").row(0, named=True)
    assert ag["bytes"] == (1 << 10) * 2 * 4
    assert t.filter(pl.col("group") == "tp0", pl.col("op") != "broadcast")["busbw_gbps"].is_null().all()
    # The exports carry busbw for every op whose rank count is known, and for no other.
    busbw = [x for x in to_prometheus(snap).splitlines() if x.startswith("mspti_lens_collective_busbw_gbps{")]
    have = {(x.split('group="')[1].split('"')[0], x.split('op="')[1].split('"')[0]) for x in busbw}
    assert have == {(WORLD_GROUP, "all_reduce"), (WORLD_GROUP, "all_gather"), (WORLD_GROUP, "broadcast"),
                    ("tp0", "broadcast")}  # fmt: skip
    metrics = to_otlp(snap)["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
    points = next(m for m in metrics if m["name"] == "mspti_lens.collective.busbw")["gauge"]["dataPoints"]
    assert len(points) == 4
