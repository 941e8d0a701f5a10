"""Local HTTP servers that implement the clouds' documented preemption-notice protocols.

These stand in for endpoints that cannot exist on this machine (169.254.169.254 and
metadata.google.internal). Each implements the documented request/response contract,
including the parts that make clients fail when they get it wrong:

* ``AwsImdsEmulator``  IMDSv2: ``PUT /latest/api/token`` (TTL header 1..21600 required),
  every GET needs a valid unexpired ``X-aws-ec2-metadata-token`` (else 401);
  ``spot/instance-action`` and ``events/recommendations/rebalance`` 404 until set.
* ``GcpMetadataEmulator``  ``/computeMetadata/v1/...`` requires ``Metadata-Flavor: Google``
  (else 403); ``instance/preempted`` answers ``FALSE``/``TRUE`` with an ``ETag`` and
  supports hanging GETs (``wait_for_change``, ``last_etag``, ``timeout_sec``).
* ``AzureScheduledEventsEmulator``  ``/metadata/scheduledevents?api-version=..`` requires
  ``Metadata: true`` (else 400); ``Preempt`` events with RFC 1123 ``NotBefore``;
  ``POST {"StartRequests": [{"EventId": ..}]}`` acknowledges (recorded in ``acknowledged``).

All three refuse requests carrying ``X-Forwarded-For`` as the real services do. Each
also has a control path ``POST /_emulator/preempt?deadline=<unix s>`` (``/_emulator/rebalance``
for AWS, ``/_emulator/reset``) so a separate process can trigger notices when the server
runs from the command line:

    python -m fleet.emulation.metadata_servers --cloud aws --port 0

Thread-based (``http.server.ThreadingHTTPServer``), bound to 127.0.0.1. Times are unix
seconds.
"""

from __future__ import annotations

import argparse
import email.utils
import hashlib
import json
import secrets
import signal
import sys
import threading
import time
import urllib.parse
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "AwsImdsEmulator",
    "AzureScheduledEventsEmulator",
    "GcpMetadataEmulator",
    "MetadataEmulator",
    "make_emulator",
]

CONTROL_PREFIX = "/_emulator/"


class _Reply:
    def __init__(self, status: int, body: str | bytes = b"", content_type: str = "text/plain",
                 headers: dict[str, str] | None = None):
        self.status = status
        self.body = body.encode() if isinstance(body, str) else body
        self.content_type = content_type
        self.headers = headers or {}


class MetadataEmulator:
    """Base: a threaded HTTP server on 127.0.0.1 with a request log.

    ``requests`` holds ``(method, path, status)`` for every request served.
    """

    cloud = "base"

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host = host
        self.port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Condition()
        self.requests: list[tuple[str, str, int]] = []
        self.preemption_deadline: float | None = None

    # ---- lifecycle ----------------------------------------------------------------
    def start(self) -> str:
        """Start serving; return the base URL (``http://127.0.0.1:<port>``)."""
        if self._server is not None:
            return self.base_url
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length > 0 else b""
                split = urllib.parse.urlsplit(self.path)
                query = {k: v[-1] for k, v in urllib.parse.parse_qs(split.query).items()}
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    if split.path.startswith(CONTROL_PREFIX) and method == "POST":
                        reply = emulator._control(split.path[len(CONTROL_PREFIX):], query)
                    else:
                        reply = emulator._handle(method, split.path, query, headers, body)
                except Exception as exc:  # report, never kill the server thread
                    reply = _Reply(500, f"emulator error: {exc}")
                with emulator._lock:
                    emulator.requests.append((method, split.path, reply.status))
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(reply.body)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    # the node was killed (or exited) during a long poll (GCP
                    # wait_for_change): nobody to answer; printed a traceback before
                    return

            def do_GET(self) -> None:
                self._serve("GET")

            def do_PUT(self) -> None:
                self._serve("PUT")

            def do_POST(self) -> None:
                self._serve("POST")

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name=f"{self.cloud}-metadata-emulator")
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        """Stop serving and release the port (wakes any hanging GET)."""
        server, self._server = self._server, None
        if server is None:
            return
        with self._lock:
            self._lock.notify_all()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> MetadataEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def source_spec(self) -> str:
        """The ``SPOTFLEET_NOTICE_SOURCES`` entry that watches this emulator."""
        return f"{self.cloud}:{self.base_url}"

    # ---- notices --------------------------------------------------------------------
    def schedule_preemption(self, deadline_unix: float) -> None:
        """Post a preemption notice now; the node is to be killed at ``deadline_unix``."""
        raise NotImplementedError

    def reset(self) -> None:
        """Withdraw every notice (a fresh node)."""
        with self._lock:
            self.preemption_deadline = None
            self._reset_locked()
            self._lock.notify_all()

    def _reset_locked(self) -> None:
        pass

    def _control(self, action: str, query: dict[str, str]) -> _Reply:
        if action == "preempt":
            deadline = float(query.get("deadline") or time.time() + 30.0)
            self.schedule_preemption(deadline)
            return _Reply(200, json.dumps({"deadline": deadline}), "application/json")
        if action == "reset":
            self.reset()
            return _Reply(200, "{}", "application/json")
        if action == "rebalance" and hasattr(self, "rebalance"):
            self.rebalance()
            return _Reply(200, "{}", "application/json")
        return _Reply(404, f"unknown control action {action!r}")

    def _handle(self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
                body: bytes) -> _Reply:
        raise NotImplementedError


