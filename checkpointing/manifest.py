"""Commit protocol, listing, retention and restore-with-fallback for checkpoints.

Store-agnostic: works on any ``CheckpointStore`` (local directory, S3). One checkpoint
is a key prefix ``ckpt-<step:012d>-<kind>-<id>/`` holding data blobs and, written LAST,
``MANIFEST.json``::

    write blob 1 .. blob n   (each put is atomic; sha256 computed while writing)
    write MANIFEST.json      (step, kind, created, per-blob bytes + sha256, format
                              version, and a checksum of the manifest itself)

A prefix without a valid manifest is never loaded (it is a torn or abandoned save and
is deleted by the next retention pass). A manifest whose blobs are missing, have the
wrong size or the wrong sha256 makes ``restore_latest`` fall back to the previous
checkpoint with a warning.

Retention (thesis §5.1): keep the newest ``keep_periodic`` periodic checkpoints; an
insurance or emergency checkpoint is dropped once a newer periodic one commits (and at
most ``keep_insurance`` of them are kept in between).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from checkpointing.snapshot import BufferReader
from checkpointing.stores.base import CheckpointStore, PartialUpload, StoreError

log = logging.getLogger("checkpointing.manifest")

MANIFEST_NAME = "MANIFEST.json"
MANIFEST_FORMAT = "spotfleet-checkpoint"
FORMAT_VERSION = 1
PREFIX = "ckpt-"
KINDS = ("periodic", "insurance", "emergency")

#: env hook for tests: sleep this many seconds before each blob put (makes a kill
#: in the middle of a save reliably reachable). Never set it in production.
ENV_DEBUG_PERSIST_DELAY = "SPOTFLEET_DEBUG_PERSIST_DELAY_SECONDS"

T = TypeVar("T")


class CorruptCheckpoint(RuntimeError):
    """A committed checkpoint failed verification (missing blob, size or sha256 mismatch)."""


class CheckpointTooNew(RuntimeError):
    """A checkpoint was written by a newer spotfleet (its manifest format version is
    above ``FORMAT_VERSION``). It is not corrupt: it is never deleted (garbage
    collection, retention) and restore never falls back past it."""

    def __init__(self, message: str, *, version: Any = None, step: int | None = None):
        super().__init__(message)
        self.version = version
        self.step = step


class SaveAbandoned(RuntimeError):
    """The save was cancelled (superseded by an emergency save) before its manifest."""


class NoRoom(StoreError):
    """The store has not enough free space for the next checkpoint, even after deleting
    garbage and what the retention policy allows. Nothing was written."""


@dataclass(frozen=True)
class BlobInfo:
    bytes: int
    sha256: str


@dataclass(frozen=True)
class CheckpointInfo:
    """One committed checkpoint, as listed from its manifest.

    ``bytes`` is the total size of its blobs; ``save_seconds`` the persist time (seconds)
    and ``stall_seconds`` the time the training loop was blocked by the snapshot;
    ``created`` a unix timestamp (seconds); ``location`` the URI of its prefix.
    """

    name: str
    kind: str
    step: int
    bytes: int
    save_seconds: float
    stall_seconds: float
    location: str
    created: float
    blobs: dict[str, BlobInfo] = field(default_factory=dict, repr=False)
    meta: dict[str, Any] = field(default_factory=dict, repr=False)


def new_checkpoint_name(step: int, kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"checkpoint kind {kind!r} is not one of {KINDS}")
    if step < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    return f"{PREFIX}{step:012d}-{kind}-{uuid.uuid4().hex[:8]}"


def _manifest_checksum(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def encode_manifest(body: dict[str, Any]) -> bytes:
    doc = dict(body)
    doc["manifest_sha256"] = _manifest_checksum(body)
    return json.dumps(doc, sort_keys=True, indent=1).encode()


def decode_manifest(data: bytes) -> dict[str, Any]:
    """Parse and self-verify a manifest; raise ``CorruptCheckpoint`` if torn or edited,
    ``CheckpointTooNew`` if a newer library wrote it."""
    try:
        doc = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptCheckpoint(f"manifest is not valid JSON (torn write?): {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise CorruptCheckpoint("manifest has no 'format': 'spotfleet-checkpoint' field")
    try:
        version = int(doc.get("version", -1))
    except (TypeError, ValueError) as exc:
        raise CorruptCheckpoint(f"manifest version {doc.get('version')!r} is not a number") from exc
    if version > FORMAT_VERSION:
        step = doc.get("step")
        raise CheckpointTooNew(f"manifest format version {version} is newer than this library's "
                               f"({FORMAT_VERSION}); upgrade spotfleet to read it",
                               version=version, step=step if isinstance(step, int) else None)
    claimed = doc.pop("manifest_sha256", None)
    if claimed != _manifest_checksum(doc):
        raise CorruptCheckpoint("manifest checksum mismatch (torn or edited manifest)")
    return doc


def _sha256_hex(view: memoryview) -> str:
    return hashlib.sha256(view).hexdigest()


def _debug_delay() -> float:
    raw = os.environ.get(ENV_DEBUG_PERSIST_DELAY)
    try:
        return float(raw) if raw else 0.0
    except ValueError:
        return 0.0


class CheckpointWriter:
    """Writes one checkpoint: ``put_blob`` for each data blob, then ``commit``.

    sha256 of each blob is computed on a helper thread while the blob is written, so
    hashing costs no extra wall time when the store is the bottleneck. ``cancel`` (an
    Event) is checked before every blob; when set, the writer raises ``SaveAbandoned``.
    """

    def __init__(self, store: CheckpointStore, step: int, kind: str, *,
                 cancel: threading.Event | None = None,
                 hash_pool: ThreadPoolExecutor | None = None,
                 before_commit: Callable[[], None] | None = None):
        self.store = store
        #: called right before the manifest is written (the prefix lease check); raising
        #: there aborts the save with nothing committed
        self.before_commit = before_commit
        self.step = step
        self.kind = kind
        self.name = new_checkpoint_name(step, kind)
        self.cancel = cancel or threading.Event()
        self._pool = hash_pool
        self._own_pool = hash_pool is None
        self.blobs: dict[str, BlobInfo] = {}
        self._delay = _debug_delay()

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise SaveAbandoned(f"save of step {self.step} ({self.kind}) abandoned")
        if self._delay:
            time.sleep(self._delay)
            if self.cancel.is_set():
                raise SaveAbandoned(f"save of step {self.step} ({self.kind}) abandoned")

    def put_blob(self, blob: str, data: memoryview | bytes) -> BlobInfo:
        """Hash and atomically store one blob (``data`` is not copied for local stores)."""
        return self.put_blobs([(blob, data)])[0]

    def put_blobs(self, items: list[tuple[str, memoryview | bytes]]) -> list[BlobInfo]:
        """Store blobs in order; their sha256 digests are computed on the hash pool
        (up to one blob per pool thread ahead of the writer), overlapping the writes."""
        views = [(name, memoryview(data).cast("B")) for name, data in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1)),
                                            thread_name_prefix="ckpt-hash")
        digests = [self._pool.submit(_sha256_hex, view) for _name, view in views]
        out: list[BlobInfo] = []
        # stores that can batch durability (LocalStore) flush once for all blobs; the
        # manifest is only written after this block, so nothing is committed before
        batch = getattr(self.store, "deferred_sync", None)
        try:
            with batch() if batch is not None else contextlib.nullcontext():
                for (name, view), digest in zip(views, digests, strict=True):
                    self._check_cancel()
                    self.store.put_file(f"{self.name}/{name}", BufferReader(view), size=len(view))
                    info = BlobInfo(bytes=len(view), sha256=digest.result())
                    self.blobs[name] = info
                    out.append(info)
        finally:
            for digest in digests:
                digest.cancel()
            for digest in digests:  # never leave a hash running over a buffer being reused
                if not digest.cancelled():
                    digest.exception()
        return out

    def commit(self, *, save_seconds: float, stall_seconds: float,
               meta: dict[str, Any] | None = None) -> CheckpointInfo:
        """Write the manifest last; from this moment the checkpoint is loadable."""
        self._check_cancel()
        if self.before_commit is not None:
            self.before_commit()
        created = time.time()
        body = {
            "format": MANIFEST_FORMAT,
            "version": FORMAT_VERSION,
            "name": self.name,
            "step": self.step,
            "kind": self.kind,
            "created": created,
            "save_seconds": save_seconds,
            "stall_seconds": stall_seconds,
            "blobs": {k: {"bytes": v.bytes, "sha256": v.sha256} for k, v in self.blobs.items()},
            "meta": meta or {},
        }
        self.store.put_bytes(f"{self.name}/{MANIFEST_NAME}", encode_manifest(body))
        self.close()
        return _info_from_manifest(self.store, body)

    def abort(self) -> None:
        """Delete whatever was written (best effort); the prefix has no manifest anyway."""
        self.close()
        try:
            self.store.delete_prefix(f"{self.name}/")
        except (StoreError, OSError) as exc:  # pragma: no cover - best effort
            log.warning("could not clean up abandoned checkpoint %s: %s", self.name, exc)

    def close(self) -> None:
        if self._own_pool and self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _info_from_manifest(store: CheckpointStore, doc: dict[str, Any]) -> CheckpointInfo:
    blobs = {k: BlobInfo(int(v["bytes"]), str(v["sha256"])) for k, v in doc["blobs"].items()}
    return CheckpointInfo(
        name=doc["name"], kind=doc["kind"], step=int(doc["step"]),
        bytes=sum(b.bytes for b in blobs.values()),
        save_seconds=float(doc.get("save_seconds", 0.0)),
        stall_seconds=float(doc.get("stall_seconds", 0.0)),
        location=store.uri(doc["name"]), created=float(doc["created"]),
        blobs=blobs, meta=dict(doc.get("meta") or {}),
    )


def _group_keys(store: CheckpointStore) -> dict[str, dict[str, int]]:
    groups: dict[str, dict[str, int]] = {}
    for key, size in store.list(PREFIX):
        name, _, rest = key.partition("/")
        if not rest:
            continue
        groups.setdefault(name, {})[rest] = size
    return groups


def _sort_key(info: CheckpointInfo) -> tuple[int, float]:
    return (info.step, info.created)


def _step_of(name: str) -> int | None:
    """The step in a prefix name ``ckpt-<step:012d>-...`` (None if it has none)."""
    try:
        return int(name[len(PREFIX):].split("-", 1)[0])
    except ValueError:
        return None


@dataclass(frozen=True)
class ScanResult:
    """One listing of a store's checkpoint prefixes, sorted into what they are."""

    committed: list[CheckpointInfo]
    incomplete: list[str]
    invalid: dict[str, str]
    #: written by a newer spotfleet: {name: the error naming both versions}; never garbage
    too_new: dict[str, CheckpointTooNew]


