"""spotfleet's own deadline policy (v11): Uniform Progress's robust core, priced and probed.

Why this shape: the previous spotfleet (run-length forecast + a slack reserve from the
observed market + a 5 h on-demand exit rule) was tuned on the 9-zone V100 set and lost
2-29 % to Uniform Progress in volatile markets, where its reserve exceeded the slack
and kept it on on-demand. This version keeps no market-sized reserve and no tuned exit
rules: the spot / on-demand / idle decision is Uniform Progress's (NSDI'24), which has
no market parameter at all, plus the deadline safety net — except that it bridges an
outage on on-demand only when the spare slack falls below ``time left x min((D-W)/D, b)``
with ``b`` the expected share of time that burns slack (:meth:`slack_burn_share`; less
than Uniform Progress's line where capacity is nearly always somewhere: waiting is free),
and that with ample slack it waits for a better zone (``patience``). What it adds is
what the baselines ignore and a live controller knows:

* **Price and region aware zone choice.** Every candidate zone gets an expected cost
  per *useful* hour: its spot $/h now times the expected run (mean up-run from the
  statistics before the job, capped by the work left), plus the egress $ of moving the
  checkpoint when the zone is in another region, divided by the run minus the restart,
  the transfer time and the work a preemption loses. Zones are tried cheapest first;
  a zone whose cost per useful hour is not below on-demand's (restart included, v5) is
  never tried.
* **Probing as in a real cloud.** It knows a zone only by holding it or trying a launch
  (``Observation.probed``); :func:`fleet.policies.market_view.belief_up` turns the last
  observation and its age into the chance a launch succeeds, and zones almost surely
  down are skipped.
* **Leaving an expensive zone.** While holding spot it reconsiders every
  ``reconsider_hours``: when another zone's cost per useful hour, restart and migration
  included, is below ``(1 - move_margin)`` x the held zone's, it tries to move (and
  stays where it is when that launch fails) — only while the spare slack pays for the
  move's restart and failed tries (v4).
* **Correlated reclaims.** Right after a preemption, the zones of the same region are
  scored with the prior's up-time measured after a neighbour's preemption (shorter
  where reclaims hit a region together), so it leaves the region when that pays, and
  stays (no egress) when the region's zones are independent.
* **Notices and checkpoints.** With a usable notice it relies on the emergency save (no
  periodic saves, like the baselines; ``notice_failure_prob > 0`` adds insurance saves
  while they cost at most half the spare slack); without one, the cost-model optimum for
  the zone's hazard, moved into the range where the saves and expected losses of the
  rest of the job fit the spare slack (:func:`budget_interval`, v4).
* **Bridging outages (v4).** While idle it goes on-demand only when the expected slack
  burn exceeds the spare slack *and* the chance of being forced onto on-demand later
  (share of past windows that burnt more) exceeds one minus the best zone's
  availability (:meth:`SpotfleetPolicy.bridge`): on-demand hours spent now are sunk,
  waiting keeps the option. It leaves on-demand only when the spot run the slack allows
  pays for its restart.
* **No deadline (v5).** When the job has none (``JobSpec.deadline_given`` False: the
  live driver's far horizon is not slack), it idles only while the saving of waiting for
  the cheapest zone pays for the delay (:meth:`SpotfleetPolicy.waiting_pays`).

* **The job's own evidence against a stale history (v6).** The statistics before the job
  are short or stale where they matter most (a 12 h history with one up-run per zone, a
  regime shift). Each zone the job has seen gets two hypotheses -- "as its history says"
  (the history's own run law) and "changed" (an exponential with a vague rate) -- for its
  up-runs (the job's holds and preemptions there) and its down-runs (the outages its
  launch tries and preemptions saw); the expected run and wait are the posterior averages
  (``zone_model="changepoint_updown"``, :func:`fleet.policies.market_view.changepoint_run_emp`).
  They feed the ranking, the launch belief and the patience rule's wait; a zone the job
  never saw keeps its history. The bridge, the reserve and the forced-probability test
  still read the history's all-zones-down share.
* **When the job's own holds reject the model (v7).** Per-zone evidence is slow: after a
  regime shift the job would be burnt by every cheap zone whose calm history it still
  believes. Each preempted hold is scored by its zone's own run law (how likely a run that
  short is there); once Fisher's combination of those scores rejects the model at 1 %
  (at least two preemptions), every ranking -- launch order, the patience rule's best zone,
  the move rule's targets and held zone -- uses runs capped by the job's own evidence: a
  zone that preempted it at most its held hours per preemption, a zone it never held at
  most the held hours per preemption over all zones (``model_check="holds_law"``,
  :func:`fleet.policies.market_view.holds_reject_run_law`,
  :func:`fleet.policies.market_view.own_evidence_caps`). Which zones are worth trying at
  all stays v6's, so the caps never leave the job idle where v6 would launch. Where the
  history is true the test does not trip and v7 is v6.
* **Holds that began mid-run (v8).** A launch into a zone that was already up, rather
  than one the job watched come back, lands at an arbitrary moment of a run, and the run
  it lands in is length-biased: such a preempted hold is scored by the run law's residual
  life (``model_check="holds_residual"``), so a few short runs in a calm history no longer
  make a short hold there unsurprising. Holds that began at a recovery the job saw are
  scored as v7 scores them.
* **No launch the slack cannot pay for (v9).** A spot launch from idle or after a
  preemption whose restart (plus the checkpoint's transfer into another region) exceeds
  the spare slack above the safety net would run the slack out before any progress and
  end on on-demand anyway; such zones are neither tried nor waited for
  (``launch_guard="restart"``), as moves and leaving on-demand already were. Found on a
  heavy job (20-minute restart) at D/W 1.05; on the report set v9 is v8 in 23 of 40 cells.
* **The rule that sends a job to on-demand is the one that keeps it there (v10).** v9 kept a
  job on on-demand while its spare slack was below the reserve, whatever the odds of being
  forced there later; v10 stays only while :meth:`SpotfleetPolicy.bridge` would send it there
  now (``od_exit="bridge"``). Found on a 48 h job: after a 71 h drought v9 stayed on on-demand
  14-33 h after spot returned. Volatile markets 1-3 % cheaper; elsewhere v10 is v9.
* **A last spot run must beat on-demand now (v11).** A launch after which the spare slack
  (less its overhead and the failed tries of the zones ahead of it) would be below one
  restart is the job's last spot run: the guard refuses the next one and the rest runs on
  on-demand, in the region the launch took the checkpoint to. It is made only if its spot
  $, the egress and that on-demand remainder cost less than on-demand now
  (``launch_guard="restart_cost"``, :meth:`SpotfleetPolicy._last_run_pays`). Found on H100
  D/W 1.2 without notice, where v10 launched across regions with 0.215 h of spare slack,
  kept 0.117 h of work and finished on on-demand in the dearer region the move had taken
  the checkpoint to; elsewhere v11 is v10 but for a few starts
  (0.4-0.8 % cheaper when every zone breaks without a notice, 1.5 % on SkyNomad's 6 H100
  zones at D/W 1.05).

Parameters (``SpotfleetParams``) are structural, not fitted: the lookback of the
statistics, the move margin, how often to reconsider, the least launch belief worth a
try, the patience factor, the neighbour window, the share of notices assumed lost, the
zone model (``"history"`` = v5; the rejected thirteenth and fourteenth rounds'
``"changepoint"`` / ``"changepoint_emp"`` stay opt-in). ``own_runs`` (``"switch"`` /
``"switch_emp"``, v6 ninth and tenth rounds, not adopted; ``"off"`` = the default) and
``interval_hazard`` (``"mixture"``, sixteenth round, rejected; ``"run"`` = the default) are
opt-in too, as are the later rounds' ``hold_start``, ``zone_cost``, ``change_pool``,
``h1_prior_seconds``, ``outage_end``, ``model_check="holds"`` and, for jobs without a deadline
only, ``no_deadline_wait="set"`` (2026-11-27, docs/fleet-policies.md, *Jobs without a
deadline*); ``od_exit="bridge"`` is v10's and v11's (the default) and ``"reserve"`` v9's;
``launch_guard="restart_cost"`` is v11 (the default since session 20), ``"restart"`` v9's and
v10's and ``"off"`` v8; ``patience_reclaim="other_regions"`` and ``launch_guard="restart_progress"``
(session 19, both rejected) and ``patience_wait="residual"`` (session 20, rejected) are opt-in; ``model_check="holds_residual"`` is v8's to v11's check,
``"holds_law"`` v7 and ``"off"`` v6. The other rejected v6 fields were removed and reproduce at commit
e1c45df (docs/fleet-policies-tuning-log.md).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from checkpointing.costmodel import optimal_interval_hours
from fleet.policies.base import IDLE, ON_DEMAND, Action, JobSpec, JobState, Observation, Policy
from fleet.policies.market_view import (
    CHANGE_POOLS,
    PriorStats,
    belief_up,
    changed_runs_emp,
    changepoint_hazard_emp,
    changepoint_run,
    changepoint_run_emp,
    fisher_rejects,
    h1_prior_hours,
    history_rejected,
    hold_p_value,
    holds_reject_model,
    holds_reject_run_law,
    launch_action,
    own_evidence_caps,
    pooled_changed_runs_emp,
    up_run_ticks,
)
from fleet.policies.safety import (
    affordable_probes,
    must_go_on_demand,
    safe_slack_hours,
    safety_threshold_hours,
    ticks_until_unsafe,
)


@dataclass(frozen=True)
class SpotfleetParams:
    """Structural settings (hours unless noted); not fitted to any trace."""

    lookback_hours: float = 24.0 * 30  # statistics window before the job's start
    move_margin: float = 0.25  # move off a held zone when another is 25 % cheaper per useful hour
    reconsider_hours: float = 1.0  # how often a held spot zone is reconsidered
    min_belief: float = 0.02  # do not try zones whose launch almost surely fails
    notice_failure_prob: float = 0.0  # share of notices assumed lost (> 0: insurance saves)
    patience: float = 2.0  # wait for a better zone while spare slack > this x its mean wait (0: off)
    neighbour_window_hours: float = 1.0  # after a preemption, its region's zones use the
    # prior's up-time measured after a neighbour's preemption for this long
    own_runs: str = "off"  # "off": v5. Not adopted (docs/fleet-policies-tuning-log.md, ninth
    # and tenth rounds): "switch": once the job's own preemptions, over all the zones it
    # held, reject the history's mean up-runs (market_view.history_rejected), the ranking
    # drops the history: a zone that preempted the job is ranked by the hours it held per
    # preemption, any other as if it holds to the end; "switch_emp": the same switch, with
    # Fisher's test of each hold against the larger of the exponential and the empirical
    # run-law p-values (market_view.hold_p_value, fisher_rejects)
    zone_model: str = "changepoint_updown"  # the default since session 9 (v6, fifteenth
    # round, docs/fleet-policies-tuning-log.md). "history": v5. "changepoint" (thirteenth round):
    # a zone the job held gets the posterior average of v5's expected run (no change) and
    # the run its own holds and preemptions show (a changed zone), market_view.changepoint_run;
    # "changepoint_emp" (fourteenth round): the same with the history's own run law as "no
    # change" and the changed run's posterior mean, market_view.changepoint_run_emp;
    # "changepoint_updown" (fifteenth round): changepoint_emp plus the same update of each
    # zone's down-runs from the outages the job observes (the waits and launch beliefs):
    # v6, adopted after its pre-registered check on every held-out set
    interval_hazard: str = "run"  # "run": v6. "mixture" (sixteenth round, session 9, not
    # adopted): the checkpoint interval of a zone the job has held uses 1 / the posterior mean
    # hazard (market_view.changepoint_hazard_emp) instead of the posterior average of runs
    hold_start: str = "run"  # "run": v6 (every hold of the job is read as a fresh run of the
    # zone). "seen" (seventeenth round, session 10, rejected on the report set's strict misses;
    # zone_model="changepoint_updown" only): a
    # hold is a fresh run only when it began at a recovery the job saw (an outage it was
    # watching ended with the launch); any other began mid-run and is read as the run law's
    # residual life (market_view.run_law_log_likelihood)
    zone_cost: str = "run"  # "run": v6 (a held zone's cost per useful hour is that of its posterior
    # average run). "mixture" (eighteenth round, session 10, rejected at clause 3 on the April
    # 2023 trace and the fresh shift at D/W 3 with notice; own-evidence zone models only): the
    # cost per useful hour averaged over the two hypotheses, (1 - p1) cost(history's run) +
    # p1 min(cost(changed run), on-demand's), market_view.changed_runs_emp
    h1_rate_ratio: float = 0.0  # 0: v6 (H1's Gamma(1, b) prior on a changed zone's rate has
    # b = one tick). > 0 (session 10 exploration, not adopted: on the tuning set 24 and 60 are
    # 1.036-1.038x v6 on SkyNomad's 6 H100 zones at D/W 1.05, docs/fleet-policies-tuning-log.md):
    # b = the zone's history mean run (or outage) / h1_rate_ratio, so the own-evidence update
    # does not depend on the tick (market_view.h1_prior_hours)
    change_pool: str = "off"  # "off": v6 (each zone's P(changed) on its own evidence, prior 0.1).
    # "seen" (nineteenth round, session 11): the zones change together, P(changed) of the
    # held zones from all of the job's evidence (a Beta prior on the share of zones that
    # changed, market_view.pooled_change_posteriors); "all": that, and a zone the job never
    # held is mixed too, with the pooled P(changed) and the held zones' changed run
    # (market_view.pooled_changed_runs_emp); up-runs only, own-evidence zone models only
    h1_prior_seconds: float = 0.0  # 0: v6 (b = one tick). > 0 (session 11 tick diagnosis, opt-in,
    # not adopted): b = this many seconds whatever the tick (300: v6's b on the 300 s synthetic
    # families); not with h1_rate_ratio > 0 (market_view.h1_prior_hours)
    outage_end: str = "seen"  # "seen": v6 (an outage the job watches ends at the first decision
    # that sees the zone up). "launch" (session 11 tick diagnosis, opt-in, not adopted;
    # zone_model="changepoint_updown" only): it also ends at a launch that found the zone up,
    # so a hold preempted before the job's next decision (one tick after a launch from idle)
    # splits the outages around it instead of merging them into one (docs/fleet-policies.md,
    # *Tick length*)
    no_deadline_wait: str = "cheapest"  # without a deadline (JobSpec.deadline_given False),
    # what the job may idle for (waiting_pays): "cheapest": v5, the cheapest zone alone, its
    # expected wait (1 - belief) x mean down time; "set" (2026-11-27, bench_no_deadline.py,
    # opt-in, not adopted): any of the k cheapest zones, k chosen for the largest net saving,
    # their expected wait prod(1 - belief) / sum(1 / mean down time) (independent zones; k = 1
    # is "cheapest"'s), priced at the dearest of them
    model_check: str = "holds_residual"  # "holds_residual": v8, the default since session 13;
    # "holds_law": v7 (the default in session 12); "off": v6 (see the last sentences). "holds" (twenty-first round, session 12, rejected on
    # the April 2023 trace; own-evidence zone models only): once the job's own holds reject the
    # runs its decisions expected (market_view.holds_reject_model: more preemptions than the
    # expected runs predict, at the 1 % level), every ranking -- launch order, the patience
    # rule's best zone, move targets and the held zone -- uses runs capped by the job's own
    # evidence (market_view.own_evidence_caps); which zones are worth trying at all stays
    # v6's. "holds_law" (twenty-second round, adopted: v7): the same, the holds tested against
    # each zone's own run law instead (market_view.holds_reject_run_law). Zone models that
    # keep no holds ignore it (v5 is zone_model="history", whatever model_check says).
    # "holds_residual" (twenty-third round, session 13, adopted: v8): "holds_law", except that a preempted
    # hold that began mid-run (a launch into a zone the job had not watched come back up)
    # is judged by the run law's residual life, which weights each run by its length
    # (market_view.holds_reject_run_law, residual=True): a few short runs in a calm history
    # no longer make a short hold in a zone that was already up unsurprising

    launch_guard: str = "restart_cost"  # "restart_cost": v11, the default since session 20
    # (passed the session-19 verdict rule, see below); "restart": v9 and v10, the default in
    # sessions 15-19 (twenty-fourth round, adopted); "off": v8 (a launch from idle or after a
    # preemption tries the ranked zones whatever the slack). "restart": a
    # spot zone whose launch overhead (restart, plus the transfer across regions) exceeds the
    # spare slack above the safety net is not tried -- its restart would run the slack out and
    # the net would send the job to on-demand before any progress, spot paid for nothing
    # (the rule moves and leaving on-demand already follow, _affordable_moves and
    # _leaving_on_demand_pays); found on the heavy job shape (docs/fleet-policies-held-out.md).
    # "restart_progress" (session 19, opt-in, rejected at clause 2): a zone is tried only if the
    # spare slack pays its launch overhead plus one save (checkpoint_hours) plus one tick (the
    # net looks at tick boundaries and, without notice, counts only saved work). Wrong about the
    # tick: the net's threshold already holds it, and with a notice (or saves inside the tick)
    # a job keeps a spare far below a tick on spot for the whole job; at D/W 1.05 the rule sends
    # it to on-demand from the start (tuning H100 D/W 1.05 with notice 3.64x v10, SkyNomad
    # h100_6 D/W 1.05 1.37x; docs/fleet-policies-tuning-log.md, session 19)
    # "restart_cost" (session 19, v11 since session 20): "restart", and a zone whose launch would be the
    # job's last spot run -- the spare slack left after its overhead and the failed tries
    # before it (one probe per zone ahead of it in the order: it lands only if they all fail)
    # is below one restart, so the guard would refuse the next launch and the rest of the job
    # runs on on-demand -- is tried only if that is cheaper than on-demand now: spot $ for
    # the overhead and the work it keeps, the egress, then on-demand for the rest (and its
    # restart) in the region the checkpoint ends in, against on-demand now for all of it in
    # the region where on-demand would run now (_last_run_pays). If it empties the order the
    # job goes on-demand now. Found on H100 D/W 1.2 without notice (start 75); passed clause 2
    # of the session-19 verdict rule (tuning set and SkyNomad h100_6: geometric mean 0.9989, no
    # cell wholly above 1.01) and clause 3 (fresh seeds 260-264, the report families, SkyNomad:
    # 0.985-1.0037 of v10, no new strict miss) and the check on every seen held-out family
    # (600 cells, none wholly above 1.00); adopted in session 20 as v11, with the results
    # tables re-run on it (tuning log, session 20)

    od_exit: str = "bridge"  # "bridge": v10 and v11, the default since session 16 (twenty-fifth round,
    # adopted); "reserve": v9 (a job on on-demand stays there while the spare
    # slack is below reserve_hours, whatever the odds of being forced later). "bridge":
    # it stays only while the bridge rule would put it there
    # now (spare below the reserve AND forced_probability above 1 - the best zone's
    # availability): the rule that sends a job to on-demand is the one that keeps it there.
    # Found on the long job shape: after a 71 h drought v9 stayed on on-demand 14-33 h after
    # spot returned (docs/fleet-policies-held-out.md, *Job shapes nobody tuned on*)

    patience_reclaim: str = "wait"  # "wait": v10 and v11 (the patience rule may idle for any zone).
    # "other_regions" (session 19, opt-in): for neighbour_window_hours after a preemption of
    # this job, the zones of the region that preempted it are tried in their order but never
    # waited for: the patience rule waits only for the cheapest zone outside that region (and
    # with none, not at all). Its wait is a zone's own mean outage, which assumes the zones'
    # outages independent; right after a reclaim in a region the region's zones are down
    # together (the premise of the neighbour rule, whose window it reuses), and waiting on
    # them spends the slack the next preemption needs. Found on H100 D/W 1.2 without notice;
    # rejected at clause 2 (session 19, docs/fleet-policies-tuning-log.md): where the slack is
    # ample the region's short outage is worth waiting out (SkyNomad's 6 H100 zones 1.06-1.24x
    # v10, the shift at D/W 3 with notice 1.09x)

    patience_wait: str = "mean"  # "mean": v11 (the patience rule waits while the spare slack
    # less the reserve exceeds ``patience`` x the best zone's mean outage, mean_down_hours).
    # "residual" (session 20, opt-in, pre-registered in docs/fleet-policies-tuning-log.md): for a
    # best zone the job currently sees down, the wait is the expected REMAINING outage given
    # its age a (hours from the first tick the job saw it down, or from the start of the
    # history's trailing outage when the job has not seen the zone up since its start, to the
    # last tick it saw it down), under mean_down_hours's two hypotheses and weights
    # (market_view.changed_runs_emp): "as its history says": the mean of (d - a) over the
    # history's outages d > a (_emp_downs; none longer: that hypothesis is out, the changed
    # one alone), "changed" (exponential): its posterior mean, the residual of an
    # exponential; a zone not seen down keeps its mean (_residual_down_hours). Found on the
    # tuning set's all_break family (seed 402, D/W 2, notice 120 s, start 2083: v11 idled
    # 7.9 h for zone 8 while its mean outage moved 1.53 -> 1.79 h; v11 1.089x failover_sky).
    # Rejected at clause 2 (session 20, docs/fleet-policies-tuning-log.md): 54 cells, geometric
    # mean 0.9980 (all_break D/W 2-3 with notice -9 %, the shift D/W 1.5 without -8 %), but
    # SkyNomad's 6 H100 zones at D/W 1.05 and 1.1 1.030 [1.017, 1.042] and 1.078 [1.045, 1.110]
    # x v11: one outage where the slightly longer wait tips the rule off waiting a tick earlier

    @classmethod
    def from_assignments(cls, items: Sequence[str]) -> SpotfleetParams:
        """``["field=value", ...]`` (benchmark and CLI options) -> params, the rest at their
        defaults; each value converted to its field's type (bool: 1/true/yes, else false)."""
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        kw: dict[str, object] = {}
        for item in items:
            k, eq, v = item.partition("=")
            if not eq or k not in types:
                raise ValueError(f"{item!r} is not a SpotfleetParams field=value "
                                 f"(fields: {', '.join(types)})")
            t = types[k]
            kw[k] = (v.lower() in ("1", "true", "yes")) if t in (bool, "bool") else \
                float(v) if t in (float, "float") else int(v) if t in (int, "int") else v
        return cls(**kw)


