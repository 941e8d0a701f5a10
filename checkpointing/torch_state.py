"""Capture and re-apply the state of standard training objects.

``TrainingState`` gathers, into one nested dict that ``checkpointing.snapshot`` can
flatten: the model's ``state_dict``, the optimizer's and LR scheduler's, any other
object with ``state_dict()/load_state_dict()`` (e.g. a data loader or sampler), the RNG
states (python ``random``, numpy's global generator, torch CPU and every CUDA device),
the step counter, the data position and user extras (plain values).
"""

from __future__ import annotations

import hashlib
import pickle
import random
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch


class CheckpointMismatch(ValueError):
    """The checkpoint was written for different objects (another model or script)."""


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> Any: ...


def capture_rng() -> dict[str, Any]:
    """Every global RNG state (python, numpy, torch CPU, torch CUDA if present)."""
    rng: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def restore_rng(rng: dict[str, Any]) -> None:
    """Inverse of ``capture_rng``; CUDA states are restored only when CUDA is present."""
    py = rng["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    np.random.set_state(tuple(rng["numpy"]))
    torch.set_rng_state(torch.as_tensor(rng["torch"], dtype=torch.uint8).clone())
    if "cuda" in rng and torch.cuda.is_available():
        states = [torch.as_tensor(s, dtype=torch.uint8).clone() for s in rng["cuda"]]
        if len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)


@dataclass
class TrainingState:
    """The objects a checkpoint saves and restores. All fields optional.

    ``step`` is the number of COMPLETED steps (the next step to run after a restore);
    ``data_position`` is whatever locates the next batch (defaults to the step);
    ``extras`` holds small plain values (numbers, strings, lists, dicts, tensors).
    """

    model: torch.nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    scheduler: Any | None = None
    stateful: dict[str, Stateful] = field(default_factory=dict)
    rng: bool = True
    step: int = 0
    data_position: Any = None
    extras: dict[str, Any] = field(default_factory=dict)

    def capture(self) -> dict[str, Any]:
        """A nested dict referencing live tensors (the snapshot copies them)."""
        state: dict[str, Any] = {"step": int(self.step), "data_position": self.data_position,
                                 "extras": dict(self.extras)}
        if self.model is not None:
            state["model"] = self.model.state_dict()
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        if self.stateful:
            state["stateful"] = {name: obj.state_dict() for name, obj in self.stateful.items()}
        if self.rng:
            state["rng"] = capture_rng()
        return state

    def apply(self, state: dict[str, Any]) -> int:
        """Load ``state`` into the objects; returns the restored step."""
        missing = [name for name, obj in (("model", self.model), ("optimizer", self.optimizer),
                                           ("scheduler", self.scheduler))
                   if obj is not None and name not in state]
        if missing:
            raise CheckpointMismatch(f"checkpoint has no {', '.join(missing)} state; it was saved by a "
                             "different training script (pass the same objects you saved with)")
        targets: list[tuple[str, Any, Any]] = [
            (name, obj, state[name]) for name, obj in (("model", self.model), ("optimizer", self.optimizer),
                                                       ("scheduler", self.scheduler)) if obj is not None]
        saved = state.get("stateful", {})
        for name, obj in self.stateful.items():
            if name not in saved:
                raise CheckpointMismatch(f"checkpoint has no state for {name!r}; saved: {sorted(saved)}")
            targets.append((name, obj, saved[name]))
        for name, obj, sd in targets:
            try:
                obj.load_state_dict(sd)
                if name == "optimizer":
                    _own_optimizer_state(obj)
            except (RuntimeError, ValueError, KeyError) as exc:
                raise CheckpointMismatch(
                    f"the checkpoint's {name} state does not fit this {type(obj).__name__}: {exc}. "
                    "It was saved by a different model/configuration: point the run at a fresh "
                    "checkpoint location, or restore with the same configuration") from exc
        if self.rng and "rng" in state:
            restore_rng(state["rng"])
        self.step = int(state["step"])
        self.data_position = state.get("data_position")
        self.extras = dict(state.get("extras") or {})
        return self.step


def _own_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Give the optimizer its own copies of tensors that are views into the restore
    buffer (same dtype and device make ``load_state_dict`` keep them as views), so the
    whole buffer, including the model's part, can be freed."""
    for state in optimizer.state.values():
        for key, value in list(state.items()):
            if isinstance(value, torch.Tensor) and value._base is not None:
                state[key] = value.clone()


