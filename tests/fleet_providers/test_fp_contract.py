"""The run contract (fleet/contract.py): units, the in-attempt refinement, the wire format."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.contract import (
    RunPriors,
    posterior_mttp_seconds,
    posterior_restart_seconds,
    prior_history,
    training_env,
    training_stats,
)
from fleet.providers.base import StageSpec
from fleet.providers.wire import spec_from_dict, spec_to_dict


def test_posterior_mttp_uses_only_what_was_observed():
    assert posterior_mttp_seconds(None, 7200.0, 0) is None  # nothing lost, no prior: unknown
    assert posterior_mttp_seconds(None, 7200.0, 2) == pytest.approx(3600.0)
    # the prior counts as one preemption after MTTP0 held seconds
    assert posterior_mttp_seconds(3600.0, 0.0, 0) == pytest.approx(3600.0)
    assert posterior_mttp_seconds(3600.0, 1800.0, 1) == pytest.approx((3600.0 + 1800.0) / 2)
    assert posterior_mttp_seconds(3600.0, 36000.0, 0) == pytest.approx(39600.0)  # held long, never lost
    assert posterior_restart_seconds(300.0, [100.0, 200.0]) == pytest.approx(200.0)


def test_training_env_converts_market_seconds_to_the_process_clock():
    env = training_env(7200.0, 360.0, 900.0, 60.0)
    assert env == {"SPOTFLEET_MTTP_SECONDS": "7200", "SPOTFLEET_RESTART_SECONDS": "360",
                   "SPOTFLEET_INTERVAL_SECONDS": "900", "SPOTFLEET_CHECKPOINT_SECONDS": "60"}
    # the local fleet at 30 wall s per market hour: 1 wall s = 120 market s
    local = training_env(7200.0, 360.0, None, None, seconds_per_market_second=1 / 120.0)
    assert float(local["SPOTFLEET_MTTP_SECONDS"]) == pytest.approx(60.0)
    assert float(local["SPOTFLEET_RESTART_SECONDS"]) == pytest.approx(3.0)
    assert "SPOTFLEET_INTERVAL_SECONDS" not in local
    assert training_stats(None, 360.0) == {"restart_seconds": 360.0}  # unknown MTTP is left out


def test_prior_history_has_the_priors_statistics():
    zones = ["a1", "b1"]
    pr = RunPriors(mttp_seconds={"a1": 4 * 3600.0}, availability={"a1": 0.8})
    h = prior_history(pr, zones, 300.0, hours=24 * 7)
    assert h.shape == (2, 2016)
    a = h[0]
    assert a.mean() == pytest.approx(0.8, abs=0.02)
    runs = np.diff(np.flatnonzero(np.diff(a.astype(int)) == -1))  # up+down cycle lengths
    assert runs.size and np.all(runs == 60)  # 48 up (4 h) + 12 down ticks
    assert h[1].all()  # b1: no statistics -> assumed up
    assert prior_history(RunPriors(), zones, 300.0) is None


def test_priors_validate_with_the_field_named():
    with pytest.raises(ValueError, match=r"RunPriors.restart_seconds = -1"):
        RunPriors(restart_seconds=-1)
    with pytest.raises(ValueError, match=r"mttp_seconds\['a1'\]"):
        RunPriors(mttp_seconds={"a1": 0.0})
    with pytest.raises(ValueError, match="unknown field"):
        RunPriors.from_dict({"mttp_hours": {"a1": 1.0}})


def test_stage_spec_round_trips_through_the_wire_format():
    spec = StageSpec(name="s", command=["python", "t.py"], checkpoint_uri="/c", zones=("a1", "b1"),
                     policy="failover", deadline_seconds=7200.0,
                     priors=RunPriors(mttp_seconds={"a1": 3600.0}, interval_seconds=300.0))
    back = spec_from_dict(spec_to_dict(spec))
    assert back == spec
    with pytest.raises(ValueError, match="unknown field"):
        spec_from_dict({**spec_to_dict(spec), "zonez": []})


def test_an_unmeasured_checkpoint_time_is_no_prior_for_the_training_process():
    """Only a checkpoint time measured in the DB reaches the training process (as its
    delta prior, weighted as 10 saves); the fleet policy assumes the default meanwhile."""
    from checkpointing import runtime_env as rt
    from fleet.contract import DEFAULT_CHECKPOINT_SECONDS, training_env

    pr = RunPriors(mttp_seconds={"a1": 3600.0})
    assert pr.checkpoint_seconds is None and pr.checkpoint_seconds_or_default == DEFAULT_CHECKPOINT_SECONDS
    assert rt.ENV_CHECKPOINT_SECONDS not in training_env(3600.0, 360.0, None, pr.checkpoint_seconds)
    measured = RunPriors(checkpoint_seconds=12.0)
    assert measured.checkpoint_seconds_or_default == 12.0
    env = training_env(3600.0, 360.0, None, measured.checkpoint_seconds, seconds_per_market_second=0.5)
    assert env[rt.ENV_CHECKPOINT_SECONDS] == "6"  # the process's own clock
    with pytest.raises(ValueError, match=r"RunPriors.checkpoint_seconds = -1"):
        RunPriors(checkpoint_seconds=-1)


def test_posterior_checkpoint_time_weights_the_plan_as_the_process_does():
    from checkpointing.policy import CKPT_PRIOR_WEIGHT
    from fleet.contract import posterior_checkpoint_seconds

    assert posterior_checkpoint_seconds(None, []) is None  # nothing known: nothing exported
    assert posterior_checkpoint_seconds(None, [2.0, 4.0]) == 3.0  # no plan C: the attempt's mean
    assert posterior_checkpoint_seconds(10.0, []) == 10.0
    assert posterior_checkpoint_seconds(10.0, [0.0, 4.0]) == pytest.approx(  # 0: unmeasured
        (CKPT_PRIOR_WEIGHT * 10.0 + 4.0) / (CKPT_PRIOR_WEIGHT + 1))


def test_the_attempt_refines_a_zones_mttp_with_that_zones_sessions_only():
    """A move from a calm zone to a risky one must not carry the calm zone's held hours
    into the risky zone's MTTP (found tracing the demo's MTTP through `spotfleet main`:
    after a preemption in us-west-2b the next node in us-east-1f got (M0_f + held_w) / 2)."""
    from fleet.providers.attempt import AttemptRecord
    from fleet.providers.base import NodeSession

    calm, risky = 10 * 3600.0, 1.6 * 3600.0
    spec = StageSpec(name="s", command=["python", "t.py"], checkpoint_uri="/c", zones=("calm-a", "risky-b"),
                     priors=RunPriors(mttp_seconds={"calm-a": calm, "risky-b": risky}))
    rec = AttemptRecord(spec, 1, None)

    def session(zone, held, reason):
        return NodeSession(node_id=f"n-{zone}-{reason}", stage="s", attempt=1, provider="local", cloud="aws",
                           region=zone[:-2], zone=zone, instance_type="p3.2xlarge", spot=True,
                           price_per_hour=0.9, launched_at=0.0, ready_at=60.0, ended_at=60.0 + held,
                           end_reason=reason)

    rec.sessions.append(session("calm-a", 10 * 3600.0, "cancelled"))  # held 10 h, then moved
    assert rec.mttp_estimate("risky-b") == pytest.approx(risky)  # no evidence about risky-b yet
    assert rec.mttp_estimate("calm-a") == pytest.approx(calm + 10 * 3600.0)  # its own: held, not lost
    rec.sessions.append(session("risky-b", 1800.0, "preempted"))
    assert rec.mttp_estimate("risky-b") == pytest.approx((risky + 1800.0) / 2)
    assert rec.mttp_estimate("calm-a") == pytest.approx(calm + 10 * 3600.0)  # risky-b's loss is not its