def scan_store(store: CheckpointStore) -> ScanResult:
    """Committed checkpoints (oldest→newest), names without a manifest, names with an
    invalid manifest, and names whose manifest a newer library wrote."""
    committed: list[CheckpointInfo] = []
    incomplete: list[str] = []
    invalid: dict[str, str] = {}
    too_new: dict[str, CheckpointTooNew] = {}
    for name, files in sorted(_group_keys(store).items()):
        if MANIFEST_NAME not in files:
            incomplete.append(name)
            continue
        try:
            doc = decode_manifest(store.get_bytes(f"{name}/{MANIFEST_NAME}"))
            if doc.get("name") != name:
                raise CorruptCheckpoint(f"manifest names {doc.get('name')!r}, not its own prefix")
            info = _info_from_manifest(store, doc)
        except CheckpointTooNew as exc:
            step = exc.step if exc.step is not None else _step_of(name)
            too_new[name] = CheckpointTooNew(str(exc), version=exc.version, step=step)
            continue
        except (CorruptCheckpoint, KeyError, ValueError, TypeError) as exc:
            invalid[name] = str(exc)
            continue
        committed.append(info)
    committed.sort(key=_sort_key)
    return ScanResult(committed, incomplete, invalid, too_new)


def scan(store: CheckpointStore) -> tuple[list[CheckpointInfo], list[str], dict[str, str]]:
    """(committed checkpoints oldest→newest, names without a manifest, {name: why invalid}).

    Checkpoints written by a newer library are in none of the three (``scan_store``)."""
    found = scan_store(store)
    return found.committed, found.incomplete, found.invalid


