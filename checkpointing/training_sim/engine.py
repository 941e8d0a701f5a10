"""One simulated training run on preemptible VMs (thesis section 6.2.2). Seconds.

Timeline of a run::

    alloc | prep | steps ... save ... steps ... [notice] ... kill | alloc | prep | ...

* A VM's lifetime starts when it is allocated and is exponential with mean MTTP
  (thesis Eq. 6.1); the notice arrives ``grace_seconds`` before the kill.
* Training resumes from the newest DURABLE checkpoint: a save is durable once its
  dump (delta) and its background backup (beta) have both finished before the kill.
  Everything computed after it is lost and recomputed ("recompute", a part of
  "compute", as in Tables 6.2/6.3).
* Static policies save every N steps and ignore notices. The adaptive policy is the
  real ``checkpointing.policy.AdaptivePolicy``: the simulator feeds it step and save
  times and asks ``decide`` at every step where a save can be due (periodic steps, its
  ``next_insurance_step``, and the first step ending after a notice). Steps in between
  are fed in bulk with ``record_steps``; ``exhaustive=True`` asks ``decide`` at every
  step instead and gives the identical result (tested).
* With ``notice_probability < 1`` some VMs are killed without any notice.
* An emergency save dumps and persists synchronously; when it completes the VM is
  released and the replacement allocation starts (the rest of the notice window is
  not spent by the job). One that does not finish before the kill is lost.
* Total latency = compute (incl. recompute) + save + allocation + preparation.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from checkpointing.policy import AdaptivePolicy, SaveKind
from checkpointing.training_sim.config import PolicySpec, Range, SimConfig

__all__ = ["RunBreakdown", "simulate_run"]


@dataclass(frozen=True)
class RunBreakdown:
    """Latency breakdown of one run (seconds) and its cost ($)."""

    compute_seconds: float  # all step compute, recompute included
    recompute_seconds: float  # compute that was lost to preemptions
    save_seconds: float  # time training was stalled by saves (incl. emergency persist)
    alloc_seconds: float
    prep_seconds: float
    total_seconds: float
    cost_dollars: float
    preemptions: int
    saves: int
    emergency_saves: int
    failed_emergency_saves: int


class _StepStream:
    """Per-step compute times in execution order, as prefix sums (recomputed steps draw
    fresh samples). ``prefix[i]`` is the time of the first ``i`` steps executed."""

    def __init__(self, rng: np.random.Generator, r: Range, expected: int) -> None:
        self._rng, self._r = rng, r
        self.prefix: list[float] = [0.0]
        self._grow(max(1024, expected))

    def _grow(self, n: int) -> None:
        if self._r.high > self._r.low:
            draws = self._rng.uniform(self._r.low, self._r.high, size=n)
        else:
            draws = np.full(n, self._r.low)
        cum = np.cumsum(draws) + self.prefix[-1]
        self.prefix.extend(cum.tolist())

    def ensure(self, index: int) -> None:
        while index >= len(self.prefix):
            self._grow(max(1024, len(self.prefix) // 2))


def _uniform(rng: random.Random, r: Range) -> float:
    return r.low if r.high <= r.low else rng.uniform(r.low, r.high)


def simulate_run(
    config: SimConfig,
    policy: PolicySpec,
    *,
    mttp_seconds: float | None,
    seed: int,
    exhaustive: bool = False,
    lifetimes_seconds: Sequence[float] | None = None,
    max_preemptions: int = 200_000,
) -> RunBreakdown:
    """Simulate one training run; ``mttp_seconds=None`` (or on-demand) means no preemption.

    Runs with the same ``seed`` see the same VM lifetimes, allocation and preparation
    latencies in the same order (common random numbers), so policies compare fairly.
    ``lifetimes_seconds`` replaces the exponential draws with a fixed list (a preemption
    trace, like the thesis's injector input); VMs after the list's end are never
    preempted. ``mttp_seconds`` is then only the policy's estimate. A run that needs
    more than ``max_preemptions`` preemptions raises ValueError (the job thrashes).
    """
    on_demand = policy.kind == "on-demand"
    preemptible = not on_demand and mttp_seconds is not None and math.isfinite(mttp_seconds)
    if preemptible and mttp_seconds <= 0:
        raise ValueError(f"mttp_seconds must be > 0, got {mttp_seconds!r}")
    trace = (
        None if lifetimes_seconds is None or on_demand else [float(x) for x in lifetimes_seconds]
    )
    if trace is not None and any(not (x > 0) for x in trace):
        raise ValueError("lifetimes_seconds must all be > 0 seconds")
    env = random.Random(seed * 1_000_003 + 17)  # lifetimes, allocation, preparation
    job = random.Random(seed * 1_000_003 + 29)  # checkpoint and backup latencies
    steps = _StepStream(
        np.random.default_rng(seed * 1_000_003 + 43),
        config.step_seconds,
        int(config.total_steps * 1.25) + 16,
    )
    prefix = steps.prefix

    adaptive: AdaptivePolicy | None = None
    if policy.kind == "adaptive":
        adaptive = AdaptivePolicy(
            periodic_every=policy.every,
            grace_seconds=config.grace_seconds,
            mttp_seconds=mttp_seconds if (preemptible or trace is not None) else None,
            restart_seconds=config.alloc_seconds.mean + config.prep_seconds.mean,
            insurance=policy.insurance,
        )
    every = policy.every

    total = config.total_steps
    grace = config.grace_seconds
    t = 0.0  # wall clock
    ptr = 0  # index into the step stream
    compute = recompute = save_t = alloc_t = prep_t = 0.0
    preemptions = saves = emergencies = failed = 0
    durable_step, durable_mark = 0, 0.0  # newest restorable checkpoint (step, compute clock)
    step = 0

    while True:
        # ---- get a VM: allocate, then prepare (the VM can be lost while preparing)
        while True:
            a = _uniform(env, config.alloc_seconds)
            if trace is not None:
                life = trace.pop(0) if trace else math.inf
            else:
                life = env.expovariate(1.0 / mttp_seconds) if preemptible else math.inf
            p = _uniform(env, config.prep_seconds)
            alloc_t += a
            t += a
            kill = t + life
            if t + p <= kill:
                prep_t += p
                t += p
                break
            prep_t += kill - t
            t = kill
            preemptions += 1
            if preemptions > max_preemptions:
                raise ValueError(
                    f"the job thrashes: {preemptions} VMs lost while preparing; MTTP "
                    f"{mttp_seconds} s is too short for preparation {config.prep_seconds} s"
                )
        notice_at = kill - grace
        if config.notice_probability < 1.0 and env.random() >= config.notice_probability:
            notice_at = math.inf  # this VM is killed without warning
        notice_seen = False
        pending: list[tuple[int, float, float]] = []  # (step, durable_at, compute mark)
        persist_free_at = t  # when the in-flight backup finishes
        step = durable_step
        if adaptive is not None:
            adaptive.on_restore(step)
        released = False  # an emergency save finished: VM handed back early
        killed = False

        while step < total:
            # ---- next step at whose end a save may be due
            if adaptive is None:
                target = min((step // every + 1) * every, total)
            elif exhaustive:
                target = step + 1
            else:
                target = total
                if every:
                    target = min(target, (step // every + 1) * every)
                ins = adaptive.next_insurance_step
                if ins is not None:
                    target = min(target, max(ins, step + 1))
            k = target - step
            steps.ensure(ptr + k)
            base = prefix[ptr]
            if adaptive is not None and not notice_seen and notice_at < t + prefix[ptr + k] - base:
                # the notice lands in this stretch: stop at the end of the step it lands in
                m = bisect.bisect_left(prefix, base + (notice_at - t), ptr + 1, ptr + k + 1) - ptr
                k = max(1, min(k, m))
                target = step + k
            seg = prefix[ptr + k] - base
            if t + seg > kill:  # killed mid-stretch: everything since the last durable save is lost
                j = bisect.bisect_right(prefix, base + (kill - t), ptr, ptr + k + 1)
                if adaptive is not None and j - 1 > ptr:
                    adaptive.record_steps(j - 1 - ptr, prefix[j - 1] - base)
                ptr = j  # the step in progress consumed a sample too
                compute += kill - t
                t = kill
                killed = True
                break
            t += seg
            compute += seg
            ptr += k
            step = target
            # ---- decide
            kind: SaveKind | None = None
            if adaptive is None:
                if step % every == 0:
                    kind = SaveKind.PERIODIC
            else:
                adaptive.record_steps(k, seg)
                notice = t >= notice_at
                if notice:
                    notice_seen = True
                decision = adaptive.decide(step, notice, (kill - t) if notice else None)
                kind = decision.kind
            if kind is not None:
                d = _uniform(job, config.ckpt_seconds)
                b = _uniform(job, config.backup_seconds)
                if config.async_saver:
                    stall = min(_uniform(job, config.stall_seconds), d)
                    background = (d - stall) + b
                else:
                    stall, background = d, b
                if kind is SaveKind.EMERGENCY:
                    # supersedes (cancels) a persist still in flight, then dumps + persists
                    emergencies += 1
                    pending = [x for x in pending if x[1] <= t]
                    wait = 0.0
                    critical = stall + background
                else:
                    wait = max(0.0, persist_free_at - t)  # at most one persist in flight
                    critical = wait + stall
                if t + critical > kill:  # killed while saving
                    save_t += kill - t
                    t = kill
                    killed = True
                    if kind is SaveKind.EMERGENCY:
                        failed += 1
                    break
                t += critical
                save_t += critical
                saves += 1
                if kind is SaveKind.EMERGENCY:
                    durable_step, durable_mark = step, compute
                    pending.clear()
                    if adaptive is not None:
                        adaptive.record_save(kind, step, wait + stall, background)
                    released = step < total
                    break
                persist_free_at = t + background
                pending.append((step, persist_free_at, compute))
                if adaptive is not None:
                    adaptive.record_save(kind, step, wait + stall, background)
        if step >= total and not released and not killed:
            break  # finished
        # ---- preempted (or released after an emergency save): roll back
        end = t if released else kill
        for s, ready, mark in pending:
            if ready <= end and s > durable_step:
                durable_step, durable_mark = s, mark
        recompute += compute - durable_mark
        durable_mark = compute  # the lost work is accounted; measure from here on
        preemptions += 1
        if preemptions > max_preemptions:
            raise ValueError(
                f"the job thrashes: {preemptions} preemptions and only step {durable_step} of "
                f"{total} durable; MTTP {mttp_seconds} s is too short for allocation "
                f"{config.alloc_seconds} s + preparation {config.prep_seconds} s + checkpoint "
                f"intervals; raise mttp or lower the latencies"
            )

    total_seconds = compute + save_t + alloc_t + prep_t
    price = config.on_demand_price_per_hour if on_demand else config.spot_price_per_hour
    return RunBreakdown(
        compute_seconds=compute,
        recompute_seconds=recompute,
        save_seconds=save_t,
        alloc_seconds=alloc_t,
        prep_seconds=prep_t,
        total_seconds=total_seconds,
        cost_dollars=total_seconds / 3600.0 * price,
        preemptions=preemptions,
        saves=saves,
        emergency_saves=emergencies,
        failed_emergency_saves=failed,
    )
