"""Offline training simulator (thesis section 6.2.2): latency breakdown and cost of a
training job on preemptible VMs under a checkpointing policy. See
docs/training-simulator.md."""

from checkpointing.training_sim.config import PolicySpec, Range, SimConfig
from checkpointing.training_sim.engine import RunBreakdown, simulate_run
from checkpointing.training_sim.experiment import (
    PolicyResult,
    format_duration,
    format_table,
    run_policies,
)

__all__ = [
    "PolicyResult",
    "PolicySpec",
    "Range",
    "RunBreakdown",
    "SimConfig",
    "format_duration",
    "format_table",
    "run_policies",
    "simulate_run",
]