def _iso_utc(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AwsImdsEmulator(MetadataEmulator):
    """EC2 instance metadata service with IMDSv2 required (``HttpTokens=required``)."""

    cloud = "aws"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, instance_id: str = "i-0spotfleet0000001",
                 availability_zone: str = "us-east-1a"):
        super().__init__(host, port)
        self.instance_id = instance_id
        self.availability_zone = availability_zone
        self.action = "terminate"
        self.rebalance_time: float | None = None
        self._tokens: dict[str, float] = {}  # token -> expiry (unix seconds)
        self.tokens_issued = 0

    def schedule_preemption(self, deadline_unix: float, action: str = "terminate") -> None:
        if action not in ("terminate", "stop", "hibernate"):
            raise ValueError(f"action must be terminate, stop or hibernate, got {action!r}")
        with self._lock:
            self.preemption_deadline = float(deadline_unix)
            self.action = action

    def rebalance(self) -> None:
        """Post a rebalance recommendation (advisory: elevated interruption risk)."""
        with self._lock:
            self.rebalance_time = time.time()

    def expire_tokens(self) -> None:
        """Invalidate every issued token (clients must get a new one after a 401)."""
        with self._lock:
            self._tokens.clear()

    def _reset_locked(self) -> None:
        self.rebalance_time = None

    def _handle(self, method, path, query, headers, body):
        if "x-forwarded-for" in headers:
            return _Reply(403, "Forbidden")
        if path == "/latest/api/token":
            if method != "PUT":
                return _Reply(405, "Method Not Allowed")
            ttl_raw = headers.get("x-aws-ec2-metadata-token-ttl-seconds")
            try:
                ttl = int(ttl_raw or "")
            except ValueError:
                return _Reply(400, "Bad Request: missing or invalid X-aws-ec2-metadata-token-ttl-seconds")
            if not 1 <= ttl <= 21600:
                return _Reply(400, "Bad Request: TTL must be between 1 and 21600 seconds")
            token = secrets.token_urlsafe(42)
            with self._lock:
                self._tokens[token] = time.time() + ttl
                self.tokens_issued += 1
            return _Reply(200, token, headers={"X-aws-ec2-metadata-token-ttl-seconds": str(ttl)})
        if method != "GET":
            return _Reply(405, "Method Not Allowed")
        token = headers.get("x-aws-ec2-metadata-token")
        with self._lock:
            expiry = self._tokens.get(token or "")
            valid = expiry is not None and expiry > time.time()
            deadline, action, rebalance = self.preemption_deadline, self.action, self.rebalance_time
        if not valid:
            return _Reply(401, "Unauthorized")
        if path == "/latest/meta-data/spot/instance-action":
            if deadline is None:
                return _Reply(404, "Not Found")
            return _Reply(200, json.dumps({"action": action, "time": _iso_utc(deadline)}),
                          "application/json")
        if path == "/latest/meta-data/spot/termination-time":  # legacy item, same deadline
            if deadline is None or action != "terminate":
                return _Reply(404, "Not Found")
            return _Reply(200, _iso_utc(deadline))
        if path == "/latest/meta-data/events/recommendations/rebalance":
            if rebalance is None:
                return _Reply(404, "Not Found")
            return _Reply(200, json.dumps({"noticeTime": _iso_utc(rebalance)}), "application/json")
        if path == "/latest/meta-data/instance-id":
            return _Reply(200, self.instance_id)
        if path == "/latest/meta-data/placement/availability-zone":
            return _Reply(200, self.availability_zone)
        return _Reply(404, "Not Found")


