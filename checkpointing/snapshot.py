"""Snapshot a nested training state into reusable, preallocated CPU buffers.

A *state* is any nesting of dicts, lists, tuples and plain Python values whose leaves
may be ``torch.Tensor`` (or ``numpy.ndarray``). ``flatten`` splits it into

* a *skeleton*: the same structure with every tensor replaced by ``TensorRef(i)``,
  pickled (small: optimizer hyper-parameters, scheduler counters, RNG tuples, ...);
* a *tensor table*: per tensor its dtype, shape and byte offset in one flat buffer;
* the *flat buffer*: every tensor's bytes, back to back, each aligned to 64 bytes.

``SnapshotBuffers`` owns the flat buffer and reuses it between saves (pinned memory
when CUDA is available), so a save stalls the training loop only for the copy
(``Tensor.copy_`` per tensor; from GPU memory it is a device-to-host DMA). The buffer is
grown only when the state grows (e.g. the first save after the optimizer's first step).

On-store format (see docs/checkpointing.md): ``state.pkl`` holds
``{"format": ..., "skeleton": ..., "tensors": [(dtype, shape, offset, nbytes), ...],
"flat_bytes": N}`` and ``tensors-NNNNN.bin`` hold consecutive byte ranges of the flat
buffer. Loading uses a restricted unpickler: only builtin containers/scalars and
``TensorRef`` are accepted, so a checkpoint cannot run code.
"""

from __future__ import annotations

import io
import os
import pickle
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

ALIGN_BYTES = 64
STATE_FORMAT = "spotfleet-state-v1"


@dataclass(frozen=True)
class TensorRef:
    """Placeholder for the ``index``-th tensor in the tensor table."""

    index: int
    numpy: bool = False  # the leaf was a numpy array (restored as one)


@dataclass(frozen=True)
class TensorSpec:
    """Where one tensor lives in the flat buffer (offset and size in bytes)."""

    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"checkpoint names unknown tensor dtype {name!r}; was it written by a newer torch?")
    return dtype


def _align(n: int) -> int:
    return (n + ALIGN_BYTES - 1) // ALIGN_BYTES * ALIGN_BYTES


def flatten(state: Any) -> tuple[Any, list[torch.Tensor]]:
    """Split ``state`` into (skeleton with ``TensorRef`` leaves, list of tensors)."""
    tensors: list[torch.Tensor] = []

    def walk(obj: Any, path: str) -> Any:
        if isinstance(obj, torch.Tensor):
            if obj.is_sparse or obj.is_quantized or obj.layout != torch.strided:
                raise TypeError(f"state at {path!r}: sparse/quantized tensors are not supported; "
                                "convert to a dense tensor before saving")
            tensors.append(obj.detach())
            return TensorRef(len(tensors) - 1)
        if isinstance(obj, np.ndarray):
            if obj.dtype == object:
                raise TypeError(f"state at {path!r}: numpy object arrays cannot be saved; use plain lists")
            tensors.append(torch.from_numpy(np.ascontiguousarray(obj)))
            return TensorRef(len(tensors) - 1, numpy=True)
        if isinstance(obj, OrderedDict):
            return OrderedDict((k, walk(v, f"{path}.{k}")) for k, v in obj.items())
        if isinstance(obj, dict):
            return {k: walk(v, f"{path}.{k}") for k, v in obj.items()}
        if isinstance(obj, list):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return tuple(walk(v, f"{path}[{i}]") for i, v in enumerate(obj))
        if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, set, frozenset, slice)):
            return obj
        if isinstance(obj, torch.dtype):
            return _DtypeName(_dtype_name(obj))
        raise TypeError(f"state at {path!r} has type {type(obj).__name__}, which a checkpoint cannot hold; "
                        "use tensors, numpy arrays, dicts, lists, tuples, numbers and strings")

    return walk(state, "state"), tensors


@dataclass(frozen=True)
class _DtypeName:
    name: str


