"""SkyPilot provider: task/resources YAML, offline validation and prices, and launch /
queue / cancel of managed jobs through the real SDK against a double of the API server."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from live_replay import RestartSpy

from fleet.contract import RunPriors
from fleet.policies.base import ON_DEMAND, Action, Policy
from fleet.providers.base import AttemptFailed, StageSpec
from fleet.providers.skypilot import (
    SkyPilotConfig,
    SkyPilotProvider,
    SkyTaskOptions,
    build_task,
    hourly_price,
    task_from_yaml,
    task_to_yaml,
    zones_of,
)
from fleet.providers.skypilot.tasks import REAL_NOTICE_SOURCES, resolve_instance_type

REPO = Path(__file__).resolve().parents[2]
ZONES = ("us-east-2a", "us-east-1a", "us-west-2c")


@pytest.fixture
def catalog_edits() -> dict[tuple[str, str], float]:
    """On-demand $/h to change in the catalog subset, {(instance type, region): price}; a
    test parametrizes it (the subset prices every region of an instance type alike)."""
    return {}


def _edited_catalog(source: Path, target: Path, edits: dict[tuple[str, str], float]) -> Path:
    import csv
    import shutil

    shutil.copytree(source, target)
    vms = target / "aws" / "vms.csv"
    with vms.open(newline="") as f:
        rows = list(csv.DictReader(f))
    fields = list(rows[0])
    for row in rows:
        if (row["InstanceType"], row["Region"]) in edits:
            row["Price"] = str(edits[(row["InstanceType"], row["Region"])])
    with vms.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return target


@pytest.fixture
def sky_offline(shared_data, tmp_path, monkeypatch, catalog_edits):
    """SkyPilot with the catalog subset in a temporary home, AWS enabled, no network."""
    from fleet.market.catalog import offline_catalog

    monkeypatch.setenv("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
    source = shared_data / "skypilot-catalog-v8"
    if catalog_edits:
        source = _edited_catalog(source, tmp_path / "catalog-edited", catalog_edits)
    with offline_catalog(tmp_path / "skyhome", source):
        yield


@pytest.fixture
def api_server(sky_offline, monkeypatch):
    """The SDK talks to a loopback double of the API server."""
    from sky.server import common as server_common
    from sky.server import versions
    from sky_api_double import FakeSkyApiServer

    fake = FakeSkyApiServer()
    url = fake.start()
    monkeypatch.setenv("SKYPILOT_API_SERVER_ENDPOINT", url)
    monkeypatch.setenv("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")  # no calls home
    caches = [server_common.get_server_url, server_common.is_api_server_local,
              server_common.get_api_server_status_response]

    def clear() -> None:
        for fn in caches:
            if hasattr(fn, "cache_clear"):
                fn.cache_clear()

    clear()
    try:
        yield fake
    finally:
        fake.stop()
        clear()
        versions.set_remote_api_version(None)
        versions.set_remote_version(None)


#: what FleetPlan.apply puts into the spec (seconds): 4 h MTTP and 80 % availability per zone
PRIORS = RunPriors(mttp_seconds={z: 4 * 3600.0 for z in ZONES}, availability={z: 0.8 for z in ZONES},
                   restart_seconds=300.0, checkpoint_seconds=30.0, interval_seconds=1200.0,
                   work_seconds=4 * 3600.0)


def _spec(**kw) -> StageSpec:
    base = dict(name="pretrain", command=["python", "examples/train_example.py", "--steps", "100"],
                checkpoint_uri="s3://bucket/spotfleet/pretrain", accelerator="L4", zones=ZONES,
                priors=PRIORS)
    base.update(kw)
    return StageSpec(**base)


# ------------------------------------------------------------------ task / resources / YAML

def test_task_yaml_round_trip_keeps_zones_order_spot_and_recovery(sky_offline):
    task = build_task(_spec())
    text = task_to_yaml(task)
    cfg = yaml.safe_load(text)
    ordered = cfg["resources"]["ordered"]
    assert [r["infra"] for r in ordered] == [f"aws/{z[:-1]}/{z}" for z in ZONES]
    assert all(r["use_spot"] and r["instance_type"] == "g6.xlarge" and r["accelerators"] == {"L4": 1}
               and r["job_recovery"]["strategy"] == "EAGER_NEXT_REGION" for r in ordered)
    assert cfg["run"] == "python examples/train_example.py --steps 100"
    assert cfg["envs"]["SPOTFLEET_CHECKPOINT_URI"] == "s3://bucket/spotfleet/pretrain"
    assert cfg["envs"]["SPOTFLEET_NOTICE_SOURCES"] == REAL_NOTICE_SOURCES["aws"]
    back = task_from_yaml(text)
    assert isinstance(back.resources, list) and zones_of(back) == list(ZONES)
    assert task_to_yaml(back) == text  # stable round trip
    for r in back.resources:
        r.validate()  # SkyPilot's own checks against the offline catalog


def test_any_of_and_accelerator_resolution(sky_offline):
    task = build_task(_spec(accelerator="A10G", use_spot=False), options=SkyTaskOptions(any_of=True))
    cfg = yaml.safe_load(task_to_yaml(task))
    assert "any_of" in cfg["resources"] and "ordered" not in cfg["resources"]
    assert {r["instance_type"] for r in cfg["resources"]["any_of"]} == {"g5.4xlarge"}
    assert not any(r.get("use_spot") for r in cfg["resources"]["any_of"])
    with pytest.raises(ValueError, match="StageSpec.accelerator='H100'"):
        build_task(_spec(accelerator="H100"))


def test_prices_come_from_the_catalog_subset(sky_offline):
    # catalog v8 rows: g6.xlarge on-demand 0.8048 $/h; spot us-east-2a (use2-az1) 0.2756 $/h
    assert hourly_price("g6.xlarge", spot=True, zone="us-east-2a") == pytest.approx(0.2756)
    assert hourly_price("g6.xlarge", spot=False, region="us-west-2") == pytest.approx(0.8048)
    assert hourly_price("g5.4xlarge", spot=True, zone="us-west-2a") == pytest.approx(0.5516)
    task = build_task(_spec())
    costs = {r.zone: r.get_cost(3600) for r in task.resources}
    assert costs["us-east-2a"] == pytest.approx(0.2756)
    assert min(costs, key=costs.get) == "us-east-2a"


def test_infra_template_is_a_valid_task(sky_offline):
    task = task_from_yaml((REPO / "infra" / "skypilot" / "stage-task.yaml").read_text())
    assert zones_of(task) == list(ZONES)
    for r in task.resources:
        r.validate()
        assert r.use_spot and r.job_recovery["strategy"] == "EAGER_NEXT_REGION"


# ------------------------------------------------------------------ managed jobs via the SDK

class Controller:
    """Plays SkyPilot's jobs controller between the provider's polls.

    ``script`` lists, per launched job, the zone outcome: "preempt" or "succeed". A job
    runs in the first zone of its ``resources.ordered`` list (SkyPilot's order).
    """

    def __init__(self, fake, script: list[str]):
        self.fake = fake
        self.script = list(script)
        self.handled: set[int] = set()
        self.zones_per_job: dict[int, list[str]] = {}

    def __call__(self, _seconds: float) -> None:
        if not self.fake.jobs:
            return
        job_id = max(self.fake.jobs)
        job = self.fake.jobs[job_id]
        if job_id not in self.zones_per_job:  # the DAG YAML the SDK sent, parsed by SkyPilot
            from sky.utils import dag_utils

            dag = dag_utils.load_chain_dag_from_yaml_str(self.fake.launched_yaml[job_id])
            self.zones_per_job[job_id] = zones_of(dag.tasks[0])
        status = job["status"].value
        if status == "PENDING":
            self.fake.run(job_id, self.zones_per_job[job_id][0])
        elif status == "RUNNING" and job_id not in self.handled:
            self.handled.add(job_id)
            action = self.script.pop(0)
            if action == "preempt":
                self.fake.preempt(job_id)
            elif action == "succeed":
                self.fake.succeed(job_id)
            else:
                self.fake.fail(job_id, action)


def test_stage_survives_preemptions_with_zone_rotation(api_server):
    ctl = Controller(api_server, ["preempt", "preempt", "succeed"])
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=ctl)
    events = []
    # the rotation mechanics under the plan's uniform prices (the stage's own catalog prices
    # only fill in when the plan has none: test_a_stage_planned_without_prices_...)
    uniform = dataclasses.replace(PRIORS, spot_price_per_hour={z: 0.918 for z in ZONES},
                                  on_demand_price_per_hour=3.06)
    res = prov.run_stage(_spec(priors=uniform), attempt=1, on_event=events.append)

    assert res.completed and res.info["jobs"] == [1, 2, 3]
    # zone rotation: each relaunch drops the preempted zones from the ordered list
    assert ctl.zones_per_job[1] == ["us-east-2a", "us-east-1a", "us-west-2c"]
    assert ctl.zones_per_job[2][0] != "us-east-2a" and "us-east-2a" not in ctl.zones_per_job[2]
    assert "us-east-2a" not in ctl.zones_per_job[3]
    assert ctl.zones_per_job[2][0] not in ctl.zones_per_job[3]
    # the preempted jobs were cancelled through the SDK (SkyPilot would have retried them)
    assert [api_server.jobs[j]["status"].value for j in (1, 2, 3)] == \
        ["CANCELLED", "CANCELLED", "SUCCEEDED"]
    # the real SDK went through its whole request path
    for call in [("GET", "/api/health"), ("POST", "/validate"), ("POST", "/jobs/launch"),
                 ("POST", "/jobs/queue/v2"), ("POST", "/jobs/cancel"), ("GET", "/api/get")]:
        assert call in api_server.calls
    # sessions: zones, end reasons and catalog prices
    assert [s.zone for s in res.sessions] == [ctl.zones_per_job[j][0] for j in (1, 2, 3)]
    assert [s.end_reason for s in res.sessions] == ["preempted", "preempted", "completed"]
    assert res.sessions[0].price_per_hour == pytest.approx(0.2756)
    assert all(s.provider == "skypilot" and s.cloud == "aws" and s.spot for s in res.sessions)
    kinds = [e.kind for e in events]
    assert kinds.count("preempted") == 2 and kinds.count("relaunch") == 2 and kinds[-1] == "completed"
    # the stage's policy (default: the project's own) placed every job: the class fleet-sim runs
    from fleet.simulation.sweep import make_policies

    decided = {e.data["policy_class"] for e in events if e.kind == "decision"}
    assert decided == {type(make_policies(["spotfleet"])[0]).__qualname__}
    assert sum(e.kind == "decision" for e in events) == 3

    from fleet.stats.preemption import session_stats

    stats = session_stats(res.sessions)
    assert sum(s.preemptions for s in stats) == 2


def test_failed_job_raises_attempt_failed_with_reason(api_server):
    ctl = Controller(api_server, ["CUDA out of memory in step 12"])
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=ctl)
    with pytest.raises(AttemptFailed, match="CUDA out of memory"):
        prov.run_stage(_spec())
    assert [s.end_reason for s in prov.sessions()] == ["failed"]


def test_cancel_reaches_the_managed_job(api_server):
    prov: SkyPilotProvider

    def sleep(_s: float) -> None:
        job = api_server.jobs[1]
        if job["status"].value == "PENDING":
            api_server.run(1, "us-east-2a")
        else:
            prov.cancel("pretrain")

    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=sleep)
    with pytest.raises(AttemptFailed, match="cancelled"):
        prov.run_stage(_spec())
    assert api_server.jobs[1]["status"].value == "CANCELLED"


def test_the_yaml_policy_drives_skypilot_the_same_class_fleet_sim_evaluates(api_server):
    """policy: failover -> SkyPilot's ordered list is the policy's target + fallbacks."""
    from fleet.policies.registry import policy_class
    from fleet.simulation.sweep import make_policies

    ctl = Controller(api_server, ["preempt", "succeed"])
    events = []
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=ctl)
    res = prov.run_stage(_spec(policy="failover"), on_event=events.append)
    assert res.completed
    decisions = [e for e in events if e.kind == "decision"]
    sim_cls = type(make_policies(["failover"])[0])
    assert {e.data["policy_class"] for e in decisions} == {sim_cls.__qualname__}
    assert policy_class("failover") is sim_cls
    assert [e.data["policy"] for e in decisions] == ["failover", "failover"]
    # each job's resources.ordered is exactly the policy's list of spot tries
    for e, job in zip(decisions, sorted(ctl.zones_per_job), strict=True):
        tries = [t for t in e.data["tries"] if t not in ("idle", "on-demand")]
        assert ctl.zones_per_job[job] == tries


def test_a_multi_node_job_is_told_the_jobs_mttp_not_one_nodes(api_server):
    """SkyPilot recovers a multi-node managed job as a whole when one node is preempted:
    the job's MTTP is one node's over the node count (independent nodes), and that is what
    its nodes are told (until 2026-11-28 one node's: an interval up to sqrt(n) too long).
    What the attempt observes is the job's already: each loss ends every node's session."""
    from sky.utils import dag_utils

    from fleet.providers.attempt import AttemptRecord

    priors = RunPriors(mttp_seconds={z: 4.0 for z in ZONES}, restart_seconds=1.0,
                       checkpoint_seconds=0.05, interval_seconds=1.5, work_seconds=10.0)
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=Controller(api_server, ["succeed"]))
    assert prov.run_stage(_spec(priors=priors, num_nodes=4)).completed
    envs = dict(dag_utils.load_chain_dag_from_yaml_str(api_server.launched_yaml[1]).tasks[0].envs)
    assert float(envs["SPOTFLEET_MTTP_SECONDS"]) == pytest.approx(1.0)  # 4.0 s / 4 nodes
    one = AttemptRecord(_spec(priors=priors), 1, None)
    assert one.mttp_estimate(ZONES[0]) == pytest.approx(4.0)
    assert one.mttp_estimate(ZONES[0], job_nodes=4) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="job_nodes"):
        one.mttp_estimate(ZONES[0], job_nodes=0)


@pytest.mark.slow
def test_training_process_gets_the_priors_and_keeps_insurance_saves(api_server, tmp_path):
    """The SkyPilot task environment carries MTTP / R / interval / checkpoint time; a real
    training process started with exactly that environment takes insurance saves every tau
    from the start (the plan's C is its delta prior: no bootstrap save); without the priors
    it takes only the bootstrap save."""
    import os
    import subprocess
    import sys

    from sky.utils import dag_utils

    from checkpointing.events import read_events

    priors = RunPriors(mttp_seconds={z: 4.0 for z in ZONES}, restart_seconds=1.0,
                       checkpoint_seconds=0.05, interval_seconds=1.5, work_seconds=10.0)
    ctl = Controller(api_server, ["succeed"])
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=ctl)
    assert prov.run_stage(_spec(priors=priors)).completed
    dag = dag_utils.load_chain_dag_from_yaml_str(api_server.launched_yaml[1])
    envs = dict(dag.tasks[0].envs)
    assert float(envs["SPOTFLEET_MTTP_SECONDS"]) == pytest.approx(4.0)
    assert float(envs["SPOTFLEET_RESTART_SECONDS"]) == pytest.approx(1.0)
    assert float(envs["SPOTFLEET_INTERVAL_SECONDS"]) == pytest.approx(1.5)
    assert float(envs["SPOTFLEET_CHECKPOINT_SECONDS"]) == pytest.approx(0.05)

    def train(env_extra: dict, name: str) -> list:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTFLEET_")}
        env.update(env_extra)
        # on the VM the notice comes from the cloud's endpoint; here only a signal, and a
        # notice window shorter than one step: Algorithm 1 then relies on insurance saves
        env.update({"SPOTFLEET_NOTICE_SOURCES": "signal:SIGTERM", "SPOTFLEET_GRACE_SECONDS": "0.001",
                    "SPOTFLEET_EVENTS_FILE": str(tmp_path / f"{name}.jsonl"),
                    "SPOTFLEET_CHECKPOINT_URI": str(tmp_path / name)})
        subprocess.run([sys.executable, str(REPO / "examples" / "train_example.py"), "--steps", "160",
                        "--size", "tiny", "--step-sleep", "0.02", "--periodic-every", "0"],
                       env=env, check=True, cwd=REPO, stdout=subprocess.DEVNULL, timeout=300)
        return [e for e in read_events(tmp_path / f"{name}.jsonl")
                if e.kind == "save_committed" and e.data.get("kind") == "insurance"]

    with_priors = train(envs, "with")
    without = train({k: v for k, v in envs.items() if k not in (
        "SPOTFLEET_MTTP_SECONDS", "SPOTFLEET_RESTART_SECONDS", "SPOTFLEET_INTERVAL_SECONDS",
        "SPOTFLEET_CHECKPOINT_SECONDS")}, "without")
    assert [e.data["step"] for e in without] == [10]  # the bootstrap save only: no MTTP, no tau
    # insurance saves every tau = sqrt(2 C (MTTP + R)) = 0.71 s, about 30 steps, from the start
    assert len(with_priors) >= 3 and 10 not in [e.data["step"] for e in with_priors]


def _train_to(store: Path, step: int, total: int = 100, step_seconds: float = 144.0) -> None:
    """A real TrainingSession on the stage's checkpoint prefix, run to ``step`` and saved."""
    import torch

    from checkpointing.events import EventLog
    from checkpointing.session import TrainingSession

    model = torch.nn.Linear(4, 1)
    s = TrainingSession(store=str(store), model=model, total_steps=total, job_id="pretrain-job",
                        events=EventLog(store.parent / "events.jsonl"), insurance="off")
    for _ in range(s.restore(), step):
        s.end_step(step_seconds)
    assert s.finish() == 0


def test_the_policy_sees_the_progress_the_training_writes_to_the_checkpoint_store(api_server, tmp_path):
    """No events reach the SkyPilot controller; the checkpoint store does: each decision
    gets the newest committed step and the loop's total steps / step time from the
    manifests (PolicyDriver.decide's Progress, as on the local fleet)."""
    from checkpointing.manifest import list_checkpoints
    from checkpointing.stores.base import open_store
    from fleet.providers.decisions import progress_from_checkpoints

    ckpt = tmp_path / "ckpt"
    _train_to(ckpt, 40)  # an earlier attempt got to step 40
    [info] = list_checkpoints(open_store(str(ckpt)))
    # 100 steps x 144 s: the planned 4 h of work (PRIORS.work_seconds)
    assert info.meta["progress"] == {"total_steps": 100, "mean_step_seconds": 144.0}
    p = progress_from_checkpoints([info])
    assert (p.committed_step, p.step, p.total_steps, p.step_seconds) == (40, 40, 100, 144.0)
    assert p.fractions() == (0.4, 0.0)

    ctl = Controller(api_server, ["preempt", "succeed"])

    def sleep(s: float) -> None:
        job = api_server.jobs.get(1)
        if job is not None and job["status"].value == "RUNNING" and 1 not in ctl.handled:
            _train_to(ckpt, 70)  # the first job trains to step 70, then is preempted
        ctl(s)

    events = []
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0, progress_poll_seconds=0), sleep=sleep)
    assert prov.run_stage(_spec(checkpoint_uri=str(ckpt)), on_event=events.append).completed
    seen = [(e.data["committed_step"], e.data["total_steps"], e.data["step_seconds"])
            for e in events if e.kind == "decision"]
    assert seen == [(40, 100, 144.0), (70, 100, 144.0)]
    # the checkpoint time in each job's environment: the plan's C (30 s) refined by the
    # stalls of the checkpoints on the prefix at that launch (fleet.contract)
    from fleet.contract import posterior_checkpoint_seconds

    stalls = {c.step: c.stall_seconds for c in list_checkpoints(open_store(str(ckpt)))}
    assert sorted(stalls) == [40, 70]
    sent = [float(e.data["training_env"]["SPOTFLEET_CHECKPOINT_SECONDS"]) for e in events
            if e.kind == "launch"]
    assert sent == [pytest.approx(posterior_checkpoint_seconds(30.0, [stalls[40]]), rel=1e-5),
                    pytest.approx(posterior_checkpoint_seconds(30.0, [stalls[40], stalls[70]]), rel=1e-5)]


def test_an_unreadable_store_leaves_the_policy_without_progress_not_failing(api_server, monkeypatch):
    # an S3 prefix the controller has no credentials for (endpoint: a closed loopback port)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    ctl = Controller(api_server, ["succeed"])
    events = []
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=ctl)
    assert prov.run_stage(_spec(), on_event=events.append).completed
    [d] = [e for e in events if e.kind == "decision"]
    assert d.data["committed_step"] == 0 and d.data["total_steps"] is None