def list_checkpoints(store: CheckpointStore) -> list[CheckpointInfo]:
    """Every checkpoint with a valid manifest, oldest first (by step, then creation time)."""
    return scan(store)[0]


def newest_committed_step(store: CheckpointStore) -> int | None:
    """Step of the newest checkpoint prefix that has a manifest, from ONE listing (the
    step is in the prefix name ``ckpt-<step:012d>-...``; nothing is read or verified).

    A cheap "is there anything newer than step s?" test: loading still goes through
    ``restore_latest``, which verifies and may fall back to an older checkpoint."""
    newest: int | None = None
    for name, files in _group_keys(store).items():
        if MANIFEST_NAME not in files:
            continue
        try:
            step = int(name[len(PREFIX):].split("-", 1)[0])
        except ValueError:
            continue
        newest = step if newest is None else max(newest, step)
    return newest


def latest_checkpoint(store: CheckpointStore) -> CheckpointInfo | None:
    infos = list_checkpoints(store)
    return infos[-1] if infos else None


def check_blob_sizes(store: CheckpointStore, info: CheckpointInfo) -> None:
    """Cheap check (one listing): every blob present with the manifest's size."""
    present = dict(store.list(f"{info.name}/"))
    for blob, meta in info.blobs.items():
        size = present.get(f"{info.name}/{blob}")
        if size is None:
            raise CorruptCheckpoint(f"{info.location}: blob {blob} is missing")
        if size != meta.bytes:
            raise CorruptCheckpoint(f"{info.location}: blob {blob} has {size} bytes, manifest says {meta.bytes}")