class GcpMetadataEmulator(MetadataEmulator):
    """Compute Engine metadata server: ``instance/preempted`` with hanging GETs."""

    cloud = "gcp"
    MAX_HANG_SECONDS = 3600

    def __init__(self, host: str = "127.0.0.1", port: int = 0, instance_name: str = "spotfleet-vm",
                 zone: str = "projects/0/zones/us-central1-a"):
        super().__init__(host, port)
        self.instance_name = instance_name
        self.zone = zone
        self.preempted = False

    def schedule_preemption(self, deadline_unix: float) -> None:
        # GCP publishes no deadline: preempted flips to TRUE and ~30 s later the VM stops.
        with self._lock:
            self.preemption_deadline = float(deadline_unix)
            self.preempted = True
            self._lock.notify_all()

    def _reset_locked(self) -> None:
        self.preempted = False

    @staticmethod
    def _etag(value: str) -> str:
        return hashlib.sha1(value.encode()).hexdigest()[:16]

    def _handle(self, method, path, query, headers, body):
        flavor_headers = {"Metadata-Flavor": "Google"}
        if headers.get("metadata-flavor") != "Google" or "x-forwarded-for" in headers:
            return _Reply(403, "Your client does not have permission to get URL from this server. "
                               "Missing Metadata-Flavor:Google header.", "text/html")
        if method != "GET":
            return _Reply(405, "Method Not Allowed", headers=flavor_headers)
        if path == "/computeMetadata/v1/instance/preempted":
            value = self._wait_preempted(query)
            if value is None:  # server stopping
                return _Reply(503, "shutting down", headers=flavor_headers)
            return _Reply(200, value, "application/text",
                          {**flavor_headers, "ETag": self._etag(value)})
        if path == "/computeMetadata/v1/instance/name":
            return _Reply(200, self.instance_name, "application/text", flavor_headers)
        if path == "/computeMetadata/v1/instance/zone":
            return _Reply(200, self.zone, "application/text", flavor_headers)
        if path == "/computeMetadata/v1/instance/maintenance-event":
            return _Reply(200, "NONE", "application/text", flavor_headers)
        return _Reply(404, "Not Found", headers=flavor_headers)

    def _wait_preempted(self, query: dict[str, str]) -> str | None:
        def value() -> str:
            return "TRUE" if self.preempted else "FALSE"

        with self._lock:
            if query.get("wait_for_change", "").lower() != "true":
                return value()
            start_value = value()
            last_etag = query.get("last_etag")
            if last_etag is not None and last_etag != self._etag(start_value):
                return start_value  # already changed since the caller's version
            try:
                hang = min(float(query.get("timeout_sec") or self.MAX_HANG_SECONDS), self.MAX_HANG_SECONDS)
            except ValueError:
                hang = self.MAX_HANG_SECONDS
            end = time.monotonic() + hang
            while value() == start_value and self._server is not None:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
            return value() if self._server is not None else None


