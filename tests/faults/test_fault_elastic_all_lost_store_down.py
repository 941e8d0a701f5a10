"""Every node of an elastic stage gets its notice while the object store is down.

Real processes: two torch elastic agents under the local fleet's ``ElasticStageRun``
(gloo on 127.0.0.1, ``examples/train_elastic.py``) and a REAL S3 server (Ceph radosgw)
behind a loopback proxy that the test closes (connection refused) before reclaiming both
zones at once.

Rank 0 writes the group's one emergency checkpoint. Before: it tried only the store
(no deadline, so never the local spill area a single process uses), the save failed and
both nodes left with nothing saved since the last periodic checkpoint; the relaunched
group restored step 50 and trained those steps again. Now the emergency checkpoint goes
to the spill area before the notice deadline, and the relaunched group (store back)
restores exactly the step the old group left at, bit for bit, and uploads it.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[0] / "s3"))
from fault_kit import FreezableProxy, use_s3_through  # noqa: E402
from s3_radosgw_server import ACCESS_KEY, SECRET_KEY, RadosGateway  # noqa: E402

from checkpointing.manifest import list_checkpoints  # noqa: E402
from checkpointing.stores.s3 import S3Store  # noqa: E402
from fleet.providers.local.elastic_drill import (  # noqa: E402
    EventWatch,
    drill_run,
    join_or_cancel,
    run_in_thread,
    train_args,
)

pytestmark = [pytest.mark.slow, pytest.mark.s3]

STEPS = 300
ZONES = ("us-east-1a", "us-east-1b")


def test_all_nodes_noticed_with_the_store_down_spill_and_resume_exactly(
        s3_gateway: RadosGateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = f"faults-{uuid.uuid4().hex[:12]}"
    s3_gateway.client().create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/stage"
    proxy = FreezableProxy.for_url(s3_gateway.endpoint_url)
    use_s3_through(monkeypatch, proxy.endpoint_url, ACCESS_KEY, SECRET_KEY, tmp_path / "spill")
    w = EventWatch()
    run = drill_run(tmp_path / "work", uri, nodes=2, zones=ZONES, on_event=w,  # type: ignore[arg-type]
                    args=train_args(STEPS, step_sleep=0.03))
    t, box = run_in_thread(run)
    try:
        assert w.wait(lambda e: 2 in w.world_sizes(), 300), w.world_sizes()
        assert w.wait(lambda e: any(x.data.get("step") == 50 for x in w.of("save_committed")), 300)
        assert w.wait(lambda e: w.max_step() >= 80, 300)
        proxy.close()  # S3 down: connection refused from now on
        lost = run.reclaim_zone(*ZONES)  # one correlated reclaim: every node noticed
        assert len(lost) == 2
        assert w.wait(lambda e: len([x for x in w.of("exit")
                                     if x.data.get("reason") == "preempted"]) == 2, 120)
        # the store is back (the relaunched nodes read the endpoint from the environment)
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_gateway.endpoint_url)
        run.regain_zone(*ZONES)
        t.join(400)
    finally:
        ended = join_or_cancel(run, t, 0.0)
    assert ended, "the elastic stage did not end"
    assert "result" in box, box.get("error")
    assert box["result"].completed and box["result"].final_step == STEPS

    leaves = [e for e in w.of("exit") if e.data.get("reason") == "preempted"]
    (stop,) = {e.data["step"] for e in leaves}
    spilled = [e.data for e in w.of("save_spilled")]
    assert [s["step"] for s in spilled] == [stop], spilled
    restores = [e.data for e in w.of("restore")]
    assert [r["step"] for r in restores] == [stop], restores  # before: 50
    resumed = [g for g in w.groups() if g["state_from"] == "checkpoint"]
    assert len(resumed) == 1 and resumed[0]["step"] == stop
    assert {e.data["state_sha256"] for e in leaves} == {resumed[0]["state_sha256"]}
    # the spilled checkpoint was uploaded to the store; the stage's final one is there too
    assert any(e.data["step"] == stop and e.data["location"].startswith(uri)
               for e in w.of("save_committed")), [e.data for e in w.of("save_committed")]
    steps = [c.step for c in list_checkpoints(S3Store(bucket, "stage", client=s3_gateway.client()))]
    assert steps[-1] == STEPS
    proxy.close()