def _open_blob(store: CheckpointStore, info: CheckpointInfo, blob: str):
    """A readable stream of one blob of ``info``; ``CorruptCheckpoint`` when it is missing."""
    try:
        return store.open_read(f"{info.name}/{blob}")
    except KeyError:
        raise CorruptCheckpoint(f"{info.location}: blob {blob} is missing") from None


def verify_blobs(store: CheckpointStore, info: CheckpointInfo) -> None:
    """Check that ``store`` holds every blob of ``info`` with the manifest's size and
    sha256, as restore checks them (each blob is streamed once, 16 MiB at a time).
    Raises ``CorruptCheckpoint``."""
    check_blob_sizes(store, info)
    for blob, meta in info.blobs.items():
        h = hashlib.sha256()
        size = 0
        with _open_blob(store, info, blob) as fh:
            while chunk := fh.read(16 << 20):
                h.update(chunk)
                size += len(chunk)
        _verify(info, blob, meta, size, h.hexdigest())


def read_blob(store: CheckpointStore, info: CheckpointInfo, blob: str) -> bytes:
    """Read one blob and verify its size and sha256 against the manifest."""
    meta = info.blobs.get(blob)
    if meta is None:
        raise CorruptCheckpoint(f"{info.location}: manifest lists no blob {blob}")
    try:
        data = store.get_bytes(f"{info.name}/{blob}")
    except KeyError:
        raise CorruptCheckpoint(f"{info.location}: blob {blob} is missing") from None
    _verify(info, blob, meta, len(data), hashlib.sha256(data).hexdigest())
    return data


def read_blob_into(store: CheckpointStore, info: CheckpointInfo, blob: str, out: memoryview) -> None:
    """Stream one blob into ``out`` (exactly its size) and verify size and sha256."""
    meta = info.blobs.get(blob)
    if meta is None:
        raise CorruptCheckpoint(f"{info.location}: manifest lists no blob {blob}")
    if len(out) != meta.bytes:
        raise CorruptCheckpoint(f"{info.location}: blob {blob}: expected {len(out)} bytes, manifest says {meta.bytes}")
    h = hashlib.sha256()
    got = 0
    with _open_blob(store, info, blob) as fh:
        while got < len(out):
            n = fh.readinto(out[got:got + (16 << 20)]) if hasattr(fh, "readinto") else 0
            if not n:
                break
            h.update(out[got:got + n])
            got += n
        extra = fh.read(1)
    _verify(info, blob, meta, got + len(extra), h.hexdigest())