def test_an_on_demand_launch_exports_no_mttp(api_server):
    """Nothing preempts an on-demand node: its process gets R / interval / checkpoint time
    but no MTTP, so it takes no insurance saves (an MTTP averaged over the spot zones made
    on-demand processes save as if they could be preempted)."""
    from sky.utils import dag_utils

    ctl = Controller(api_server, ["succeed"])
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=ctl)
    assert prov.run_stage(_spec(use_spot=False)).completed
    dag = dag_utils.load_chain_dag_from_yaml_str(api_server.launched_yaml[max(api_server.launched_yaml)])
    task = dag.tasks[0]
    assert not any(r.use_spot for r in task.resources)
    envs = dict(task.envs)
    assert "SPOTFLEET_MTTP_SECONDS" not in envs
    assert float(envs["SPOTFLEET_RESTART_SECONDS"]) == pytest.approx(300.0)


def test_a_stage_planned_without_prices_is_priced_from_the_catalog_not_as_a_v100(sky_offline):
    """The policy decides in $/h: missing plan prices come from the catalog for the stage's own
    accelerator (L4 here); an accelerator the catalog lacks stays unpriced, and the driver then
    refuses to decide instead of using the V100 fallback prices."""
    from fleet.providers.decisions import FALLBACK_SPOT_PRICE, PolicyDriver, Progress
    from fleet.providers.skypilot.provider import catalog_priced

    priced = catalog_priced(_spec())
    assert set(priced.spot_price_per_hour) == set(ZONES)
    zone = ZONES[0]
    itype = resolve_instance_type(_spec(), zone=zone, use_spot=True)
    assert priced.spot_price_per_hour[zone] == pytest.approx(hourly_price(itype, True, zone=zone))
    assert priced.on_demand_price_per_hour > max(priced.spot_price_per_hour.values())
    assert FALLBACK_SPOT_PRICE not in priced.spot_price_per_hour.values()
    unknown = _spec(accelerator="H9000")
    assert catalog_priced(unknown).spot_price_per_hour == {}
    driver = PolicyDriver("spotfleet", ZONES, priors=catalog_priced(unknown), accelerator="H9000")
    with pytest.raises(ValueError, match="no spot price for accelerator H9000"):
        driver.job_spec(Progress())


