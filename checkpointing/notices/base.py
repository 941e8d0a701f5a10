"""What every notice source shares: the ``Notice`` record, the source interface and a
small standard-library HTTP helper for the metadata pollers.

Runs on the training VM, so it uses only the standard library (``urllib``).
All times are unix seconds (``time.time()``); all durations are seconds.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("checkpointing.notices")

#: Sources whose notice means "this node will be killed" (kill notices).
KILL_SOURCES = ("signal", "aws", "gcp", "azure")
#: Advisory sources: reported, but the node is not (yet) being killed.
ADVISORY_SOURCES = ("aws-rebalance",)


@dataclass(frozen=True)
class Notice:
    """One preemption notice.

    source:       ``"signal" | "aws" | "gcp" | "azure" | "aws-rebalance"``
    received_at:  unix seconds when this process saw the notice
    deadline:     unix seconds when the node will be killed, if the source says so
                  (AWS ``time``, Azure ``NotBefore``); ``None`` otherwise
    detail:       what the source reported (action, event id, signal name, ...)
    """

    source: str
    received_at: float
    deadline: float | None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def is_kill(self) -> bool:
        """True for a notice that the node will be taken away (not a recommendation)."""
        return self.source not in ADVISORY_SOURCES


Deliver = Callable[[Notice], None]


class NoticeSource(abc.ABC):
    """Something that tells the guard a preemption is coming.

    ``start(deliver)`` arms the source; it calls ``deliver(notice)`` (possibly from a
    signal handler or a background thread) when a notice arrives. ``stop()`` disarms it
    and returns the process to how it was (handlers restored, threads joined).
    """

    #: short name used in notices and logs (``signal``, ``aws``, ``gcp``, ``azure``)
    kind: str = "abstract"

    @abc.abstractmethod
    def start(self, deliver: Deliver) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    def acknowledge(self, notice: Notice) -> bool:
        """Tell the platform the node is ready to go (Azure only). Returns True if sent."""
        return False

    def describe(self) -> str:
        return self.kind


class HttpError(Exception):
    """An HTTP exchange with a metadata endpoint failed (status or transport)."""

    def __init__(self, url: str, status: int | None, message: str):
        super().__init__(f"{url}: {status or 'no response'} {message}")
        self.url = url
        self.status = status


@dataclass
class HttpResponse:
    status: int
    body: bytes
    headers: Mapping[str, str]

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def http_request(
    method: str,
    url: str,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = 2.0,
) -> HttpResponse:
    """One HTTP exchange without proxies. Non-2xx statuses are returned, not raised;
    transport failures (refused, timeout) raise ``HttpError`` with status None.

    ``timeout`` is in seconds (connect and each read).
    """
    req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return HttpResponse(resp.status, resp.read(), dict(resp.headers.items()))
    except urllib.error.HTTPError as exc:
        data = exc.read() if exc.fp is not None else b""
        return HttpResponse(exc.code, data, dict(exc.headers.items()) if exc.headers else {})
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise HttpError(url, None, str(reason)) from exc


# Metadata endpoints are link-local: never send them through an HTTP proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class PollingSource(NoticeSource):
    """A source that runs ``poll_once`` on a daemon thread every ``poll_seconds``.

    ``poll_once`` returns the notices it found (possibly none). A kill notice ends the
    polling; an advisory one is delivered once and polling goes on. Transport errors are
    logged once per outage and retried: a metadata server that is briefly down must not
    break training.
    """

    def __init__(self, base_url: str, poll_seconds: float = 1.0, timeout_seconds: float = 2.0):
        if poll_seconds <= 0:
            raise ValueError(f"poll_seconds must be > 0 seconds, got {poll_seconds}")
        self.base_url = base_url.rstrip("/")
        self.poll_seconds = float(poll_seconds)
        self.timeout_seconds = float(timeout_seconds)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._deliver: Deliver | None = None
        self._advisories_seen: set[str] = set()
        self.polls = 0
        self.errors = 0
        self.last_error: str | None = None

    def describe(self) -> str:
        return f"{self.kind}:{self.base_url}"

    @abc.abstractmethod
    def poll_once(self) -> list[Notice]: ...

    def start(self, deliver: Deliver) -> None:
        if self._thread is not None:
            return
        self._deliver = deliver
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"spotfleet-notice-{self.kind}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.timeout_seconds + 1.0)

    def _run(self) -> None:
        in_outage = False
        while not self._stop.is_set():
            try:
                notices = self.poll_once()
                self.polls += 1
                if in_outage:
                    log.info("%s: metadata endpoint reachable again", self.describe())
                in_outage = False
            except HttpError as exc:
                if self._stop.is_set():  # cut short by stop(): not an outage
                    return
                self.errors += 1
                self.last_error = str(exc)
                if not in_outage:
                    log.warning("%s: cannot read notices (%s); retrying every %.1f s",
                                self.describe(), exc, self.poll_seconds)
                in_outage = True
                notices = []
            killed = False
            for notice in notices:
                if not notice.is_kill:
                    key = repr(sorted(notice.detail.items()))
                    if key in self._advisories_seen:
                        continue
                    self._advisories_seen.add(key)
                assert self._deliver is not None
                self._deliver(notice)
                killed = killed or notice.is_kill
            if killed:
                return
            self._stop.wait(self.poll_seconds)


def now() -> float:
    """Current unix time in seconds."""
    return time.time()
