"""AWS EC2 spot interruption notices through the instance metadata service, IMDSv2.

Protocol (EC2 user guide, "Spot Instance interruption notices" and "Use IMDSv2"):

1. ``PUT /latest/api/token`` with header ``X-aws-ec2-metadata-token-ttl-seconds: <1..21600>``
   returns a session token (text).
2. ``GET /latest/meta-data/spot/instance-action`` with header ``X-aws-ec2-metadata-token``:
   404 while no interruption is planned; 200 with JSON
   ``{"action": "terminate"|"stop"|"hibernate", "time": "2026-01-01T08:22:00Z"}`` about two
   minutes before the interruption (``time`` is when it happens, UTC).
3. ``GET /latest/meta-data/events/recommendations/rebalance``: 404, or 200 with
   ``{"noticeTime": "..Z"}`` when the instance is at elevated risk of interruption. A
   rebalance recommendation is advisory (source ``aws-rebalance``), not a kill notice.

A 401 means the token expired or is invalid: fetch a new one and retry once. AWS
recommends polling every 5 seconds; the default here is 1 s (the endpoint is local).
"""

from __future__ import annotations

import json
import time
from datetime import datetime

from checkpointing.notices.base import HttpError, Notice, PollingSource, http_request

TOKEN_PATH = "/latest/api/token"
INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
DEFAULT_URL = "http://169.254.169.254"


def parse_aws_time(text: str) -> float:
    """ISO 8601 UTC (``2026-01-01T08:22:00Z``) -> unix seconds."""
    return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()


class AwsImdsWatcher(PollingSource):
    """Poll IMDSv2 for a spot interruption (kill) and a rebalance recommendation (advisory)."""

    kind = "aws"

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        poll_seconds: float = 1.0,
        timeout_seconds: float = 2.0,
        token_ttl_seconds: int = 21600,
        watch_rebalance: bool = True,
    ):
        super().__init__(base_url, poll_seconds, timeout_seconds)
        if not 1 <= token_ttl_seconds <= 21600:
            raise ValueError(f"token_ttl_seconds must be 1..21600 seconds, got {token_ttl_seconds}")
        self.token_ttl_seconds = int(token_ttl_seconds)
        self.watch_rebalance = watch_rebalance
        self._token: str | None = None
        self._token_expires = 0.0
        self.token_fetches = 0

    def _fetch_token(self) -> str:
        url = self.base_url + TOKEN_PATH
        resp = http_request("PUT", url, {TTL_HEADER: str(self.token_ttl_seconds)},
                            body=b"", timeout=self.timeout_seconds)
        if resp.status != 200:
            raise HttpError(url, resp.status, f"IMDSv2 token request refused: {resp.text()[:200]}")
        self.token_fetches += 1
        self._token = resp.text().strip()
        # Refresh a little before expiry so a poll never carries a stale token.
        self._token_expires = time.monotonic() + max(1.0, self.token_ttl_seconds * 0.9)
        return self._token

    def _get(self, path: str) -> tuple[int, str]:
        """GET with the session token; on 401 fetch a new token and retry once."""
        if self._token is None or time.monotonic() >= self._token_expires:
            self._fetch_token()
        url = self.base_url + path
        for attempt in (0, 1):
            resp = http_request("GET", url, {TOKEN_HEADER: self._token or ""},
                                timeout=self.timeout_seconds)
            if resp.status == 401 and attempt == 0:
                self._fetch_token()
                continue
            return resp.status, resp.text()
        raise AssertionError("unreachable")

    def poll_once(self) -> list[Notice]:
        found: list[Notice] = []
        status, body = self._get(INSTANCE_ACTION_PATH)
        if status == 200:
            found.append(self._instance_action(body))
            return found
        if status != 404:
            raise HttpError(self.base_url + INSTANCE_ACTION_PATH, status, body[:200])
        if self.watch_rebalance:
            status, body = self._get(REBALANCE_PATH)
            if status == 200:
                found.append(self._rebalance(body))
            elif status != 404:
                raise HttpError(self.base_url + REBALANCE_PATH, status, body[:200])
        return found

    def _instance_action(self, body: str) -> Notice:
        received = time.time()
        try:
            doc = json.loads(body)
            action = str(doc["action"])
            deadline: float | None = parse_aws_time(str(doc["time"]))
        except (ValueError, KeyError, TypeError):
            # Still a kill notice: act on it with the default grace window.
            return Notice("aws", received, None, {"raw": body[:500], "parse_error": True})
        return Notice("aws", received, deadline, {"action": action, "time": doc["time"]})

    def _rebalance(self, body: str) -> Notice:
        received = time.time()
        try:
            notice_time = str(json.loads(body)["noticeTime"])
        except (ValueError, KeyError, TypeError):
            notice_time = body[:100]
        return Notice("aws-rebalance", received, None, {"noticeTime": notice_time})