OWN_RUNS = ("off", "switch", "switch_emp")
"""The values of ``SpotfleetParams.own_runs`` (see its comment)."""

ZONE_MODELS = ("history", "changepoint", "changepoint_emp", "changepoint_updown")
"""The values of ``SpotfleetParams.zone_model`` (see its comment)."""

INTERVAL_HAZARDS = ("run", "mixture")
"""The values of ``SpotfleetParams.interval_hazard`` (see its comment)."""

ZONE_COSTS = ("run", "mixture")
"""The values of ``SpotfleetParams.zone_cost`` (see its comment)."""

HOLD_STARTS = ("run", "seen")
"""The values of ``SpotfleetParams.hold_start`` (see its comment)."""

OUTAGE_ENDS = ("seen", "launch")
"""The values of ``SpotfleetParams.outage_end`` (see its comment)."""

MODEL_CHECKS = ("off", "holds", "holds_law", "holds_residual")
"""The values of ``SpotfleetParams.model_check`` (see its comment)."""

NO_DEADLINE_WAITS = ("cheapest", "set")
"""The values of ``SpotfleetParams.no_deadline_wait`` (see its comment)."""

LAUNCH_GUARDS = ("off", "restart", "restart_progress", "restart_cost")
"""The values of ``SpotfleetParams.launch_guard`` (see its comment)."""