def _verify(info: CheckpointInfo, blob: str, meta: BlobInfo, size: int, sha: str) -> None:
    if size != meta.bytes:
        raise CorruptCheckpoint(f"{info.location}: blob {blob} has {size} bytes, manifest says {meta.bytes} (truncated?)")
    if sha != meta.sha256:
        raise CorruptCheckpoint(f"{info.location}: blob {blob} sha256 mismatch (corrupted)")


@dataclass(frozen=True)
class RestoreOutcome:
    """What ``restore_latest`` loaded: the checkpoint, the loader's value, and why it fell back."""

    info: CheckpointInfo
    value: Any
    fell_back: bool
    reason: str
    #: checkpoints skipped as unusable (corrupt blobs, invalid manifests): garbage to collect
    skipped: tuple[str, ...] = ()


def restore_latest(store: CheckpointStore, load: Callable[[CheckpointInfo], T], *,
                   candidates: Iterable[CheckpointInfo] | None = None) -> RestoreOutcome | None:
    """Load the newest checkpoint that verifies; fall back to older ones on corruption.

    ``load(info)`` reads and verifies the blobs (raising ``CorruptCheckpoint``) and
    returns the loaded state. Returns ``None`` when no checkpoint can be loaded (fresh
    start); every skipped checkpoint is logged as a warning naming the reason.
    """
    too_new: dict[str, CheckpointTooNew] = {}
    if candidates is None:
        found = scan_store(store)
        committed, invalid, too_new = found.committed, found.invalid, found.too_new
        for name, why in invalid.items():
            log.warning("ignoring checkpoint %s: %s", store.uri(name), why)
    else:
        committed, invalid = list(candidates), {}
    reasons: list[str] = [f"{store.uri(n)}: {why}" for n, why in invalid.items()]
    skipped: list[str] = list(invalid)
    for info in sorted(committed, key=_sort_key, reverse=True):
        _refuse_past_too_new(store, too_new, info.step)
        try:
            check_blob_sizes(store, info)
            value = load(info)
        except StoreError as exc:
            # an I/O failure is not corruption: falling back (or starting over) could
            # overwrite good checkpoints; let the caller retry or fail loudly
            raise StoreError(f"cannot read checkpoint {info.location}: {exc}; the checkpoint "
                             "may be intact -- retry once the store is reachable") from exc
        except (CorruptCheckpoint, ValueError, KeyError, EOFError) as exc:
            msg = f"{info.location} (step {info.step}, {info.kind}): {exc}"
            log.warning("checkpoint unusable, falling back to the previous one: %s", msg)
            reasons.append(msg)
            skipped.append(info.name)
            continue
        fell_back = bool(reasons)
        reason = ("latest complete checkpoint" if not fell_back
                  else "fell back: " + "; ".join(reasons))
        return RestoreOutcome(info=info, value=value, fell_back=fell_back, reason=reason,
                              skipped=tuple(skipped))
    _refuse_past_too_new(store, too_new, None)
    if reasons:
        log.warning("no loadable checkpoint in %s (%s); starting from scratch",
                    store.location, "; ".join(reasons))
    return None


def _refuse_past_too_new(store: CheckpointStore, too_new: dict[str, CheckpointTooNew],
                         step: int | None) -> None:
    """Raise ``CheckpointTooNew`` when loading a checkpoint of ``step`` (None: starting
    from scratch) would skip a newer-format checkpoint of a higher step."""
    newer = [(exc.step if exc.step is not None else -1, name, exc) for name, exc in too_new.items()]
    newer = [item for item in newer if step is None or item[0] > step]
    if not newer:
        return
    _step, name, exc = max(newer, key=lambda item: item[0])
    instead = f"from an older checkpoint (step {step})" if step is not None else "from scratch"
    raise CheckpointTooNew(
        f"checkpoint {store.uri(name)} (step {exc.step}) was written by a newer spotfleet: its "
        f"manifest format version is {exc.version}, this library reads version {FORMAT_VERSION}. "
        f"Restoring would resume {instead} and lose its progress, so nothing was loaded. "
        "Fix: upgrade spotfleet on this node (the same version that wrote it, or later) and "
        "re-run; the checkpoint is kept as it is.", version=exc.version, step=exc.step)


