"""Build notice sources from the ``SPOTFLEET_NOTICE_SOURCES`` syntax.

A comma-separated list of ``KIND[:ARG]``:

    signal[:SIGNAME]     SIGTERM when no name is given (``signal:SIGUSR1``, ``signal:15``)
    aws[:URL]            IMDSv2 base URL, default http://169.254.169.254
    gcp[:URL]            metadata server base URL, default http://metadata.google.internal
    azure[:URL]          IMDS base URL, default http://169.254.169.254

Example: ``signal:SIGTERM,aws:http://127.0.0.1:8123``.
"""

from __future__ import annotations

import urllib.parse

from checkpointing.notices.aws import AwsImdsWatcher
from checkpointing.notices.azure import AzureScheduledEventsWatcher
from checkpointing.notices.base import NoticeSource
from checkpointing.notices.gcp import GcpMetadataWatcher
from checkpointing.notices.signals import SignalSource, parse_signal

ENV_NOTICE_SOURCES = "SPOTFLEET_NOTICE_SOURCES"
DEFAULT_SOURCES = "signal:SIGTERM"
KINDS = ("signal", "aws", "gcp", "azure")
_HTTP = {"aws": AwsImdsWatcher, "gcp": GcpMetadataWatcher, "azure": AzureScheduledEventsWatcher}


class NoticeConfigError(ValueError):
    """A notice-source spec is malformed; the message names the variable and the fix."""


def _bad(var: str, spec: str, item: str, why: str) -> NoticeConfigError:
    return NoticeConfigError(
        f"{var}={spec!r}: entry {item!r} {why}. Use a comma list of signal[:SIGNAME], "
        "aws[:http://host:port], gcp[:http://host:port], azure[:http://host:port], "
        f"e.g. {var}=signal:SIGTERM,aws:http://127.0.0.1:8123"
    )


def parse_sources(
    spec: str | None,
    poll_seconds: float | None = None,
    var: str = ENV_NOTICE_SOURCES,
) -> list[NoticeSource]:
    """Parse a sources spec (``None``/empty -> ``signal:SIGTERM``) into unstarted sources.

    ``poll_seconds`` overrides the HTTP pollers' interval (seconds).
    ``var`` is the name used in error messages.
    """
    spec = (spec or "").strip() or DEFAULT_SOURCES
    sources: list[NoticeSource] = []
    seen: set[str] = set()
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        kind, _, arg = item.partition(":")
        kind = kind.strip().lower()
        if kind not in KINDS:
            raise _bad(var, spec, item, f"has unknown source {kind!r} (known: {', '.join(KINDS)})")
        if kind == "signal":
            try:
                sig = parse_signal(arg or "SIGTERM")
            except ValueError as exc:
                raise _bad(var, spec, item, str(exc).split(";")[0]) from exc
            key = f"signal:{sig.name}"
            source: NoticeSource = SignalSource(sig)
        else:
            url = arg.strip()
            if url:
                parsed = urllib.parse.urlsplit(url)
                if parsed.scheme not in ("http", "https") or not parsed.netloc:
                    raise _bad(var, spec, item, "needs an http(s)://host:port URL after the colon")
                kwargs = {"base_url": url}
            else:
                kwargs = {}
            if poll_seconds is not None:
                kwargs["poll_seconds"] = poll_seconds
            source = _HTTP[kind](**kwargs)
            key = source.describe()
        if key in seen:
            raise _bad(var, spec, item, "is listed twice")
        seen.add(key)
        sources.append(source)
    return sources