OD_EXITS = ("reserve", "bridge")
"""The values of ``SpotfleetParams.od_exit`` (see its comment)."""

PATIENCE_RECLAIMS = ("wait", "other_regions")
"""The values of ``SpotfleetParams.patience_reclaim`` (see its comment)."""

PATIENCE_WAITS = ("mean", "residual")
"""The values of ``SpotfleetParams.patience_wait`` (see its comment)."""

_V9_AND_BEFORE = {"od_exit": "reserve"}
VERSIONS: dict[str, SpotfleetParams] = {
    "v5": SpotfleetParams(zone_model="history", launch_guard="off", **_V9_AND_BEFORE),
    "v6": SpotfleetParams(model_check="off", launch_guard="off", **_V9_AND_BEFORE),
    "v7": SpotfleetParams(model_check="holds_law", launch_guard="off", **_V9_AND_BEFORE),
    "v8": SpotfleetParams(launch_guard="off", **_V9_AND_BEFORE),
    "v9": SpotfleetParams(launch_guard="restart", **_V9_AND_BEFORE),
    "v10": SpotfleetParams(launch_guard="restart"),
    "v11": SpotfleetParams(),
}
"""Every adopted version of spotfleet as ``SpotfleetParams`` (the last is the default); each is
pinned bit for bit in tests/fleet_policies/v5_pins.py."""
DEFAULT_VERSION = "v11"


def version_of(params: SpotfleetParams) -> str:
    """The version ``params`` are (``"v10"``), or the default's name and the fields that differ
    from it (``"v11 with launch_guard=restart_progress"``)."""
    for name, p in VERSIONS.items():
        if p == params:
            return name
    base = VERSIONS[DEFAULT_VERSION]
    diff = [f"{f.name}={getattr(params, f.name)}" for f in dataclasses.fields(params)
            if getattr(params, f.name) != getattr(base, f.name)]
    return f"{DEFAULT_VERSION} with {', '.join(diff)}"

RANK_AFTER_USD = 1e6
"""$ per useful hour added to v6's figure for the zones that the own-evidence ranking
(any ``model_check``, once it has tripped) makes worthless: they follow every other zone, in v6's order."""


def budget_interval(t_opt: float, c: float, rem: float, mttp: float, restart: float,
                    spare: float, hold: float | None = None) -> float:
    """Checkpoint interval without a notice: the optimum ``t_opt`` moved into the range
    where the slack the rest of the job is expected to burn fits in the spare slack.

    Over the ``rem`` hours of work left, interval ``T`` burns ``rem C / T`` in saves and,
    per expected preemption (``rem / mttp`` of them), a restart and ``T / 2`` of redone
    work; the work since the last save (up to ``T``) must also fit, or the safety net sends
    the job to on-demand (it counts unsaved work as lost). So ``T`` must satisfy
    ``a T + rem C / T <= S'`` with ``a = 1 + rem / (2 mttp)`` and
    ``S' = spare - rem restart / mttp``. Inside that range: ``t_opt`` (clipped to it).
    When no ``T`` satisfies it the net will fire before the end whatever the interval;
    every save costs ``C`` whatever the interval, so the job stays on spot longest with
    the longest interval the net lets it hold: ``min(t_opt, hold)``, ``hold`` = the slack
    above the net's threshold less one save (tuning set, without notice: v100 D/W 1.05
    2.60x omniscient vs 2.94x for ``sqrt(rem C / a)``, the interval of least expected
    burn; h100 D/W 1.2 1.057x vs 1.094x). v3's cap (``0.4 x spare``, at least two saves' time)
    spent more and more of a shrinking slack on saves — half the time at the floor — and
    ended on on-demand.
    """
    if rem <= 0:
        return max(t_opt, 2.0 * c)
    a = 1.0 + rem / (2.0 * mttp)
    s = spare - rem * restart / mttp
    disc = s * s - 4.0 * a * rem * c
    if disc < 0 or s <= 0:
        t = min(t_opt, spare if hold is None else hold)
    else:
        lo = (s - math.sqrt(disc)) / (2.0 * a)
        hi = (s + math.sqrt(disc)) / (2.0 * a)
        t = min(max(t_opt, lo), hi)
    return max(t, 2.0 * c)