def plan_retention(committed: list[CheckpointInfo], incomplete: list[str], *,
                   keep_periodic: int, keep_insurance: int, keep: Iterable[str] = ()) -> list[str]:
    """Names to delete (pure function). ``committed`` in any order.

    - keep the newest ``keep_periodic`` periodic checkpoints;
    - drop insurance/emergency checkpoints older than the newest periodic one, and keep
      at most ``keep_insurance`` of the newer ones;
    - "newest" means the highest STEP (then the later ``created`` time), the order
      restore loads them in; never the writer's wall clock alone, which differs between
      nodes (a relaunched node whose clock lags must not delete what it just saved);
    - drop prefixes without a manifest whose step is below the newest committed step
      (torn or abandoned saves; a save in flight always has a newer step);
    - never the names in ``keep`` (the checkpoint just committed, an upload in flight).
    """
    if keep_periodic < 1:
        raise ValueError(f"keep_periodic must be >= 1, got {keep_periodic}")
    keep = set(keep)
    ordered = sorted(committed, key=_sort_key)
    periodic = [c for c in ordered if c.kind == "periodic"]
    doomed = [c.name for c in periodic[:-keep_periodic]]
    newest_periodic = periodic[-1] if periodic else None
    others = [c for c in ordered if c.kind != "periodic"]
    if newest_periodic is not None:
        stale = [c for c in others if _sort_key(c) < _sort_key(newest_periodic)]
        doomed += [c.name for c in stale]
        others = [c for c in others if c not in stale]
    if keep_insurance >= 0 and len(others) > keep_insurance:
        doomed += [c.name for c in others[:len(others) - keep_insurance]]
    if ordered:
        newest_step = max(c.step for c in ordered)
        for name in incomplete:
            step = _step_of(name)
            if step is not None and step < newest_step:
                doomed.append(name)
    return [name for name in doomed if name not in keep]


def apply_retention(store: CheckpointStore, *, keep_periodic: int = 3,
                    keep_insurance: int = 2, keep: Iterable[str] = ()) -> list[str]:
    """Delete what ``plan_retention`` says, never the names in ``keep``; returns the
    deleted names."""
    committed, incomplete, _invalid = scan(store)
    doomed = plan_retention(committed, incomplete, keep_periodic=keep_periodic,
                            keep_insurance=keep_insurance, keep=keep)
    for name in doomed:
        try:
            store.delete_prefix(f"{name}/")
        except (StoreError, OSError) as exc:
            log.warning("retention could not delete %s: %s", store.uri(name), exc)
    return doomed


# -- garbage collection and room before writing --------------------------------------

@dataclass(frozen=True)
class GcReport:
    """What ``collect_garbage`` removed: checkpoint prefixes and unfinished puts."""

    deleted: tuple[str, ...] = ()
    aborted: tuple[PartialUpload, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.deleted or self.aborted)


def collect_garbage(store: CheckpointStore, *, keep: Iterable[str] = (),
                    discard: Iterable[str] = ()) -> GcReport:
    """Delete what can never be loaded, except the prefixes named in ``keep`` (the save
    in flight):

    - checkpoint prefixes without a manifest (torn by a kill, or an abandoned save whose
      cleanup failed) and prefixes whose manifest is invalid (torn or edited);
    - unfinished puts under ``ckpt-`` (a killed writer's temp files on a local disk,
      orphan multipart uploads on S3: invisible, but they take space);
    - the committed checkpoints named in ``discard`` (restore found them corrupt and
      fell back past them).

    A checkpoint whose manifest a newer spotfleet wrote (``CheckpointTooNew``) is not
    garbage and is never touched.

    Only the lease holder writes a prefix, so apart from ``keep`` no save is in flight:
    everything matched is older than any save that could still commit. Failures are
    logged and skipped (GC is best effort). Returns what was removed.
    """
    keep = set(keep)
    discard = set(discard) - keep
    found = scan_store(store)
    committed, incomplete, invalid = found.committed, found.incomplete, found.invalid
    keep |= set(found.too_new)  # a newer library's checkpoint is not garbage
    committed_names = {c.name for c in committed}
    aborted: list[PartialUpload] = []
    partial_names: set[str] = set()
    try:
        partials = store.list_partial(PREFIX)
    except (StoreError, OSError) as exc:
        log.warning("could not list unfinished uploads in %s: %s", store.location, exc)
        partials = []
    for up in partials:
        name = up.key.partition("/")[0]
        if name in keep:
            continue
        try:
            store.abort_partial(up)
            aborted.append(up)
            partial_names.add(name)
        except (StoreError, OSError) as exc:
            log.warning("could not abort the unfinished upload %s: %s", store.uri(up.key), exc)
    doomed = [n for n in dict.fromkeys([*incomplete, *invalid, *sorted(partial_names - committed_names),
                                        *sorted(discard & committed_names)]) if n not in keep]
    deleted: list[str] = []
    for name in doomed:
        try:
            store.delete_prefix(f"{name}/")
            deleted.append(name)
        except (StoreError, OSError) as exc:
            log.warning("could not delete unusable checkpoint %s: %s", store.uri(name), exc)
    if deleted or aborted:
        log.info("garbage collection in %s: deleted %s; aborted %d unfinished upload(s)", store.location,
                 ", ".join(deleted) or "nothing", len(aborted))
    return GcReport(tuple(deleted), tuple(aborted))


