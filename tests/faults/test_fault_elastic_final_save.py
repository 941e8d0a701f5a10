"""An elastic (multi-node) stage whose object store goes down before the final save.

Real processes: two torch elastic agents (``checkpointing.elastic_run``) under the local
fleet's ``ElasticStageRun``, gloo on 127.0.0.1, ``examples/train_elastic.py``, and a REAL
S3 server (Ceph radosgw) behind a loopback proxy that the test closes (connection
refused) once training passed step 200 of 300.

Rank 0 trains every step, cannot commit the final checkpoint and exits 74 (as a single
process does). Before: the other rank exited 0, so the controller reported the stage
completed (final_step 300) while the store's newest checkpoint was step 150 -- the next
stage would have started from it -- and rank 0's agent restarted its worker over and over
(each restart failed to restore from the unreachable store) until the other node's exit
barrier timed out. Now the attempt fails with rank 0's error (the store, what is saved
where, the fix) and no worker is restarted.

Rank 0 kept the final state in the local spill area, and its error says a re-run on this
machine resumes there. Before, the elastic restore read only the store: the retried
attempt resumed at step 150. Now it restores step 300 from the spill area and uploads it.
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
from fleet.providers.base import AttemptFailed  # noqa: E402
from fleet.providers.local.elastic_drill import (  # noqa: E402
    EventWatch,
    drill_run,
    join_or_cancel,
    run_in_thread,
    train_args,
)

pytestmark = [pytest.mark.slow, pytest.mark.s3]

STEPS = 300


def test_store_down_before_the_final_save_fails_the_elastic_stage(
        s3_gateway: RadosGateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = f"faults-{uuid.uuid4().hex[:12]}"
    s3_gateway.client().create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/stage"
    with FreezableProxy.for_url(s3_gateway.endpoint_url) as proxy:
        use_s3_through(monkeypatch, proxy.endpoint_url, ACCESS_KEY, SECRET_KEY, tmp_path / "spill")
        w = EventWatch()
        run = drill_run(tmp_path / "work", uri, nodes=2, on_event=w,  # type: ignore[arg-type]
                        args=train_args(STEPS, step_sleep=0.03))
        t, box = run_in_thread(run)
        try:
            assert w.wait(lambda e: 2 in w.world_sizes(), 300), w.world_sizes()
            assert w.wait(lambda e: w.max_step() >= 200, 300), w.max_step()
            proxy.close()  # S3 down: connection refused from now on
            t.join(400)
        finally:
            ended = join_or_cancel(run, t, 0.0)
    assert ended, "the elastic stage did not end"
    assert "result" not in box, f"reported complete without its final checkpoint: {str(box['result'])[:300]}"
    err = box["error"]
    assert isinstance(err, AttemptFailed), err
    message = str(err)
    assert "final checkpoint was not committed" in message and uri in message, message
    assert f"FINAL checkpoint (step {STEPS}) was NOT committed" in message, message
    exits = {e.node_id: e.data for e in w.of("exit")}
    failed = [d for d in exits.values() if d.get("reason") == "final_save_failed"]
    assert len(failed) == 1 and failed[0]["step"] == STEPS, exits
    saved = failed[0]["saved_step"]
    # no worker restarts after the final save failed: every group formed before it
    assert all(g["step"] < STEPS for g in w.groups()), w.groups()
    # nothing saved is lost: the newest committed checkpoint is intact, the final state spilled
    store = S3Store(bucket, "stage", client=s3_gateway.client())
    assert saved is not None and list_checkpoints(store)[-1].step == saved < STEPS
    assert failed[0]["spilled_step"] == STEPS

    # the store back: the retried attempt on this machine resumes from the spilled final
    # state (what rank 0's error promises), uploads it and ends with the same state.
    # Before: the elastic restore read only the store and trained steps 150-300 again.
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_gateway.endpoint_url)
    w2 = EventWatch()
    run2 = drill_run(tmp_path / "work2", uri, nodes=2, on_event=w2,  # type: ignore[arg-type]
                     args=train_args(STEPS, step_sleep=0.03))
    t2, box2 = run_in_thread(run2)
    t2.join(400)
    if t2.is_alive():
        run2.cancel()
        t2.join(60)
        pytest.fail("the retried elastic stage did not end")
    assert "result" in box2, box2.get("error")
    assert box2["result"].completed and box2["result"].final_step == STEPS
    restores = [e.data for e in w2.of("restore")]
    assert [r["step"] for r in restores] == [STEPS], restores
    assert restores[0]["location"].startswith(str(tmp_path / "spill")), restores
    assert box2["result"].info["state_sha256"] == failed[0]["state_sha256"]
    assert list_checkpoints(store)[-1].step == STEPS
