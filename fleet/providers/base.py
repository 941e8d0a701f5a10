"""One interface for every fleet provider (``local`` emulated fleet, ``skypilot``).

A *stage* runs one training command on one or more nodes until it completes. Inside
a stage attempt the provider survives preemptions itself (relaunch in another zone,
the training process resumes from the latest checkpoint); it gives up only when the
whole attempt is lost (no capacity anywhere, too many relaunches, deadline) and then
raises ``AttemptFailed`` so that Dagster's RetryPolicy retries the attempt.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from checkpointing.events import Event
from fleet.contract import RunPriors, billed_usd, session_cost_usd
from fleet.policies.registry import DEFAULT_POLICY


@dataclass(frozen=True)
class StageSpec:
    """What to run and where: the run contract of one stage.

    Durations in MARKET seconds (real seconds on SkyPilot, emulated seconds on the local
    fleet, which converts them to its compressed wall clock itself), prices in $/h.
    ``policy`` names the fleet policy (fleet/policies/registry.py) that places and moves
    the node group; ``priors`` are the plan's statistics (``FleetPlan.apply``) that the
    policy and the training process start from.
    """

    name: str
    command: list[str]  # argv of the training process
    checkpoint_uri: str  # SPOTFLEET_CHECKPOINT_URI for the process
    accelerator: str = "V100"
    accelerator_count: int = 1
    num_nodes: int = 1
    clouds: tuple[str, ...] = ("aws",)
    regions: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()  # candidate zones in preference order
    use_spot: bool = True
    instance_type: str | None = None
    deadline_seconds: float | None = None
    #: False: the pipeline ruled on-demand out (``on_demand_fallback: false``); the fleet
    #: policy's on-demand launches are not made (``JobSpec.on_demand_allowed``)
    on_demand_allowed: bool = True
    env: dict[str, str] = field(default_factory=dict)
    max_relaunches: int = 20
    policy: str = DEFAULT_POLICY
    priors: RunPriors = field(default_factory=RunPriors)
    #: $ of the pipeline's budget left when this attempt starts (``enforce_budget: true``);
    #: None: no budget enforced. A relaunch that would spend past it is not made
    #: (:func:`relaunch_budget_error`).
    budget_left_usd: float | None = None
    #: progress watchdog (local fleet; fleet/providers/stall.py), WALL seconds of the training
    #: process: a running node with no training event for longer than this is killed and
    #: relaunched from its latest checkpoint (a failure, counted in ``max_relaunches``);
    #: "auto": max(120 s, 20 x its mean step s x its steps per progress event); 0 / None: off
    stall_timeout_seconds: float | str | None = "auto"
    #: the watchdog's limit (wall s) from a node's ``start`` event (after its restore) to its
    #: first ``progress`` event
    stall_startup_seconds: float = 600.0
    #: an operator's Terminate (fleet/providers/terminate.py), WALL seconds: each running node
    #: gets a preemption notice (emergency save) and is killed if still running this long
    #: after; "auto": the fleet's notice window; 0: kill at once
    terminate_grace_seconds: float | str = "auto"


@dataclass(frozen=True)
class NodeSession:
    """One node's life: launched in a zone, ended by completion, preemption or failure.

    Times are unix seconds; ``price_per_hour`` in $/h. Persisted by infra/db.
    """

    node_id: str
    stage: str
    attempt: int
    provider: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    spot: bool
    price_per_hour: float
    launched_at: float
    ready_at: float | None
    ended_at: float | None
    end_reason: Literal["completed", "preempted", "failed", "cancelled", "running"]
    notice_at: float | None = None
    first_step: int | None = None
    last_step: int | None = None
    last_checkpoint_step: int | None = None
    #: ended by a fault injection (the local fleet's ``preempt_now``, e.g. a pipeline's
    #: ``inject_preemptions_at_steps``), not by the market: billed and counted in the cost
    #: report like any preemption, left out of the market's statistics (``session_stats``)
    injected: bool = False


@dataclass
class StageResult:
    """Outcome of one stage attempt."""

    stage: str
    attempt: int
    completed: bool
    sessions: list[NodeSession]
    events: list[Event]
    final_step: int | None
    info: dict[str, Any] = field(default_factory=dict)


class AttemptFailed(RuntimeError):
    """The whole attempt is lost; Dagster should retry it (it will resume from checkpoint)."""


#: marker in an AttemptFailed message: the budget stopped the stage (the orchestrator does
#: not retry it)
BUDGET_STOP = "stopped by the budget"


def relaunch_budget_error(stage: str, budget_left_usd: float | None, spent_usd: float,
                          relaunch_usd: float, *, first_launch: bool = False) -> str | None:
    """Why a (re)launch must not happen, or None when it fits.

    ``budget_left_usd``: the budget left at attempt start (None: not enforced);
    ``spent_usd``: this attempt's spend so far; ``relaunch_usd``: the least the relaunch
    costs (its node group's start-up: price x nodes x the restart time);
    ``first_launch``: the attempt's first node group (nothing spent yet), not a relaunch.
    """
    if budget_left_usd is None or spent_usd + relaunch_usd <= budget_left_usd:
        return None
    what, done = ("its first launch", "launched") if first_launch else ("a relaunch", "relaunched")
    return (f"stage {stage!r} {BUDGET_STOP}: this attempt spent ${spent_usd:.4f} and {what} costs at "
            f"least ${relaunch_usd:.4f} (its start-up), over the ${budget_left_usd:.4f} left of the budget "
            f"when the attempt started; the stage was NOT {done}. Raise budget_usd in the pipeline "
            "YAML, or set enforce_budget: false to allow it")


def attempt_budget_error(spec: StageSpec, sessions: Iterable[NodeSession], price_per_hour: float,
                         *, first_launch: bool = False, restart_seconds: float | None = None) -> str | None:
    """:func:`relaunch_budget_error` for one attempt of ``spec`` about to launch a node group
    at ``price_per_hour`` ($/h per node): spent = its ``sessions`` billed so far
    (``fleet.contract.session_cost_usd``), start-up = price x ``spec.num_nodes`` x the
    restart time R (s): ``restart_seconds``, the attempt's own estimate
    (``AttemptRecord.restart_estimate``: the plan's R refined by every launch -> ready
    measured, the R the policy plans with), or the plan's ``spec.priors.restart_seconds``
    when not given. Every provider uses this one rule."""
    if spec.budget_left_usd is None:
        return None
    spent = sum(session_cost_usd(s.price_per_hour, s.launched_at, s.ended_at) for s in sessions)
    r = spec.priors.restart_seconds if restart_seconds is None else max(0.0, float(restart_seconds))
    start_up = billed_usd(price_per_hour * spec.num_nodes, r)
    return relaunch_budget_error(spec.name, spec.budget_left_usd, spent, start_up, first_launch=first_launch)


class FleetProvider(abc.ABC):
    """Launch a stage, stream its events, survive preemptions, cancel it."""

    name: str

    @abc.abstractmethod
    def run_stage(
        self,
        spec: StageSpec,
        attempt: int = 1,
        on_event: Callable[[Event], None] | None = None,
    ) -> StageResult:
        """Run the stage to completion (blocking), relaunching after preemptions.

        ``on_event`` is called for every training event and every provider event
        (launch, preemption, relaunch), so the caller can forward them to Dagster Pipes.
        Raises ``AttemptFailed`` when it cannot finish this attempt.
        """

    @abc.abstractmethod
    def cancel(self, stage: str) -> None:
        """Stop every node of a running stage (kill at once)."""

    def terminate(self, stage: str) -> None:
        """An operator's Terminate: stop the stage gracefully -- every running node is asked
        to save (the notice of a preemption) and killed if it has not stopped after the
        stage's ``terminate_grace_seconds`` (fleet/providers/terminate.py). Idempotent; a
        later ``cancel`` kills at once. This default (a provider that cannot ask its nodes to
        save) is ``cancel``."""
        self.cancel(stage)

    def sessions(self) -> Iterator[NodeSession]:
        """All node sessions recorded so far (for statistics)."""
        return iter(())
