"""Fast tests of the elastic pieces: sharding, the /dev/shm handoff, the single-process
session, the launcher's CLI, and the SkyPilot multi-node task."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
import torch

from checkpointing.elastic import ElasticSession, shard_bounds
from checkpointing.elastic_run import parse_args
from checkpointing.elastic_state import HandoffFile, pack_state, unpack_state
from checkpointing.torch_state import TrainingState, state_sha256

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("count", [4, 7, 32, 33])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shards_cover_the_global_batch_once_and_are_balanced(count, world):
    bounds = [shard_bounds(count, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == count
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    sizes = [b - a for a, b in bounds]
    assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="rank 4"):
        shard_bounds(count, 4, 4)


def _objects(seed=0):
    sys.path.insert(0, str(ROOT / "examples"))
    from train_example import build

    model, opt, sched = build(argparse.Namespace(seed=seed, model="mlp", size="tiny", lr=3e-3,
                                                 steps=20))
    return model, opt, sched


def _train(model, opt, sched, steps, session=None):
    from train_example import batch_for_step

    for step in range(steps):
        x, y = batch_for_step("mlp", 1, step, 8)
        opt.zero_grad()
        if session is not None:
            part = session.shard(len(x))
            torch.nn.functional.mse_loss(model(x[part]), y[part]).backward()
            assert session.sync_gradients(len(y[part]), len(y))
        else:
            torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        sched.step()
        if session is not None:
            session.end_step(loss=0.0)


def test_handoff_round_trip_is_bit_exact_and_stays_until_discarded(tmp_path):
    model, opt, sched = _objects()
    _train(model, opt, sched, 3)
    state = TrainingState(model=model, optimizer=opt, scheduler=sched, rng=False, step=3)
    slot = HandoffFile("run-1", "node/a", root=tmp_path)
    slot.write(state.capture(), step=3)
    got = slot.read()
    assert got is not None and got.step == 3 and got.path.parent.name == "run-1"
    assert slot.read() is not None  # a worker killed before its group formed reads it again
    m2, o2, s2 = _objects(seed=5)
    TrainingState(model=m2, optimizer=o2, scheduler=s2, rng=False).apply(got.state)
    assert state_sha256(m2, o2) == state_sha256(model, opt)
    slot.discard()
    assert slot.read() is None


def test_a_torn_handoff_is_ignored(tmp_path):
    slot = HandoffFile("run", "n", root=tmp_path)
    slot.path.parent.mkdir(parents=True)
    slot.path.write_bytes(b"SFHANDOFF1" + b"\0" * 5)
    assert slot.read() is None
    header, flat = pack_state({"w": torch.arange(4.0), "step": 2})
    out = unpack_state(header, flat)
    assert out["step"] == 2 and torch.equal(out["w"], torch.arange(4.0))
    with pytest.raises(ValueError, match="holds"):
        unpack_state(header, flat[:-1])


def test_single_process_session_is_the_plain_loop_bit_for_bit(tmp_path, monkeypatch):
    """World size 1 (no torch elastic env): the reference the elastic runs compare with."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    plain = _objects()
    _train(*plain, 12)
    model, opt, sched = _objects()
    el = ElasticSession(model=model, optimizer=opt, scheduler=sched, store=str(tmp_path / "ck"),
                        total_steps=12, periodic_every=5, handoff_root=str(tmp_path / "shm"))
    assert el.start() == 0 and el.state_from == "fresh" and el.world_size == 1
    _train(model, opt, sched, 12, session=el)
    assert el.should_stop() and el.finish() == 0
    assert state_sha256(model, opt) == state_sha256(plain[0], plain[1]) == el.final_sha256
    # a second session over the same store resumes from the final checkpoint (rank 0 wrote it)
    m2, o2, s2 = _objects(seed=9)
    el2 = ElasticSession(model=m2, optimizer=o2, scheduler=s2, store=str(tmp_path / "ck"),
                         total_steps=12, handoff_root=str(tmp_path / "shm"))
    assert el2.start() == 12 and el2.state_from == "checkpoint"
    assert state_sha256(m2, o2) == el.final_sha256


def test_launcher_cli_errors_name_the_fix(capsys):
    cfg, script, args = parse_args(["--nnodes", "1:4", "--rdzv-endpoint", "h:29400",
                                    "--rdzv-id", "x", "--", "t.py", "--steps", "3"])
    assert (cfg.min_nodes, cfg.max_nodes, script, args) == (1, 4, "t.py", ["--steps", "3"])
    for bad, why in ((["--nnodes", "4:1"], "MIN <= MAX"), (["--nnodes", "a"], "MIN:MAX"),
                     (["--rdzv-endpoint", "host"], "HOST:PORT")):
        argv = ["--nnodes", "1:2", "--rdzv-endpoint", "h:1", "--rdzv-id", "x"]
        argv[argv.index(bad[0]) + 1] = bad[1]
        with pytest.raises(SystemExit):
            parse_args([*argv, "t.py"])
        assert why in capsys.readouterr().err