# ------------------------------------------------------------------ budget (enforce_budget)

#: the plan's uniform prices (as in test_stage_survives_preemptions_with_zone_rotation): the
#: policy relaunches at once after a preemption
UNIFORM = dataclasses.replace(PRIORS, spot_price_per_hour={z: 0.918 for z in ZONES}, on_demand_price_per_hour=3.06)


def _cheapest_spot(spec: StageSpec) -> float:
    return min(hourly_price(resolve_instance_type(spec, zone=z, use_spot=True), True, zone=z) for z in ZONES)


def test_an_enforced_budget_stops_the_first_launch_before_any_managed_job(api_server):
    """budget_left_usd below the node group's start-up (cheapest candidate x nodes x R): no
    managed job is launched; the message (BUDGET_STOP: the orchestrator's non-retriable
    Failure) gives the figures and the fix."""
    from fleet.providers.base import BUDGET_STOP

    spec = _spec(budget_left_usd=0.01, num_nodes=2)
    start_up = _cheapest_spot(spec) * 2 * PRIORS.restart_seconds / 3600.0  # 0.2756 x 2 x 300 s = $0.0459
    assert start_up == pytest.approx(0.0459, abs=1e-4)
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=Controller(api_server, ["succeed"]))
    with pytest.raises(AttemptFailed) as err:
        prov.run_stage(spec)
    msg = str(err.value)
    assert BUDGET_STOP in msg and "NOT launched" in msg and "its first launch" in msg
    assert f"${start_up:.4f} (its start-up)" in msg and "$0.0100 left" in msg and "Raise budget_usd" in msg
    assert api_server.jobs == {} and ("POST", "/jobs/launch") not in api_server.calls
    assert list(prov.sessions()) == []


