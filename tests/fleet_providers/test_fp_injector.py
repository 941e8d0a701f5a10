"""Preemption injector: capacity replay, each cloud's notice delivery, kill after grace."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from checkpointing.events import read_events
from fleet.emulation.injector import (
    CLOUD_GRACE_SECONDS,
    CapacitySchedule,
    PreemptionInjector,
    TimeScale,
)
from fleet.market.traces import Trace

HERE = Path(__file__).parent
STANDIN = HERE / "standin_trainer.py"


def _trace(zone: str, bits: list[int], gap: float = 60.0) -> Trace:
    return Trace(zone=zone, accelerator="V100", count=1, gap_seconds=gap,
                 available=np.asarray(bits, dtype=np.int32))


def test_schedule_replays_trace_ticks_and_wraps():
    sched = CapacitySchedule([_trace("us-east-1a", [1, 1, 0, 0, 1]), _trace("us-west-2b", [1] * 5)])
    assert sched.is_up("us-east-1a", 0) and sched.is_up("us-east-1a", 119.9)
    assert not sched.is_up("us-east-1a", 120.0) and not sched.is_up("us-east-1a", 179)
    assert sched.is_up("us-east-1a", 240) and sched.is_up("us-east-1a", 300)  # wraps at 300 s
    assert sched.up_zones(130) == ["us-west-2b"]
    assert sched.next_change("us-east-1a", 10) == 120.0
    assert sched.next_change("us-east-1a", 130) == 240.0
    assert sched.next_change("us-west-2b", 10) is None
    # the past only (the live policy's prior history): ticks before t, never after
    assert sched.past("us-east-1a", 250.0, 10).tolist() == [True, True, False, False]
    assert sched.past("us-east-1a", 130.0, 1).tolist() == [True]
    assert sched.past("us-east-1a", 0.0, 10).tolist() == []
    assert sched.region_of("us-east-1a") == "us-east-1"
    with pytest.raises(ValueError, match="not in the capacity schedule"):
        sched.is_up("eu-west-1a", 0)


def test_rotating_schedule_fails_zones_one_after_another():
    sched = CapacitySchedule.rotating(["a1", "b1", "c1"], up_hours=1.0, down_hours=1.0)
    # at every instant at least one zone has capacity, and each zone fails once a cycle
    for h in np.arange(0, 6, 0.1):
        assert sched.up_zones(h * 3600)
    for k, z in enumerate(sched.zones):  # zone k is down during hour k+1 of the 3 h cycle
        assert sched.is_up(z, (k + 0.5) * 3600) and not sched.is_up(z, (k + 1.5) * 3600)
        assert sched.is_up(z, (k + 3.5) * 3600) and not sched.is_up(z, (k + 4.5) * 3600)


def test_time_scale_converts_and_rejects_nonsense():
    ts = TimeScale(wall_seconds_per_trace_hour=10)
    assert ts.factor == 360
    assert ts.to_wall(3600) == pytest.approx(10)
    assert ts.to_trace(1) == pytest.approx(360)
    with pytest.raises(ValueError, match="wall_seconds_per_trace_hour"):
        TimeScale(0)


def test_synthetic_default_market_is_deterministic_per_seed():
    a = CapacitySchedule.synthetic(n_zones=3, hours=24, seed=7)
    b = CapacitySchedule.synthetic(n_zones=3, hours=24, seed=7)
    assert a.zones == b.zones and len(a.zones) == 3
    for z in a.zones:
        assert np.array_equal(a.traces[z].available, b.traces[z].available)


def _run_with_notice(tmp_path: Path, cloud: str, delivery: tuple[str, ...] | None,
                     script_args: list[str], grace: float = 3.0):
    """Start the stand-in under the injector, preempt it now, return (rc, events, node, inj)."""
    sched = CapacitySchedule([_trace("us-east-1a", [1] * 10)])
    inj = PreemptionInjector(sched, TimeScale(10), cloud=cloud, delivery=delivery,
                             grace_seconds=grace)
    inj.start()
    events_file = tmp_path / f"{cloud}.jsonl"
    try:
        node = inj.open_node("n0", "us-east-1a")
        env = dict(os.environ, SPOTFLEET_EVENTS_FILE=str(events_file), SPOTFLEET_NODE_ID="n0",
                   SPOTFLEET_CHECKPOINT_URI=str(tmp_path / "ckpt"),
                   SPOTFLEET_NOTICE_SOURCES=node.notice_sources)
        proc = subprocess.Popen([sys.executable, str(STANDIN), *script_args], env=env,
                                start_new_session=True)
        inj.attach("n0", proc.pid)
        deadline = time.time() + 30
        while not any(e.kind == "start" for e in read_events(events_file)):
            assert time.time() < deadline, "stand-in did not start"
            assert proc.poll() is None, "stand-in died before starting"
            time.sleep(0.05)
        time.sleep(0.3)  # let the pollers make a first (negative) request
        kill_at = inj.preempt_now("n0")
        rc = proc.wait(timeout=30)
        events = read_events(events_file)
        endpoint = next((ch.server for ch in node.channels if hasattr(ch, "server")), None)
        requests = list(endpoint.requests) if endpoint is not None else []
        return rc, events, kill_at, requests
    finally:
        inj.stop()


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_cloud_metadata_notice_reaches_the_process(tmp_path, cloud):
    rc, events, kill_at, requests = _run_with_notice(tmp_path, cloud, ("endpoint",),
                                                     ["--notice-only"])
    notices = [e for e in events if e.kind == "notice"]
    assert rc == 75
    assert [n.data["source"] for n in notices] == [cloud]
    if cloud in ("aws", "azure"):  # these protocols carry the kill time (1 s resolution)
        assert notices[0].data["deadline_unix"] == pytest.approx(kill_at, abs=1.5)
    # the process spoke the cloud's protocol to its own endpoint
    paths = {p for _, p, _ in requests}
    expected = {"aws": "/latest/meta-data/spot/instance-action",
                "gcp": "/computeMetadata/v1/instance/preempted",
                "azure": "/metadata/scheduledevents"}[cloud]
    assert expected in paths
    if cloud == "aws":
        assert ("PUT", "/latest/api/token", 200) in requests  # IMDSv2 token first


def test_signal_notice_reaches_the_process(tmp_path):
    rc, events, _, requests = _run_with_notice(tmp_path, "signal", None, ["--notice-only"])
    assert rc == 75
    assert [e.data["source"] for e in events if e.kind == "notice"] == ["signal"]
    assert requests == []


def test_gcp_default_delivery_is_endpoint_and_sigterm(tmp_path):
    inj = PreemptionInjector(CapacitySchedule([_trace("z1a", [1])]), cloud="gcp")
    node = inj.open_node("n", "z1a")
    try:
        assert inj.grace_seconds == CLOUD_GRACE_SECONDS["gcp"] == 30.0
        kinds = [s.split(":")[0] for s in node.notice_sources.split(",")]
        assert kinds == ["gcp", "signal"]
    finally:
        inj.close_node("n")


def test_process_that_ignores_the_notice_is_killed_after_grace(tmp_path):
    t0 = time.time()
    rc, events, kill_at, _ = _run_with_notice(
        tmp_path, "aws", None, ["--ignore-notice", "--steps", "100000", "--step-sleep", "0.01"],
        grace=1.0)
    assert rc == -9  # SIGKILL
    assert not any(e.kind == "exit" for e in events)
    assert kill_at > t0


def test_capacity_loss_preempts_only_nodes_in_that_zone(tmp_path):
    # zone a loses capacity after 2 trace ticks (2 * 60 s = 120 trace s = 0.33 wall s)
    sched = CapacitySchedule([_trace("a1a", [1, 1, 0, 0]), _trace("b1a", [1, 1, 1, 1])])
    noticed: list[str] = []
    inj = PreemptionInjector(sched, TimeScale(wall_seconds_per_trace_hour=10), cloud="signal",
                             grace_seconds=0.5, on_notice=lambda nid, dl: noticed.append(nid))
    procs = {}
    inj.start()
    try:
        for nid, zone in (("na", "a1a"), ("nb", "b1a")):
            inj.open_node(nid, zone)
            procs[nid] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                                          start_new_session=True)
            inj.attach(nid, procs[nid].pid)
            inj.mark_ready(nid)
        assert procs["na"].wait(timeout=20) != 0  # SIGTERM, then SIGKILL
        assert noticed == ["na"]
        assert procs["nb"].poll() is None
    finally:
        inj.stop()
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
