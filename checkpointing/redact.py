"""One credential-redaction helper for everything spotfleet logs, prints or stores.

Credentials reach text through URLs (``s3://KEY:SECRET@bucket/run``,
``AWS_ENDPOINT_URL=http://user:pass@host:7480``) and through ``NAME=value`` pairs of
secret environment variables. Every sink (error messages, the events file, log
records, Dagster metadata and logs, node logs) passes its text through ``redact``::

    redact("s3://AKIA:abc/def@bucket/run")          -> "s3://***@bucket/run"
    redact("AWS_SECRET_ACCESS_KEY=abc123")          -> "AWS_SECRET_ACCESS_KEY=***"
    redact_env({"AWS_SECRET_ACCESS_KEY": "abc"})    -> {"AWS_SECRET_ACCESS_KEY": "***"}
    strip_userinfo("http://u:p@host:80/x")          -> ("http://host:80/x", "u", "p")

``install()`` makes every log record and uncaught-exception traceback of the process go
through ``redact`` (idempotent; the training session calls it). The module depends on
the standard library only, so the orchestration side imports it too.

Redaction errs on the side of hiding: anything between ``scheme://`` and an ``@`` in
the same whitespace-free token is treated as user information.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Mapping
from typing import Any

REDACTED = "***"

# scheme://<userinfo>@  -- userinfo may hold '/', '+', '=' (AWS secrets do), but no
# whitespace, quotes, brackets or another '@'
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]{0,15}://)(?P<userinfo>[^\s'\"<>\[\]{}@]+)@")
# names of secret values: ...SECRET..., ...PASSWORD..., ..._TOKEN, API_KEY, signature, credential
_SECRET_NAME = (r"[A-Za-z0-9_\-]*(?:secret|password|passwd|_token\b|\btoken_|\btoken\b|api_?key|"
                r"signature|credential|private_key|session_key)[A-Za-z0-9_\-]*")
_NAME_VALUE = re.compile(
    r"(?P<name>" + _SECRET_NAME + r")(?P<sep>[\"']?\s*[=:]\s*[\"']?)(?P<value>[^\s'\",;&}\])\\]+)",
    re.IGNORECASE)
_SECRET_KEY = re.compile(r"^" + _SECRET_NAME + r"$", re.IGNORECASE)


def redact(text: Any) -> str:
    """``text`` (made a str) with URL credentials and secret ``name=value`` values hidden."""
    s = text if isinstance(text, str) else str(text)
    if "@" in s:
        s = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", s)
    if "=" in s or ":" in s:
        s = _NAME_VALUE.sub(_hide_value, s)
    return s


def _hide_value(m: re.Match[str]) -> str:
    if m.group("value") == REDACTED:
        return m.group(0)
    return f"{m.group('name')}{m.group('sep')}{REDACTED}"


def is_secret_name(name: str) -> bool:
    """True for names like AWS_SECRET_ACCESS_KEY, DB_PASSWORD, GITHUB_TOKEN, api_key."""
    return bool(_SECRET_KEY.match(name))


def redact_env(env: Mapping[str, Any]) -> dict[str, str]:
    """A copy of an environment mapping that is safe to show: secret names get ``***``,
    every other value goes through ``redact`` (URLs with credentials)."""
    return {k: (REDACTED if is_secret_name(k) and v else redact(v)) for k, v in env.items()}


def redact_obj(obj: Any) -> Any:
    """``obj`` with every string inside (dict keys kept, secret-named values hidden) redacted;
    for JSON-like data (events, metadata)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping):
        return {k: (REDACTED if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and v
                    else redact_obj(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_obj(v) for v in obj)
    return obj


def strip_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``scheme://user:pass@host/...`` -> (url without ``user:pass@``, user, password).

    Percent-escapes in user and password are decoded. URLs without user information
    come back unchanged with ``(None, None)``.
    """
    from urllib.parse import unquote

    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, None, None
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        userinfo, _, host = authority.rpartition("@")
    elif "@" in rest and ":" in rest.partition("@")[0]:
        # an unescaped '/' in the secret (AWS secrets have them): s3://KEY:SE/CRET@bucket/run
        userinfo, _, after = rest.partition("@")
        host, slash, path = after.partition("/")
    else:
        return url, None, None
    user, colon, password = userinfo.partition(":")
    return (f"{scheme}://{host}{slash}{path}", unquote(user) or None,
            unquote(password) if colon else None)


class RedactingFilter(logging.Filter):
    """A logging filter that redacts the formatted message and the exception text."""

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record)
        return True


def _redact_record(record: logging.LogRecord) -> logging.LogRecord:
    if getattr(record, "_spotfleet_redacted", False):
        return record
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a broken format string: leave it to the handler
        return record
    record.msg = redact(message)
    record.args = None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
    elif record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
    record._spotfleet_redacted = True
    return record


_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Redact every log record created from now on (any logger, any handler) and every
    uncaught exception's traceback. Idempotent."""
    global _installed
    with _install_lock:
        if _installed:
            return
        _installed = True
        factory = logging.getLogRecordFactory()

        def redacting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return _redact_record(factory(*args, **kwargs))

        logging.setLogRecordFactory(redacting_factory)
        hook = sys.excepthook

        def redacting_excepthook(exc_type, exc, tb) -> None:  # noqa: ANN001
            import traceback

            try:
                text = "".join(traceback.format_exception(exc_type, exc, tb))
                sys.stderr.write(redact(text))
                sys.stderr.flush()
            except Exception:  # noqa: BLE001 - fall back to the original hook
                hook(exc_type, exc, tb)

        sys.excepthook = redacting_excepthook
