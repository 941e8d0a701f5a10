"""Moving a replicated training state between processes without the object store.

Two ways, both in the on-store snapshot layout of ``checkpointing.snapshot`` (a
restricted-pickle header plus one flat byte buffer, so nothing received can run code):

* ``HandoffFile``: a survivor of a membership change writes its in-memory state to a
  file under ``/dev/shm`` (memory, not disk) just before its worker process exits, and
  the worker the elastic agent starts next on the same node reads it back. This is how
  the state outlives torch elastic's "restart every worker on a membership change".
* ``broadcast_state``: the new group copies the freshest state from one rank (a
  survivor) to every other rank with ``torch.distributed.broadcast`` (grow: a new node
  receives the state from a peer).

Sizes are bytes; times unix seconds.
"""

from __future__ import annotations

import os
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from checkpointing.snapshot import (
    dumps_header,
    flatten,
    loads_header,
    plan_layout,
    tensors_from_flat,
    unflatten,
)

#: default parent directory of handoff files: tmpfs (RAM) on Linux
DEFAULT_HANDOFF_ROOT = "/dev/shm/spotfleet-elastic"
_MAGIC = b"SFHANDOFF1"


def pack_state(state: Any) -> tuple[bytes, torch.Tensor]:
    """(header, flat uint8 CPU tensor) of a nested state (tensors copied to CPU)."""
    skeleton, tensors = flatten(state)
    tensors = [t.detach().to("cpu").contiguous() for t in tensors]
    specs, flat_bytes = plan_layout(tensors)
    flat = torch.zeros(flat_bytes, dtype=torch.uint8)
    for t, spec in zip(tensors, specs, strict=True):
        if spec.nbytes:
            flat[spec.offset:spec.offset + spec.nbytes] = t.reshape(-1).view(torch.uint8)
    return dumps_header(skeleton, specs, flat_bytes), flat


def unpack_state(header: bytes, flat: torch.Tensor) -> Any:
    """Inverse of ``pack_state`` (tensors are views into ``flat``; apply() copies them)."""
    skeleton, specs, flat_bytes = loads_header(header)
    if flat.numel() != flat_bytes:
        raise ValueError(f"state buffer holds {flat.numel()} bytes, its header says {flat_bytes}")
    return unflatten(skeleton, tensors_from_flat(flat, specs))


@dataclass(frozen=True)
class Handoff:
    """A state read back from a handoff file."""

    state: Any
    step: int
    written_at: float  # unix seconds
    path: Path


class HandoffFile:
    """The handoff slot of one node of one elastic run: ``<root>/<run_id>/<node_id>.state``."""

    def __init__(self, run_id: str, node_id: str, root: str | os.PathLike[str] | None = None):
        safe = [str(x).replace("/", "_") for x in (run_id, node_id)]
        self.path = Path(root or DEFAULT_HANDOFF_ROOT) / safe[0] / f"{safe[1]}.state"

    def write(self, state: Any, step: int) -> Path:
        """Write atomically (temp file + rename); returns the path."""
        header, flat = pack_state(state)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        meta = struct.pack("<qdq", int(step), time.time(), len(header))
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(_MAGIC + meta + header)
                fh.write(flat.numpy().tobytes())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return self.path

    def read(self) -> Handoff | None:
        """Read the handoff (None when there is none or it is unreadable). It stays in
        place until ``discard``: a worker killed before its new group formed leaves it
        for the next one."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        head = len(_MAGIC) + struct.calcsize("<qdq")
        if len(data) < head or not data.startswith(_MAGIC):
            return None
        step, written_at, hlen = struct.unpack("<qdq", data[len(_MAGIC):head])
        header = data[head:head + hlen]
        flat = torch.frombuffer(bytearray(data[head + hlen:]), dtype=torch.uint8)
        try:
            state = unpack_state(header, flat)
        except (ValueError, KeyError, EOFError):
            return None
        return Handoff(state=state, step=int(step), written_at=float(written_at), path=self.path)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def broadcast_state(state: Any | None, src: int, device: torch.device | str = "cpu") -> Any:
    """Broadcast a nested state from rank ``src`` to every rank of the default group.

    ``state`` is only read on ``src``. Three collectives: the two lengths, the header,
    the flat buffer (on ``device``: CPU for gloo, the rank's GPU for NCCL). Returns the
    state (on ``src``: the argument itself).
    """
    import torch.distributed as dist

    rank = dist.get_rank()
    if rank == src:
        header, flat = pack_state(state)
        sizes = torch.tensor([len(header), flat.numel()], dtype=torch.int64, device=device)
    else:
        sizes = torch.zeros(2, dtype=torch.int64, device=device)
    dist.broadcast(sizes, src)
    hlen, flen = (int(x) for x in sizes.cpu().tolist())
    if rank == src:
        hbuf = torch.frombuffer(bytearray(header), dtype=torch.uint8).to(device)
        fbuf = flat.to(device)
    else:
        hbuf = torch.empty(hlen, dtype=torch.uint8, device=device)
        fbuf = torch.empty(flen, dtype=torch.uint8, device=device)
    dist.broadcast(hbuf, src)
    if flen:
        dist.broadcast(fbuf, src)
    if rank == src:
        return state
    return unpack_state(bytes(hbuf.cpu().numpy().tobytes()), fbuf.cpu())