def test_a_stage_looks_up_its_on_demand_prices_once(api_server, monkeypatch):
    """One catalog look-up of the candidates' on-demand prices per stage, shared by the
    priors (catalog_priced) and the driver; until 2026-11-27 a stage planned without an
    on-demand price made it twice."""
    from fleet.providers.skypilot import provider as sp

    calls = []
    real = sp.catalog_on_demand_prices

    def counted(spec):
        calls.append(spec.name)
        return real(spec)

    monkeypatch.setattr(sp, "catalog_on_demand_prices", counted)
    assert not PRIORS.on_demand_price_per_hour  # the plan carried none
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=Controller(api_server, ["succeed"]))
    with pytest.raises(AttemptFailed):  # stopped by the budget before any job: a quick stage
        prov.run_stage(_spec(budget_left_usd=0.01))
    assert calls == ["pretrain"]
    # what the driver decides with is unchanged: the cheapest zone's catalog price
    assert sp.catalog_priced(_spec(), real(_spec())) == sp.catalog_priced(_spec())


def test_an_enforced_budget_stops_the_relaunch_after_a_preemption(api_server):
    """The first job fits (start-up $0.0230 <= $0.20 left) and runs one billed hour in
    us-east-2a ($0.2756) before it is preempted: spent + the relaunch's start-up is over what
    was left, so the provider does not launch a second managed job (the local provider's rule,
    fleet.providers.base.attempt_budget_error)."""
    from fleet.providers.base import BUDGET_STOP

    ctl = Controller(api_server, ["preempt", "succeed"])

    def sleep(s: float) -> None:
        job = api_server.jobs.get(1)
        if job is not None and job["status"].value == "PENDING":
            job["submitted_at"] -= 3600.0  # when it runs, the node has been up one hour
        ctl(s)

    spec = _spec(budget_left_usd=0.20, priors=UNIFORM)
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=sleep)
    events = []
    with pytest.raises(AttemptFailed) as err:
        prov.run_stage(spec, on_event=events.append)
    msg = str(err.value)
    [session] = prov.sessions()
    assert session.end_reason == "preempted" and session.zone == "us-east-2a"
    spent = session.price_per_hour * (session.ended_at - session.launched_at) / 3600.0
    assert spent == pytest.approx(0.2756, abs=1e-3)
    assert BUDGET_STOP in msg and "NOT relaunched" in msg and "a relaunch costs" in msg
    assert f"spent ${spent:.4f}" in msg and "$0.2000 left" in msg
    # the relaunch's floor: the cheapest zone the policy still offers (us-east-2a is down) for
    # the attempt's restart estimate, the plan's R (300 s) refined by the launch -> ready this
    # attempt measured (session 14; with the plan's R it was $0.0304: 0.3653 $/h in us-east-1a x 300 s)
    import re

    from fleet.contract import posterior_restart_seconds

    r = posterior_restart_seconds(spec.priors.restart_seconds, [session.ready_at - session.launched_at])
    assert spec.priors.restart_seconds == 300.0 and r > 1800.0
    floor = float(re.search(r"a relaunch costs at least \$([0-9.]+) \(its start-up\)", msg).group(1))
    assert floor == pytest.approx(0.0304 * r / 300.0, rel=2e-3)
    assert sorted(api_server.jobs) == [1] and api_server.jobs[1]["status"].value == "CANCELLED"
    assert [e.kind for e in events if e.kind in ("launch", "relaunch")] == ["launch"]


