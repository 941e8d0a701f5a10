"""What every provider records while it runs one attempt of one stage."""

from __future__ import annotations

from collections.abc import Callable

from checkpointing.events import Event
from fleet.contract import (
    posterior_checkpoint_seconds,
    posterior_mttp_seconds,
    posterior_restart_seconds,
    restart_seconds_of,
)
from fleet.providers.base import NodeSession, StageSpec


class AttemptRecord:
    """The node sessions and events of one attempt; each event also goes to ``on_event``.

    Providers subclass it for their per-attempt runner and report ``sessions`` and
    ``events`` in the ``StageResult``.
    """

    def __init__(self, spec: StageSpec, attempt: int, on_event: Callable[[Event], None] | None):
        self.spec = spec
        self.attempt = attempt
        self.on_event = on_event
        self.sessions: list[NodeSession] = []
        self.events: list[Event] = []

    def _emit(self, event: Event) -> None:
        """Keep ``event`` and pass it to the caller's ``on_event`` (if any), in order."""
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    # -- the run contract refreshed from what this attempt observed (market seconds) -------
    def mttp_estimate(self, zone: str | None, spot: bool = True, job_nodes: int = 1) -> float | None:
        """MTTP (s) of ``zone``: the plan's prior, refined by what this attempt's ended spot
        sessions held and lost so far (``fleet.contract.posterior_mttp_seconds``; never the
        market's future). None on on-demand: nothing preempts it, so the training process
        takes no insurance saves there (periodic ones remain). A failed session (the
        training process crashed) says nothing about the market and is left out.

        Only ``zone``'s own sessions refine ``zone``'s prior (all sessions when ``zone`` is
        None): MTTP is per zone. Before 2026-11-28 every zone's sessions did, so a node that
        held 10 h in a calm zone and was moved to a zone with a 1.6 h MTTP told its
        training process an MTTP of 11.6 h there (insurance saves 2.7x too far apart),
        and one preemption in a calm zone halved the next zone's MTTP.

        ``job_nodes``: a job that is lost as a whole when ANY of its ``job_nodes`` nodes is
        (a SkyPilot managed multi-node job: the controller recovers the whole cluster). The
        plan's prior is one node's MTTP; the job's is taken as that / ``job_nodes`` (each
        node reclaimed independently, the conservative case: a zone-wide reclaim of all of
        them is one event, an MTTP up to ``job_nodes`` times longer). What the attempt
        observed needs no scaling: each job loss ends all its nodes' sessions, so held /
        lost over them is already the job's MTTP."""
        if not spot:
            return None
        if isinstance(job_nodes, bool) or not isinstance(job_nodes, int) or job_nodes < 1:
            raise ValueError(f"job_nodes must be an integer >= 1, got {job_nodes!r}")
        ended = [s for s in self.sessions if s.spot and s.ended_at is not None
                 and s.end_reason in ("preempted", "completed", "cancelled")
                 and (zone is None or s.zone == zone)]
        held = sum(max(0.0, s.ended_at - (s.ready_at or s.launched_at)) for s in ended)
        lost = sum(1 for s in ended if s.end_reason == "preempted")
        prior = self.spec.priors.mttp_for(zone)
        return posterior_mttp_seconds(prior / job_nodes if prior is not None else None, held, lost)

    def restart_estimate(self) -> float:
        """R (market s): the plan's prior (one sample) refined by every launch -> ready this
        attempt measured: its ended sessions' and :meth:`running_starts`. Every provider
        tells its policy this R before each decision (``PolicyDriver.restart_seconds``) and
        its training process the same R (``training_env``)."""
        measured = [r for s in self.sessions if (r := restart_seconds_of(s.launched_at, s.ready_at)) is not None]
        return posterior_restart_seconds(self.spec.priors.restart_seconds, measured + self.running_starts())

    def running_starts(self) -> list[float]:
        """launch -> ready (market s) of nodes that started but have no session yet (the
        running group's); none by default (a provider that records a session only when its
        node ends and knows its running nodes' starts overrides it)."""
        return []

    def checkpoint_estimate(self, stalls: list[float]) -> float | None:
        """Checkpoint time (s): the plan's measured one, refined by the attempt's ``stalls``."""
        return posterior_checkpoint_seconds(self.spec.priors.checkpoint_seconds, stalls)