def unflatten(skeleton: Any, tensors: list[torch.Tensor]) -> Any:
    """Inverse of ``flatten``."""

    def walk(obj: Any) -> Any:
        if isinstance(obj, TensorRef):
            t = tensors[obj.index]
            return t.numpy() if obj.numpy else t
        if isinstance(obj, _DtypeName):
            return _dtype_from_name(obj.name)
        if isinstance(obj, OrderedDict):
            return OrderedDict((k, walk(v)) for k, v in obj.items())
        if isinstance(obj, dict):
            return {k: walk(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(walk(v) for v in obj)
        return obj

    return walk(skeleton)


def plan_layout(tensors: list[torch.Tensor]) -> tuple[list[TensorSpec], int]:
    """Offsets (64-byte aligned) of each tensor in the flat buffer and its total size."""
    specs: list[TensorSpec] = []
    offset = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        specs.append(TensorSpec(_dtype_name(t.dtype), tuple(t.shape), offset, nbytes))
        offset = _align(offset + nbytes)
    return specs, offset


def _view(flat: torch.Tensor, spec: TensorSpec, dtype: torch.dtype) -> torch.Tensor:
    raw = flat[spec.offset:spec.offset + spec.nbytes]
    if spec.nbytes == 0:
        return torch.empty(spec.shape, dtype=dtype)
    return raw.view(dtype).view(spec.shape)


def _bytes_of(t: torch.Tensor) -> np.ndarray | None:
    """A uint8 numpy view of a contiguous CPU tensor's bytes, or None when ``t`` cannot
    be viewed as bytes (non-contiguous, conjugate/negative views, meta, ...)."""
    if t.device.type != "cpu" or not t.is_contiguous() or t.is_conj() or t.is_neg():
        return None
    try:
        return t.reshape(-1).view(torch.uint8).numpy()
    except (RuntimeError, TypeError):
        return None


#: pieces of at most this many bytes are handed to the copy threads
COPY_PIECE_BYTES = 16 << 20
#: below this total, one thread copies everything (thread hand-off costs more)
PARALLEL_COPY_MIN_BYTES = 64 << 20


def _copy_pieces(pieces: list[tuple[np.ndarray, np.ndarray]]) -> None:
    for dst, src in pieces:
        np.copyto(dst, src)  # glibc memcpy; releases the GIL


class _SafeUnpickler(pickle.Unpickler):
    _ALLOWED = {
        ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "complex"),
        ("builtins", "slice"), ("collections", "OrderedDict"),
        (__name__, "TensorRef"), (__name__, "_DtypeName"),
    }

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle hook
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"checkpoint state refers to {module}.{name}, which is not allowed in a checkpoint "
            "(only plain Python values and tensors are); was it written by another program?")


def dumps_header(skeleton: Any, specs: list[TensorSpec], flat_bytes: int) -> bytes:
    header = {
        "format": STATE_FORMAT,
        "skeleton": skeleton,
        "tensors": [(s.dtype, s.shape, s.offset, s.nbytes) for s in specs],
        "flat_bytes": flat_bytes,
    }
    return pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)


def loads_header(data: bytes) -> tuple[Any, list[TensorSpec], int]:
    header = _SafeUnpickler(io.BytesIO(data)).load()
    if not isinstance(header, dict) or header.get("format") != STATE_FORMAT:
        raise ValueError(f"state blob is not a {STATE_FORMAT} header")
    specs = [TensorSpec(d, tuple(shape), int(off), int(n)) for d, shape, off, n in header["tensors"]]
    return header["skeleton"], specs, int(header["flat_bytes"])


def tensors_from_flat(flat: torch.Tensor, specs: list[TensorSpec]) -> list[torch.Tensor]:
    """Tensors viewing ``flat`` (a uint8 CPU tensor) according to ``specs`` (no copy)."""
    return [_view(flat, s, _dtype_from_name(s.dtype)) for s in specs]


class BufferReader(io.RawIOBase):
    """A read-only stream over a byte range of a buffer, without copying it up front.

    ``getbuffer()`` exposes the memory itself, which ``LocalStore`` writes directly.
    """

    def __init__(self, view: memoryview):
        super().__init__()
        self._view = view.cast("B")
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, min(len(self._view), base + offset))
        return self._pos

    def readinto(self, b) -> int:
        n = min(len(b), len(self._view) - self._pos)
        memoryview(b).cast("B")[:n] = self._view[self._pos:self._pos + n]
        self._pos += n
        return n

    def getbuffer(self) -> memoryview:
        return self._view[self._pos:]

    def __len__(self) -> int:
        return len(self._view)


@dataclass
class Snapshot:
    """A captured state: the pickled header plus the flat tensor bytes (a buffer view)."""

    header: bytes
    flat: torch.Tensor  # uint8 CPU tensor, length == flat_bytes (a view of the reusable buffer)
    tensor_count: int
    stall_seconds: float = 0.0

    @property
    def nbytes(self) -> int:
        return len(self.header) + self.flat.numel()

    def flat_view(self) -> memoryview:
        if self.flat.numel() == 0:
            return memoryview(b"")
        return memoryview(self.flat.numpy()).cast("B")


