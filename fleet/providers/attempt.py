"""What every provider records while it runs one attempt of one stage."""

from __future__ import annotations

from collections.abc import Callable

from checkpointing.events import Event
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