def test_a_budget_that_fits_changes_nothing(api_server, tmp_path):
    ctl = Controller(api_server, ["preempt", "succeed"])
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=ctl)
    res = prov.run_stage(_spec(budget_left_usd=5.0, priors=UNIFORM, checkpoint_uri=str(tmp_path / "ckpt")))
    assert res.completed and res.info["jobs"] == [1, 2]


# ------------------------------------------------------------------ unpriced sessions

def test_a_session_the_catalog_cannot_price_is_recorded_unpriced_and_the_report_says_so(
        api_server, tmp_path, caplog):
    """SkyPilot reports the job in a zone the catalog has no g6.xlarge spot price for: the
    session is recorded at $0/h (the "no price" mark), the provider warns with the node id,
    and the cost report built from the statistics DB flags it first, with the fix, instead
    of showing a silent $0."""
    import logging

    from assets import cost_tables as ct
    from assets.cost_report import ReportSelection, build_report
    from infra.db.recorder import record_attempt
    from infra.db.session import make_engine, upgrade

    def sleep(_s: float) -> None:
        job = api_server.jobs[1]
        if job["status"].value == "PENDING":
            job["submitted_at"] -= 1800.0  # half a billed hour by the time it ends
            api_server.run(1, "ap-south-9z")  # not in the catalog subset
        elif job["status"].value == "RUNNING":
            api_server.succeed(1)

    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0), sleep=sleep)
    with caplog.at_level(logging.WARNING, logger="fleet.providers.skypilot"):
        res = prov.run_stage(_spec(priors=UNIFORM))
    [s] = res.sessions
    assert res.completed and s.zone == "ap-south-9z" and s.price_per_hour == 0.0
    assert res.info["unpriced_sessions"] == [s.node_id] == ["pretrain-a1-j1-r0-n0"]
    assert any("UNPRICED" in r.message and s.node_id in r.message for r in caplog.records)

    eng = make_engine(f"sqlite:///{tmp_path / 'stats.db'}")
    upgrade(eng)
    record_attempt(eng, run_id="run-sky", pipeline="demo", stage="pretrain", attempt=1, provider="skypilot",
                   status="completed", sessions=res.sessions, events=[], started_at=s.launched_at,
                   ended_at=s.ended_at, start_step=None, final_step=None, total_steps=None,
                   on_demand_price=lambda _s: 0.8048)
    rep = build_report(eng, "demo", tmp_path / "reports", ReportSelection(("run-sky",)), write_focus=False)
    assert list(rep.unpriced["node_id"]) == [s.node_id]
    assert rep.unpriced["billed_hours"].iloc[0] == pytest.approx(0.5, abs=0.01)
    assert rep.totals["spend_usd"] == 0.0  # the $ are unknown, not zero: hence the warning
    head = rep.markdown.split("### Stages")[0]
    assert "WARNING: 1 node session (0.50 billed h) could not be priced" in head
    assert s.node_id in head and ct.UNPRICED_FIX in head
    assert "could not be priced" in rep.files["html"].read_text()


