"""The local fleet's market clock: where compressed (emulated) time is converted.

The local fleet replays a market in which one market hour lasts
``wall_seconds_per_market_hour`` wall seconds (``TimeScale``). Its processes, the
injector and the poll loop run on the wall clock; everything that LEAVES the provider
(``NodeSession`` times, the events passed to ``on_event`` and returned in the
``StageResult``) is in market seconds, so the statistics DB, the cost report and the
planner never see the compression (docs/database.md, "Units").

The mapping is affine, anchored at the Dagster run's start (``anchor_unix``, the
``market_clock_start_unix`` the ``train_<stage>`` asset sends; the attempt's start when
none is given)::

    market_t = anchor + (wall_t - anchor) x factor        (timestamps, unix seconds)
    market_s = wall_s x factor                            (durations)

so a retry or a later stage of the same run lands later on the same market timeline,
and ``market_t - anchor`` is the position in the replayed future that the injector uses.
On a real cloud the factor is 1 and nothing changes (the SkyPilot provider has no clock).

Which event fields are converted: every event's ``time``; a provider ``notice_sent``'s
``deadline_unix`` and ``grace_seconds``; a training ``notice``'s ``deadline_unix``; and
``save_committed``'s ``stall_seconds`` and ``persist_seconds`` (what the DB records as
checkpoint time). Other durations in training-event data (``mean_step_seconds``,
``interval`` events' tau, elastic ``pause_seconds``) stay in the training process's own
(wall) seconds, as the process reported them: they are logs, not statistics.
"""

from __future__ import annotations

import dataclasses
import time

from checkpointing.events import Event
from fleet.providers.base import NodeSession

#: save_committed durations recorded as checkpoint time (market seconds once converted)
CHECKPOINT_DURATIONS = ("stall_seconds", "persist_seconds")


def wall_seconds_of_market(market_seconds: float, market: object = None) -> float:
    """Wall seconds that ``market_seconds`` last on the local fleet replaying ``market``
    (a MarketConfig or its dict; None: the default compression)."""
    from fleet.market.config import MarketConfig

    cfg = market if isinstance(market, MarketConfig) else MarketConfig.model_validate(market or {})
    return float(market_seconds) * cfg.wall_seconds_per_market_hour / 3600.0


@dataclasses.dataclass(frozen=True)
class MarketClock:
    """Wall clock -> market clock of one local-fleet attempt (``factor`` market s per wall s)."""

    anchor_unix: float
    factor: float = 1.0

    @classmethod
    def starting(cls, anchor_unix: float | None, factor: float) -> MarketClock:
        if not (factor > 0):
            raise ValueError(f"MarketClock.factor = {factor!r} must be > 0 market seconds per wall second")
        return cls(float(anchor_unix) if anchor_unix else time.time(), float(factor))

    def at(self, wall_t: float | None) -> float | None:
        """A wall unix timestamp as a market unix timestamp (None stays None)."""
        if wall_t is None:
            return None
        return self.anchor_unix + (wall_t - self.anchor_unix) * self.factor

    def seconds(self, wall_s: float | None) -> float | None:
        """A wall duration as market seconds (None stays None)."""
        return None if wall_s is None else wall_s * self.factor

    def session(self, s: NodeSession) -> NodeSession:
        """A node session recorded on the wall clock, in market time."""
        return dataclasses.replace(s, launched_at=self.at(s.launched_at), ready_at=self.at(s.ready_at),
                                   ended_at=self.at(s.ended_at), notice_at=self.at(s.notice_at))

    def event(self, ev: Event) -> Event:
        """An event stamped on the wall clock, in market time (see the module docstring)."""
        if self.factor == 1.0:
            return ev
        data = dict(ev.data)
        if ev.kind in ("notice_sent", "notice") and isinstance(data.get("deadline_unix"), (int, float)):
            data["deadline_unix"] = self.at(float(data["deadline_unix"]))
        if ev.kind == "notice_sent" and isinstance(data.get("grace_seconds"), (int, float)):
            data["grace_seconds"] = self.seconds(float(data["grace_seconds"]))
        if ev.kind == "save_committed":
            for k in CHECKPOINT_DURATIONS:
                if isinstance(data.get(k), (int, float)):
                    data[k] = self.seconds(float(data[k]))
        return Event(kind=ev.kind, time=self.at(ev.time), node_id=ev.node_id, data=data)
