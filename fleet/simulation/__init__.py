"""Trace-driven simulation of deadline jobs under fleet policies, and the exact offline
bound. ``Market`` (availability matrix), ``simulate`` (one run), ``omniscient_bound``
(DP lower bound), ``run_sweep`` / ``summarize`` / ``format_table`` (many starts)."""

from fleet.simulation.engine import PolicyError, RunResult, simulate
from fleet.simulation.market import Market
from fleet.simulation.omniscient import OmniscientResult, omniscient_bound

__all__ = ["Market", "OmniscientResult", "PolicyError", "RunResult", "omniscient_bound",
           "simulate"]