# ------------------------------------------------------------------ where on-demand runs

#: two zones in us-west-2: an on-demand job there may use either (the checkpoint's region)
OD_ZONES = ("us-east-2a", "us-east-1a", "us-west-2c", "us-west-2a")
#: us-east-1 the cheapest on-demand region for L4 (g6.xlarge; the subset prices all at 0.8048)
CHEAP_EAST_1 = {("g6.xlarge", "us-east-1"): 0.70}


class Scripted(Policy):
    """A fleet policy that goes where ``plan`` says, one entry per decision, and keeps
    every observation it was given."""

    name = "scripted"

    def __init__(self, plan: list[int]):
        self.plan = list(plan)
        self.seen: list = []

    def decide(self, state, obs) -> Action:
        self.seen.append(obs)
        return Action(self.plan.pop(0), None, obs.tick + 1)


def _job_resources(api_server, job_id: int) -> list:
    from sky.utils import dag_utils

    return list(dag_utils.load_chain_dag_from_yaml_str(api_server.launched_yaml[job_id]).tasks[0].resources)


def _spot_then_on_demand(api_server, checkpoint_uri: str) -> tuple[Scripted, list, object]:
    """Spot in us-west-2c (third in zone order), preempted, then the policy says on-demand."""
    pol = Scripted([OD_ZONES.index("us-west-2c"), ON_DEMAND])
    ctl = Controller(api_server, ["preempt", "succeed"])
    events: list = []
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0, progress_poll_seconds=0, policy=pol), sleep=ctl)
    spec = _spec(zones=OD_ZONES, checkpoint_uri=checkpoint_uri,
                 priors=dataclasses.replace(PRIORS, mttp_seconds={z: 4 * 3600.0 for z in OD_ZONES}))
    res = prov.run_stage(spec, on_event=events.append)
    assert res.completed and res.info["jobs"] == [1, 2]
    return pol, events, res


