"""A checkpoint store in an S3 bucket (AWS S3 or any S3-compatible server) via boto3.

Large blobs go up as multipart uploads (``part_size_bytes`` per part, up to
``max_concurrency`` parts in flight, boto3 ``TransferConfig``); small ones as a single
PUT. Each put is atomic by protocol: an object appears only when its PUT or its
``CompleteMultipartUpload`` succeeds, and boto3 aborts a failed multipart upload.

Failures become ``StoreError`` naming the endpoint, the bucket and what to check.
Connect timeouts are short and retries few, so an unreachable store fails in seconds,
not minutes. Sizes are bytes, durations seconds.

    store = S3Store.from_uri("s3://bucket/run1", endpoint_url="http://127.0.0.1:7480")
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterator
from typing import Any, BinaryIO

from checkpointing.redact import redact, strip_userinfo
from checkpointing.stores.base import (
    CheckpointStore,
    PartialUpload,
    StoreError,
    StorePreconditionFailed,
)

DEFAULT_PART_SIZE_BYTES = 64 << 20
DEFAULT_MAX_CONCURRENCY = 8
MIN_PART_SIZE_BYTES = 5 << 20  # S3 protocol minimum for every part but the last
#: per-request socket timeouts (seconds) and total tries; each overridable by the
#: environment (``ENV_*``) or the constructor. A request against a frozen endpoint gives
#: up after at most ``request_bound_seconds`` (attempts x (connect + read) + backoff).
DEFAULT_CONNECT_TIMEOUT_SECONDS = 3.0
DEFAULT_READ_TIMEOUT_SECONDS = 20.0
DEFAULT_MAX_ATTEMPTS = 3
ENV_CONNECT_TIMEOUT = "SPOTFLEET_S3_CONNECT_TIMEOUT_SECONDS"
ENV_READ_TIMEOUT = "SPOTFLEET_S3_READ_TIMEOUT_SECONDS"
ENV_MAX_ATTEMPTS = "SPOTFLEET_S3_MAX_ATTEMPTS"
#: botocore "standard" retry mode: sleep random() * 2**(retry) seconds, capped at 20 s
MAX_BACKOFF_SECONDS = 20.0
#: download size kept in memory by ``open_read`` before spilling to a temp file
SPOOL_BYTES = 256 << 20

_UNREACHABLE = ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
                "ConnectionClosedError", "ProxyConnectionError", "SSLError")
_AUTH = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403",
         "InvalidToken", "ExpiredToken", "AuthorizationHeaderMalformed")
_MISSING_KEY = ("NoSuchKey", "404", "NotFound")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")``; StoreError if malformed.

    Credentials in the URI (``s3://KEY:SECRET@bucket/prefix``) are dropped here (see
    ``S3Store.from_uri``, which uses them) and never appear in a message.
    """
    if not uri.startswith("s3://"):
        raise StoreError(f"{redact(uri)!r} is not an s3:// URI; write it as s3://bucket/prefix")
    uri = strip_userinfo(uri)[0]
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    if not bucket:
        raise StoreError(f"{uri!r} has no bucket name; write it as s3://bucket/prefix")
    return bucket, prefix.strip("/")