_CHOICES = {"own_runs": OWN_RUNS, "zone_model": ZONE_MODELS, "zone_cost": ZONE_COSTS,
            "hold_start": HOLD_STARTS, "change_pool": CHANGE_POOLS, "outage_end": OUTAGE_ENDS,
            "interval_hazard": INTERVAL_HAZARDS, "model_check": MODEL_CHECKS,
            "no_deadline_wait": NO_DEADLINE_WAITS, "launch_guard": LAUNCH_GUARDS, "od_exit": OD_EXITS,
            "patience_reclaim": PATIENCE_RECLAIMS, "patience_wait": PATIENCE_WAITS}
"""Each option field of :class:`SpotfleetParams` and its allowed values."""

_OWN_EVIDENCE = ("changepoint_emp", "changepoint_updown")
_NEEDS_ZONE_MODEL = {  # field: (its v6 value, the zone models it works with, why)
    "hold_start": ("run", ("changepoint_updown",), "the outages the job watches"),
    "outage_end": ("seen", ("changepoint_updown",), "the outages the job watches"),
    "change_pool": ("off", _OWN_EVIDENCE, "the job's own evidence per zone"),
    "patience_wait": ("mean", ("changepoint_updown",), "the outages the job watches"),
}


def check_params(p: SpotfleetParams) -> None:
    """A ``ValueError`` naming the field, its allowed values (or the zone model it needs) for
    a :class:`SpotfleetParams` the policy cannot run."""
    for name, allowed in _CHOICES.items():
        v = getattr(p, name)
        if v not in allowed:
            raise ValueError(f"{name} {v!r}: one of {', '.join(allowed)}")
    for name, (v6, models, why) in _NEEDS_ZONE_MODEL.items():
        v = getattr(p, name)
        if v != v6 and p.zone_model not in models:
            raise ValueError(f"{name}={v!r} needs zone_model={' or '.join(map(repr, models))} "
                             f"({why}), not {p.zone_model!r}")
    if p.h1_prior_seconds > 0 and p.h1_rate_ratio > 0:
        raise ValueError("h1_prior_seconds and h1_rate_ratio both set: H1's prior b is one "
                         "or the other")


