"""Each cloud watcher against a local server implementing that cloud's documented protocol."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse

import pytest

from checkpointing.guard import PreemptionGuard
from checkpointing.notices import AwsImdsWatcher, AzureScheduledEventsWatcher, GcpMetadataWatcher
from checkpointing.notices.base import http_request
from fleet.emulation.metadata_servers import (
    AwsImdsEmulator,
    AzureScheduledEventsEmulator,
    GcpMetadataEmulator,
)

POLL = 0.05


@pytest.fixture
def aws():
    emu = AwsImdsEmulator()
    emu.start()
    yield emu
    emu.stop()


@pytest.fixture
def gcp():
    emu = GcpMetadataEmulator()
    emu.start()
    yield emu
    emu.stop()


@pytest.fixture
def azure():
    emu = AzureScheduledEventsEmulator(vm_name="trainer-0")
    emu.start()
    yield emu
    emu.stop()


# ---------------------------------------------------------------- AWS IMDSv2
def test_aws_imdsv2_requires_token_and_ttl(aws: AwsImdsEmulator) -> None:
    url = aws.base_url + "/latest/meta-data/spot/instance-action"
    assert http_request("GET", url).status == 401  # IMDSv1-style GET refused
    assert http_request("PUT", aws.base_url + "/latest/api/token", body=b"").status == 400
    bad_ttl = {"X-aws-ec2-metadata-token-ttl-seconds": "21601"}
    assert http_request("PUT", aws.base_url + "/latest/api/token", bad_ttl, body=b"").status == 400
    tok = http_request("PUT", aws.base_url + "/latest/api/token",
                       {"X-aws-ec2-metadata-token-ttl-seconds": "60"}, body=b"").text()
    assert http_request("GET", url, {"X-aws-ec2-metadata-token": tok}).status == 404
    assert http_request("GET", url, {"X-aws-ec2-metadata-token": "forged"}).status == 401


def test_aws_interruption_notice_with_deadline(aws: AwsImdsEmulator) -> None:
    seen = []
    guard = PreemptionGuard([AwsImdsWatcher(aws.base_url, poll_seconds=POLL)], on_notice=seen.append)
    with guard:
        assert guard.wait_for_notice(0.3) is None
        deadline = time.time() + 120
        aws.schedule_preemption(deadline, action="stop")
        notice = guard.wait_for_notice(10)
    assert notice is not None and notice.source == "aws"
    assert notice.detail["action"] == "stop"
    assert notice.deadline == pytest.approx(int(deadline), abs=1.0)  # IMDS time has 1 s resolution
    assert guard.deadline == notice.deadline
    assert 100 < guard.seconds_left() <= 121
    assert [n.source for n in seen] == ["aws"]


def test_aws_token_refreshed_after_401(aws: AwsImdsEmulator) -> None:
    watcher = AwsImdsWatcher(aws.base_url, poll_seconds=POLL)
    assert watcher.poll_once() == []
    assert watcher.token_fetches == 1
    aws.expire_tokens()
    aws.schedule_preemption(time.time() + 120)
    notices = watcher.poll_once()
    assert [n.source for n in notices] == ["aws"]
    assert watcher.token_fetches == 2
    statuses = [s for (_m, p, s) in aws.requests if p.endswith("instance-action")]
    assert 401 in statuses and statuses[-1] == 200


def test_aws_rebalance_is_advisory_not_a_kill(aws: AwsImdsEmulator) -> None:
    seen = []
    got_advisory = threading.Event()

    def on_notice(n):
        seen.append(n)
        got_advisory.set()

    with PreemptionGuard([AwsImdsWatcher(aws.base_url, poll_seconds=POLL)], on_notice=on_notice) as guard:
        aws.rebalance()
        assert got_advisory.wait(10)
        time.sleep(5 * POLL)  # further polls must not repeat it
        assert guard.notice is None and guard.seconds_left() is None
        assert guard.advisory is not None and guard.advisory.source == "aws-rebalance"
        assert "noticeTime" in guard.advisory.detail
        aws.schedule_preemption(time.time() + 120)
        assert guard.wait_for_notice(10) is not None
    assert [n.source for n in seen] == ["aws-rebalance", "aws"]


# ---------------------------------------------------------------- GCP
def test_gcp_requires_metadata_flavor(gcp: GcpMetadataEmulator) -> None:
    url = gcp.base_url + "/computeMetadata/v1/instance/preempted"
    assert http_request("GET", url).status == 403
    assert http_request("GET", url, {"Metadata-Flavor": "Google", "X-Forwarded-For": "1.2.3.4"}).status == 403
    resp = http_request("GET", url, {"Metadata-Flavor": "Google"})
    assert resp.status == 200 and resp.text() == "FALSE" and resp.headers.get("ETag")


def test_gcp_hanging_get_returns_on_change(gcp: GcpMetadataEmulator) -> None:
    url = gcp.base_url + "/computeMetadata/v1/instance/preempted"
    first = http_request("GET", url, {"Metadata-Flavor": "Google"})
    etag = first.headers["ETag"]
    query = urllib.parse.urlencode({"wait_for_change": "true", "last_etag": etag, "timeout_sec": 1})
    unchanged = http_request("GET", f"{url}?{query}", {"Metadata-Flavor": "Google"}, timeout=5)
    assert unchanged.text() == "FALSE" and unchanged.headers["ETag"] == etag  # timed out unchanged
    threading.Timer(0.2, gcp.schedule_preemption, args=(time.time() + 30,)).start()
    query = urllib.parse.urlencode({"wait_for_change": "true", "last_etag": etag, "timeout_sec": 60})
    changed = http_request("GET", f"{url}?{query}", {"Metadata-Flavor": "Google"}, timeout=30)
    assert changed.text() == "TRUE" and changed.headers["ETag"] != etag


def test_gcp_watcher_detects_preemption(gcp: GcpMetadataEmulator) -> None:
    # hang_seconds far above the test's wait: only the hanging GET waking on change passes.
    watcher = GcpMetadataWatcher(gcp.base_url, hang_seconds=300)
    with PreemptionGuard([watcher], grace_seconds=25) as guard:
        for _ in range(200):
            if watcher.last_etag is not None:
                break
            time.sleep(0.01)
        time.sleep(0.1)
        gcp.schedule_preemption(time.time() + 30)
        notice = guard.wait_for_notice(20)
    assert notice is not None and notice.source == "gcp" and notice.deadline is None
    assert guard.deadline == pytest.approx(notice.received_at + 25)
    assert any("wait_for_change" not in p for (_m, p, _s) in gcp.requests)


# ---------------------------------------------------------------- Azure
def test_azure_requires_metadata_header(azure: AzureScheduledEventsEmulator) -> None:
    url = azure.base_url + "/metadata/scheduledevents?api-version=2020-07-01"
    assert http_request("GET", url).status == 400
    assert http_request("GET", azure.base_url + "/metadata/scheduledevents", {"Metadata": "true"}).status == 400
    doc = json.loads(http_request("GET", url, {"Metadata": "true"}).body)
    assert doc["Events"] == [] and isinstance(doc["DocumentIncarnation"], int)


def test_azure_preempt_detected_and_acknowledged(azure: AzureScheduledEventsEmulator) -> None:
    watcher = AzureScheduledEventsWatcher(azure.base_url, poll_seconds=POLL)
    with PreemptionGuard([watcher]) as guard:
        azure.schedule_preemption(time.time() + 30, resources=["some-other-vm"])  # not ours
        assert guard.wait_for_notice(0.5) is None
        deadline = time.time() + 30
        event_id = azure.schedule_preemption(deadline)
        notice = guard.wait_for_notice(10)
        assert notice is not None and notice.source == "azure"
        assert notice.detail["EventId"] == event_id
        assert notice.detail["EventType"] == "Preempt"
        assert notice.detail["Resources"] == ["trainer-0"]
        assert notice.deadline == pytest.approx(int(deadline), abs=1.0)  # RFC 1123: whole seconds
        assert watcher.vm_name == "trainer-0"  # learned from IMDS compute/name
        assert azure.acknowledged == []  # never acknowledged before the loop says so
        assert guard.acknowledge() is True
    assert azure.acknowledged == [event_id]
    doc = json.loads(http_request("GET", azure.base_url + "/metadata/scheduledevents?api-version=2020-07-01",
                                  {"Metadata": "true"}).body)
    ours = next(e for e in doc["Events"] if e["EventId"] == event_id)
    assert ours["EventStatus"] == "Started" and ours["NotBefore"] == ""


def test_azure_ack_of_unknown_event_is_refused(azure: AzureScheduledEventsEmulator) -> None:
    url = azure.base_url + "/metadata/scheduledevents?api-version=2020-07-01"
    body = json.dumps({"StartRequests": [{"EventId": "nope"}]}).encode()
    assert http_request("POST", url, {"Metadata": "true"}, body=body).status == 400
    assert azure.acknowledged == []


# ---------------------------------------------------------------- outage
def test_unreachable_endpoint_is_retried_not_fatal() -> None:
    emu = AwsImdsEmulator()
    url = emu.start()
    emu.stop()  # nothing listens on that port now
    watcher = AwsImdsWatcher(url, poll_seconds=POLL, timeout_seconds=0.5)
    with PreemptionGuard([watcher]) as guard:
        for _ in range(300):
            if watcher.errors >= 2:
                break
            time.sleep(0.01)
        assert guard.notice is None
    assert watcher.errors >= 2 and watcher.last_error and url in watcher.last_error


def test_gcp_stop_cuts_the_hanging_get(gcp: GcpMetadataEmulator) -> None:
    watcher = GcpMetadataWatcher(gcp.base_url, hang_seconds=300, timeout_seconds=0.5)
    guard = PreemptionGuard([watcher]).start()
    thread = watcher._thread
    for _ in range(500):  # wait until the hanging GET (with last_etag) is outstanding
        if watcher.last_etag is not None and watcher._conn is not None:
            break
        time.sleep(0.01)
    assert watcher._conn is not None
    guard.stop()  # joins for at most timeout_seconds + 1 s, far less than the 300 s hang
    assert thread is not None and not thread.is_alive()
    assert guard.notice is None
