"""Local fleet provider behaviour with a fast torch-free stand-in trainer."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from checkpointing.events import Event
from fleet.emulation.injector import CapacitySchedule, TimeScale
from fleet.providers.base import AttemptFailed, StageSpec
from fleet.providers.local import (
    EventTail,
    LocalFleetConfig,
    LocalFleetProvider,
    is_provider_event,
)

STANDIN = str(Path(__file__).parent / "standin_trainer.py")
ZONES = ["us-east-1a", "us-east-1b", "us-west-2a"]


def _with_past(schedule: CapacitySchedule, hours: float = 24.0) -> CapacitySchedule:
    """The same market replayed from ``hours`` in (a whole number of rotating cycles): the
    fleet policy starts from that past, as it starts from the statistics DB in a pipeline."""
    return CapacitySchedule(schedule.traces.values(), offset_seconds=hours * 3600.0)


def _cfg(tmp_path: Path, **kw) -> LocalFleetConfig:
    base = dict(schedule=_with_past(CapacitySchedule.rotating(ZONES)), time_scale=TimeScale(1.0),
                cloud="signal", grace_seconds=1.0, min_uptime_seconds=0.5,
                allocation_seconds=0.05, preparation_seconds=0.05, workdir=tmp_path / "w")
    base.update(kw)
    return LocalFleetConfig(**base)


def _spec(tmp_path: Path, steps: int = 100, sleep: float = 0.02, **kw) -> StageSpec:
    return StageSpec(name=kw.pop("name", "st"),
                     command=[sys.executable, STANDIN, "--steps", str(steps), "--step-sleep",
                              str(sleep)], checkpoint_uri=str(tmp_path / "ckpt"), **kw)


def test_event_tail_reads_only_complete_lines(tmp_path):
    f = tmp_path / "e.jsonl"
    tail = EventTail(f)
    assert tail.poll() == []
    e1 = Event(kind="progress", time=1.0, node_id="n", data={"step": 1})
    line = e1.to_json() + "\n"
    f.write_text(line + line[:10])
    assert [e.data["step"] for e in tail.poll()] == [1]
    with f.open("a") as fh:
        fh.write(line[10:] + "not json\n")
    assert [e.data["step"] for e in tail.poll()] == [1]


# --------------------------------------------------------------------------- provider runs

def test_preempted_stage_resumes_in_other_zones_and_completes(tmp_path):
    prov = LocalFleetProvider(_cfg(tmp_path))
    res = prov.run_stage(_spec(tmp_path, steps=250), attempt=2)
    assert res.completed and res.final_step == 250 and res.attempt == 2
    pre = [s for s in res.sessions if s.end_reason == "preempted"]
    assert pre, "the rotating market preempts every ~1 s of work"
    for a, b in zip(res.sessions, res.sessions[1:], strict=False):
        assert b.first_step == a.last_checkpoint_step  # every relaunch resumes exactly
    assert len({s.zone for s in res.sessions}) >= 2  # the policy moved on to other zones
    assert [s.node_id for s in prov.sessions()] == [s.node_id for s in res.sessions]
    stats = (tmp_path / "w" / "st" / "attempt-2" / "stats.json").read_text()
    assert "restart_seconds" in stats and "mttp_seconds" in stats


def test_deadline_pressure_switches_to_on_demand(tmp_path):
    cfg = _cfg(tmp_path, min_uptime_seconds=0.8)
    # 300 steps x 20 ms = 6 wall s of work (6 emulated hours at 1 wall s per emulated
    # hour), deadline 7 emulated hours: the policy's deadline safety net (the one
    # fleet-sim evaluates) moves the rest of the job to on-demand
    res = LocalFleetProvider(cfg).run_stage(_spec(tmp_path, steps=300, deadline_seconds=7 * 3600.0))
    assert res.completed
    last = res.sessions[-1]
    assert not last.spot and last.end_reason == "completed"
    assert last.price_per_hour == pytest.approx(3.06)  # p3.2xlarge on-demand
    assert any(s.spot for s in res.sessions[:-1])
    od = [e for e in res.events if is_provider_event(e) and e.kind == "relaunch"
          and not e.data["spot"]]
    assert od and "policy spotfleet: on-demand" in od[0].data["reason"]


def test_use_spot_false_runs_on_demand_without_preemptions(tmp_path):
    res = LocalFleetProvider(_cfg(tmp_path)).run_stage(_spec(tmp_path, steps=60, use_spot=False))
    assert res.completed and [s.spot for s in res.sessions] == [False]
    assert res.sessions[0].end_reason == "completed"


def test_crash_without_notice_raises_attempt_failed_with_log_tail(tmp_path):
    spec = StageSpec(name="boom", command=[sys.executable, "-c",
                                           "import sys; print('kaboom: bad config'); sys.exit(3)"],
                     checkpoint_uri=str(tmp_path / "ckpt"))
    prov = LocalFleetProvider(_cfg(tmp_path))
    with pytest.raises(AttemptFailed, match=r"(?s)exited with code 3.*kaboom: bad config"):
        prov.run_stage(spec)
    assert [s.end_reason for s in prov.sessions()] == ["failed"]


def test_too_many_preemptions_raise_attempt_failed(tmp_path):
    prov = LocalFleetProvider(_cfg(tmp_path))
    with pytest.raises(AttemptFailed, match="max_relaunches=1"):
        prov.run_stage(_spec(tmp_path, steps=100000, max_relaunches=1))
    assert [s.end_reason for s in prov.sessions()] == ["preempted", "preempted"]


def test_cancel_stops_the_stage(tmp_path):
    prov = LocalFleetProvider(_cfg(tmp_path, schedule=_with_past(CapacitySchedule.rotating(ZONES, up_hours=100), 300.0)))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            prov.run_stage(_spec(tmp_path, steps=100000, name="long"))
        except AttemptFailed as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1.5)
    prov.cancel("long")
    t.join(timeout=20)
    assert not t.is_alive()
    assert errors and "cancelled" in str(errors[0])
    assert [s.end_reason for s in prov.sessions()] == ["cancelled"]


def test_preempt_now_injects_one_preemption_and_the_stage_resumes(tmp_path):
    prov = LocalFleetProvider(_cfg(tmp_path, schedule=_with_past(CapacitySchedule.rotating(ZONES, up_hours=100), 300.0)))
    assert prov.preempt_now("inj", "no-such-node") is False  # stage not running: no-op
    hits: list[bool] = []

    def on_event(ev: Event) -> None:
        if ev.kind == "progress" and ev.node_id and not hits and ev.data.get("step", 0) >= 30:
            hits.append(True)
            node = ev.node_id
            threading.Thread(target=lambda: hits.append(prov.preempt_now("inj", node))).start()

    res = prov.run_stage(_spec(tmp_path, steps=150, name="inj"), on_event=on_event)
    assert hits == [True, True]
    assert res.completed and res.final_step == 150
    # the stable market preempts nothing by itself: exactly the one injected preemption
    assert [s.end_reason for s in res.sessions] == ["preempted", "completed"]
    # marked as the injection it was: billed like a preemption, not the market's statistics
    assert [s.injected for s in res.sessions] == [True, False]
    assert res.sessions[1].first_step == res.sessions[0].last_checkpoint_step
    assert prov.preempt_now("inj", res.sessions[1].node_id) is False  # stage over


def test_multi_node_stage_needs_an_elastic_script(tmp_path):
    """num_nodes > 1 is an elastic data-parallel stage (docs/elastic.md; its must-show
    tests are in tests/elastic/): a script whose nodes would not cooperate is refused."""
    with pytest.raises(ValueError, match="ElasticSession"):
        LocalFleetProvider(_cfg(tmp_path)).run_stage(_spec(tmp_path, steps=150, num_nodes=2))


def test_unknown_zone_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="StageSpec.zones"):
        LocalFleetProvider(_cfg(tmp_path)).run_stage(_spec(tmp_path, zones=("eu-west-1a",)))


# --------------------------------------------------------------------------- fleet policies

def test_fleet_policies_drive_the_local_fleet(tmp_path):
    from fleet.contract import RunPriors
    from fleet.policies.baselines import Failover

    priors = RunPriors(restart_seconds=1800.0, work_seconds=3 * 3600.0)  # emulated seconds
    od = LocalFleetProvider(_cfg(tmp_path / "od")).run_stage(
        _spec(tmp_path / "od", steps=60, policy="on_demand", priors=priors,
              deadline_seconds=20 * 3600.0))
    assert [(s.spot, s.end_reason) for s in od.sessions] == [(False, "completed")]

    fo_run = []
    prov = LocalFleetProvider(_cfg(tmp_path / "fo"))
    fo = prov.run_stage(_spec(tmp_path / "fo", steps=150, policy="failover", priors=priors,
                              deadline_seconds=20 * 3600.0), on_event=fo_run.append)
    decisions = [e for e in fo_run if e.kind == "decision"]
    assert decisions and {e.data["policy_class"] for e in decisions} == {Failover.__qualname__}
    assert fo.completed and all(s.spot for s in fo.sessions)
    assert len(fo.sessions) >= 2
    for a, b in zip(fo.sessions, fo.sessions[1:], strict=False):
        assert a.end_reason == "preempted" and b.zone != a.zone  # failover moves on
        assert "policy failover" in next(
            e.data["reason"] for e in fo.events if e.kind == "launch" and e.node_id == b.node_id)


def test_cli_rejects_bad_options_with_the_flag_named(capsys):
    from pipelines.cli import main

    with pytest.raises(SystemExit):
        main(["local-fleet", "run", "--time-scale", "0"])
    assert "--time-scale must be > 0" in capsys.readouterr().err
    assert main(["local-fleet", "run", "--market", "traces"]) == 2
    assert "--traces-dir" in capsys.readouterr().err


def test_cli_replays_real_traces(shared_data):
    import argparse

    from pipelines.commands.local_fleet import _schedule

    args = argparse.Namespace(zones=3, market="traces", start_hour=5.0, seed=0, traces_dir=(
        shared_data / "spot-traces" / "availability" / "1-node" / "aws-02-15-2023"))
    sched = _schedule(args)
    assert len(sched.zones) == 3 and sched.offset_seconds == 5 * 3600
    assert all(sched.traces[z].gap_seconds == 195 for z in sched.zones)


def test_a_policy_move_sends_a_notice_saves_and_relaunches_where_it_said(tmp_path):
    """While the group runs, the policy is asked again at its recheck time; a different
    target moves the group: notice -> emergency save -> launch there -> exact resume."""
    from fleet.policies import registry
    from fleet.policies.base import ON_DEMAND, Action, Policy

    class SpotThenOnDemand(Policy):
        name = "test_spot_then_on_demand"

        def decide(self, state, obs):
            if state.location == ON_DEMAND or (state.location >= 0 and state.elapsed_hours >= 1.5):
                return Action(ON_DEMAND, None, obs.tick + 10_000)
            return Action(0, None, obs.tick + 6)  # spot in the first zone; ask again in 30 min

    registry.register_policy("test_spot_then_on_demand")(SpotThenOnDemand)
    try:
        prov = LocalFleetProvider(_cfg(tmp_path, schedule=_with_past(
            CapacitySchedule.rotating(ZONES, up_hours=100), 300.0)))
        res = prov.run_stage(_spec(tmp_path, steps=200, name="mv", policy="test_spot_then_on_demand"))
    finally:
        registry._registry.pop("test_spot_then_on_demand", None)
    assert res.completed and res.final_step == 200
    first, last = res.sessions[0], res.sessions[-1]
    assert first.spot and first.end_reason == "cancelled"  # moved, not preempted
    assert not last.spot and last.end_reason == "completed"
    moved = [e for e in res.events if is_provider_event(e) and e.kind == "moved"]
    assert len(moved) == 1 and moved[0].data["to_zone"] == ZONES[0] and moved[0].data["spot"] is False
    emergency = [e.data["step"] for e in res.events
                 if e.kind == "save_committed" and e.data.get("kind") == "emergency"]
    assert emergency and last.first_step == emergency[-1] == first.last_checkpoint_step
    # what `local-fleet run` prints: the move and its notice, never a capacity loss
    from fleet.providers.local.narrate import Narrator

    lines = [x for x in map(Narrator(0.0).line, res.events) if x]
    assert any(f"MOVE {ZONES[0]} -> {ZONES[0]} (on-demand)" in x for x in lines), lines
    assert any("MOVE NOTICE" in x for x in lines) and not any("lost capacity" in x for x in lines)


def test_reported_times_are_market_time_and_the_wall_clock_stays_inside(tmp_path):
    """Compressed time stays inside the local provider: every session time and training
    event it reports is the wall time the process wrote, mapped to market time
    (anchor + (wall - anchor) x factor), and durations are wall x factor -- what the
    statistics DB then records without any time-scale column."""
    from checkpointing.events import read_events
    from fleet.providers.local.elastic_drill import always_up

    factor = 100.0  # 36 wall s per market hour
    anchor = time.time()
    cfg = _cfg(tmp_path, schedule=always_up(ZONES), time_scale=TimeScale(36.0),
               market_clock_start_unix=anchor)
    spec = StageSpec(name="st", command=[sys.executable, STANDIN, "--steps", "30", "--step-sleep", "0.02",
                                         "--periodic-every", "10"], checkpoint_uri=str(tmp_path / "ckpt"))
    res = LocalFleetProvider(cfg).run_stage(spec, attempt=1)
    wall_end = time.time()
    assert res.completed and res.info["time_scale_factor"] == factor
    [s] = res.sessions
    # the process' own (wall) events, as it wrote them
    raw = read_events(tmp_path / "w" / "st" / "attempt-1" / "events" / f"{s.node_id}.jsonl")
    reported = [e for e in res.events if not is_provider_event(e)]
    assert [(e.kind, e.data.get("step")) for e in reported] == [(e.kind, e.data.get("step")) for e in raw]
    for r, w in zip(reported, raw, strict=True):
        assert r.time == pytest.approx(anchor + (w.time - anchor) * factor, abs=1e-6)
        if w.kind == "save_committed":
            assert r.data["stall_seconds"] == pytest.approx(w.data["stall_seconds"] * factor)
    start = next(w for w in raw if w.kind == "start")
    assert s.ready_at == pytest.approx(anchor + (start.time - anchor) * factor, abs=1e-6)
    # the session lies inside the market image of the wall interval the run took, and its
    # duration is at least the 30 x 20 ms of work, x factor
    assert anchor <= s.launched_at < s.ended_at <= anchor + (wall_end - anchor) * factor
    assert s.ended_at - s.launched_at >= 30 * 0.02 * factor
    assert res.info["cost_usd"] == pytest.approx(s.price_per_hour * (s.ended_at - s.launched_at) / 3600.0)
    # provider events are on the same market clock (launch before the process' start)
    launch = next(e for e in res.events if is_provider_event(e) and e.kind == "launch")
    assert anchor <= launch.time <= s.ready_at


def test_a_relaunched_process_gets_the_checkpoint_time_the_attempt_measured(tmp_path):
    """The plan's C (1 market s) goes to the first process as its delta prior; the
    relaunched one gets C refined by the stalls (0.25 wall s) of the periodic saves the
    attempt committed, with the training process's own weighting (n0 = 10 saves); each
    in the process's own (wall) clock."""
    from checkpointing.policy import CKPT_PRIOR_WEIGHT
    from fleet.contract import RunPriors

    prov = LocalFleetProvider(_cfg(tmp_path, schedule=_with_past(CapacitySchedule.rotating(ZONES, up_hours=100), 300.0)))
    seen: list[Event] = []
    fired: list[bool] = []

    def on_event(ev: Event) -> None:
        seen.append(ev)
        if ev.kind == "progress" and ev.data.get("step", 0) >= 30 and not fired:
            fired.append(True)  # one injected preemption, at step 30 of the first process
            node = ev.node_id
            threading.Thread(target=lambda: prov.preempt_now("c", node)).start()

    spec = _spec(tmp_path, steps=150, name="c", priors=RunPriors(checkpoint_seconds=1.0))
    spec = StageSpec(**{**spec.__dict__, "command": [*spec.command, "--periodic-every", "10",
                                                     "--stall", "0.25"]})
    res = prov.run_stage(spec, on_event=on_event)
    assert res.completed and [s.end_reason for s in res.sessions] == ["preempted", "completed"]
    starts = [e for e in seen if e.kind == "start"]
    first_node = starts[0].node_id
    n = sum(1 for e in seen if e.kind == "save_committed" and e.node_id == first_node
            and e.data.get("kind") == "periodic")
    assert n >= 3
    f = prov.config.time_scale.to_trace(1.0)  # market seconds per wall second (the process's clock)
    assert float(starts[0].data["checkpoint_prior"]) == pytest.approx(1.0 / f, rel=1e-5)
    want = (CKPT_PRIOR_WEIGHT * 1.0 + n * 0.25 * f) / (CKPT_PRIOR_WEIGHT + n)  # market s
    assert float(starts[1].data["checkpoint_prior"]) == pytest.approx(want / f, rel=1e-5)