@pytest.fixture
def sky_offline(shared_data, tmp_path, monkeypatch):
    from fleet.market.catalog import offline_catalog

    monkeypatch.setenv("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
    with offline_catalog(tmp_path / "skyhome", shared_data / "skypilot-catalog-v8"):
        yield


def test_skypilot_multi_node_task_runs_the_elastic_agent_with_the_head_as_endpoint(sky_offline):
    from fleet.providers.base import StageSpec
    from fleet.providers.skypilot.tasks import build_task, task_from_yaml, task_to_yaml

    spec = StageSpec(name="dp", command=["python", "examples/train_elastic.py", "--steps", "9"],
                     checkpoint_uri="s3://bucket/dp", accelerator="L4", num_nodes=4,
                     zones=("us-east-1a", "us-east-2a"))
    task = task_from_yaml(task_to_yaml(build_task(spec)))
    assert task.num_nodes == 4
    run = task.run
    assert 'HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)' in run
    assert '--rdzv-endpoint "$HEAD_IP:29400"' in run and "--nnodes \"1:$SKYPILOT_NUM_NODES\"" in run
    assert 'if [ "$SKYPILOT_NODE_RANK" = "0" ]; then HOST_STORE="--host-store"' in run
    assert run.rstrip().endswith("-- examples/train_elastic.py --steps 9")
    single = build_task(StageSpec(name="one", command=["python", "x.py"], checkpoint_uri="/c",
                                  accelerator="L4", zones=("us-east-1a",)))
    assert single.run == "python x.py"
    with pytest.raises(ValueError, match="script.py"):
        build_task(StageSpec(name="bad", command=["bash", "-c", "x"], checkpoint_uri="/c",
                             accelerator="L4", num_nodes=2, zones=("us-east-1a",)))


def test_choose_zones_spreads_over_zones_with_capacity_within_caps():
    from fleet.providers.local.multinode import choose_zones, parse_placement

    zones = ["a", "b", "c"]
    caps = {"a": 2, "b": 2, "c": 2}
    assert sorted(choose_zones(4, zones, {}, zones, caps)) == ["a", "a", "b", "c"]
    # the plan's spread (a:2, b:2) first; c only takes overflow
    assert sorted(choose_zones(4, zones, {}, zones, caps, {"a", "b"})) == ["a", "a", "b", "b"]
    assert choose_zones(2, zones, {"b": 2}, ["b", "c"], caps, {"a", "b"}) == ["c", "c"]
    # zone a reclaimed (not up): its 2 nodes are not replaced there; c takes the overflow
    assert choose_zones(2, zones, {"b": 2}, ["b", "c"], caps) == ["c", "c"]
    # only the plan's zones: no capacity left -> nothing placed (the group trains with 2)
    assert choose_zones(2, ["a", "b"], {"b": 2}, ["b"], {"a": 2, "b": 2}) == []
    assert parse_placement("us-east-1a:3, us-east-1b:1") == {"us-east-1a": 3, "us-east-1b": 1}
    with pytest.raises(ValueError, match="zone:nodes"):
        parse_placement("us-east-1a")


def test_plan_apply_hands_the_k_over_z_spread_to_the_elastic_controller():
    from fleet.planning.planner import FleetPlan, ZoneChoice
    from fleet.providers.base import StageSpec

    def zc(zone, nodes, rank):
        return ZoneChoice(zone=zone, region=zone[:-1], instance_type="p3.2xlarge", spot_price=1.0,
                          on_demand_price=3.0, rate_per_hour=0.1, availability=0.9,
                          interval_hours=0.5, c_eff=1.2, break_even_rate=1.0, nodes=nodes,
                          rank=rank)

    plan = FleetPlan(stage="dp", accelerator="V100", instance_type="p3.2xlarge", num_nodes=5,
                     spot_nodes=4, on_demand_nodes=1,
                     zones=[zc("us-east-1a", 2, 1), zc("us-east-1b", 2, 2), zc("us-west-2a", 0, 3)],
                     failover_order=["us-east-1a", "us-east-1b", "us-west-2a"],
                     on_demand_region="us-east-1", on_demand_price=3.0,
                     checkpoint_interval_hours=0.5, expected_cost=1.0, on_demand_cost=2.0,
                     savings_fraction=0.5, expected_completion_hours=1.0, p_any_zone_up=0.9,
                     meets_deadline=None, fallback_slack_hours=None, latest_switch_hour=None,
                     mean_nodes_lost_per_hour=0.1, variance_nodes_lost_per_hour=0.1,
                     variance_by_zone_count={})
    assert plan.placement() == {"us-east-1a": 2, "us-east-1b": 2}
    spec = plan.apply(StageSpec(name="dp", command=["python", "t.py"], checkpoint_uri="/c",
                                num_nodes=5))
    assert spec.env["SPOTFLEET_PLACEMENT"] == "us-east-1a:2,us-east-1b:2"
    assert spec.env["SPOTFLEET_ON_DEMAND_NODES"] == "1"
    single = plan.apply(StageSpec(name="one", command=["python", "t.py"], checkpoint_uri="/c"))
    assert "SPOTFLEET_PLACEMENT" not in single.env


@pytest.mark.slow
def test_agent_does_not_restart_a_worker_whose_final_save_failed(tmp_path):
    """Exit 74 (all steps trained, final checkpoint not committed) is terminal: before, the
    agent restarted the worker up to --max-restarts times (each restart failing to restore
    from the store that was down) and then exited 1."""
    import socket
    import subprocess

    runs = tmp_path / "runs.txt"
    script = tmp_path / "final_save_fails.py"
    script.write_text(f"import sys\nopen({str(runs)!r}, 'a').write('run\\n')\nsys.exit(74)\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, "-m", "checkpointing.elastic_run", "--nnodes", "1:1", "--host-store",
         "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "final-save", "--local-addr",
         "127.0.0.1", "--max-restarts", "2", "--", str(script)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 74, proc.stderr[-3000:]
    assert runs.read_text().count("run") == 1, proc.stderr[-3000:]
    assert "final checkpoint was not committed" in proc.stderr
