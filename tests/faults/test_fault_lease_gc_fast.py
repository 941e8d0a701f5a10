"""Fast checks of the prefix lease and the garbage collector on real stores (a local
directory; the conditional-put race also on the real radosgw). The end-to-end fault
reproductions are in test_fault_job_identity.py and test_fault_gc.py (slow)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from fault_s3 import new_bucket

from checkpointing.lease import LEASE_KEY, LeaseHeld, LeaseLost, LeaseRecord, PrefixLease
from checkpointing.manifest import MANIFEST_NAME, collect_garbage, list_checkpoints, scan
from checkpointing.saver import AsyncSaver
from checkpointing.stores.base import StorePreconditionFailed
from checkpointing.stores.local import LocalStore


def test_lease_other_job_refused_successor_takes_over_superseded_is_fenced(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "ckpt")
    a = PrefixLease(store, "job-A", ttl_seconds=600, node_id="n1")
    assert a.acquire() is None and a.held
    b = PrefixLease(store, "job-B", ttl_seconds=600, node_id="n2")
    with pytest.raises(LeaseHeld, match=r"job 'job-A' \(node n1.*This process is job 'job-B'"):
        b.check_available()
    with pytest.raises(LeaseHeld):
        b.acquire()
    a2 = PrefixLease(store, "job-A", ttl_seconds=600, node_id="n3")  # a relaunch of A
    taken = a2.acquire()
    assert taken is not None and taken.node_id == "n1" and a2.held
    with pytest.raises(LeaseLost, match="now held by job 'job-A' \\(node n3"):
        a.verify()
    assert not a.renew()
    assert a2.renew()
    a2.release()
    record = LeaseRecord.from_bytes(store.get_bytes(LEASE_KEY))
    assert record is not None and record.expires <= time.time()
    assert b.acquire() is not None and b.held  # an expired lease of another job is free


def test_lease_expiry_lets_another_job_in(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "ckpt")
    a = PrefixLease(store, "job-A", ttl_seconds=0.2)
    a.acquire()
    time.sleep(0.3)  # not a timing assertion: the lease is simply past its expiry now
    b = PrefixLease(store, "job-B", ttl_seconds=60)
    b.acquire()
    with pytest.raises(LeaseLost):
        a.verify()


def _race(store, n: int) -> list[str]:
    """``n`` threads of ``n`` different jobs acquire the free lease at once; return winners."""
    winners: list[str] = []
    barrier = threading.Barrier(n)

    def go(i: int) -> None:
        lease = PrefixLease(store, f"job-{i}", ttl_seconds=600)
        barrier.wait()
        try:
            lease.acquire()
            winners.append(lease.job_id)
        except LeaseHeld:
            pass

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return winners


def test_concurrent_acquire_on_a_local_dir_has_exactly_one_winner(tmp_path: Path) -> None:
    for round_ in range(5):
        store = LocalStore(tmp_path / f"ckpt{round_}")
        assert len(_race(store, 6)) == 1


@pytest.mark.s3
def test_conditional_put_and_acquire_race_on_real_s3(s3_gateway) -> None:
    from checkpointing.stores.s3 import S3Store

    store = S3Store(new_bucket(s3_gateway), "race", client=s3_gateway.client())
    version = store.put_if("k", b"one", None)
    with pytest.raises(StorePreconditionFailed):
        store.put_if("k", b"two", None)  # create-only
    new = store.put_if("k", b"three", version)  # compare-and-swap (radosgw's If-Match quirk)
    with pytest.raises(StorePreconditionFailed):
        store.put_if("k", b"four", version)  # stale version
    assert store.get_versioned("k") == (b"three", new)
    assert len(_race(store, 6)) == 1


def test_collect_garbage_keeps_the_save_in_flight_and_committed_ones(tmp_path: Path) -> None:
    import torch

    store = LocalStore(tmp_path / "ckpt")
    saver = AsyncSaver(store)
    saver.save({"w": torch.arange(10.0)}, 10, "periodic", block=True)
    saver.save({"w": torch.arange(10.0)}, 20, "periodic", block=True)
    saver.close()
    committed = list_checkpoints(store)
    root = tmp_path / "ckpt"
    (root / "ckpt-000000000030-periodic-torn0000").mkdir()
    (root / "ckpt-000000000030-periodic-torn0000" / "tensors-00000.bin").write_bytes(b"x" * 100)
    (root / "ckpt-000000009999-periodic-tmp00000").mkdir()
    (root / "ckpt-000000009999-periodic-tmp00000" / "tensors-00000.bin.tmp-abcd1234").write_bytes(b"y")
    (root / "ckpt-000000000040-periodic-badman00").mkdir()
    (root / "ckpt-000000000040-periodic-badman00" / MANIFEST_NAME).write_bytes(b"{torn")
    (root / "ckpt-000000000050-periodic-inflight").mkdir()
    (root / "ckpt-000000000050-periodic-inflight" / "tensors-00000.bin").write_bytes(b"z")
    report = collect_garbage(store, keep=("ckpt-000000000050-periodic-inflight",),
                             discard=(committed[0].name,))
    assert set(report.deleted) == {"ckpt-000000000030-periodic-torn0000", "ckpt-000000009999-periodic-tmp00000",
                                   "ckpt-000000000040-periodic-badman00", committed[0].name}
    assert [u.key for u in report.aborted] == ["ckpt-000000009999-periodic-tmp00000/tensors-00000.bin"]
    left_committed, left_incomplete, left_invalid = scan(store)
    assert [c.name for c in left_committed] == [committed[1].name]
    assert left_incomplete == ["ckpt-000000000050-periodic-inflight"] and left_invalid == {}
    assert store.list_partial("") == []
