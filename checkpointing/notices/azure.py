"""Azure Scheduled Events (spot VM eviction) through the Instance Metadata Service.

Protocol (Azure docs, "Scheduled Events for Linux VMs"):

* ``GET /metadata/scheduledevents?api-version=2020-07-01`` with header ``Metadata: true``
  (requests without it get 400) returns
  ``{"DocumentIncarnation": n, "Events": [{"EventId", "EventType", "ResourceType",
  "Resources", "EventStatus", "NotBefore", "Description", "EventSource",
  "DurationInSeconds"}]}``. A spot eviction is ``EventType: "Preempt"`` with a
  ``NotBefore`` (RFC 1123, e.g. ``Mon, 19 Sep 2016 18:29:47 GMT``) at least 30 s ahead;
  ``NotBefore`` may be empty once the event has ``EventStatus: "Started"``.
* ``Resources`` lists the VM names the event applies to (events are shared across an
  availability set); a VM acts only on events naming it.
* Acknowledge (let the event proceed now) with ``POST`` to the same URL, same header,
  body ``{"StartRequests": [{"EventId": "<id>"}]}``.

The watcher does not acknowledge by itself: acknowledging starts the eviction, so the
training side calls ``PreemptionGuard.acknowledge()`` after its emergency save.
"""

from __future__ import annotations

import json
import time
from email.utils import parsedate_to_datetime

from checkpointing.notices.base import HttpError, Notice, PollingSource, http_request

EVENTS_PATH = "/metadata/scheduledevents"
COMPUTE_NAME_PATH = "/metadata/instance/compute/name"
API_VERSION = "2020-07-01"
METADATA_HEADER = {"Metadata": "true"}
DEFAULT_URL = "http://169.254.169.254"
KILL_EVENT_TYPES = ("Preempt",)


def parse_rfc1123(text: str) -> float | None:
    """``Mon, 19 Sep 2016 18:29:47 GMT`` -> unix seconds; empty -> None."""
    if not text or not text.strip():
        return None
    return parsedate_to_datetime(text.strip()).timestamp()


class AzureScheduledEventsWatcher(PollingSource):
    """Poll Scheduled Events for a ``Preempt`` event naming this VM."""

    kind = "azure"

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        poll_seconds: float = 1.0,
        timeout_seconds: float = 2.0,
        vm_name: str | None = None,
        kill_event_types: tuple[str, ...] = KILL_EVENT_TYPES,
    ):
        super().__init__(base_url, poll_seconds, timeout_seconds)
        self.vm_name = vm_name
        self.kill_event_types = kill_event_types
        self.document_incarnation: int | None = None
        self._name_looked_up = vm_name is not None

    @property
    def events_url(self) -> str:
        return f"{self.base_url}{EVENTS_PATH}?api-version={API_VERSION}"

    def _lookup_vm_name(self) -> None:
        """Ask IMDS for this VM's name (to match ``Resources``); keep None if unknown."""
        self._name_looked_up = True
        url = f"{self.base_url}{COMPUTE_NAME_PATH}?api-version=2021-02-01&format=text"
        try:
            resp = http_request("GET", url, METADATA_HEADER, timeout=self.timeout_seconds)
        except HttpError:
            return
        if resp.status == 200 and resp.text().strip():
            self.vm_name = resp.text().strip()

    def poll_once(self) -> list[Notice]:
        if not self._name_looked_up:
            self._lookup_vm_name()
        resp = http_request("GET", self.events_url, METADATA_HEADER, timeout=self.timeout_seconds)
        if resp.status != 200:
            raise HttpError(self.events_url, resp.status, resp.text()[:200])
        try:
            doc = json.loads(resp.body)
            events = list(doc.get("Events") or [])
            self.document_incarnation = doc.get("DocumentIncarnation")
        except (ValueError, AttributeError) as exc:
            raise HttpError(self.events_url, resp.status, f"not a Scheduled Events document: {exc}") from exc
        for event in events:
            if event.get("EventType") not in self.kill_event_types:
                continue
            resources = event.get("Resources") or []
            if self.vm_name and resources and self.vm_name not in resources:
                continue
            try:
                deadline = parse_rfc1123(str(event.get("NotBefore") or ""))
            except (TypeError, ValueError):
                deadline = None
            detail = {k: event.get(k) for k in ("EventId", "EventType", "ResourceType", "Resources",
                                                 "EventStatus", "NotBefore", "EventSource")}
            detail["DocumentIncarnation"] = self.document_incarnation
            return [Notice("azure", time.time(), deadline, detail)]
        return []

    def acknowledge(self, notice: Notice) -> bool:
        """POST ``StartRequests`` for the notice's EventId (the VM is ready to be evicted)."""
        event_id = notice.detail.get("EventId") if notice.source == "azure" else None
        if not event_id:
            return False
        body = json.dumps({"StartRequests": [{"EventId": event_id}]}).encode()
        resp = http_request("POST", self.events_url,
                            {**METADATA_HEADER, "Content-Type": "application/json"},
                            body=body, timeout=self.timeout_seconds)
        if resp.status != 200:
            raise HttpError(self.events_url, resp.status, f"acknowledge refused: {resp.text()[:200]}")
        return True