@pytest.mark.parametrize("catalog_edits", [CHEAP_EAST_1])
def test_on_demand_after_a_save_runs_in_the_checkpoints_region(api_server, tmp_path):
    """Work saved while spot in us-west-2c: the on-demand managed job may use only us-west-2's
    zones (the last launch's first), though us-east-1 is the cheaper on-demand region -- the
    simulator's od_region(saved). Before: every candidate zone, SkyPilot picking."""
    ckpt = tmp_path / "ckpt"
    _train_to(ckpt, 40)  # committed work on the stage's prefix
    pol, events, res = _spot_then_on_demand(api_server, str(ckpt))
    spot_job, od_job = _job_resources(api_server, 1), _job_resources(api_server, 2)
    assert [r.zone for r in spot_job] == ["us-west-2c"] and all(r.use_spot for r in spot_job)
    assert [r.zone for r in od_job] == ["us-west-2c", "us-west-2a"]
    assert not any(r.use_spot for r in od_job)
    # the policy priced on-demand where it runs: per-zone catalog prices, the checkpoint's region
    obs = pol.seen[-1]
    assert obs.checkpoint_region == "us-west-2" == obs.on_demand_region
    assert list(obs.on_demand_price) == pytest.approx([0.8048, 0.70, 0.8048, 0.8048])
    [relaunch] = [e for e in events if e.kind == "relaunch"]
    assert relaunch.data["spot"] is False and relaunch.data["zones"] == ["us-west-2c", "us-west-2a"]
    assert [(s.zone, s.spot) for s in res.sessions] == [("us-west-2c", True), ("us-west-2c", False)]
    assert res.sessions[1].price_per_hour == pytest.approx(0.8048)


@pytest.mark.parametrize("catalog_edits", [CHEAP_EAST_1])
def test_on_demand_with_nothing_saved_runs_in_the_cheapest_catalog_region(api_server, tmp_path):
    """Preempted in us-west-2c before any save: nothing to carry, so on-demand goes to the
    cheapest on-demand region by the catalog (us-east-1, 0.70 $/h), not the last launch's nor
    the first zone's (us-east-2a)."""
    pol, events, res = _spot_then_on_demand(api_server, str(tmp_path / "empty-prefix"))
    od_job = _job_resources(api_server, 2)
    assert [r.zone for r in od_job] == ["us-east-1a"] and not od_job[0].use_spot
    obs = pol.seen[-1]
    assert obs.checkpoint_region is None and obs.on_demand_region == "us-east-1"
    assert [(s.zone, s.spot) for s in res.sessions] == [("us-west-2c", True), ("us-east-1a", False)]
    assert res.sessions[1].price_per_hour == pytest.approx(0.70)


@pytest.mark.parametrize("catalog_edits", [CHEAP_EAST_1])
def test_on_demand_prices_per_zone_come_from_the_catalog_at_the_plans_level(sky_offline):
    """Without a planned on-demand price: the catalog's per region. With one (the plan's
    cheapest region's): that level, the catalog's ratios between regions."""
    from fleet.providers.skypilot.provider import catalog_on_demand_prices

    assert catalog_on_demand_prices(_spec(zones=OD_ZONES, priors=PRIORS)) == pytest.approx(
        {"us-east-2a": 0.8048, "us-east-1a": 0.70, "us-west-2c": 0.8048, "us-west-2a": 0.8048})
    planned = catalog_on_demand_prices(_spec(zones=OD_ZONES, priors=UNIFORM))
    assert planned["us-east-1a"] == pytest.approx(3.06)
    assert planned["us-west-2c"] == pytest.approx(3.06 * 0.8048 / 0.70)
    assert catalog_on_demand_prices(_spec(accelerator="H9000")) == {}


@pytest.mark.parametrize("catalog_edits", [CHEAP_EAST_1])
def test_a_plan_without_prices_gets_the_cheapest_zones_on_demand_price_of_the_on_demand_type(
        sky_offline, monkeypatch):
    """``catalog_priced``'s flat on-demand price is the cheapest candidate zone's on-demand
    price (us-east-1, 0.70 $/h; the planner's flat price is its cheapest on-demand region's)
    of the instance type an on-demand job gets there. Before: the first zone's (us-east-2a,
    0.8048 $/h) and of the SPOT instance type."""
    from fleet.providers.skypilot import provider as sp

    bare = _spec(zones=OD_ZONES, priors=PRIORS)
    assert OD_ZONES[0] == "us-east-2a"
    priced = sp.catalog_priced(bare)
    assert priced.on_demand_price_per_hour == pytest.approx(0.70)
    assert priced.on_demand_price_per_hour == pytest.approx(min(sp.catalog_on_demand_prices(bare).values()))
    assert priced.spot_price_per_hour["us-east-2a"] == pytest.approx(
        hourly_price("g6.xlarge", True, zone="us-east-2a"))
    # a plan's own on-demand price is kept (only the missing spot prices are filled in)
    assert sp.catalog_priced(_spec(zones=OD_ZONES, priors=dataclasses.replace(
        PRIORS, on_demand_price_per_hour=3.06))).on_demand_price_per_hour == 3.06

    # the spot and the on-demand instance types differ (the subset has one type per
    # accelerator: the spot pick is made another one here): on-demand is priced as the
    # on-demand job's type, spot as the spot job's
    real = sp.resolve_instance_type

    def by_market(spec, zone=None, use_spot=None):
        return "g5.4xlarge" if use_spot else real(spec, zone=zone, use_spot=use_spot)

    monkeypatch.setattr(sp, "resolve_instance_type", by_market)
    priced = sp.catalog_priced(bare)
    assert priced.on_demand_price_per_hour == pytest.approx(0.70)  # g6.xlarge in us-east-1, not g5's 1.624
    assert priced.spot_price_per_hour["us-east-2a"] == pytest.approx(
        hourly_price("g5.4xlarge", True, zone="us-east-2a"))


