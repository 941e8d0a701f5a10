"""The market a pipeline runs on (``market:`` in the pipeline YAML), and what it yields:
its traces (history, or history + the future the local fleet replays), its prices.

Hours are MARKET hours. ``wall_seconds_per_market_hour`` and ``grace_seconds`` concern
only the local emulated fleet's compressed clock (fleet/providers/local); nothing else
converts time with them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import pickle
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, model_validator

from fleet.market.prices import PriceBook
from fleet.market.traces import Trace

#: p3.2xlarge (V100) $/h, the figures used with the public traces
DEFAULT_ON_DEMAND_PRICE = 3.06
DEFAULT_SPOT_PRICE = 0.918


class MarketConfig(BaseModel):
    """The spot market the local fleet emulates (synthetic unless a trace dir is given).

    The local fleet replays the market with time compression: one market hour lasts
    ``wall_seconds_per_market_hour`` wall seconds; everything it records is in market
    seconds.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["synthetic", "traces"] = "synthetic"
    seed: int = 0
    n_zones: int = Field(3, ge=1, le=9, description="synthetic: calibrated zones to emulate")
    hours: float = Field(72.0, gt=0, description="length of the market history, hours")
    future_hours: float = Field(
        48.0, gt=0, description="synthetic: market hours after the history that the local fleet replays")
    trace_dir: str | None = None
    instance_types: tuple[str, ...] | None = Field(
        None, description="traces: keep only these instance types (file label, e.g. v100_1, "
                          "or accelerator); the local fleet needs one type per zone")
    wall_seconds_per_market_hour: float = Field(10.0, gt=0)
    cloud: Literal["aws", "gcp", "azure", "signal"] = Field(
        "signal", description="notice protocol the local fleet emulates")
    grace_seconds: float | None = Field(None, gt=0, description="notice window, wall seconds")
    inject_preemptions_at_steps: dict[str, list[NonNegativeInt]] = Field(
        default_factory=dict,
        description="fault injection: stage -> training steps at which the node running it "
                    "gets a preemption notice (on top of the market's own preemptions)")
    lose_attempt_at_step: dict[str, NonNegativeInt] = Field(
        default_factory=dict,
        description="fault injection: stage -> step at which the FIRST attempt loses its "
                    "whole node group (Dagster then retries it)")
    on_demand_price_per_hour: float = Field(DEFAULT_ON_DEMAND_PRICE, gt=0, description="$/h, local fleet")
    spot_price_per_hour: float = Field(DEFAULT_SPOT_PRICE, gt=0, description="$/h, local fleet")

    @model_validator(mode="after")
    def _traces(self) -> MarketConfig:
        if self.kind == "traces" and not self.trace_dir:
            raise ValueError("kind 'traces' needs trace_dir: a folder of spot-trace JSON files")
        if self.instance_types and self.kind != "traces":
            raise ValueError("instance_types filters trace files: it needs kind 'traces'")
        return self

    @property
    def history_seconds(self) -> float:
        """Market seconds of history before the fleet's replay starts."""
        return self.hours * 3600.0

    def traces(self, part: Literal["history", "all"] = "history",
               cache_dir: str | Path | None = None) -> list[Trace]:
        """``history``: the first ``hours`` hours (what statistics and forecasts see);
        ``all``: history followed by ``future_hours`` more (the local fleet replays the
        future from where the history ends: the world it lives through, never an input
        to a decision).

        ``cache_dir``: keep the generated synthetic market there (a pickle named by a hash
        of the generator's source and of its inputs), so that every node runner of a run
        loads it instead of generating it again (~0.1 s each); trace folders are not cached.
        """
        if self.kind == "traces":
            from fleet.market.traces import load_trace_dir

            traces = load_trace_dir(self.trace_dir, instance_types=self.instance_types)
        else:
            traces = self._synthetic(cache_dir)
        if part == "all":
            return traces
        out = []
        for t in traces:
            n = max(1, min(t.n_ticks, int(round(self.hours * 3600.0 / t.gap_seconds))))
            sp = None if t.spot_prices is None else t.spot_prices[:n]
            out.append(dataclasses.replace(t, available=t.available[:n], spot_prices=sp))
        self._check_history_up(traces, out)
        return out

    def _check_history_up(self, full: list[Trace], history: list[Trace]) -> None:
        """Refuse a history window in which no zone is ever up (the folder check saw the
        whole traces; statistics and forecasts of an all-down window would all be zero),
        naming the window and the ``hours`` that would let it see the first capacity."""
        if any(t.up().any() for t in history):
            return
        where = self.trace_dir if self.kind == "traces" else f"the synthetic market (seed {self.seed})"
        ends = [((int(np.argmax(t.up())) + 1) * t.gap_seconds / 3600.0, t.zone)
                for t in full if t.up().any()]
        fix = "; no zone is up in the whole market either"
        if ends:
            first, zone = min(ends)
            fix = (f"; the first capacity is in {zone}, in the tick that ends at hour "
                   f"{first:.2f}: set the market's hours to at least "
                   f"{math.ceil(first * 100 - 1e-9) / 100:g} (more for statistics worth "
                   "reading)")
        raise ValueError(
            f"market history window: no zone of {where} is ever up in the first "
            f"{self.hours:g} h (hours: {self.hours:g}){fix}")

    def _synthetic(self, cache_dir: str | Path | None) -> list[Trace]:
        from fleet.market import synthetic

        hours = self.hours + self.future_hours
        if cache_dir is None:
            return synthetic.generate_market(synthetic.default_market_config(n_zones=self.n_zones),
                                             hours, self.seed)
        key = hashlib.sha256(Path(synthetic.__file__).read_bytes()
                             + repr((self.n_zones, hours, self.seed)).encode()).hexdigest()[:24]
        path = Path(cache_dir) / f"market-{key}.pkl"
        try:
            with path.open("rb") as f:
                return pickle.load(f)  # written below by this code, in this state folder
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, AttributeError, ImportError):
            pass
        traces = synthetic.generate_market(synthetic.default_market_config(n_zones=self.n_zones),
                                           hours, self.seed)
        try:  # atomic: a concurrent reader sees the old state or the whole file
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(pickle.dumps(traces, protocol=pickle.HIGHEST_PROTOCOL))
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only state folder: generate each time
        return traces

    def price_book(self) -> PriceBook:
        """The fleet's PriceBook with this market's spot / on-demand $/h (for p3.2xlarge)
        and, for a trace folder whose files carry prices (SkyNomad ``price_info``), the
        files' prices over the history window (``PriceBook.with_traces``): what the
        planner prices zones with, as the fleet simulator does."""
        book = PriceBook.default(overrides={
            "spot": {"p3.2xlarge": {"*": self.spot_price_per_hour}},
            "on_demand": {"p3.2xlarge": {"*": self.on_demand_price_per_hour}}})
        return book.with_traces(self.traces("history")) if self.kind == "traces" else book