class SpotfleetPolicy(Policy):
    """The spotfleet policy (see the module docstring)."""

    name = "spotfleet"

    def __init__(self, params: SpotfleetParams | None = None) -> None:
        self.p = params or SpotfleetParams()
        self.prior: PriorStats | None = None

    def describe(self) -> str:
        """``"spotfleet v11"`` for the default, the version whose settings ``params`` are
        (:data:`VERSIONS`), else ``"spotfleet v11 with field=value, ..."``."""
        return f"{self.name} {version_of(self.p)}"

    def reset(self, spec: JobSpec, obs: Observation) -> None:
        hist = obs.history[:, : obs.tick] if obs.tick > 1 else obs.history
        self.prior = PriorStats.from_history(hist, obs.gap_hours, self.p.lookback_hours,
                                             tuple(obs.regions))
        check_params(self.p)
        n = max(2, int(self.p.lookback_hours / obs.gap_hours))
        self._down = ~np.asarray(hist[:, -n:], dtype=bool).any(axis=0)  # no zone up, per tick
        self._gap = obs.gap_hours
        self._h1_cache: tuple[np.ndarray, np.ndarray] | None = None  # _h1_b: (up-runs, outages)
        self._pre_tick = -(10**9)
        self._pre_region: str | None = None
        self._idle_h = 0.0  # hours spent idle so far (the no-deadline delay budget)
        self._idle_since: float | None = None
        # own_runs: the job's own holds and preemptions per zone
        self._held_h = np.zeros(obs.n_zones)
        self._own_n = np.zeros(obs.n_zones)
        self._at: tuple[int, float] | None = None  # (location, elapsed h) at the last decision
        self._switched = False  # own_runs="switch*": the history was rejected
        if self.p.zone_model in ("changepoint_emp", "changepoint_updown"):
            # the history's up-runs per zone (h) and v5's mean as one more run: the "no
            # change" run law; the job's holds per zone: (hours, ended by a preemption?)
            self._emp_runs = [np.append(up_run_ticks(row) * obs.gap_hours, m) for row, m in
                              zip(np.asarray(hist[:, -n:], dtype=bool),
                                                self.prior.mean_up_hours, strict=True)]
            # (hours, ended by a preemption?, began with its run?) per hold (hold_start)
            self._holds: list[list[tuple]] = [[] for _ in range(obs.n_zones)]
            self._open: list | None = None  # [zone, hours, fresh?] of the hold in progress
        if self.p.zone_model == "changepoint_updown":
            # the same for the down-runs: the history's outages per zone (h) and v5's mean;
            # the outages the job sees: (hours, seen up again?), and the one in progress
            self._emp_downs = [np.append(up_run_ticks(~row) * obs.gap_hours, m) for row, m in
                               zip(np.asarray(hist[:, -n:], dtype=bool),
                                   self.prior.mean_down_hours, strict=True)]
            self._spells: list[list[tuple[float, bool]]] = [[] for _ in range(obs.n_zones)]
            self._dn_first = np.full(obs.n_zones, -1, dtype=np.int64)  # tick first seen down
            self._dn_last = np.full(obs.n_zones, -1, dtype=np.int64)   # tick last seen down
            self._prev_tick = obs.tick  # tick of the previous decision (outage_end="launch")
            # patience_wait="residual": the tick the history's trailing outage began, per zone
            # (-1: up at the history's end), and whether the job has seen the zone up since
            # its start (then that outage is not the one the job sees)
            tail = np.asarray(hist[:, -n:], dtype=bool)
            self._hist_dn_start = np.full(obs.n_zones, -1, dtype=np.int64)
            for z in range(obs.n_zones):
                if tail.shape[1] and not tail[z, -1]:
                    up_at = np.flatnonzero(tail[z])
                    length = tail.shape[1] - (int(up_at[-1]) + 1 if up_at.size else 0)
                    self._hist_dn_start[z] = hist.shape[1] - length
            self._seen_up = np.zeros(obs.n_zones, dtype=bool)
        # model_check="holds": (hours, preempted?, run expected at its launch h) per hold, the
        # runs expected at the last decision, the expected run of the hold in progress, and
        # whether the holds have rejected the model (then every ranking uses own_evidence_caps)
        self._checked: list[tuple[float, bool, float]] = []
        self._last_run: np.ndarray | None = None
        self._open_expected = math.inf
        self._rejected = False
        self._caps = False
        if self.p.own_runs == "switch_emp":
            self._runs_h = [up_run_ticks(row) * obs.gap_hours
                            for row in np.asarray(hist[:, -n:], dtype=bool)]
            self._mark = np.zeros(obs.n_zones)  # held h at each zone's last preemption
            self._pvals: list[float] = []

    def expected_runs(self, obs: Observation, neighbour: bool = True) -> np.ndarray:
        """Expected up-run (h) of each zone if launched now: the prior's mean up-run, or,
        for zones of a region that just lost an instance of this job, the shorter of that
        and the prior's up-time after a neighbour's preemption (correlated reclaims;
        ``neighbour=False``: the prior's mean up-run everywhere); with an own-evidence zone
        model, averaged with what the job saw (module docstring, v6)."""
        run = self._history_runs(obs, neighbour)
        if self.p.zone_model == "changepoint":
            run = changepoint_run(run, self.prior.mean_up_hours, self._own_n, self._held_h,
                                  obs.gap_hours)
        elif self.p.change_pool != "off":
            run = np.array(run, dtype=float)
            for z, p1, r1 in pooled_changed_runs_emp(self._holds_now(), self._emp_runs,
                                                     self._h1_b(obs), self.p.change_pool == "all"):
                run[z] = (1.0 - p1) * run[z] + p1 * r1
        elif self.p.zone_model in ("changepoint_emp", "changepoint_updown"):
            run = changepoint_run_emp(run, self._holds_now(), self._emp_runs, self._h1_b(obs))
        if self._caps:
            run = own_evidence_caps(run, self._holds_now())
        return run

    def _h1_b(self, obs: Observation, down: bool = False) -> np.ndarray:
        """H1's prior ``b`` (hours) per zone for the up-runs (or ``down``: the outages):
        :func:`h1_prior_hours` of the history's means and ``h1_rate_ratio``, fixed for the
        job (computed once at its first use)."""
        if self._h1_cache is None:
            self._h1_cache = tuple(h1_prior_hours(m, obs.gap_hours, self.p.h1_rate_ratio,
                                                  self.p.h1_prior_seconds)
                                   for m in (self.prior.mean_up_hours, self.prior.mean_down_hours))
        return self._h1_cache[1 if down else 0]

    def _holds_now(self) -> list[list[tuple]]:
        """The job's holds per zone (hours, ended by a preemption?, fresh?, ...: see
        :meth:`_hold_update`), the one in progress included as censored (own-evidence zone
        models)."""
        holds = [list(h) for h in self._holds]
        if self._open is not None:
            holds[self._open[0]].append((self._open[1], False, self._open[2]))
        return holds

    def _history_runs(self, obs: Observation, neighbour: bool = True) -> np.ndarray:
        """v5's expected up-run (h) per zone: the prior's mean, shortened for a region that
        just lost an instance of this job (:meth:`expected_runs` without the job's evidence)."""
        run = np.array(self.prior.mean_up_hours, dtype=float)
        after = self.prior.up_after_neighbour_hours
        recent = (obs.tick - self._pre_tick) * obs.gap_hours <= self.p.neighbour_window_hours
        if neighbour and after is not None and recent and self._pre_region is not None and obs.regions:
            same = np.array([r == self._pre_region for r in obs.regions])
            run = np.where(same, np.minimum(run, after), run)
        return run

    def interval_runs(self, obs: Observation, run: np.ndarray) -> np.ndarray:
        """The run (h) each zone's checkpoint interval is set from: ``run`` (v6), or with
        ``interval_hazard="mixture"`` and the own-evidence zone models, 1 / the posterior
        mean hazard for the zones the job has held (:func:`changepoint_hazard_emp`)."""
        if self.p.interval_hazard != "mixture" or self.p.zone_model not in (
                "changepoint_emp", "changepoint_updown"):
            return run
        holds = self._holds_now()
        r0 = self._history_runs(obs)
        haz = changepoint_hazard_emp(r0, holds, self._emp_runs, self._h1_b(obs))
        return np.where([bool(h) for h in holds], 1.0 / np.maximum(haz, 1e-9), run)

    # ------------------------------------------------------------------ costs
    def _lost_per_preemption(self, spec: JobSpec, run_hours: float) -> float:
        c = spec.checkpoint_hours
        if spec.notice_saves:
            return c
        return math.sqrt(2.0 * max(c, 1e-6) * max(run_hours, 1e-3)) / 2.0 + c

    def cost_per_useful_hour(self, state: JobState, obs: Observation,
                             held: int | None = None, neighbour: bool = True) -> np.ndarray:
        """$ per hour of progress expected from launching in each zone now (the held zone:
        from staying there); inf where not worth it."""
        spec = state.spec
        price = obs.spot_prices(spec)
        rem = max(spec.work_hours - state.done_hours, 1e-3)
        overs = np.empty(obs.n_zones)
        for z in range(obs.n_zones):
            stay = held is not None and z == held
            overs[z] = 0.0 if stay else self._launch_overhead(spec, obs, z)
        run = self.expected_runs(obs, neighbour)
        if self._switched:
            # history-free: a zone that preempted the job is what the job saw there (held h
            # per preemption), any other as if it holds to the end (price, restart and
            # egress rank it, as failover ranks)
            seen = self._own_n > 0
            run = np.where(seen, np.minimum(run, self._held_h / np.maximum(self._own_n, 1)),
                           rem + overs)
        out = np.empty(obs.n_zones)
        for z in range(obs.n_zones):
            stay = held is not None and z == held
            moves = (not stay) and obs.moves_region(z)
            extra = obs.migration_usd if moves else 0.0
            out[z] = self._eff(spec, float(price[z]), float(run[z]), float(overs[z]), extra, rem)
        if self.p.zone_cost == "mixture" and self.p.zone_model in ("changepoint_emp", "changepoint_updown"):
            # the cost per useful hour averaged over the two hypotheses, not the cost of the
            # averaged run: a zone that has probably changed costs what its changed run costs
            od = self.on_demand_cost_per_useful_hour(state, self._od_price(state, obs))
            r0 = self._history_runs(obs, neighbour)
            for z, p1, r1 in changed_runs_emp(self._holds_now(), self._emp_runs, self._h1_b(obs)):
                stay = held is not None and z == held
                extra = obs.migration_usd if (not stay) and obs.moves_region(z) else 0.0
                e0 = self._eff(spec, float(price[z]), float(r0[z]), float(overs[z]), extra, rem)
                e1 = min(self._eff(spec, float(price[z]), r1, float(overs[z]), extra, rem), od)
                out[z] = (1.0 - p1) * e0 + p1 * e1
        return out

    def _eff(self, spec: JobSpec, price: float, r: float, over: float, extra: float,
             rem: float) -> float:
        """$ per useful hour of a launch (``over`` h of restart and transfer, ``extra`` $ of
        egress) in a zone at ``price`` $/h whose expected run is ``r`` h, ``rem`` h of work left."""
        if r >= rem + over:  # expected to finish before the next preemption
            return (price * (rem + over) + extra) / rem
        useful = r - over - self._lost_per_preemption(spec, r)
        return (price * r + extra) / useful if useful > 0.05 * r else math.inf

    def checkpoint_interval(self, run_hours: float, state: JobState, gap_hours: float) -> float | None:
        """Cost-model optimum for the zone's hazard; with a notice stretched by the share of
        notices assumed lost; without one kept inside the slack budget
        (:func:`budget_interval`)."""
        spec = state.spec
        c = spec.checkpoint_hours
        if c <= 0:
            return None
        rate = 1.0 / max(run_hours, 1e-3)
        if spec.notice_saves:
            if self.p.notice_failure_prob <= 0:
                return None  # the notice's emergency save is enough
            rate *= self.p.notice_failure_prob
        try:
            t_opt = optimal_interval_hours(c, rate, spec.restart_hours)
        except ValueError:
            t_opt = 2.0 * c
        slack_if_saved = state.remaining_time_hours - (spec.work_hours - state.done_hours)
        spare = slack_if_saved - safety_threshold_hours(state, gap_hours) - c - gap_hours
        rem = max(spec.work_hours - state.done_hours, 0.0)
        if spec.notice_saves:
            # insurance saves only while they cost at most half the spare slack (each one
            # burns C of slack; near the deadline they would push the job onto on-demand)
            return t_opt if rem / t_opt * c <= 0.5 * max(spare, 0.0) else None
        # the most unsaved work the net lets the job hold: the slack above its threshold
        # (which already covers the tick in flight) less the save (``spare`` keeps one
        # tick more as a margin for the range above)
        hold = spare + gap_hours
        return budget_interval(t_opt, c, rem, max(run_hours, 1e-3), spec.restart_hours, spare, hold)

    # ------------------------------------------------------------------ decisions
    def _candidates(self, state: JobState, obs: Observation, eff: np.ndarray,
                    od_price: float, exclude: int = -1) -> list[int]:
        belief = self.belief(obs)
        ok = [z for z in range(obs.n_zones)
              if z != exclude and eff[z] < od_price and belief[z] >= self.p.min_belief]
        return sorted(ok, key=lambda z: (eff[z], -belief[z], z))

    def on_demand_cost_per_useful_hour(self, state: JobState, od_price: float) -> float:
        """$ per hour of progress on on-demand from now: it runs to the end, but a job not
        already there pays the restart too (v5). Comparing spot's cost per useful hour,
        which counts the restart, with the bare on-demand $/h made every zone "dearer
        than on-demand" once the work left was short next to the restart (live: one
        step of 120 left after a preemption, restart 6 min: spot 6.2 $/useful h vs
        3.06 $/h), and the job idled with zones up until the deadline horizon."""
        if state.location == ON_DEMAND:
            return od_price
        rem = max(state.spec.work_hours - state.done_hours, 1e-3)
        return od_price * (rem + state.spec.restart_hours) / rem

    def _od_price(self, state: JobState, obs: Observation) -> float:
        od = obs.on_demand_prices(state.spec)
        # where on-demand would run (Observation.on_demand_region: the checkpoint's region
        # once something is saved, else the cheapest on-demand region)
        region = obs.on_demand_region or obs.checkpoint_region
        if region is not None and obs.regions:
            same = [od[z] for z in range(obs.n_zones) if obs.regions[z] == region]
            if same:
                return float(min(same))
        return float(od.min())

    def decide(self, state: JobState, obs: Observation) -> Action:
        g = obs.gap_hours
        spec = state.spec
        if must_go_on_demand(state, g):
            return Action(ON_DEMAND, None, obs.tick + 1, watch=())
        k = ticks_until_unsafe(state, g)
        if self._idle_since is not None and state.location == IDLE and not state.just_preempted:
            # idle since the last decision only when none of its launches ran: a job placed
            # by that decision (held now, or preempted since) was not idle. Counting every
            # interval that began idle charged the no-deadline wait budget with the run
            # that followed the launch -- one tick in fleet-sim, the hours until the live
            # driver asked again (local fleet: 3.8 market h, the node's start; it then
            # left the cheapest zone's 10-min outage for a 69.91 $/h zone)
            self._idle_h += max(0.0, state.elapsed_hours - self._idle_since)
        self._idle_since = state.elapsed_hours if state.location == IDLE else None
        if state.just_preempted and state.last_preempted_zone >= 0 and obs.regions:
            self._pre_tick = obs.tick
            self._pre_region = obs.regions[state.last_preempted_zone]
        if self.p.own_runs != "off" or self.p.zone_model != "history":
            self._own_run_update(state)
        if self.p.zone_model == "changepoint_updown":
            self._down_update(obs, state)
        checks = self.p.zone_model in _OWN_EVIDENCE and not self._rejected
        if self.p.model_check == "holds" and checks:
            held = list(self._checked)
            if self._open is not None:
                held.append((self._open[1], False, self._open_expected))
            self._rejected = holds_reject_model(held)
        elif self.p.model_check in ("holds_law", "holds_residual") and checks:
            self._rejected = holds_reject_run_law(self._holds, self._emp_runs, obs.gap_hours,
                                                  residual=self.p.model_check == "holds_residual")
        od_price = self._od_price(state, obs)
        od_eff = self.on_demand_cost_per_useful_hour(state, od_price)
        if not spec.on_demand_allowed:
            od_eff = math.inf  # ruled out by the operator: spot zones compete with each other only
        run = self.expected_runs(obs)
        self._last_run = run
        run_ck = self.interval_runs(obs, run)
        if state.location >= 0:
            z = state.location
            interval = self.checkpoint_interval(run_ck[z], state, g)
            recheck = obs.tick + max(1, min(k, int(self.p.reconsider_hours / g)))
            eff_here = self.cost_per_useful_hour(state, obs, held=z)[z]
            eff = self.cost_per_useful_hour(state, obs)
            cands = self._candidates(state, obs, eff, od_eff, exclude=z)
            if self._rejected:
                eff_here = self._rank_eff(state, obs, self.cost_per_useful_hour(
                    state, obs, held=z), held=z)[z]
                eff = self._rank_eff(state, obs, eff)
                cands.sort(key=lambda c: (eff[c], c))
            better = [c for c in cands if eff[c] < (1.0 - self.p.move_margin) * eff_here]
            better = self._affordable_moves(state, obs, better)
            if better:
                return Action(better[0], self.checkpoint_interval(run_ck[better[0]], state, g),
                              recheck, watch=(z,), fallbacks=(*better[1:], z))
            return Action(z, interval, recheck, watch=(z,))
        eff = self.cost_per_useful_hour(state, obs)
        order = self._candidates(state, obs, eff, od_eff)
        if self._rejected:
            eff = self._rank_eff(state, obs, eff)
            order.sort(key=lambda z: (eff[z], z))
        interval = self.checkpoint_interval(run_ck[order[0]], state, g) if order else None
        spare = safe_slack_hours(state) - safety_threshold_hours(state, g)
        if state.location == ON_DEMAND:
            later = state.elapsed_hours + 2.0 * spec.restart_hours
            # v9 keeps the reserve; od_exit="bridge" leaves once the bridge rule itself would
            # no longer send the job here (the odds of being forced later are low enough)
            stay = self.bridge(state, spare, later) if self.p.od_exit == "bridge" else \
                spare < self.reserve_hours(state, later)
            if stay or not order \
                    or not self._leaving_on_demand_pays(state, obs, order[0], spare, od_price):
                return Action(ON_DEMAND, None, obs.tick + 1, watch=())
            return launch_action(order, ON_DEMAND, interval, obs.tick + 1)
        if self.p.launch_guard in ("restart", "restart_progress", "restart_cost"):
            # "restart_progress": the spare must also pay a save and the tick in which the net
            # next looks, or the launch ends on on-demand before progress that keeps it on spot
            need = spec.checkpoint_hours + g if self.p.launch_guard == "restart_progress" else 0.0
            doomed = [z for z in range(obs.n_zones)
                      if self._launch_overhead(spec, obs, z) + need > spare]
            if doomed:
                eff = eff.copy()
                eff[doomed] = math.inf  # neither tried nor waited for (the patience rule)
                order = [z for z in order if z not in doomed]
                interval = self.checkpoint_interval(run_ck[order[0]], state, g) if order else None
        if self.p.launch_guard == "restart_cost" and order and spec.on_demand_allowed:
            kept = self._last_run_pays(state, obs, order, spare, run, od_price)
            if len(kept) < len(order):
                if not kept:  # every launch costs more than on-demand now
                    return Action(ON_DEMAND, None, obs.tick + 1, watch=())
                eff = eff.copy()
                eff[[z for z in order if z not in kept]] = math.inf
                order = kept
                interval = self.checkpoint_interval(run_ck[order[0]], state, g)
        reserve = self.reserve_hours(state, state.elapsed_hours)
        if self.bridge(state, spare, state.elapsed_hours):
            return launch_action(order, ON_DEMAND, interval, obs.tick + 1,
                                 max_tries=affordable_probes(state, g))
        if not spec.deadline_given:
            # no deadline: the horizon is not slack to wait out; idle only while the wait
            # for the cheapest zone pays for itself (v5, :meth:`waiting_pays`)
            wait_for = self.waiting_pays(state, obs, eff, order, od_eff)
            if wait_for is None:  # launch now: the best zone up, else on-demand (idle if ruled out)
                return launch_action(order, ON_DEMAND if spec.on_demand_allowed else IDLE, interval,
                                     obs.tick + 1)
            best = [z for z in order if eff[z] <= eff[wait_for] * (1.0 + 1e-9)]
            return launch_action(best, IDLE, interval, obs.tick + 1)
        if self.p.patience > 0 and order:
            # ample slack: try only the best zones (cost per useful hour, whether or not
            # they are believed up) and otherwise wait for them, while the expected wait
            # fits ``patience`` times over in the slack to spare
            best = int(np.argmin(eff))
            reclaim = self._reclaimed_zones(obs) if self.p.patience_reclaim == "other_regions" \
                else None
            if reclaim is not None and reclaim[best]:
                # patience_reclaim="other_regions": the region that just preempted the job is
                # not waited for; the cheapest zone outside it is (none: no waiting)
                outside = np.where(reclaim, math.inf, eff)
                best = int(np.argmin(outside))
                if not math.isfinite(float(outside[best])):
                    return launch_action(order, IDLE, interval, obs.tick + 1)
            if self.p.patience_wait == "residual":  # its expected remaining outage
                wait = self._residual_down_hours(obs)[best]
            else:
                wait = self.mean_down_hours(obs)[best]  # its mean down time (v5: before the job)
            if spare - reserve > self.p.patience * wait:
                order = [z for z in order if eff[z] <= eff[best] * (1.0 + 1e-9)]
        return launch_action(order, IDLE, interval, obs.tick + 1)

    def _reclaimed_zones(self, obs: Observation) -> np.ndarray | None:
        """``patience_reclaim="other_regions"``: per zone, True for the zones of the region
        that preempted this job within the last ``neighbour_window_hours`` (the neighbour
        rule's window); None outside that window or without regions."""
        recent = (obs.tick - self._pre_tick) * obs.gap_hours <= self.p.neighbour_window_hours
        if not recent or self._pre_region is None or not obs.regions:
            return None
        return np.array([r == self._pre_region for r in obs.regions])

    def _last_run_pays(self, state: JobState, obs: Observation, order: list[int], spare: float,
                       run: np.ndarray, od_price: float) -> list[int]:
        """``launch_guard="restart_cost"``: the zones of ``order`` (in order) worth a launch.

        A launch in ``z`` that lands after ``k`` failed tries (the zones kept ahead of it,
        ``probe_seconds`` each) leaves ``s = spare - k probe - overhead`` of spare slack. When
        ``s`` is below one restart the launch guard refuses every launch after this one: the
        job's spot run ends at the next preemption or, without a notice, once the saves and
        the unsaved work have spent ``s`` (at most ``s`` plus the tick the net lets run, as
        :meth:`_leaving_on_demand_pays` counts it), and the rest runs on on-demand where the
        checkpoint then is, ``z``'s region. The work kept ``u`` is the smallest of the work
        left, the useful part of ``z``'s expected run (:meth:`_eff`'s) and, without a
        notice, ``s`` plus one tick. ``z`` is kept when
        ``spot(z) (u + overhead) + egress + od(z's region) (rem - u + restart)`` (the last
        term only when ``u < rem``) is below ``od_price (rem + restart)``, on-demand now
        where it would run now. Any other zone (``s`` at least a restart) is kept."""
        spec = state.spec
        g = obs.gap_hours
        rem = max(spec.work_hours - state.done_hours, 1e-3)
        probe_h = spec.probe_seconds / 3600.0
        price = obs.spot_prices(spec)
        od = obs.on_demand_prices(spec)
        od_now = od_price * (rem + spec.restart_hours)
        kept: list[int] = []
        for z in order:
            over = self._launch_overhead(spec, obs, z)
            s = spare - len(kept) * probe_h - over
            if s >= spec.restart_hours:
                kept.append(z)
                continue
            r = float(run[z])
            u = rem if r >= rem + over else max(0.0, r - over - self._lost_per_preemption(spec, r))
            if not spec.notice_saves:
                u = min(u, max(0.0, s + g))
            u = min(u, rem)
            extra = obs.migration_usd if obs.moves_region(z) else 0.0
            if obs.regions:
                od_z = float(min(od[y] for y in range(obs.n_zones) if obs.regions[y] == obs.regions[z]))
            else:
                od_z = od_price
            cost = float(price[z]) * (u + over) + extra
            if u < rem:
                cost += od_z * (rem - u + spec.restart_hours)
            if cost < od_now:
                kept.append(z)
        return kept

    @staticmethod
    def _launch_overhead(spec: JobSpec, obs: Observation, z: int) -> float:
        """Hours before a launch in zone ``z`` makes progress: the restart, plus the
        checkpoint's transfer when ``z`` is in another region."""
        return spec.restart_hours + (obs.migration_hours if obs.moves_region(z) else 0.0)

    def _rank_eff(self, state: JobState, obs: Observation, eff: np.ndarray,
                  held: int | None = None) -> np.ndarray:
        """``model_check`` on, once the job's holds rejected the model: the cost per
        useful hour of each zone with the runs capped by the job's own evidence
        (:func:`own_evidence_caps`), for ranking; a zone the caps make worthless keeps v6's
        figure ``eff`` plus ``RANK_AFTER_USD`` (it follows every other, in v6's order)."""
        self._caps = True
        try:
            capped = self.cost_per_useful_hour(state, obs, held=held)
        finally:
            self._caps = False
        return np.where(np.isfinite(capped), capped, RANK_AFTER_USD + eff)

    def _own_run_update(self, state: JobState) -> None:
        """``own_runs``: add the hours held since the last decision to that zone, count a
        preemption this job suffered there, and test the history against them
        (``switch``: :func:`history_rejected`; ``switch_emp``: each hold's p-value,
        :func:`hold_p_value`, combined by :func:`fisher_rejects`). Once rejected, the
        history stays rejected for the rest of the job."""
        held = state.location if state.location >= 0 else (
            state.last_preempted_zone if state.just_preempted else -1)
        dt = max(0.0, state.elapsed_hours - self._at[1]) if self._at is not None else 0.0
        if held >= 0:
            self._held_h[held] += dt
        if state.just_preempted and state.last_preempted_zone >= 0:
            self._own_n[state.last_preempted_zone] += 1
        self._at = (state.location, state.elapsed_hours)
        if self.p.zone_model in ("changepoint_emp", "changepoint_updown"):
            self._hold_update(state, held, dt)
        if self.p.own_runs == "switch":
            # ninth round: once the joint test rejects the history, rank without it
            self._switched = self._switched or history_rejected(
                self.prior.mean_up_hours, self._held_h, self._own_n)
        elif self.p.own_runs == "switch_emp":
            # tenth round: the same switch, tested against the empirical run law too
            if state.just_preempted and state.last_preempted_zone >= 0:
                z = state.last_preempted_zone
                hold = self._held_h[z] - self._mark[z]
                self._mark[z] = self._held_h[z]
                self._pvals.append(hold_p_value(hold, float(self.prior.mean_up_hours[z]),
                                                self._runs_h[z]))
            self._switched = self._switched or fisher_rejects(self._pvals)

    def _down_update(self, obs: Observation, state: JobState | None = None) -> None:
        """``zone_model="changepoint_updown"``: the outages the job has seen, from its own
        observations (failed launch tries, preemptions, holds): one record per outage, from
        the tick it was first seen down to the tick it was first seen up again.

        v6 reads the zones' state at its decisions only: a launch into a watched outage that
        is preempted before the next decision (one tick later after a launch from idle) is
        never seen up, and the outages before and after it are recorded as one -- more often
        the longer the tick (the tick-length loss on the regime shift,
        docs/fleet-policies.md). ``outage_end="launch"`` ends the outage at that launch."""
        if not obs.probed or obs.last_seen_tick is None:
            return
        if self.p.outage_end == "launch" and state is not None:
            held = state.location if state.location >= 0 else (
                state.last_preempted_zone if state.just_preempted else -1)
            if held >= 0 and self._dn_first[held] >= 0:
                # launched at the previous decision into an outage the job was watching
                self._spells[held].append(
                    ((self._prev_tick - self._dn_first[held]) * obs.gap_hours, True))
                self._dn_first[held] = -1
            self._prev_tick = obs.tick
        for z in range(obs.n_zones):
            seen = int(obs.last_seen_tick[z])
            if seen < 0:
                continue
            if obs.available[z]:
                self._seen_up[z] = True
            if not obs.available[z]:
                if self._dn_first[z] < 0:
                    self._dn_first[z] = seen
                self._dn_last[z] = seen
            elif self._dn_first[z] >= 0:
                self._spells[z].append(((seen - self._dn_first[z]) * obs.gap_hours, True))
                self._dn_first[z] = -1

    def mean_down_hours(self, obs: Observation) -> np.ndarray:
        """Expected outage (h) of each zone: the statistics before the job (v5), or with
        ``zone_model="changepoint_updown"`` averaged with what the job has seen
        (:func:`changepoint_run_emp` on the outages)."""
        if self.p.zone_model != "changepoint_updown":
            return self.prior.mean_down_hours
        return changepoint_run_emp(self.prior.mean_down_hours, self._down_spells(obs),
                                   self._emp_downs, self._h1_b(obs, down=True))

    def _down_spells(self, obs: Observation) -> list[list[tuple[float, bool]]]:
        """The outages the job has seen per zone, the one in progress included as censored."""
        spells = [list(sp) for sp in self._spells]
        for z in range(obs.n_zones):
            if self._dn_first[z] >= 0:
                spells[z].append(((self._dn_last[z] - self._dn_first[z]) * obs.gap_hours, False))
        return spells

    def _residual_down_hours(self, obs: Observation) -> np.ndarray:
        """``patience_wait="residual"``: expected remaining outage (h) of each zone the job sees
        down now, given the outage's age ``a`` (from the first tick the job saw it down, or
        from the start of the history's trailing outage if the job has not seen the zone up
        since its start, to the last tick it saw it down): ``(1 - p1)`` x the mean of ``d - a``
        over the history's outages ``d > a`` plus ``p1`` x the changed hypothesis's mean
        (an exponential's residual), ``p1`` = P(changed) as in :meth:`mean_down_hours`; with
        no history outage longer than ``a``, the changed mean alone. Other zones: their mean."""
        out = np.array(self.mean_down_hours(obs), dtype=float)
        g = obs.gap_hours
        for z, p1, r1 in changed_runs_emp(self._down_spells(obs), self._emp_downs,
                                          self._h1_b(obs, down=True)):
            if self._dn_first[z] < 0:
                continue
            began = int(self._dn_first[z])
            fresh = not (self._seen_up[z] or self._holds[z] or self._spells[z]
                         or (self._open is not None and self._open[0] == z))
            if fresh and self._hist_dn_start[z] >= 0:
                began = int(self._hist_dn_start[z])  # the outage the history ended in
            age = (int(self._dn_last[z]) - began) * g
            d = np.asarray(self._emp_downs[z], dtype=float)
            longer = d[d > age]
            out[z] = r1 if longer.size == 0 else \
                (1.0 - p1) * float(np.mean(longer - age)) + p1 * r1
        return out

    def belief(self, obs: Observation) -> np.ndarray:
        """P(a launch succeeds) per zone (:func:`belief_up`); with
        ``zone_model="changepoint_updown"`` from the expected up- and down-runs that include
        the job's own observations."""
        if self.p.zone_model != "changepoint_updown":
            return belief_up(obs, self.prior)
        up = self.expected_runs(obs, neighbour=False)
        down = self.mean_down_hours(obs)
        seen = np.array([bool(h) or bool(sp) for h, sp in zip(self._holds, self._spells, strict=True)])
        if self._open is not None:
            seen[self._open[0]] = True
        seen |= self._dn_first >= 0
        # a zone the job has no evidence on keeps the history's share of time up
        avail = np.where(seen, up / (up + down), self.prior.availability)
        post = dataclasses.replace(self.prior, mean_up_hours=up, mean_down_hours=down,
                                   availability=avail)
        return belief_up(obs, post)

    def _hold_update(self, state: JobState, held: int, dt: float) -> None:
        """``zone_model="changepoint_emp"``: the job's holds, one record per stay in a zone:
        (hours, ended by a preemption?, fresh?, began at a recovery the job saw?); a stay the
        job left itself is censored."""
        def close(preempted: bool) -> None:
            self._holds[self._open[0]].append((self._open[1], preempted, self._open[2], self._open[3]))
            self._checked.append((self._open[1], preempted, self._open_expected))
            self._open = None

        if self._open is not None and held == self._open[0]:
            self._open[1] += dt
        elif held >= 0:
            if self._open is not None:
                close(False)
            # seen_fresh: the job was watching an outage of this zone that the launch ended
            # (its run began then), else it began mid-run; only changepoint_updown watches
            # outages (other zone models count every hold fresh). hold_start="seen" and
            # model_check="holds_residual" read it
            seen_fresh = self.p.zone_model != "changepoint_updown" or bool(self._dn_first[held] >= 0)
            fresh = self.p.hold_start == "run" or seen_fresh
            self._open = [held, dt, fresh, seen_fresh]
            # the run the decision that launched it expected there (model_check)
            self._open_expected = float(self._last_run[held]) if self._last_run is not None \
                else float(self.prior.mean_up_hours[held])
        if state.just_preempted and state.last_preempted_zone >= 0:
            if self._open is not None and self._open[0] == state.last_preempted_zone:
                close(True)
            else:
                self._holds[state.last_preempted_zone].append((0.0, True, True, True))
                self._checked.append((0.0, True, math.inf))
        if self._open is not None and state.location != self._open[0]:
            close(False)

    def waiting_pays(self, state: JobState, obs: Observation, eff: np.ndarray,
                     order: list[int], od_eff: float) -> int | None:
        """Without a deadline: the zone worth idling for, or None (launch now: the best
        zone believed up, else on-demand).

        The job can launch now in the best other zone believed up (cost per useful hour
        ``e_now``) or on on-demand (``od_eff``), whichever is cheaper, or try the cheapest
        zone ``b`` (``e_b``) and idle until it is up, expected in ``(1 - belief) x`` its
        mean down time ``w``. Without a deadline the delay has no slack to spend; it
        is priced at the rate the job would run at meanwhile: idling pays only when
        ``(i + w) e_now < (e_now - e_b) x work left``, ``i`` the hours the job has already
        spent idle -- so the job's idle time in all is at most the work left times the
        relative saving (a drought longer than the statistics' mean down time ends the
        wait instead of renewing it at every tick). v4 with the driver's
        50 x work horizon as slack waited on the patience rule for the zone with the
        longest up-runs (1.6 market h with two zones up, synthetic seed 0), and with
        every zone "dearer than on-demand" (the restart-blind comparison fixed in
        :meth:`on_demand_cost_per_useful_hour`) idled 60 market h."""
        rem = max(state.spec.work_hours - state.done_hours, 1e-3)
        b = int(np.argmin(eff))
        belief = self.belief(obs)
        # believed up: a launch there more likely succeeds than fails. Before 2026-11-27 the
        # cheapest other candidate counted whatever its belief: in an outage of every zone
        # the job compared the wait with a zone almost surely down (belief 0.13, 0.04 $ per
        # useful hour dearer than b), found that waiting never pays, tried every zone and
        # ran on on-demand: never idle in 100 volatile jobs (bench_no_deadline.py)
        others = [z for z in order if z != b and belief[z] >= 0.5]
        e_now = min(float(eff[others[0]]) if others else math.inf, od_eff)
        e_b = float(eff[b])
        if not math.isfinite(e_b) or e_b >= e_now * (1.0 - 1e-9):
            return None
        down = self.mean_down_hours(obs)
        if self.p.no_deadline_wait == "set":
            return self._set_worth_waiting_for(eff, belief, down, e_now, rem)
        wait = (1.0 - float(belief[b])) * float(down[b])
        return b if (self._idle_h + wait) * e_now < (e_now - e_b) * rem else None

    def _set_worth_waiting_for(self, eff: np.ndarray, belief: np.ndarray, down: np.ndarray,
                               e_now: float, rem: float) -> int | None:
        """``no_deadline_wait="set"``: the dearest zone of the set of the ``k`` cheapest
        zones (cost per useful hour ``eff``, $/useful h) worth idling for, or None. Waiting
        for any of them (independent zones, each down with probability ``1 - belief`` and
        back at rate ``1 / down`` per hour) takes ``prod(1 - belief) / sum(1 / down)`` h
        expected (``k = 1``: ``(1 - belief) x down``, the cheapest zone's wait) and saves at
        least ``(e_now - eff of the k-th) x rem`` $; ``k`` maximises the net saving
        ``(e_now - e_k) rem - (idle so far + wait) e_now``, which must be positive: the
        idle budget of :meth:`waiting_pays` holds whatever ``k``."""
        best, best_net = None, 0.0
        p_down, rate = 1.0, 0.0
        for z in sorted(range(eff.size), key=lambda z: (eff[z], z)):
            e = float(eff[z])
            if not e < e_now * (1.0 - 1e-9):
                break
            p_down *= 1.0 - float(belief[z])
            rate += 1.0 / max(float(down[z]), 1e-6)
            net = (e_now - e) * rem - (self._idle_h + p_down / rate) * e_now
            if net > best_net:
                best, best_net = z, net
        return best

    def _affordable_moves(self, state: JobState, obs: Observation, better: list[int]) -> list[int]:
        """The voluntary moves the slack pays for: a move spends a restart (and the transfer
        across regions) plus the failed tries before it, all off the spare slack above the
        safety net; a move that spends all of it sends the job to on-demand at the next
        tick (v3 at D/W 1.05 moved to a 25 % cheaper zone with 0.1 h of spare slack and
        finished the last 4.6 h of the job on on-demand)."""
        spec = state.spec
        spare = safe_slack_hours(state) - safety_threshold_hours(state, obs.gap_hours)
        probe_h = spec.probe_seconds / 3600.0
        out = []
        for c in better:
            over = self._launch_overhead(spec, obs, c)
            if spare - over - len(out) * probe_h > 0.0:
                out.append(c)
        return out

    def _leaving_on_demand_pays(self, state: JobState, obs: Observation, z: int, spare: float,
                                od_price: float) -> bool:
        """Leave on-demand for spot in ``z`` only when the spot run the slack allows (the
        safety net ends it once ``spare`` is spent; at most the work left) pays for its
        restart (and migration): near the deadline a hop to spot for a few minutes pays a
        restart and is sent back to on-demand at the next tick."""
        spec = state.spec
        rem = max(spec.work_hours - state.done_hours, 0.0)
        over = self._launch_overhead(spec, obs, z)
        extra = obs.migration_usd if obs.moves_region(z) else 0.0
        useful = min(rem, spare + obs.gap_hours - over)
        if useful <= 0:
            return False
        price = float(obs.spot_prices(spec)[z])
        return price * (useful + over) + extra < od_price * useful

    def bridge(self, state: JobState, spare: float, at_hours: float) -> bool:
        """While idle: True when the job should make progress on on-demand now rather
        than wait for spot.

        v3 went on-demand as soon as the *expected* slack burn of
        the time left exceeded the spare slack. But on-demand hours spent now are spent for
        sure, while waiting keeps the option: they save money only if the job is later
        forced onto on-demand for the rest. In a fluid model (spot available a share ``a``
        of the time), ``dt`` of on-demand now costs ``dt`` on-demand hours when the job
        would have finished on spot anyway, and saves ``dt a / (1 - a)`` when it is forced
        later (it is forced later, and keeps the spot hours in between), so it pays only
        when ``P(forced) > 1 - a``. v4 goes on-demand when the expected burn exceeds the
        spare slack (v3's test, which keeps it from being later than where that pays on
        nearly-always-available markets) **and** the share of past windows of the time left
        that would have burnt more than the spare slack (:meth:`forced_probability`)
        exceeds ``1 - a``, with ``a`` the availability of the best zone before the job
        (with ``patience`` the job waits for its best zones; ``a`` = the share of time any
        zone is up made the rule eager: tuning set, volatile D/W 2 without notice 1.480x
        vs 1.365x omniscient). Never more on-demand than Uniform Progress."""
        reserve = self.reserve_hours(state, at_hours)
        if spare >= reserve:
            return False
        left = max(0.0, state.spec.deadline_hours - at_hours)
        theta = 1.0 - float(np.max(self.prior.availability))
        return self.forced_probability(state.spec, spare, left) > theta

    def forced_probability(self, spec: JobSpec, spare: float, left: float) -> float:
        """Share of the windows of ``left`` hours in the statistics before the job (taken
        circularly) whose slack burn exceeds ``spare``: hours with no zone up, plus per
        up-hour the burn of preemptions and saves (:meth:`slack_burn_share` less outages)."""
        down = self._down
        n = down.size
        g = self._gap
        k = int(math.ceil(left / g))
        full, part = divmod(k, n)
        cs = np.concatenate([[0], np.cumsum(np.concatenate([down, down]))])
        w = cs[np.arange(n) + part] - cs[np.arange(n)] + full * cs[n]
        out_h = w * g
        rate = self.slack_burn_share(spec) - self.prior.all_down
        burn = out_h + np.maximum(left - out_h, 0.0) * rate
        return float(np.mean(burn > spare))

    def reserve_hours(self, state: JobState, at_hours: float) -> float:
        """Slack to keep for outages still to come at elapsed time ``at_hours``: the time
        left times the smaller of Uniform Progress's share ``(D - W) / D`` and the share of
        time no zone had capacity before the job. It never holds more than Uniform
        Progress (the volatile-market failure of the old reserve) and holds almost nothing
        where capacity is nearly always somewhere (waiting is free)."""
        spec = state.spec
        left = max(0.0, spec.deadline_hours - at_hours)
        up_share = (spec.deadline_hours - spec.work_hours) / spec.deadline_hours
        return left * min(up_share, self.slack_burn_share(spec))

    def slack_burn_share(self, spec: JobSpec) -> float:
        """Expected share of wall-clock time that burns slack off on-demand, from the
        statistics before the job: time with no zone up, plus per preemption (rate of the
        zones' mean up-runs) a restart and the work lost, plus periodic saves without a
        notice."""
        run = float(np.median(self.prior.mean_up_hours))
        lost = self._lost_per_preemption(spec, run)
        saves = 0.0 if spec.notice_saves else spec.checkpoint_hours / max(
            math.sqrt(2.0 * max(spec.checkpoint_hours, 1e-6) * run), 2.0 * spec.checkpoint_hours)
        return self.prior.all_down + (spec.restart_hours + lost) / run + saves