def _hash_obj(h: Any, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.dim() else
                     t.reshape(1).view(torch.uint8).numpy().tobytes())
    elif isinstance(obj, dict):
        h.update(b"{")
        for k in sorted(obj, key=repr):
            h.update(repr(k).encode())
            _hash_obj(h, obj[k])
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(b"[")
        for v in obj:
            _hash_obj(h, v)
        h.update(b"]")
    else:
        h.update(pickle.dumps(obj, protocol=4))


def state_sha256(*objs: Any) -> str:
    """sha256 over the ``state_dict()`` of each object (or the object itself if a dict).

    Bit-exact: two states hash equal iff every tensor has the same dtype, shape and bytes
    and every plain value is equal.
    """
    h = hashlib.sha256()
    for obj in objs:
        _hash_obj(h, obj.state_dict() if hasattr(obj, "state_dict") else obj)
    return h.hexdigest()


#: how many changed fields a structure-change message names before "+N more"
MAX_NAMED_FIELDS = 4


def _listed(items: list[str]) -> str:
    shown = items[:MAX_NAMED_FIELDS]
    more = len(items) - len(shown)
    return "; ".join(shown) + (f"; +{more} more" if more > 0 else "")


def _saved_tensor(value: Any, specs: list[Any]) -> tuple[list[int], str] | None:
    from checkpointing.snapshot import TensorRef

    if isinstance(value, TensorRef) and 0 <= value.index < len(specs):
        spec = specs[value.index]
        return list(spec.shape), str(spec.dtype)
    return None


def _model_change(saved: Any, model: torch.nn.Module, specs: list[Any]) -> str:
    if not isinstance(saved, dict):
        return "the checkpoint holds no model state"
    now = model.state_dict()
    out = [f"{k} only in the checkpoint" for k in saved if k not in now]
    out += [f"{k} only in this model" for k in now if k not in saved]
    for key, tensor in now.items():
        if key not in saved or not isinstance(tensor, torch.Tensor):
            continue
        old = _saved_tensor(saved[key], specs)
        cur = (list(tensor.shape), str(tensor.dtype).removeprefix("torch."))
        if old is not None and old != cur:
            what = (f"{old[0]} in the checkpoint, {cur[0]} now" if old[0] != cur[0]
                    else f"{old[1]} in the checkpoint, {cur[1]} now")
            out.append(f"{key}: {what}")
    return _listed(out)


def _optimizer_change(saved: Any, optimizer: torch.optim.Optimizer) -> str:
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    if not isinstance(groups, list):
        return "the checkpoint holds no optimizer state"
    now = optimizer.state_dict()["param_groups"]
    if len(groups) != len(now):
        return f"{len(groups)} parameter group(s) in the checkpoint, {len(now)} now"
    out: list[str] = []
    for i, (old, cur) in enumerate(zip(groups, now, strict=True)):
        if len(old.get("params", [])) != len(cur["params"]):
            out.append(f"group {i}: {len(old.get('params', []))} parameters in the checkpoint, "
                       f"{len(cur['params'])} now")
        for key in sorted(set(old) | set(cur)):
            if key in ("params", "lr", "initial_lr", "momentum", "betas"):
                continue  # moved by schedulers, or the parameter list (above)
            if key not in cur:
                out.append(f"group {i}: {key} only in the checkpoint (another optimizer class?)")
            elif key not in old:
                out.append(f"group {i}: {key} only now (another optimizer class?)")
            elif old[key] != cur[key]:
                out.append(f"group {i}: {key} {old[key]!r} in the checkpoint, {cur[key]!r} now")
    return _listed(out)


def structure_change(skeleton: Any, specs: list[Any], state: TrainingState) -> dict[str, str]:
    """What differs between a checkpoint's state header (``skeleton`` and its tensor table
    ``specs``: names, shapes, dtypes, hyperparameters) and ``state``'s objects, per part:
    ``{"model": "0.weight: [32, 8] in the checkpoint, [64, 8] now", ...}``; a part that
    matches is left out."""
    out: dict[str, str] = {}
    saved = skeleton if isinstance(skeleton, dict) else {}
    if state.model is not None:
        text = _model_change(saved.get("model"), state.model, specs)
        if text:
            out["model"] = text
    if state.optimizer is not None:
        text = _optimizer_change(saved.get("optimizer"), state.optimizer)
        if text:
            out["optimizer"] = text
    return out
