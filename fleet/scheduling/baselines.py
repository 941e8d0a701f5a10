"""Scheduler configurations: GFS, its ablations (Tables 8-10), the four baselines (§4.1)
in two families, and one variant beyond the paper.

Each policy is a combination of a node placement rule (Alg. 1 or a replacement), a
preemption rule (Alg. 2 or a replacement), a queue discipline, and a spot quota source.

Baseline families:

* **ungated** (``YARN-CS``, ``Chronus``, ``Lyra``, ``FGD``): spot may take any idle GPU
  and is evicted later; the honest comparison for a provider that has no forecaster.
* **quota-gated** (``YARN-CS+Q``, ``Lyra+Q``, ``FGD+Q``): the same baseline placement,
  preemption and queue, but spot is admitted through the *same* GDE forecast and SQA
  quota (Eq. 9-10) as GFS with eta fixed at 1 -- the setting of the GFS authors' code,
  where only Chronus is ungated. Compared with these, GFS differs only by PTS and eta.

Beyond the paper: ``GFS-BF`` = GFS plus a best-effort spot tier, a checkpoint-aware
eviction order and a starvation guard (see cluster_sim and docs/gfs.md).
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
    backfill: bool = False  # GFS-BF: best-effort spot runs beyond the quota (see cluster_sim)
    # GFS-BF: spot jobs waiting longer than theta (SQAParams.theta_s) are scanned first,
    # longest wait first (PTS's size order otherwise starves large requests)
    starvation_guard: bool = False
    family: str = "gfs"  # "gfs", "ablation", "ungated", "gated", "beyond" (table grouping)


_YARN = dict(placement="bestfit", preemption="youngest", queue_order="fcfs", strict_fcfs=True)
_LYRA = dict(placement="bestfit", preemption="lyra", queue_order="fcfs")
_FGD = dict(placement="fgd", preemption="youngest", queue_order="fcfs")

POLICIES: dict[str, PolicyConfig] = {
    "GFS": PolicyConfig("GFS"),
    # ablations
    "GFS-e": PolicyConfig("GFS-e", forecaster="lastweek_peak", family="ablation"),
    "GFS-d": PolicyConfig("GFS-d", eta_feedback=False, family="ablation"),
    "GFS-s": PolicyConfig("GFS-s", placement="pack", family="ablation"),
    "GFS-p": PolicyConfig("GFS-p", preemption="random", family="ablation"),
    "GFS-sp": PolicyConfig("GFS-sp", placement="pack", preemption="random", family="ablation"),
    # baselines, ungated: spot may take any idle GPU
    "YARN-CS": PolicyConfig("YARN-CS", quota="none", family="ungated", **_YARN),
    "Chronus": PolicyConfig("Chronus", placement="bestfit", preemption="none",
                            queue_order="fcfs", quota="none", lease_hp_s=1200.0,
                            lease_spot_s=300.0, family="ungated"),
    "Lyra": PolicyConfig("Lyra", quota="none", family="ungated", **_LYRA),
    "FGD": PolicyConfig("FGD", quota="none", family="ungated", **_FGD),
    # baselines, quota-gated: the same GDE + SQA as GFS, eta fixed at 1 (authors' code)
    "YARN-CS+Q": PolicyConfig("YARN-CS+Q", eta_feedback=False, family="gated", **_YARN),
    "Lyra+Q": PolicyConfig("Lyra+Q", eta_feedback=False, family="gated", **_LYRA),
    "FGD+Q": PolicyConfig("FGD+Q", eta_feedback=False, family="gated", **_FGD),
    # beyond the paper: guaranteed tier under the SQA quota + best-effort tier on idle GPUs
    "GFS-BF": PolicyConfig("GFS-BF", preemption="gfs-bf", backfill=True, starvation_guard=True, family="beyond"),
}

UNGATED = ("YARN-CS", "Chronus", "Lyra", "FGD")
GATED = ("YARN-CS+Q", "Lyra+Q", "FGD+Q")
BASELINES = UNGATED + GATED + ("GFS", "GFS-BF")
ABLATIONS_GDE = ("GFS-e", "GFS")
ABLATIONS_SQA = ("GFS-d", "GFS")
ABLATIONS_PTS = ("GFS-sp", "GFS-s", "GFS-p", "GFS")


def get_policy(name: str) -> PolicyConfig:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
