"""The restart time R the live fleet policy plans with is the one the local fleet charges.

Before 2026-11-27 the live driver told the policy the priors' R (``RunPriors.restart_seconds``,
the cloud default of 360 s = 0.1 h) for the whole attempt, while a node's launch -> ready on
`local-fleet run` (a fresh python importing torch, at 2 s per emulated hour) was billed
4.3-5.0 market hours; and `local-fleet run` started every node as a fresh python, where
`spotfleet main` forks them from a warm server. Now the policy's JobSpec.restart_hours is
the provider's ``restart_estimate()`` (the priors refined by every start measured, the
running group's included), `local-fleet run` forks its nodes from a fork server, and the
server preloads ``torch._dynamo`` (the first optimizer imported it: 4-5 s of each start).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from live_replay import RestartSpy

from fleet.contract import RunPriors, posterior_restart_seconds
from fleet.emulation.injector import CapacitySchedule, TimeScale
from fleet.providers.base import NodeSession, StageSpec
from fleet.providers.decisions import PolicyDriver, Progress
from fleet.providers.local.provider import LocalFleetConfig, LocalFleetProvider, _Node, _StageRun

ZONES = ["us-east-1a", "us-east-1b", "us-west-2a"]
REPO = Path(__file__).resolve().parents[2]


class _Injector:
    def up_zones(self, now=None):
        return list(ZONES)


def _run(tmp_path: Path) -> tuple[_StageRun, PolicyDriver, RestartSpy]:
    schedule = CapacitySchedule(CapacitySchedule.rotating(ZONES).traces.values(), offset_seconds=24 * 3600.0)
    cfg = LocalFleetConfig(schedule=schedule, time_scale=TimeScale(2.0), cloud="signal",
                           workdir=tmp_path)
    spec = StageSpec(name="r", command=[sys.executable, "-c", "pass"], checkpoint_uri=str(tmp_path / "ck"),
                     policy="spotfleet", priors=RunPriors(restart_seconds=360.0, work_seconds=10 * 3600.0))
    run = _StageRun(LocalFleetProvider(cfg), spec, 1, None)
    driver = run._driver(schedule, ZONES)
    spy = RestartSpy()
    driver.policy = spy
    run.injector = _Injector()
    run._started = time.time()
    return run, driver, spy


def test_the_policy_plans_with_the_restart_the_fleet_measured(tmp_path):
    run, driver, spy = _run(tmp_path)
    run._decide(driver, None)
    assert spy.told[-1] == pytest.approx(0.1)  # nothing measured yet: the priors' 360 s
    # an ended session billed 4.6 market h from launch to ready (a fresh python at 2 s/h) ...
    run.sessions.append(NodeSession(node_id="r-a1-s0-n0", stage="r", attempt=1, provider="local",
                                    cloud="local", region="us-east-1", zone=ZONES[0],
                                    instance_type="p3.2xlarge", spot=True, price_per_hour=1.0,
                                    launched_at=0.0, ready_at=4.6 * 3600.0, ended_at=5.0 * 3600.0,
                                    end_reason="preempted"))
    # ... and the running group's node, ready 0.5 wall s after its launch (0.25 market h)
    run._nodes.append(_Node(node_id="r-a1-s1-n0", rank=0, zone=ZONES[1], region="us-east-1",
                            spot=True, price=1.0, launched_at=1000.0, ready_at=1000.5,
                            log_path=tmp_path / "l", events_path=tmp_path / "e", tail=None))
    run._decide(driver, ZONES[1])
    want = posterior_restart_seconds(360.0, [4.6 * 3600.0, 0.25 * 3600.0])
    assert run.restart_estimate() == pytest.approx(want)  # the R the training process gets
    assert spy.told[-1] == pytest.approx(want / 3600.0)  # the policy: the same (was 0.1 h)
    assert driver.job_spec(Progress()).restart_hours == pytest.approx(want / 3600.0)


def test_the_driver_falls_back_to_the_priors_restart():
    d = PolicyDriver("spotfleet", ZONES, priors=RunPriors(restart_seconds=720.0, work_seconds=3600.0))
    assert d.job_spec(Progress()).restart_hours == pytest.approx(0.2)
    d.restart_seconds = 5400.0
    spec = d.job_spec(Progress())
    assert spec.restart_hours == pytest.approx(1.5)
    assert spec.deadline_hours == pytest.approx(d.no_deadline_factor * 1.0 + 1.5)  # no deadline: work x 50 + R
    d.restart_seconds = float("nan")
    assert d.job_spec(Progress()).restart_hours == pytest.approx(0.2)


def test_local_fleet_run_tells_the_policy_the_emulated_allocation_and_preparation():
    from types import SimpleNamespace

    from pipelines.commands.local_fleet import _priors

    ts = TimeScale(2.0)
    cfg = LocalFleetConfig(time_scale=ts)
    sched = CapacitySchedule.rotating(ZONES)
    args = SimpleNamespace(steps=10, step_sleep=0.0)
    pri = _priors(args, sched, ts, cfg)
    assert pri.restart_seconds == pytest.approx((cfg.allocation_seconds + cfg.preparation_seconds) * 1800.0)


@pytest.mark.slow
def test_local_fleet_run_forks_its_nodes_from_a_warm_server(tmp_path, monkeypatch, capsys):
    """`local-fleet run` starts its nodes the way `spotfleet main` does (before: a fresh
    python per node, 8.7-10.0 s wall from launch to ready on this machine)."""
    import fleet.providers.local.forkserver as fs
    from pipelines.cli import main

    monkeypatch.delenv(fs.ENV_FORK_SERVER, raising=False)
    kinds: list[str] = []
    real = fs.spawn

    def spy(*a, **kw):
        proc = real(*a, **kw)
        kinds.append(type(proc).__name__)
        return proc

    monkeypatch.setattr(fs, "spawn", spy)
    assert main(["local-fleet", "run", "--steps", "5", "--no-verify", "--quiet-progress",
                 "--workdir", str(tmp_path / "w")]) == 0
    out = capsys.readouterr().out
    assert kinds == ["ForkedProcess"], out
    assert "fork server: ready" in out and "node starts (launch -> ready):" in out


@pytest.mark.slow
def test_the_fork_server_preloads_what_the_first_optimizer_imports():
    """A process forked from the server builds an optimizer without importing anything of
    torch._dynamo (4-5 s of a forked start on this machine before it was preloaded)."""
    code = ("import sys\n"
            "from fleet.providers.local.forkserver import PRELOAD\n"
            "for m in PRELOAD: __import__(m)\n"
            "before = set(sys.modules)\n"
            "import torch\n"
            "torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())\n"
            "print(sorted(m for m in set(sys.modules) - before if m.startswith('torch._dynamo'))[:5])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "[]", out.stdout



def test_the_budget_prices_a_relaunch_with_the_restart_the_fleet_measured(tmp_path):
    """enforce_budget: a relaunch's start-up (price x nodes x R) used the plan's R (360 s) even
    after the attempt had measured launches of 4.6 market h, so a relaunch the budget could not
    pay for was made (before 2026-11-27, session 14). Now the rule (``attempt_budget_error``)
    gets the attempt's ``restart_estimate()``, the R the policy plans with."""
    from dataclasses import replace

    from fleet.providers.base import AttemptFailed, attempt_budget_error
    from fleet.providers.decisions import Launch

    run, _driver, _spy = _run(tmp_path)
    run.sessions.append(NodeSession(node_id="r-a1-s0-n0", stage="r", attempt=1, provider="local",
                                    cloud="local", region="us-east-1", zone=ZONES[0],
                                    instance_type="p3.2xlarge", spot=True, price_per_hour=1.0,
                                    launched_at=0.0, ready_at=4.6 * 3600.0, ended_at=5.0 * 3600.0,
                                    end_reason="preempted"))  # 5.00 $ spent
    r = run.restart_estimate()
    assert r / 3600.0 == pytest.approx((0.1 + 4.6) / 2)  # the plan's R as one sample + 4.6 h
    price = run.cfg.price_per_hour(run.spec.instance_type or run.cfg.instance_type, ZONES[1],
                                   "us-east-1", True)  # what _check_budget prices the relaunch at
    assert price > 0
    # a budget that pays the relaunch's start-up at the plan's 0.1 h but not at the measured R
    run.spec = replace(run.spec, budget_left_usd=5.0 + price * 1.0)
    assert attempt_budget_error(run.spec, run.sessions, price) is None
    msg = attempt_budget_error(run.spec, run.sessions, price, restart_seconds=r)
    assert msg is not None and "$5.0000" in msg and "NOT relaunched" in msg

    class _Traced(_Injector):
        def trace_time(self):
            return None

    run.injector = _Traced()
    with pytest.raises(AttemptFailed, match="stopped by the budget"):
        run._check_budget(Launch(zone=ZONES[1], spot=True, reason="test"), run.provider.schedule())
