"""GCP Compute Engine preemption (spot / preemptible VM) through the metadata server.

Protocol (Compute Engine docs, "Detect if a VM was preempted" and "Wait for change"):

* ``GET /computeMetadata/v1/instance/preempted`` with header ``Metadata-Flavor: Google``
  returns ``FALSE`` until the VM is being preempted, then ``TRUE``. A request without
  the header (or with ``X-Forwarded-For``) is refused with 403.
* Adding ``?wait_for_change=true&last_etag=<ETag>`` makes it a hanging GET: the server
  answers as soon as the value differs from the one with that ETag, or after
  ``timeout_sec`` seconds with the unchanged value. Every answer carries an ``ETag``.

GCP gives about 30 s between the notice and the hard stop, but does not say when; the
notice therefore has ``deadline=None`` and the guard applies its grace window.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import time
import urllib.parse

from checkpointing.notices.base import HttpError, HttpResponse, Notice, PollingSource

PREEMPTED_PATH = "/computeMetadata/v1/instance/preempted"
FLAVOR_HEADER = {"Metadata-Flavor": "Google"}
DEFAULT_URL = "http://metadata.google.internal"
DOCUMENTED_WINDOW_SECONDS = 30.0


class GcpMetadataWatcher(PollingSource):
    """Hanging-GET watcher of ``instance/preempted`` (one request outstanding at a time)."""

    kind = "gcp"

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        poll_seconds: float = 0.05,
        timeout_seconds: float = 2.0,
        hang_seconds: int = 10,
    ):
        # poll_seconds is only the pause between hanging GETs; the wait is in the server.
        super().__init__(base_url, poll_seconds, timeout_seconds)
        self.hang_seconds = int(hang_seconds)
        self.last_etag: str | None = None
        self._conn: http.client.HTTPConnection | None = None

    def _get(self, url: str, read_timeout: float) -> HttpResponse:
        """GET through a connection that ``stop()`` can cut, so a hanging GET never
        delays shutdown."""
        parts = urllib.parse.urlsplit(url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname or "", parts.port, timeout=self.timeout_seconds)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        self._conn = conn
        try:
            conn.connect()
            if conn.sock is not None:
                conn.sock.settimeout(read_timeout)
            if self._stop.is_set():
                raise HttpError(url, None, "watcher stopped")
            conn.request("GET", target, headers=FLAVOR_HEADER)
            resp = conn.getresponse()
            return HttpResponse(resp.status, resp.read(), dict(resp.getheaders()))
        except (OSError, http.client.HTTPException) as exc:
            raise HttpError(url, None, str(exc) or type(exc).__name__) from exc
        finally:
            self._conn = None
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        super().stop()

    def poll_once(self) -> list[Notice]:
        url = self.base_url + PREEMPTED_PATH
        read_timeout = self.timeout_seconds
        if self.last_etag is not None:
            query = urllib.parse.urlencode({"wait_for_change": "true", "last_etag": self.last_etag,
                                            "timeout_sec": self.hang_seconds})
            url = f"{url}?{query}"
            read_timeout += self.hang_seconds
        resp = self._get(url, read_timeout)
        if resp.status != 200:
            raise HttpError(url, resp.status, resp.text()[:200])
        etag = next((v for k, v in resp.headers.items() if k.lower() == "etag"), None)
        self.last_etag = etag
        value = resp.text().strip().upper()
        if value == "TRUE":
            return [Notice("gcp", time.time(), None,
                           {"preempted": "TRUE", "etag": etag,
                            "documented_window_seconds": DOCUMENTED_WINDOW_SECONDS})]
        if value != "FALSE":
            raise HttpError(url, resp.status, f"unexpected value {value[:50]!r} (want TRUE/FALSE)")
        if etag is None:
            # No ETag means no hanging GET: fall back to plain polling once a second.
            self._stop.wait(1.0)
        return []
