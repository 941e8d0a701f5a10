"""MUST SHOW: the local fleet (3 emulated zones) trains the example through injected
preemptions to completion: notice -> emergency save -> relaunch in another zone ->
exact resume, recorded in node sessions that the statistics accept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpointing.events import read_events
from fleet.emulation.injector import CapacitySchedule, TimeScale
from fleet.providers.base import StageSpec
from fleet.providers.local import LocalFleetConfig, LocalFleetProvider, is_provider_event
from fleet.providers.local.narrate import sessions_table
from fleet.stats.preemption import session_stats

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_example.py"
ZONES = ["us-east-1a", "us-east-1b", "us-west-2a"]
TRAIN = ["--steps", "360", "--seed", "3", "--model", "mlp", "--size", "tiny",
         "--periodic-every", "100"]


def _start_uninterrupted(tmp: Path) -> tuple[subprocess.Popen, Path]:
    """The reference run (never interrupted), started in the background."""
    ev = tmp / "ref-events.jsonl"
    env = dict(os.environ, SPOTFLEET_EVENTS_FILE=str(ev), SPOTFLEET_NODE_ID="ref")
    for k in ("SPOTFLEET_STATS_FILE", "SPOTFLEET_NOTICE_SOURCES"):
        env.pop(k, None)
    proc = subprocess.Popen([sys.executable, str(EXAMPLE), *TRAIN, "--checkpoint-uri",
                             str(tmp / "ref")], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    return proc, ev


def _uninterrupted_sha(proc: subprocess.Popen, ev: Path) -> str:
    assert proc.wait(timeout=120) == 0
    return [e for e in read_events(ev) if e.kind == "exit"][-1].data["state_sha256"]


@pytest.mark.slow
def test_local_fleet_three_zones_survives_injected_preemptions_with_exact_resume(tmp_path):
    # Zones fail one after another (each is down 1 emulated hour in 3; 1 h = 1.5 s wall,
    # shorter than a process start). A node gets 3 s of work after it is ready, then the
    # loss its zone saw is delivered; 360 steps of >= 35 ms need > 12.6 s, so the job
    # cannot finish without >= 3 preemptions.
    ref = _start_uninterrupted(tmp_path)
    cfg = LocalFleetConfig(
        # replayed from 24 h in (whole 3 h cycles): the fleet policy starts from that past
        schedule=CapacitySchedule(CapacitySchedule.rotating(ZONES, up_hours=1.0, down_hours=1.0)
                                  .traces.values(), offset_seconds=24 * 3600.0),
        time_scale=TimeScale(wall_seconds_per_trace_hour=1.5), cloud="aws", grace_seconds=4.0,
        min_uptime_seconds=3.0, workdir=tmp_path / "fleet")
    spec = StageSpec(name="mustshow", command=[sys.executable, str(EXAMPLE), *TRAIN,
                                               "--step-sleep", "0.035"],
                     checkpoint_uri=str(tmp_path / "ckpt"), zones=tuple(ZONES), max_relaunches=12,
                     # SkyPilot-style recovery: stay until preempted (spotfleet would see the
                     # drill's period in its past and move off each zone before its outage)
                     policy="failover")
    seen = []
    result = LocalFleetProvider(cfg).run_stage(spec, attempt=1, on_event=seen.append)

    print(sessions_table(result.sessions))  # shown with -s / on failure
    assert result.completed and result.final_step == 360
    assert seen == result.events  # every event went to on_event, in order
    sessions = result.sessions
    preempted = [s for s in sessions if s.end_reason == "preempted"]
    assert len(preempted) >= 3, [s.end_reason for s in sessions]
    assert sessions[-1].end_reason == "completed"
    assert all(s.spot and s.zone in ZONES and s.price_per_hour == pytest.approx(0.918)
               for s in sessions)

    by_node: dict[str, list] = {}
    for e in result.events:
        if not is_provider_event(e):
            by_node.setdefault(e.node_id, []).append(e)
    for prev, nxt in zip(sessions, sessions[1:], strict=False):
        assert prev.end_reason == "preempted"
        ev = by_node[prev.node_id]
        kinds = [e.kind for e in ev]
        # the process heard the notice, made an emergency save, and left with "preempted"
        assert "notice" in kinds
        emergency = [e.data["step"] for e in ev
                     if e.kind == "save_committed" and e.data["kind"] == "emergency"]
        assert emergency, f"{prev.node_id} made no emergency save: {kinds}"
        assert kinds.index("notice") < kinds.index("save_committed", kinds.index("notice"))
        assert [e.data["reason"] for e in ev if e.kind == "exit"] == ["preempted"]
        # relaunched where the policy's launch tries found capacity (the preempted zone may
        # be back by then: a probe, as in fleet-sim), resumed exactly at the emergency save
        start = next(e for e in by_node[nxt.node_id] if e.kind == "start")
        assert start.data["resumed_from_step"] == emergency[-1] == prev.last_checkpoint_step
        assert nxt.first_step == emergency[-1]
        assert prev.notice_at is not None and prev.notice_at <= prev.ended_at

    provider_kinds = [e.kind for e in result.events if is_provider_event(e)]
    assert provider_kinds.count("relaunch") == len(sessions) - 1
    assert provider_kinds.count("notice_sent") >= len(preempted)
    relaunches = [e for e in result.events if is_provider_event(e) and e.kind == "relaunch"]
    assert all(e.data["reason"].startswith("policy failover: spot in ") for e in relaunches)
    assert len({s.zone for s in sessions}) >= 2  # the failover did move between zones

    # bit-identical to a run that was never interrupted
    assert result.info["state_sha256"] == _uninterrupted_sha(*ref)

    # the statistics accept the sessions: per-zone preemptions and restart latency
    stats = session_stats(sessions)
    assert {s.zone for s in stats} == {s.zone for s in sessions}
    assert sum(s.preemptions for s in stats) == len(preempted)
    assert all(s.restart_latency_s is not None and s.restart_latency_s > 0 for s in stats)
    # sessions come back in market seconds: their cost needs no time-scale factor
    assert result.info["cost_usd"] == pytest.approx(
        sum(s.price_per_hour * (s.ended_at - s.launched_at) for s in sessions) / 3600)
