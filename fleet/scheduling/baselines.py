"""Scheduler configurations: GFS, its ablations (Tables 8-10) and the four baselines (§4.1).

Each policy is a combination of a node placement rule (Alg. 1 or a replacement), a
preemption rule (Alg. 2 or a replacement), a queue discipline, and a spot quota source.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PolicyConfig:
    name: str
    placement: str = "gfs"  # see pts.PLACEMENT_MODES
    preemption: str = "gfs"  # see pts.PREEMPTION_MODES
    queue_order: str = "size"  # "size": (GPU request, pods, submit) as PTS; "fcfs": submit time
    strict_fcfs: bool = False  # head-of-line blocking within each class queue
    quota: str = "sqa"  # "sqa": Eq. 9-11 spot quota; "none": spot may take any idle GPU
    forecaster: str = "orglinear"  # "orglinear" (GDE) or "lastweek_peak" (GFS-e)
    eta_feedback: bool = True  # False: eta fixed at 1.0 (GFS-d)
    lease_hp_s: float = 0.0  # Chronus-like leases (0 = none), seconds
    lease_spot_s: float = 0.0


POLICIES: dict[str, PolicyConfig] = {
    "GFS": PolicyConfig("GFS"),
    # ablations
    "GFS-e": PolicyConfig("GFS-e", forecaster="lastweek_peak"),
    "GFS-d": PolicyConfig("GFS-d", eta_feedback=False),
    "GFS-s": PolicyConfig("GFS-s", placement="pack"),
    "GFS-p": PolicyConfig("GFS-p", preemption="random"),
    "GFS-sp": PolicyConfig("GFS-sp", placement="pack", preemption="random"),
    # baselines
    "YARN-CS": PolicyConfig("YARN-CS", placement="bestfit", preemption="youngest",
                            queue_order="fcfs", strict_fcfs=True, quota="none"),
    "Chronus": PolicyConfig("Chronus", placement="bestfit", preemption="none",
                            queue_order="fcfs", quota="none", lease_hp_s=1200.0,
                            lease_spot_s=300.0),
    "Lyra": PolicyConfig("Lyra", placement="bestfit", preemption="lyra",
                         queue_order="fcfs", quota="none"),
    "FGD": PolicyConfig("FGD", placement="fgd", preemption="youngest",
                        queue_order="fcfs", quota="none"),
}

BASELINES = ("YARN-CS", "Chronus", "Lyra", "FGD", "GFS")
ABLATIONS_GDE = ("GFS-e", "GFS")
ABLATIONS_SQA = ("GFS-d", "GFS")
ABLATIONS_PTS = ("GFS-sp", "GFS-s", "GFS-p", "GFS")


def get_policy(name: str) -> PolicyConfig:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