class AzureScheduledEventsEmulator(MetadataEmulator):
    """Azure IMDS Scheduled Events with ``Preempt`` events and acknowledgements."""

    cloud = "azure"
    SUPPORTED_VERSIONS = ("2017-11-01", "2019-01-01", "2019-08-01", "2020-07-01")

    def __init__(self, host: str = "127.0.0.1", port: int = 0, vm_name: str = "spotfleet-vm"):
        super().__init__(host, port)
        self.vm_name = vm_name
        self.document_incarnation = 1
        self.events: list[dict[str, Any]] = []
        self._deadlines: dict[str, float] = {}
        #: EventIds acknowledged through POST StartRequests, in order
        self.acknowledged: list[str] = []

    def schedule_preemption(self, deadline_unix: float, resources: list[str] | None = None) -> str:
        """Post a ``Preempt`` event with ``NotBefore`` = deadline; returns its EventId."""
        event_id = str(uuid.uuid4()).upper()
        with self._lock:
            self.preemption_deadline = float(deadline_unix)
            self._deadlines[event_id] = float(deadline_unix)
            self.events.append({
                "EventId": event_id,
                "EventType": "Preempt",
                "ResourceType": "VirtualMachine",
                "Resources": list(resources) if resources is not None else [self.vm_name],
                "EventStatus": "Scheduled",
                "NotBefore": email.utils.formatdate(deadline_unix, usegmt=True),
                "Description": "Virtual machine is being evicted (spot).",
                "EventSource": "Platform",
                "DurationInSeconds": -1,
            })
            self.document_incarnation += 1
        return event_id

    def _reset_locked(self) -> None:
        if self.events:
            self.events.clear()
            self._deadlines.clear()
            self.document_incarnation += 1

    def _document(self) -> dict[str, Any]:
        with self._lock:
            now = time.time()
            for event in self.events:  # NotBefore passed -> Started, NotBefore empty
                if event["EventStatus"] == "Scheduled" and now >= self._deadlines[event["EventId"]]:
                    event["EventStatus"] = "Started"
                    event["NotBefore"] = ""
                    self.document_incarnation += 1
            return {"DocumentIncarnation": self.document_incarnation,
                    "Events": [dict(e) for e in self.events]}

    def _handle(self, method, path, query, headers, body):
        if headers.get("metadata", "").lower() != "true" or "x-forwarded-for" in headers:
            return _Reply(400, json.dumps({"error": "Bad request. Required metadata header not specified"}),
                          "application/json")
        version = query.get("api-version")
        if not version:
            return _Reply(400, json.dumps({"error": "Bad request. api-version was not specified in the request"}),
                          "application/json")
        if path == "/metadata/instance/compute/name":
            return _Reply(200, self.vm_name)
        if path != "/metadata/scheduledevents":
            return _Reply(404, json.dumps({"error": "Not found"}), "application/json")
        if version not in self.SUPPORTED_VERSIONS:
            return _Reply(400, json.dumps({"error": "Bad request. api-version is invalid",
                                           "newest-versions": list(self.SUPPORTED_VERSIONS[::-1])}),
                          "application/json")
        if method == "GET":
            return _Reply(200, json.dumps(self._document()), "application/json")
        if method == "POST":
            return self._start_requests(body)
        return _Reply(405, "Method Not Allowed")

    def _start_requests(self, body: bytes) -> _Reply:
        try:
            requests = json.loads(body or b"{}")["StartRequests"]
            ids = [str(r["EventId"]) for r in requests]
        except (ValueError, KeyError, TypeError):
            return _Reply(400, json.dumps({"error": 'Bad request. Expected {"StartRequests": [{"EventId": ...}]}'}),
                          "application/json")
        with self._lock:
            known = {e["EventId"]: e for e in self.events}
            unknown = [i for i in ids if i not in known]
            if unknown:
                return _Reply(400, json.dumps({"error": f"Bad request. Unknown EventId {unknown[0]}"}),
                              "application/json")
            for event_id in ids:
                self.acknowledged.append(event_id)
                known[event_id]["EventStatus"] = "Started"
                known[event_id]["NotBefore"] = ""
            self.document_incarnation += 1
        return _Reply(200, b"", "application/json")


_CLOUDS: dict[str, type[MetadataEmulator]] = {
    "aws": AwsImdsEmulator,
    "gcp": GcpMetadataEmulator,
    "azure": AzureScheduledEventsEmulator,
}


def make_emulator(cloud: str, host: str = "127.0.0.1", port: int = 0) -> MetadataEmulator:
    """An unstarted emulator for ``cloud`` in ``aws``, ``gcp``, ``azure``."""
    try:
        return _CLOUDS[cloud](host=host, port=port)
    except KeyError:
        raise ValueError(f"unknown cloud {cloud!r}; choose one of {', '.join(_CLOUDS)}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fleet.emulation.metadata_servers",
        description="Serve one cloud's preemption-notice protocol on 127.0.0.1 until SIGTERM/SIGINT. "
                    "Trigger notices with POST /_emulator/preempt?deadline=<unix seconds>.")
    parser.add_argument("--cloud", required=True, choices=sorted(_CLOUDS))
    parser.add_argument("--port", type=int, default=0, help="port (0 = pick a free one)")
    parser.add_argument("--preempt-after", type=float, default=None, metavar="SECONDS",
                        help="post a notice this many seconds after start")
    parser.add_argument("--grace", type=float, default=30.0, metavar="SECONDS",
                        help="deadline = notice time + this (default 30)")
    args = parser.parse_args(argv)
    emulator = make_emulator(args.cloud, port=args.port)
    url = emulator.start()
    print(f"{args.cloud} metadata emulator at {url} (SPOTFLEET_NOTICE_SOURCES={emulator.source_spec()})",
          flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    if args.preempt_after is not None and not done.wait(args.preempt_after):
        emulator.schedule_preemption(time.time() + args.grace)
        print(f"posted preemption notice, deadline in {args.grace:.0f} s", flush=True)
    done.wait()
    emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