class SnapshotBuffers:
    """The reusable flat CPU buffer that snapshots are copied into.

    Only one snapshot may use the buffer at a time: ``capture`` blocks until the
    previous snapshot has been ``release``d (the saver releases it when persisted or
    abandoned).
    """

    def __init__(self, *, pin_memory: bool | None = None, copy_threads: int | None = None):
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        #: threads for the host memcpy (default: 2, or 1 on a single core)
        self.copy_threads = max(1, copy_threads if copy_threads is not None
                                else min(2, os.cpu_count() or 1))
        self._pool: ThreadPoolExecutor | None = None
        self._flat: torch.Tensor | None = None
        self._layout_key: tuple | None = None
        self._specs: list[TensorSpec] = []
        self._flat_bytes = 0
        self._free = threading.Event()
        self._free.set()
        self.allocations = 0  # how many times the buffer was (re)allocated

    @property
    def capacity_bytes(self) -> int:
        return 0 if self._flat is None else self._flat.numel()

    def _ensure(self, tensors: list[torch.Tensor]) -> None:
        key = tuple((t.dtype, tuple(t.shape)) for t in tensors)
        if key == self._layout_key:
            return
        specs, total = plan_layout(tensors)
        if self._flat is None or self._flat.numel() < total:
            self._flat = None  # free the old buffer before allocating the new one
            self._flat = torch.empty(max(total, 1), dtype=torch.uint8, pin_memory=self.pin_memory)
            self._flat.zero_()  # touch the pages now, not during the first timed save
            self.allocations += 1
        self._layout_key, self._specs, self._flat_bytes = key, specs, total

    def reserve(self, state: Any, *, timeout: float | None = 60.0) -> None:
        """Allocate (and touch) the buffer for ``state`` now, outside the training loop.
        Waits at most ``timeout`` seconds for a previous snapshot to be released."""
        _skeleton, tensors = flatten(state)
        if not self._free.wait(timeout):
            raise TimeoutError("the snapshot buffer is still in use by the previous save")
        self._ensure(tensors)

    def capture(self, state: Any, *, timeout: float | None = None) -> Snapshot:
        """Copy ``state`` into the buffer. Blocks while the previous snapshot is in use."""
        if not self._free.wait(timeout):
            raise TimeoutError("the snapshot buffer is still in use by the previous save")
        skeleton, tensors = flatten(state)
        self._ensure(tensors)
        assert self._flat is not None
        self._free.clear()
        try:
            on_cuda = False
            flat_np = self._flat.numpy()
            pieces: list[tuple[np.ndarray, np.ndarray]] = []
            for t, spec in zip(tensors, self._specs, strict=True):
                if spec.nbytes == 0:
                    continue
                if t.is_cuda:
                    on_cuda = True
                    _view(self._flat, spec, t.dtype).copy_(t, non_blocking=self.pin_memory)
                    continue
                src = _bytes_of(t)
                if src is None:
                    _view(self._flat, spec, t.dtype).copy_(t)
                    continue
                for a in range(0, spec.nbytes, COPY_PIECE_BYTES):
                    b = min(spec.nbytes, a + COPY_PIECE_BYTES)
                    pieces.append((flat_np[spec.offset + a:spec.offset + b], src[a:b]))
            self._copy(pieces)
            if on_cuda:
                torch.cuda.synchronize()
            header = dumps_header(skeleton, self._specs, self._flat_bytes)
        except BaseException:
            self._free.set()
            raise
        return Snapshot(header=header, flat=self._flat[:self._flat_bytes],
                        tensor_count=len(tensors))

    def _copy(self, pieces: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """memcpy every (dst, src) piece; split over ``copy_threads`` threads when large."""
        total = sum(dst.nbytes for dst, _src in pieces)
        if self.copy_threads <= 1 or total < PARALLEL_COPY_MIN_BYTES:
            _copy_pieces(pieces)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.copy_threads - 1, thread_name_prefix="ckpt-copy")
        # contiguous, byte-balanced shares: this thread copies the first one
        shares: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(self.copy_threads)]
        target, acc, k = total / self.copy_threads, 0, 0
        for piece in pieces:
            if acc >= target * (k + 1) and k < self.copy_threads - 1:
                k += 1
            shares[k].append(piece)
            acc += piece[0].nbytes
        futures = [self._pool.submit(_copy_pieces, share) for share in shares[1:]]
        _copy_pieces(shares[0])
        for f in futures:
            f.result()

    def release(self) -> None:
        """Mark the buffer free for the next capture."""
        self._free.set()

    def wait_free(self, timeout: float | None = None) -> bool:
        return self._free.wait(timeout)


def load_state(header: bytes, flat: torch.Tensor) -> Any:
    """Rebuild the nested state from a header blob and the flat bytes (uint8 tensor)."""
    skeleton, specs, flat_bytes = loads_header(header)
    if flat.numel() != flat_bytes:
        raise ValueError(f"tensor data has {flat.numel()} bytes, header expects {flat_bytes}")
    return unflatten(skeleton, tensors_from_flat(flat, specs))