class S3Store(CheckpointStore):
    """Blobs as objects under ``s3://bucket/prefix``.

    endpoint_url: S3 API endpoint; ``None`` -> ``AWS_ENDPOINT_URL`` (then AWS itself)
    region: signing region; ``None`` -> ``AWS_REGION``/``AWS_DEFAULT_REGION`` or us-east-1
    part_size_bytes: multipart part size and threshold (>= 5 MiB), bytes
    max_concurrency: parts uploaded / downloaded in parallel
    connect_timeout_seconds, read_timeout_seconds: per request, seconds
    max_attempts: total tries per request (1 = no retry)
    client: an existing boto3 S3 client (then endpoint/region/timeouts are ignored)
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        part_size_bytes: int = DEFAULT_PART_SIZE_BYTES,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        connect_timeout_seconds: float | None = None,
        read_timeout_seconds: float | None = None,
        max_attempts: int | None = None,
        client: Any = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
    ):
        if part_size_bytes < MIN_PART_SIZE_BYTES:
            raise StoreError(f"part_size_bytes={part_size_bytes} is below the S3 minimum part size "
                             f"of {MIN_PART_SIZE_BYTES} bytes (5 MiB); use e.g. 64 MiB")
        if max_concurrency < 1:
            raise StoreError(f"max_concurrency={max_concurrency} must be >= 1")
        connect_timeout_seconds = _setting(connect_timeout_seconds, ENV_CONNECT_TIMEOUT,
                                           DEFAULT_CONNECT_TIMEOUT_SECONDS)
        read_timeout_seconds = _setting(read_timeout_seconds, ENV_READ_TIMEOUT,
                                        DEFAULT_READ_TIMEOUT_SECONDS)
        max_attempts = int(_setting(max_attempts, ENV_MAX_ATTEMPTS, DEFAULT_MAX_ATTEMPTS))
        if max_attempts < 1:
            raise StoreError(f"max_attempts={max_attempts} must be >= 1 (set {ENV_MAX_ATTEMPTS})")
        self.connect_timeout_seconds = connect_timeout_seconds
        self.read_timeout_seconds = read_timeout_seconds
        self.max_attempts = max_attempts
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") \
            or os.environ.get("AWS_ENDPOINT_URL") or None
        # user:pass@ in an endpoint URL means nothing to S3 (requests are signed with the
        # access key); drop it so that neither boto3 nor any message ever shows it
        self.endpoint_url = strip_userinfo(endpoint)[0] if endpoint else None
        self.region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") \
            or "us-east-1"
        self.part_size_bytes = int(part_size_bytes)
        self.max_concurrency = int(max_concurrency)
        self.location = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        if client is None:
            config = Config(
                connect_timeout=connect_timeout_seconds,
                read_timeout=read_timeout_seconds,
                # total tries (botocore's "max_attempts" would count retries only)
                retries={"total_max_attempts": max_attempts, "mode": "standard"},
                max_pool_connections=max(10, self.max_concurrency + 2),
                # Path-style for custom endpoints (no wildcard DNS on a local server);
                # checksums only where the API demands them (older S3-compatible servers).
                s3={"addressing_style": "path" if self.endpoint_url else "auto"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            )
            client = boto3.session.Session(
                aws_access_key_id=access_key_id, aws_secret_access_key=secret_access_key,
            ).client("s3", endpoint_url=self.endpoint_url, region_name=self.region, config=config)
        self.client = client
        self.transfer_config = TransferConfig(
            multipart_threshold=self.part_size_bytes,
            multipart_chunksize=self.part_size_bytes,
            max_concurrency=self.max_concurrency,
            use_threads=self.max_concurrency > 1,
            num_download_attempts=self.max_attempts,
        )

    @property
    def request_bound_seconds(self) -> float:
        """Worst case (seconds) for one request against an endpoint that stopped answering:
        every attempt runs into its connect or read timeout, plus the retry backoff."""
        backoff = sum(min(MAX_BACKOFF_SECONDS, 2.0 ** k) for k in range(self.max_attempts - 1))
        return self.max_attempts * (self.connect_timeout_seconds + self.read_timeout_seconds) + backoff

    @classmethod
    def from_uri(cls, uri: str, endpoint_url: str | None = None, region: str | None = None,
                 **kwargs: Any) -> S3Store:
        """Open ``s3://bucket/prefix``; keyword arguments as in the constructor.

        ``s3://KEY:SECRET@bucket/prefix`` uses KEY/SECRET as the credentials (prefer the
        usual AWS variables: a URI ends up in configs and process listings); the store's
        ``location`` and every message show the URI without them.
        """
        _clean, user, password = strip_userinfo(uri) if uri.startswith("s3://") else (uri, None, None)
        if user and password and "access_key_id" not in kwargs:
            kwargs["access_key_id"], kwargs["secret_access_key"] = user, password
        bucket, prefix = parse_s3_uri(uri)
        return cls(bucket, prefix, endpoint_url=endpoint_url, region=region, **kwargs)

    # -- helpers ---------------------------------------------------------------------
    @property
    def endpoint_label(self) -> str:
        return self.endpoint_url or f"AWS S3 ({self.region})"

    def _key(self, key: str) -> str:
        key = key.strip("/")
        if not key:
            raise StoreError(f"empty key for {self.location}; use a non-empty '/'-separated name")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _list_prefix(self, prefix: str) -> str:
        prefix = prefix.lstrip("/")
        return f"{self.prefix}/{prefix}" if self.prefix else prefix

    def _error(self, action: str, what: str, exc: BaseException) -> StoreError:
        """Translate a boto/botocore failure into a StoreError that says what to check."""
        name, code = _describe(exc)
        where = f"{what} at endpoint {self.endpoint_label}"
        reason = ""
        if name in _UNREACHABLE or code in _UNREACHABLE:
            reason = "unreachable"
            hint = ("the S3 endpoint is unreachable: check that the server is up, that the URL "
                    "(endpoint_url / AWS_ENDPOINT_URL) and port are right, and that the network "
                    "allows the connection")
        elif name == "NoCredentialsError" or code == "NoCredentialsError":
            reason = "no_credentials"
            hint = ("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                    "(or AWS_PROFILE) for this store")
        elif code == "NoSuchBucket":
            reason = "no_bucket"
            hint = (f"bucket {self.bucket!r} does not exist there: create it, or fix the bucket in "
                    "the checkpoint URI (SPOTFLEET_CHECKPOINT_URI, a pipeline's checkpoint_uri)")
        elif code in _AUTH:
            reason = "access_denied"
            hint = (f"access denied ({code}): check the access key, secret and the bucket policy "
                    f"for {self.bucket!r}")
        else:
            hint = f"{code or name}; check the endpoint, bucket {self.bucket!r} and credentials"
        return StoreError(redact(f"S3 {action} of {where} failed: {hint}. ({name}: {exc})"), reason=reason)

    # -- CheckpointStore -------------------------------------------------------------
    def put_file(self, key: str, src: BinaryIO | str, size: int | None = None) -> None:
        full = self._key(key)
        try:
            if isinstance(src, (str, os.PathLike)):
                self.client.upload_file(os.fspath(src), self.bucket, full, Config=self.transfer_config)
            else:
                self.client.upload_fileobj(src, self.bucket, full, Config=self.transfer_config)
        except Exception as exc:
            raise self._error("upload", f"s3://{self.bucket}/{full}", exc) from exc

    def put_bytes(self, key: str, data: bytes) -> None:
        full = self._key(key)
        try:
            if len(data) < self.part_size_bytes:
                self.client.put_object(Bucket=self.bucket, Key=full, Body=bytes(data))
            else:
                self.client.upload_fileobj(io.BytesIO(data), self.bucket, full,
                                           Config=self.transfer_config)
        except Exception as exc:
            raise self._error("upload", f"s3://{self.bucket}/{full}", exc) from exc

    def get_bytes(self, key: str) -> bytes:
        full = self._key(key)
        try:
            return self.client.get_object(Bucket=self.bucket, Key=full)["Body"].read()
        except Exception as exc:
            if _describe(exc)[1] in _MISSING_KEY:
                raise KeyError(f"{key} (s3://{self.bucket}/{full})") from exc
            raise self._error("download", f"s3://{self.bucket}/{full}", exc) from exc

    def open_read(self, key: str) -> BinaryIO:
        """A seekable stream of the blob: downloaded with parallel ranged GETs into a
        spooled temporary file (memory up to 256 MiB, then disk)."""
        full = self._key(key)
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES, prefix="spotfleet-s3-")  # noqa: SIM115 (returned open)
        try:
            self.client.download_fileobj(self.bucket, full, spool, Config=self.transfer_config)
        except Exception as exc:
            spool.close()
            if _describe(exc)[1] in _MISSING_KEY:
                raise KeyError(f"{key} (s3://{self.bucket}/{full})") from exc
            raise self._error("download", f"s3://{self.bucket}/{full}", exc) from exc
        spool.seek(0)
        return spool  # type: ignore[return-value]

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        full = self._list_prefix(prefix)
        strip = len(self.prefix) + 1 if self.prefix else 0
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full)
            for page in pages:
                for obj in page.get("Contents", []):
                    yield obj["Key"][strip:], int(obj["Size"])
        except Exception as exc:
            raise self._error("listing", f"s3://{self.bucket}/{full}", exc) from exc

    def delete_prefix(self, prefix: str) -> None:
        full = self._list_prefix(prefix)
        keys = [k for k, _ in self.list(prefix)]
        for start in range(0, len(keys), 1000):
            batch = [{"Key": self._key(k)} for k in keys[start:start + 1000]]
            try:
                resp = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            except Exception as exc:
                raise self._error("delete", f"s3://{self.bucket}/{full}", exc) from exc
            errors = resp.get("Errors") or []
            if errors:
                first = errors[0]
                raise StoreError(f"S3 delete under s3://{self.bucket}/{full} at endpoint {self.endpoint_label} "
                                 f"left {len(errors)} objects: {first.get('Key')}: {first.get('Code')} "
                                 f"{first.get('Message')}; check delete permission on the bucket")

    # -- conditional puts (prefix lease), partial uploads ------------------------------
    def get_versioned(self, key: str) -> tuple[bytes, str]:
        """(data, ETag) of a small object; ``KeyError`` if missing."""
        full = self._key(key)
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=full)
            return resp["Body"].read(), str(resp["ETag"])
        except Exception as exc:
            if _describe(exc)[1] in _MISSING_KEY:
                raise KeyError(f"{key} (s3://{self.bucket}/{full})") from exc
            raise self._error("download", f"s3://{self.bucket}/{full}", exc) from exc

    def put_if(self, key: str, data: bytes, expected_version: str | None) -> str:
        """PutObject with ``If-None-Match: *`` (create) or ``If-Match: <ETag>`` (replace).

        Some servers (Ceph radosgw 16) compare If-Match against the ETag WITHOUT its
        quotes: after a 412 the current ETag is read back and, when it is the expected
        one, the put is retried with the unquoted form -- still conditional.
        """
        full = self._key(key)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full, "Body": bytes(data)}
        if expected_version is None:
            kwargs["IfNoneMatch"] = "*"
        else:
            kwargs["IfMatch"] = expected_version
        for attempt in range(2):
            try:
                return str(self.client.put_object(**kwargs)["ETag"])
            except Exception as exc:
                code = _describe(exc)[1]
                if code not in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                    raise self._error("conditional upload", f"s3://{self.bucket}/{full}", exc) from exc
                unquoted = (expected_version or "").strip('"')
                if attempt == 0 and expected_version is not None and unquoted != expected_version:
                    try:
                        current = str(self.client.head_object(Bucket=self.bucket, Key=full)["ETag"])
                    except Exception:  # noqa: BLE001 - gone or unreadable: the condition failed
                        current = None
                    if current == expected_version:
                        kwargs["IfMatch"] = unquoted
                        continue
                raise StorePreconditionFailed(
                    f"conditional write of s3://{self.bucket}/{full} refused ({code}): it "
                    f"{'exists' if expected_version is None else 'changed since it was read'}") from exc
        raise StorePreconditionFailed(f"conditional write of s3://{self.bucket}/{full} refused")

    def list_partial(self, prefix: str = "") -> list[PartialUpload]:
        """Multipart uploads under ``prefix`` that were started and never completed or
        aborted (their writer was killed): invisible objects that still cost storage."""
        full = self._list_prefix(prefix)
        strip = len(self.prefix) + 1 if self.prefix else 0
        out: list[PartialUpload] = []
        try:
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=full)
            for page in pages:
                for up in page.get("Uploads", []) or []:
                    started = up.get("Initiated")
                    out.append(PartialUpload(key=up["Key"][strip:], upload_id=up["UploadId"],
                                             started=started.timestamp() if started else None))
        except Exception as exc:
            raise self._error("multipart listing", f"s3://{self.bucket}/{full}", exc) from exc
        return out

    def abort_partial(self, upload: PartialUpload) -> None:
        full = self._key(upload.key)
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=full, UploadId=upload.upload_id)
        except Exception as exc:
            if _describe(exc)[1] in ("NoSuchUpload", "404"):
                return
            raise self._error("multipart abort", f"s3://{self.bucket}/{full}", exc) from exc

    def check_access(self) -> None:
        """One ListObjectsV2 (at most one key) under the prefix: the bucket exists, the
        endpoint answers and the credentials may list it; else ``StoreError`` with a reason."""
        try:
            self.client.list_objects_v2(Bucket=self.bucket, Prefix=self._list_prefix(""), MaxKeys=1)
        except Exception as exc:
            raise self._error("access check", self.location, exc) from exc

    # -- extras ----------------------------------------------------------------------
    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (for local servers and first runs)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return
        except Exception as exc:
            if _describe(exc)[1] not in ("404", "NoSuchBucket", "NotFound"):
                raise self._error("bucket check", f"s3://{self.bucket}", exc) from exc
        try:
            kwargs: dict[str, Any] = {"Bucket": self.bucket}
            if self.region != "us-east-1" and not self.endpoint_url:
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
            self.client.create_bucket(**kwargs)
        except Exception as exc:
            if _describe(exc)[1] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise self._error("bucket creation", f"s3://{self.bucket}", exc) from exc


def _setting(value: float | None, env: str, default: float) -> float:
    """An explicit value, else the environment variable ``env``, else ``default``."""
    if value is None:
        raw = os.environ.get(env, "").strip()
        if not raw:
            return float(default)
        try:
            value = float(raw)
        except ValueError:
            raise StoreError(f"{env}={raw!r} is not a number; set it to e.g. {default:g}") from None
    if value <= 0:
        raise StoreError(f"{env}={value} must be > 0")
    return float(value)


def _describe(exc: BaseException) -> tuple[str, str]:
    """(exception class name, S3 error code or '') — looking through boto3's wrappers."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        response = getattr(cur, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            return type(cur).__name__, code
        name = type(cur).__name__
        if name in _UNREACHABLE or name == "NoCredentialsError":
            return name, name
        cur = cur.__cause__ or cur.__context__
    # boto3's S3UploadFailedError keeps only the text of the underlying error.
    text = str(exc)
    for marker in (*_UNREACHABLE, "NoSuchBucket", "AccessDenied", "InvalidAccessKeyId",
                   "SignatureDoesNotMatch", "NoCredentialsError"):
        if marker in text or (marker == "EndpointConnectionError" and "Could not connect" in text):
            return type(exc).__name__, marker
    return type(exc).__name__, ""