def test_an_enforced_budget_stops_the_relaunch(tmp_path):
    """budget_left_usd (enforce_budget): after the first preemption, relaunching would spend past
    what was left of the budget at attempt start, so the stage stops with the figures and the fix."""
    prov = LocalFleetProvider(_cfg(tmp_path))
    with pytest.raises(AttemptFailed, match=r"(?s)stopped by the budget.*NOT relaunched.*Raise budget_usd"):
        prov.run_stage(_spec(tmp_path, steps=100000, max_relaunches=5, budget_left_usd=1e-7))
    assert [s.end_reason for s in prov.sessions()] == ["preempted"]  # no relaunch


def test_relaunch_budget_decision():
    from fleet.providers.base import relaunch_budget_error

    assert relaunch_budget_error("st", None, 100.0, 100.0) is None  # not enforced
    assert relaunch_budget_error("st", 2.0, 1.5, 0.5) is None  # exactly fits
    msg = relaunch_budget_error("st", 2.0, 1.5, 0.6)
    assert msg is not None and "$1.5000" in msg and "$0.6000" in msg and "$2.0000" in msg
    assert "enforce_budget: false" in msg


def test_cli_rerun_in_the_same_workdir_reports_only_its_own_sessions(tmp_path, capsys):
    """`local-fleet run --workdir W` twice (as its own "re-run the same command: it resumes"
    advice says): the second run read the first run's node events as its own, printing
    negative market times, a -17000 s session and "cost: 0.00 $" (before 2026-11-27)."""
    from pipelines.cli import main

    work = tmp_path / "w"
    args = ["local-fleet", "run", "--steps", "10", "--workdir", str(work), "--no-verify",
            "--quiet-progress"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 0
    cap = capsys.readouterr()
    rows = [ln.split() for ln in cap.out.splitlines() if ln.startswith("s0-n0")]
    assert len(rows) == 1 and float(rows[0][4]) > 0 and float(rows[0][-1]) > 0  # market s, $
    assert "holds an earlier run" in cap.err
    assert "training RESUMED at step 10" in cap.out or "10->10" in cap.out
    assert not any("| market  -" in ln for ln in cap.out.splitlines())
    assert [p.name for p in work.iterdir() if p.name.startswith("fleet-earlier-")]