# ------------------------------------------------------------------ the restart R the policy plans with

class _SlowStarts(Controller):
    """``Controller`` whose jobs take ``starts[i]`` seconds from ``submitted_at`` (the
    jobs controller starts launching the cluster) to ``start_at`` (the job runs on it)."""

    def __init__(self, fake, script: list[str], starts: list[float]):
        super().__init__(fake, script)
        self.starts = list(starts)

    def __call__(self, _seconds: float) -> None:
        job = self.fake.jobs[max(self.fake.jobs)] if self.fake.jobs else None
        if job is not None and job["status"].value == "PENDING":
            job["submitted_at"] = submitted = 1_000_000.0 * job["job_id"]
            real = self.fake.run

            def run(job_id, zone, cloud="AWS", at=None):
                real(job_id, zone, cloud, at=submitted + self.starts.pop(0))

            self.fake.run = run
            try:
                super().__call__(_seconds)
            finally:
                self.fake.run = real
            return
        super().__call__(_seconds)


def test_the_policy_plans_with_the_restart_skypilot_measured(api_server):
    """Every decision tells the policy the attempt's R: the plan's 300 s as one sample plus
    each job's launch -> ready as SkyPilot stamps it (``submitted_at`` -> ``start_at``; its
    controller sets ``last_recovered_at`` = ``start_at`` on a first start). Before: the
    plan's 300 s at every decision, and each session measured 0 s (launched at
    ``last_recovered_at``)."""
    spy = RestartSpy()
    ctl = _SlowStarts(api_server, ["preempt", "preempt", "succeed"], starts=[900.0, 1500.0, 600.0])
    events: list = []
    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0, policy=spy), sleep=ctl)
    res = prov.run_stage(_spec(), on_event=events.append)
    assert res.completed and res.info["jobs"] == [1, 2, 3]
    # R told: 300 (nothing measured), (300 + 900) / 2, (300 + 900 + 1500) / 3 seconds
    assert spy.told == pytest.approx([300 / 3600, 600 / 3600, 900 / 3600])
    assert [s.ready_at - s.launched_at for s in res.sessions] == pytest.approx([900.0, 1500.0, 600.0])
    assert [e.data["restart_seconds"] for e in events if e.kind == "decision"] == [300.0, 600.0, 900.0]
    assert res.info["policy_restart_seconds"] == pytest.approx(900.0)
    # the training process of each job is told the same R as the policy that placed it
    told_env = [float(e.data["training_env"]["SPOTFLEET_RESTART_SECONDS"]) for e in events if e.kind == "launch"]
    assert told_env == pytest.approx([300.0, 600.0, 900.0])


@pytest.mark.parametrize("seen_recovering", [True, False])
def test_a_cluster_skypilot_recovered_is_measured_from_the_recovery(api_server, seen_recovering):
    """With ``rotate_on_preemption=False`` SkyPilot recovers the job itself; the new
    cluster's launch -> ready runs from the poll that saw the job RECOVERING (or, when it
    recovered between two polls, the last poll that saw the old cluster) to its
    ``last_recovered_at``. Before: from ``last_recovered_at`` to the job's first
    ``start_at`` (clamped to 0 s), and the first cluster 0 s too."""
    clock = [1000.0]
    fake = api_server

    def sleep(_s: float) -> None:
        job = fake.jobs[1]
        st = job["status"].value
        if st == "PENDING":
            job["submitted_at"] = 1000.0
            clock[0] = 1900.0
            fake.run(1, ZONES[0], at=1900.0)  # first cluster: 900 s
        elif st == "RUNNING" and job["zone"] == ZONES[0]:
            clock[0] = 5000.0
            fake.preempt(1)
            if not seen_recovering:  # recovered before the next poll
                fake.run(1, ZONES[1], at=5700.0)
                clock[0] = 5800.0
        elif st == "RECOVERING":
            clock[0] = 5700.0
            fake.run(1, ZONES[1], at=5700.0)
        else:
            fake.succeed(1)
            job["end_at"] = clock[0] = 9000.0

    prov = SkyPilotProvider(SkyPilotConfig(poll_seconds=0, rotate_on_preemption=False,
                                           policy=RestartSpy()), sleep=sleep, clock=lambda: clock[0])
    res = prov.run_stage(_spec())
    assert res.completed and [s.end_reason for s in res.sessions] == ["preempted", "completed"]
    # seen RECOVERING at 5000 s; else the old cluster last seen running at 1900 s
    second = 700.0 if seen_recovering else 3800.0
    assert [s.ready_at - s.launched_at for s in res.sessions] == pytest.approx([900.0, second])
    assert [s.zone for s in res.sessions] == [ZONES[0], ZONES[1]]