#: slack (bytes) added to a checkpoint's size when checking free space: manifest,
#: directory entries and filesystem block rounding
ROOM_SLACK_BYTES = 256 << 10


def make_room(store: CheckpointStore, needed_bytes: int, kind: str, *, keep_periodic: int,
              keep_insurance: int, keep: Iterable[str] = ()) -> list[str]:
    """Before writing a checkpoint of ``needed_bytes``: if the store reports less free
    space (``free_bytes``), delete -- oldest first, and only until it fits -- the
    checkpoints that the retention policy would delete once this new checkpoint of
    ``kind`` commits. The newest complete checkpoint is never deleted.

    Returns the deleted names. Raises ``NoRoom`` (nothing written) when it still does
    not fit; the message says how much is needed and free, and what is kept.
    """
    free = store.free_bytes()
    need = int(needed_bytes) + ROOM_SLACK_BYTES
    if free is None or free >= need:
        return []
    committed = list_checkpoints(store)
    newest = max(committed, key=_sort_key) if committed else None
    placeholder = CheckpointInfo(name="\0new", kind=kind, step=(newest.step if newest else 0) + 1,
                                 bytes=int(needed_bytes), save_seconds=0.0, stall_seconds=0.0,
                                 location="", created=max(time.time(), newest.created + 1 if newest else 0.0))
    protected = set(keep) | {placeholder.name} | ({newest.name} if newest else set())
    allowed = plan_retention([*committed, placeholder], [], keep_periodic=keep_periodic,
                             keep_insurance=keep_insurance, keep=protected)
    by_name = {c.name: c for c in committed}
    allowed.sort(key=lambda n: _sort_key(by_name[n]) if n in by_name else (0, 0.0))
    deleted: list[str] = []
    for name in allowed:
        if free >= need:
            break
        try:
            store.delete_prefix(f"{name}/")
        except (StoreError, OSError) as exc:
            log.warning("could not delete %s to make room: %s", store.uri(name), exc)
            continue
        deleted.append(name)
        free = store.free_bytes() or 0
    if deleted:
        log.warning("store %s was short of space: deleted %s ahead of the retention pass (the policy "
                    "would delete them after this save)", store.location, ", ".join(deleted))
    if free < need:
        kept = (f"the newest complete checkpoint (step {newest.step}, {newest.kind}, {newest.location}) "
                "is kept and used on restart" if newest else "no complete checkpoint exists yet")
        raise NoRoom(
            f"not enough space in {store.location} for the {kind} checkpoint: it needs "
            f"{need / 2**20:.2f} MiB, {free / 2**20:.2f} MiB free after removing garbage"
            f"{' and ' + ', '.join(deleted) if deleted else ''} (the retention policy allows deleting "
            f"nothing more); nothing was written and {kept}. Fix: free space on that volume, "
            "point SPOTFLEET_CHECKPOINT_URI at a larger one, or lower keep_periodic/keep_insurance.")
    return deleted
