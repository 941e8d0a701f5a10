"""Cost report tables from the statistics DB (pure pandas; plots in assets/report_render.py).

Inputs are the ``stage_attempts``, ``node_sessions``, ``cost_lines`` and ``checkpoints``
tables (infra/db). Money in $, time in BILLED hours (market hours on the local fleet),
rates per billed hour.

Views (each an explicit table, never silently mixed):

- one RUN (a Dagster run and its run-level retries): :func:`for_runs` then
  :func:`cost_table` (stage x zone x day lines) and :func:`subtotals` (per stage / zone);
- one PERIOD of UTC days: :func:`for_days` then :func:`day_summary` (per day, all runs);
- ALL TIME: :func:`run_summary` (one row per recorded run, every run ever).

Categories of a node session's billed time (infra/db/accounting.py): ``useful``,
``checkpoint``, ``membership`` (the pauses of an elastic stage's shrinks / grows),
``redo``, ``restart``, ``idle``; the report splits ``restart`` into
``launch`` (the stage's first node-group launch: start-up paid even without
preemptions) and ``restart`` (every relaunch after it). The first launch is counted
once per stage across ALL attempts of a run group (a Dagster run, its step retries, and
the re-execution / retry runs of its root): a later attempt's or re-execution's first
session is a restart, and so is any session that resumed from a checkpoint
(``first_step > 0``). ``fallback`` is a PRICE split,
not a time split: the premium paid on on-demand nodes over the spot price for the
same hours (it overlaps the time categories, so it is never added to them).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

import pandas as pd

from checkpointing import costmodel
from fleet.contract import mean_restart_seconds, measured_checkpoint_seconds, session_cost_usd

CATEGORIES = ("useful", "checkpoint", "membership", "redo", "launch", "restart", "idle")
TAXES = ("checkpoint", "membership", "redo", "launch", "restart", "idle")
GROUP = ["pipeline", "stage", "zone", "day"]
#: below this on-demand equivalent ($) a savings percentage means nothing (a run or row with
#: ~$0.0001 of useful work read "-130751.6 %"): the tables leave it empty ("–", n/a)
MIN_PCT_BASE_USD = 0.01
MONEY = ["spend_usd", "on_demand_usd", "savings_usd"] + [f"{c}_usd" for c in CATEGORIES] + ["fallback_usd"]
#: end reason of a node lost with its node group (the attempt failed and its nodes were
#: cancelled); a node whose own process crashed ("failed") is a failure, not a preemption
LOST_REASONS = ("cancelled",)
#: nodes of one node-group launch start within this many (market) seconds of each other
GROUP_LAUNCH_WINDOW_S = 5.0


def session_costs(sessions: pd.DataFrame) -> pd.Series:
    """Billed $ of each ended session (``fleet.contract.session_cost_usd``, market hours)."""
    if sessions.empty:
        return pd.Series(dtype=float)
    return pd.Series([session_cost_usd(float(p), float(a), None if pd.isna(e) else float(e))
                      for p, a, e in zip(sessions["price_per_hour"], sessions["launched_at"],
                                         sessions["ended_at"], strict=True)],
                     index=sessions.index, dtype=float)


def _billed_hours(sessions: pd.DataFrame) -> pd.Series:
    """Billed (market) hours of each session; a running one counts zero."""
    ended = sessions["ended_at"].notna()
    hours = (sessions["ended_at"] - sessions["launched_at"]).clip(lower=0) / 3600.0
    return hours.where(ended, 0.0).astype(float)


#: what to do about a node session billed at $0/h (no real VM is free: the provider could not price it)
UNPRICED_FIX = ("the provider found no catalog price for these node types in these zones, so their cost "
                "is NOT in this report (recorded at $0/h); look the hours up in the cloud's bill, and "
                "before the next run refresh SkyPilot's catalog or set resources.instance_type to a type "
                "the catalog prices in those zones (docs/cost-report.md, \"Unpriced sessions\")")
UNPRICED_COLS = ["node_id", "run_id", "stage", "attempt", "provider", "zone", "instance_type", "spot",
                 "billed_hours"]


def unpriced_sessions(sessions: pd.DataFrame) -> pd.DataFrame:
    """The ended node sessions recorded without a price (``price_per_hour`` <= 0 or missing):
    their billed hours are real, their $ are unknown, so every total that includes them is
    a lower bound. One row per session (:data:`UNPRICED_COLS`)."""
    if sessions.empty:
        return pd.DataFrame(columns=UNPRICED_COLS)
    price = pd.to_numeric(sessions["price_per_hour"], errors="coerce")
    bad = sessions[(price.isna() | (price <= 0)) & sessions["ended_at"].notna()].copy()
    if "billed_hours" not in bad:
        bad["billed_hours"] = _billed_hours(bad) if not bad.empty else pd.Series(dtype=float)
    for col in UNPRICED_COLS:
        if col not in bad:
            bad[col] = None
    return bad[UNPRICED_COLS].reset_index(drop=True)


@dataclass(frozen=True)
class CostData:
    """The statistics DB rows of one pipeline, prepared for the report.

    ``sessions`` gains ``run_id``, ``billed_hours``, ``cost_usd``, ``lost`` (ended with
    its lost node group), ``preempted_or_lost`` and ``first_launch``; ``lines`` gains the
    ``launch`` category (see the module docstring).
    """

    attempts: pd.DataFrame
    sessions: pd.DataFrame
    lines: pd.DataFrame
    checkpoints: pd.DataFrame

    @property
    def run_ids(self) -> list[str]:
        """Recorded runs, oldest first (by their first attempt's start)."""
        if self.attempts.empty:
            return []
        first = self.attempts.groupby("run_id")["started_at"].min().sort_values()
        return [str(r) for r in first.index]

    @property
    def empty(self) -> bool:
        return self.sessions.empty and self.lines.empty


#: the last few prepared loads, by (DB, pipeline, root_of, table fingerprint); see :func:`load`
_LOADED: dict[tuple, CostData] = {}
_LOADED_MAX = 4


def _fingerprint(engine, pipeline: str) -> tuple:
    """Row count, highest id and a sum of a per-row time/amount of each table :func:`load`
    reads, for one pipeline: any insert, delete or re-recorded row changes it (~ms)."""
    from sqlalchemy import func, select

    from infra.db.models import CheckpointRecord, CostLine, NodeSessionRecord, StageAttempt

    cols = ((StageAttempt, StageAttempt.ended_at), (NodeSessionRecord, NodeSessionRecord.ended_at),
            (CostLine, CostLine.dollars), (CheckpointRecord, CheckpointRecord.committed_at))
    with engine.connect() as conn:
        return tuple(tuple(conn.execute(select(func.count(), func.max(m.id), func.sum(c))  # SQL: any DB
                                        .where(m.pipeline == pipeline)).one()) for m, c in cols)


def load(engine, pipeline: str, root_of: Mapping[str, str] | None = None) -> CostData:
    """Read and :func:`prepare` one pipeline's tables (``root_of``: see :func:`prepare`).

    A run reads them many times while nothing changed in between (the budget check before
    each attempt, the stage metadata after it, the cost report, every check: ~0.05 s each
    here); an unchanged fingerprint (:func:`_fingerprint`) returns the same prepared data
    again, as fresh copies of its frames.
    """
    from infra.db.models import CheckpointRecord, CostLine, NodeSessionRecord, StageAttempt
    from infra.db.recorder import read_table

    key = (str(engine.url), pipeline, tuple(sorted((root_of or {}).items())), _fingerprint(engine, pipeline))
    hit = _LOADED.get(key)
    if hit is None:
        hit = prepare(read_table(engine, StageAttempt, pipeline), read_table(engine, NodeSessionRecord, pipeline),
                      read_table(engine, CostLine, pipeline), read_table(engine, CheckpointRecord, pipeline),
                      root_of=root_of)
        while len(_LOADED) >= _LOADED_MAX:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = hit
    return CostData(hit.attempts.copy(), hit.sessions.copy(), hit.lines.copy(), hit.checkpoints.copy())


def _first_launches(s: pd.DataFrame, root_of: Mapping[str, str] | None) -> pd.Series:
    """True for the sessions of each stage's FIRST node-group launch in its run group.

    The run group of a session is its run's root (``root_of[run_id]``; a run missing from
    it is its own root): a Dagster re-execution / retry run of a failed run and every step
    retry continue the same stage, so only the earliest attempt's first launch counts (the
    sessions of that attempt that launched within :data:`GROUP_LAUNCH_WINDOW_S` of its
    first). A session that resumed from a checkpoint (``first_step > 0``) is a restart.
    """
    roots = root_of or {}
    group = s["run_id"].map(lambda r: roots.get(r, r))
    order = s["launch_order"] if "launch_order" in s else s["launched_at"]
    key = pd.DataFrame({"g": group, "stage": s["stage"], "o": order, "t": s["launched_at"], "run": s["run_id"],
                        "att": s["attempt"]}, index=s.index)
    earliest = key.sort_values(["o", "t"], kind="stable").groupby(["g", "stage"]).head(1).set_index(["g", "stage"])
    pos = pd.MultiIndex.from_frame(key[["g", "stage"]])
    t0 = pd.Series(earliest["t"].reindex(pos).to_numpy(), index=s.index)
    run0 = pd.Series(earliest["run"].reindex(pos).to_numpy(), index=s.index)
    att0 = pd.Series(earliest["att"].reindex(pos).to_numpy(), index=s.index)
    fresh = s["first_step"].fillna(0).le(0)  # not resumed from a checkpoint
    return ((s["run_id"] == run0) & (s["attempt"] == att0) & (s["launched_at"] <= t0 + GROUP_LAUNCH_WINDOW_S)
            & fresh).astype(bool)


def prepare(attempts: pd.DataFrame, sessions: pd.DataFrame, lines: pd.DataFrame,
            checkpoints: pd.DataFrame, root_of: Mapping[str, str] | None = None) -> CostData:
    """Derived columns: run of each session, billed hours and $, lost groups, first launches.

    ``root_of`` maps a run id to its root run id (Dagster re-executions / run retries); it
    overrides the roots the DB stored (``stage_attempts.root_run_id``, migration 0004); a
    run in neither is its own root (see :func:`_first_launches`).
    """
    s = sessions.copy()
    a = attempts.copy()
    root_of = {**stored_roots(a), **(root_of or {})}
    ln = lines.copy()
    if s.empty:
        for col in ("run_id", "billed_hours", "cost_usd", "lost", "preempted_or_lost", "launch_order",
                    "first_launch", "fallback_usd"):
            s[col] = pd.Series(dtype=object)
    else:
        run_of_attempt = dict(zip(a["id"], a["run_id"], strict=True)) if not a.empty else {}
        status_of_attempt = dict(zip(a["id"], a["status"], strict=True)) if not a.empty else {}
        s["run_id"] = s["attempt_id"].map(run_of_attempt)
        if not ln.empty and s["run_id"].isna().any():  # sessions without an attempt row
            run_of_session = ln.drop_duplicates("node_session_id").set_index("node_session_id")["run_id"]
            s["run_id"] = s["run_id"].fillna(s["id"].map(run_of_session))
        s["run_id"] = s["run_id"].fillna("(unknown run)")
        s["billed_hours"] = _billed_hours(s)
        s["cost_usd"] = session_costs(s)
        failed_attempt = s["attempt_id"].map(status_of_attempt).eq("failed")
        s["lost"] = s["end_reason"].isin(LOST_REASONS) & failed_attempt
        s["preempted_or_lost"] = s["end_reason"].eq("preempted") | s["lost"]
        # launch order across a run group: each run dates its sessions on its own market clock
        # (anchored at its start), so a re-execution's sessions may be dated before the root's
        # last ones; its attempts' start (recorded on the wall clock) orders the runs
        started_of_attempt = dict(zip(a["id"], a["started_at"], strict=True)) if not a.empty else {}
        s["launch_order"] = s["attempt_id"].map(started_of_attempt).fillna(s["launched_at"])
        s["first_launch"] = _first_launches(s, root_of)
        # once per session, against its own run group's spot price: every view (run, period,
        # all time, FOCUS) then sums the same premium (see _fallback_by_session)
        s["fallback_usd"] = _fallback_by_session(s, s["run_id"].map(lambda r: root_of.get(r, r)))
    if not ln.empty:
        ln["day"] = pd.to_datetime(ln["day"]).dt.date.astype(str)
        first_ids = set(s.loc[s["first_launch"].astype(bool), "id"]) if not s.empty else set()
        is_launch = ln["category"].eq("restart") & ln["node_session_id"].isin(first_ids)
        ln.loc[is_launch, "category"] = "launch"
    return CostData(a, s, ln, checkpoints.copy())


def stored_roots(attempts: pd.DataFrame) -> dict[str, str]:
    """run id -> its root run id as recorded (``stage_attempts.root_run_id``; rows recorded
    before migration 0004 were given their own run id)."""
    if attempts.empty or "root_run_id" not in attempts:
        return {}
    known = attempts[attempts["root_run_id"].notna()]
    return {str(r): str(root) for r, root in zip(known["run_id"], known["root_run_id"], strict=True)}


def run_group(data: CostData, run_id: str) -> list[str]:
    """The recorded run group of ``run_id``: its root first, then every run recorded with the
    same root (re-executions / retry runs), oldest first. The root leads even when it
    recorded nothing itself (it names the report's folder, as in the Dagster asset)."""
    roots = stored_roots(data.attempts)
    root = roots.get(run_id, run_id)
    members = [r for r in data.run_ids if r != root and roots.get(r, r) == root]
    return [root, *members]


def for_runs(data: CostData, run_ids: Iterable[str]) -> CostData:
    """Only the rows of the given runs."""
    ids = set(run_ids)
    ck = data.checkpoints
    return CostData(
        data.attempts[data.attempts["run_id"].isin(ids)] if not data.attempts.empty else data.attempts,
        data.sessions[data.sessions["run_id"].isin(ids)] if not data.sessions.empty else data.sessions,
        data.lines[data.lines["run_id"].isin(ids)] if not data.lines.empty else data.lines,
        ck[ck["run_id"].isin(ids)] if not ck.empty else ck)


def for_days(data: CostData, first: dt.date, last: dt.date) -> CostData:
    """Cost lines on UTC days ``first..last`` (inclusive) and the sessions they belong to."""
    lines = data.lines
    if not lines.empty:
        d = pd.to_datetime(lines["day"]).dt.date
        lines = lines[(d >= first) & (d <= last)]
    ids = set(lines["node_session_id"]) if not lines.empty else set()
    sessions = data.sessions[data.sessions["id"].isin(ids)] if not data.sessions.empty else data.sessions
    runs = set(sessions["run_id"]) if not sessions.empty else set()
    attempts = data.attempts[data.attempts["run_id"].isin(runs)] if not data.attempts.empty else data.attempts
    ck = data.checkpoints
    return CostData(attempts, sessions, lines, ck[ck["run_id"].isin(runs)] if not ck.empty else ck)


def latest_run(data: CostData) -> str | None:
    """The most recently started run that recorded an attempt."""
    ids = data.run_ids
    return ids[-1] if ids else None


def _fallback_by_session(sessions: pd.DataFrame, group: pd.Series | None = None) -> pd.Series:
    """$ premium of on-demand sessions over the spot price of the same node type (0 for spot).

    The spot price is the mean over the spot sessions of the same node type in the session's
    run group (``group``: its root run id per session; None: all ``sessions`` are one group);
    none there: no premium. Sessions from :func:`prepare` carry it (``fallback_usd``), so a
    session's premium does not depend on which other runs are in view: until 2026-11-28 the
    period table and the FOCUS export took the mean spot price of every run in view, and a
    day's premium was not the sum of its runs' (``tests/orchestration/
    test_orch_cost_report_views.py``)."""
    if sessions.empty:
        return pd.Series(dtype=float)
    if group is None and "fallback_usd" in sessions:
        return sessions["fallback_usd"].astype(float)
    g = group if group is not None else pd.Series("", index=sessions.index)
    spot_mask = sessions["spot"].astype(bool)
    spot = sessions[spot_mask].assign(_g=g[spot_mask])
    spot_price = spot.groupby(["_g", "instance_type"])["price_per_hour"].mean()
    od = ~spot_mask
    ref = pd.Series(pd.MultiIndex.from_arrays([g, sessions["instance_type"]]).map(
        lambda k: spot_price.get(k, float("nan"))), index=sessions.index, dtype=float)
    prem = (sessions["price_per_hour"] - ref).clip(lower=0) * sessions["billed_hours"]
    return prem.where(od & ref.notna(), 0.0).astype(float)


def cost_table(lines: pd.DataFrame, sessions: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (pipeline, stage, zone, day): spend, on-demand equivalent, savings, breakdown.

    Columns: ``spend_usd``, ``on_demand_usd`` (on-demand price of the same useful work),
    ``savings_usd``, ``savings_pct``, ``<category>_usd`` and ``<category>_hours`` for
    each of :data:`CATEGORIES`, and ``fallback_usd`` (needs ``sessions`` from a
    :class:`CostData`; 0 without it).
    """
    cols = GROUP + ["spend_usd", "on_demand_usd", "savings_usd", "savings_pct"] + \
        [f"{c}_usd" for c in CATEGORIES] + ["fallback_usd"] + [f"{c}_hours" for c in CATEGORIES]
    if lines.empty:
        return pd.DataFrame(columns=cols)
    df = lines.copy()
    df["day"] = pd.to_datetime(df["day"]).dt.date.astype(str)
    usd = df.pivot_table(index=GROUP, columns="category", values="dollars", aggfunc="sum", fill_value=0.0)
    hrs = df.pivot_table(index=GROUP, columns="category", values="seconds", aggfunc="sum", fill_value=0.0) / 3600.0
    out = pd.DataFrame(index=usd.index)
    for c in CATEGORIES:
        out[f"{c}_usd"] = usd[c] if c in usd.columns else 0.0
        out[f"{c}_hours"] = hrs[c] if c in hrs.columns else 0.0
    out["spend_usd"] = df.groupby(GROUP)["dollars"].sum()
    out["on_demand_usd"] = df.groupby(GROUP)["on_demand_dollars"].sum()
    out["savings_usd"] = out["on_demand_usd"] - out["spend_usd"]
    out["savings_pct"] = savings_pct(out["savings_usd"], out["on_demand_usd"])
    out["fallback_usd"] = 0.0
    if sessions is not None and not sessions.empty and "billed_hours" in sessions:
        prem = _fallback_by_session(sessions)
        if prem.abs().sum() > 0:
            # spread each session's premium over its lines in proportion to their dollars
            share = df.merge(pd.DataFrame({"node_session_id": sessions["id"], "prem": prem,
                                           "cost": sessions["cost_usd"]}), on="node_session_id", how="left")
            share["fallback"] = (share["prem"].fillna(0.0) * share["dollars"] /
                                 share["cost"].where(share["cost"] > 0)).fillna(0.0)
            out["fallback_usd"] = share.groupby(GROUP)["fallback"].sum().reindex(out.index).fillna(0.0)
    return out.reset_index()[cols]


def savings_pct(savings_usd, on_demand_usd):
    """100 x savings / on-demand equivalent; NaN (shown "–") when the on-demand equivalent is
    below :data:`MIN_PCT_BASE_USD` (scalars or Series)."""
    if isinstance(on_demand_usd, pd.Series):
        return (100.0 * savings_usd / on_demand_usd).where(on_demand_usd >= MIN_PCT_BASE_USD)
    return 100.0 * savings_usd / on_demand_usd if on_demand_usd >= MIN_PCT_BASE_USD else math.nan


def subtotals(table: pd.DataFrame, by: str | list[str]) -> pd.DataFrame:
    """Money columns summed per ``by`` (e.g. ``"stage"``, ``"zone"``), with savings %."""
    keys = [by] if isinstance(by, str) else list(by)
    cols = [c for c in MONEY if c in table.columns]
    if table.empty:
        return pd.DataFrame(columns=keys + cols + ["savings_pct"])
    out = table.groupby(keys, sort=False)[cols].sum().reset_index()
    out["savings_pct"] = savings_pct(out["savings_usd"], out["on_demand_usd"])
    return out


def totals(table: pd.DataFrame) -> dict[str, float]:
    """Whole-table totals (the floats Dagster plots over time)."""
    out = {k: float(table[k].sum()) if (not table.empty and k in table) else 0.0 for k in MONEY}
    out["taxes_usd"] = sum(out[f"{c}_usd"] for c in TAXES)
    out["savings_pct"] = float(savings_pct(out["savings_usd"], out["on_demand_usd"]))
    return out


@dataclass(frozen=True)
class StageHistory:
    """One stage across ALL its attempts in a run (what the stage asset reports)."""

    stage: str
    attempts: int
    lost_attempts: int
    sessions: int
    preemptions: int  # node sessions preempted, plus nodes lost with their node group
    lost_nodes: int
    on_demand_sessions: int
    cost_usd: float
    zones: str  # launch order, "a -> b -> c"
    final_step: int | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def stage_history(data: CostData, stage: str) -> StageHistory:
    """Attempts, sessions, preemptions (incl. lost node groups) and cost of one stage."""
    a = data.attempts[data.attempts["stage"] == stage] if not data.attempts.empty else data.attempts
    s = data.sessions[data.sessions["stage"] == stage] if not data.sessions.empty else data.sessions
    s = s.sort_values(["launch_order", "launched_at"]) if not s.empty else s
    final = a["final_step"].dropna() if not a.empty else pd.Series(dtype=float)
    return StageHistory(
        stage=stage, attempts=len(a), lost_attempts=int((a["status"] == "failed").sum()) if not a.empty else 0,
        sessions=len(s), preemptions=int(s["preempted_or_lost"].sum()) if not s.empty else 0,
        lost_nodes=int(s["lost"].sum()) if not s.empty else 0,
        on_demand_sessions=int((~s["spot"].astype(bool)).sum()) if not s.empty else 0,
        cost_usd=float(s["cost_usd"].sum()) if not s.empty else 0.0,
        zones=" -> ".join(s["zone"]) if not s.empty else "",
        final_step=int(final.max()) if len(final) else None)


def attempts_table(data: CostData, stage: str) -> pd.DataFrame:
    """One row per attempt of ``stage``: status, sessions, preemptions, zones, steps, $."""
    cols = ["attempt", "status", "sessions", "preemptions", "zones", "start_step", "final_step", "cost_usd"]
    a = data.attempts[data.attempts["stage"] == stage] if not data.attempts.empty else data.attempts
    if a.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for r in a.sort_values(["started_at", "attempt"]).itertuples(index=False):
        s = data.sessions[data.sessions["attempt_id"] == r.id].sort_values("launched_at")
        rows.append({"attempt": int(r.attempt), "status": r.status, "sessions": len(s),
                     "preemptions": int(s["preempted_or_lost"].sum()) if not s.empty else 0,
                     "zones": " -> ".join(s["zone"]),
                     "start_step": None if pd.isna(r.start_step) else int(r.start_step),
                     "final_step": None if pd.isna(r.final_step) else int(r.final_step),
                     "cost_usd": float(s["cost_usd"].sum()) if not s.empty else 0.0})
    return pd.DataFrame(rows, columns=cols)


def _summary_row(data: CostData) -> dict[str, object]:
    tot = totals(cost_table(data.lines, data.sessions))
    s = data.sessions
    return {"stages": int(s["stage"].nunique()) if not s.empty else 0,
            "attempts": len(data.attempts),
            "lost_attempts": int((data.attempts["status"] == "failed").sum()) if not data.attempts.empty else 0,
            "sessions": len(s), "preemptions": int(s["preempted_or_lost"].sum()) if not s.empty else 0,
            **{k: tot[k] for k in ("spend_usd", "on_demand_usd", "savings_usd", "savings_pct", "taxes_usd",
                                   "fallback_usd")}}


def run_summary(data: CostData) -> pd.DataFrame:
    """ALL TIME: one row per recorded run (oldest first) with its root run (its run group) and totals."""
    rows = []
    roots = stored_roots(data.attempts)
    for rid in data.run_ids:
        part = for_runs(data, [rid])
        start = float(part.attempts["started_at"].min())
        rows.append({"run_id": rid, "root_run_id": roots.get(rid, rid), "started_utc": _utc(start),
                     **_summary_row(part)})
    return pd.DataFrame(rows, columns=["run_id", "root_run_id", "started_utc", "stages", "attempts", "lost_attempts", "sessions",
                                       "preemptions", "spend_usd", "on_demand_usd", "savings_usd", "savings_pct",
                                       "taxes_usd", "fallback_usd"])


def day_summary(data: CostData) -> pd.DataFrame:
    """PERIOD: one row per UTC day with cost lines (all runs that billed on that day)."""
    cols = ["day", "runs", "spend_usd", "on_demand_usd", "savings_usd", "savings_pct", "taxes_usd", "fallback_usd"]
    if data.lines.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for day in sorted(set(data.lines["day"])):
        d = dt.date.fromisoformat(day)
        part = for_days(data, d, d)
        tot = totals(cost_table(part.lines, part.sessions))
        rows.append({"day": day, "runs": int(part.lines["run_id"].nunique()),
                     **{k: tot[k] for k in cols[2:]}})
    return pd.DataFrame(rows, columns=cols)


def _utc(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class ObservedRates:
    """What the recorded sessions say (billed hours): lambda, C, R and prices.

    ``preemptions`` counts preempted spot nodes AND spot nodes lost with their node
    group; ``ckpt_hours`` and ``restart_hours`` are the run contract's measured C and R
    (``fleet.contract.measured_checkpoint_seconds`` / ``mean_restart_seconds``, the values
    the planner reads), 0 when nothing was measured; ``useful_hours`` and ``spend_usd`` give the observed
    effective cost.
    """

    spot_hours: float
    preemptions: int
    rate_per_hour: float
    ckpt_hours: float
    restart_hours: float
    spot_price: float
    on_demand_price: float
    useful_hours: float = 0.0
    spend_usd: float = 0.0
    #: of ``preemptions``: spot nodes a fault injection preempted (``inject_preemptions_at_steps``,
    #: ``node_sessions.injected``) and nodes lost with their node group; the rest are the market's
    injected: int = 0
    lost: int = 0

    @property
    def observed_cost_per_useful_hour(self) -> float:
        """What one useful hour really cost: all spend / useful hours (nan without useful work)."""
        return self.spend_usd / self.useful_hours if self.useful_hours > 0 else math.nan


@dataclass(frozen=True)
class BreakEven:
    """The playbook's break-even analysis at the observed rates."""

    observed: ObservedRates
    break_even_rate_per_hour: float
    optimal_interval_hours: float | None
    eff_cost_per_useful_hour: float  # MODELLED: c_eff at the observed lambda, C, R
    spot_wins: bool

    @property
    def observed_cost_per_useful_hour(self) -> float:
        return self.observed.observed_cost_per_useful_hour

    def as_dict(self) -> dict[str, float | int | bool | None]:
        d = {f"observed_{k}": v for k, v in asdict(self.observed).items()}
        d.update({k: v for k, v in asdict(self).items() if k != "observed"})
        d["observed_cost_per_useful_hour"] = self.observed_cost_per_useful_hour
        return d


def observed_rates(sessions: pd.DataFrame, lines: pd.DataFrame, checkpoints: pd.DataFrame) -> ObservedRates:
    """Preemption rate per billed spot hour, mean checkpoint stall C and restart R (hours)."""
    ended = sessions[sessions["ended_at"].notna()] if not sessions.empty else sessions
    spot = ended[ended["spot"].astype(bool)] if not ended.empty else ended
    hours = float(_billed_hours(spot).sum()) if not spot.empty else 0.0
    if not spot.empty and "preempted_or_lost" in spot:
        npre = int(spot["preempted_or_lost"].sum())
    else:
        npre = int((spot["end_reason"] == "preempted").sum()) if not spot.empty else 0
    # C and R: the run contract's definitions (fleet.contract), the same the planner reads
    ckpt_s = measured_checkpoint_seconds(
        zip(checkpoints["kind"], checkpoints["stall_seconds"], strict=True)) if not checkpoints.empty else None
    ckpt_h = (ckpt_s or 0.0) / 3600.0  # market seconds in the DB
    restart_s = mean_restart_seconds(zip(sessions["launched_at"], sessions["ready_at"], strict=True)
                                     ) if not sessions.empty else None
    restart_h = (restart_s or 0.0) / 3600.0
    # prices per billed hour (what an hour cost on average), not per session: a short session
    # in a dear zone must not weigh as much as a long one in a cheap zone; unpriced sessions
    # ($0/h: price unknown) are left out (until 2026-11-28: the plain mean over sessions)
    sp = _hour_weighted_price(spot, "price_per_hour")
    od = _hour_weighted_price(ended, "on_demand_price_per_hour")
    useful_h = float(lines.loc[lines["category"] == "useful", "seconds"].sum()) / 3600.0 if not lines.empty else 0.0
    spend = float(lines["dollars"].sum()) if not lines.empty else 0.0
    injected = int((spot["end_reason"].eq("preempted") & spot["injected"].fillna(False).astype(bool)).sum()) \
        if not spot.empty and "injected" in spot else 0
    lost = int(spot["lost"].astype(bool).sum()) if not spot.empty and "lost" in spot else 0
    return ObservedRates(hours, npre, npre / hours if hours > 0 else 0.0, ckpt_h, restart_h, sp, od,
                         useful_h, spend, injected, lost)


def _hour_weighted_price(sessions: pd.DataFrame, col: str) -> float:
    """Mean of ``col`` ($/h) over ``sessions`` weighted by their billed hours, over the sessions
    with a positive price (NaN when none; the plain mean when none has billed hours yet)."""
    if sessions.empty or col not in sessions:
        return float("nan")
    price = pd.to_numeric(sessions[col], errors="coerce")
    ok = price.notna() & (price > 0)
    if not ok.any():
        return float("nan")
    hours = _billed_hours(sessions)[ok]
    if float(hours.sum()) <= 0:
        return float(price[ok].mean())
    return float((price[ok] * hours).sum() / hours.sum())


def break_even(obs: ObservedRates) -> BreakEven | None:
    """Break-even preemption rate for the observed C, R and prices (None: not enough data)."""
    if not (obs.spot_price > 0 and obs.on_demand_price > 0):
        return None
    c = max(obs.ckpt_hours, 1e-6)  # C must be > 0 for the interval formulas
    r = obs.restart_hours
    be = costmodel.break_even_rate_per_hour(on_demand_price=obs.on_demand_price, spot_price=obs.spot_price,
                                            ckpt_hours=c, restart_hours=r, interval="optimal",
                                            step_per_hour=None)
    lam = obs.rate_per_hour
    if lam > 0 and lam * r < 1:
        t = costmodel.optimal_interval_hours(c, lam, r)
        eff = costmodel.effective_cost_per_useful_hour(obs.spot_price, c, t, lam, r)
    elif lam == 0:
        t, eff = None, obs.spot_price * 1.0
    else:
        t, eff = None, math.inf
    return BreakEven(obs, be, t, eff, lam < be)


#: the per-stage break-even table (:func:`stage_break_even`)
STAGE_BREAK_EVEN_COLS = ["stage", "spot_hours", "preemptions", "rate_per_hour", "ckpt_s", "restart_min",
                         "spot_price", "on_demand_price", "observed_usd_per_useful_h",
                         "modelled_usd_per_useful_h", "break_even_rate_per_hour", "verdict"]


def _of_stage(df: pd.DataFrame, stage: str) -> pd.DataFrame:
    return df[df["stage"] == stage] if not df.empty and "stage" in df else df.iloc[0:0]


def stage_break_even(sessions: pd.DataFrame, lines: pd.DataFrame, checkpoints: pd.DataFrame,
                     stage_order: Sequence[str] = ()) -> pd.DataFrame:
    """The break-even analysis per stage, each on its own sessions, cost lines and saves.

    Stages checkpoint and restore different models, so their checkpoint cost C and restart
    R differ (the planner plans each stage with its own, ``fleet_plan``); the run-level
    :func:`break_even` pools them. One row per stage with spot sessions (rates per billed
    spot hour, C in seconds, R in minutes, prices and costs in $/h and $ per useful hour);
    ``verdict`` is ``spot wins``, ``ON-DEMAND would be cheaper`` or ``no prices``.
    Stages follow ``stage_order``, then the rest by name."""
    if sessions.empty or "stage" not in sessions:
        return pd.DataFrame(columns=STAGE_BREAK_EVEN_COLS)
    order = {s: i for i, s in enumerate(stage_order)}
    rows = []
    for stage in sorted(set(sessions["stage"]), key=lambda s: (order.get(s, len(order)), s)):
        obs = observed_rates(*(_of_stage(df, stage) for df in (sessions, lines, checkpoints)))
        if obs.spot_hours <= 0:
            continue  # on-demand only: nothing to break even on
        be = break_even(obs)
        rows.append({"stage": stage, "spot_hours": obs.spot_hours, "preemptions": obs.preemptions,
                     "rate_per_hour": obs.rate_per_hour, "ckpt_s": obs.ckpt_hours * 3600.0,
                     "restart_min": obs.restart_hours * 60.0, "spot_price": obs.spot_price,
                     "on_demand_price": obs.on_demand_price,
                     "observed_usd_per_useful_h": obs.observed_cost_per_useful_hour,
                     "modelled_usd_per_useful_h": be.eff_cost_per_useful_hour if be else math.nan,
                     "break_even_rate_per_hour": be.break_even_rate_per_hour if be else math.nan,
                     "verdict": ("spot wins" if be.spot_wins else "ON-DEMAND would be cheaper") if be
                     else "no prices"})
    return pd.DataFrame(rows, columns=STAGE_BREAK_EVEN_COLS)


@dataclass(frozen=True)
class BudgetStatus:
    """Spend of one budget period against the pipeline's ``budget_usd``."""

    period: str  # "run <id>" or "day YYYY-MM-DD"
    spend_usd: float
    budget_usd: float

    @property
    def used_fraction(self) -> float:
        return self.spend_usd / self.budget_usd if self.budget_usd > 0 else math.inf

    @property
    def within(self) -> bool:
        return self.spend_usd <= self.budget_usd


def budget_status(data: CostData, budget_usd: float, period: str, run_ids: Iterable[str] | None = None,
                  day: dt.date | None = None) -> BudgetStatus:
    """Spend in the budget period: ``period="run"`` (the given runs) or ``"day"`` (one UTC day).

    The day, unless given: the last UTC day the given runs billed on (the day the cost report of
    those runs judges by default), else today (nothing billed yet: the day a launch bills on).
    Before 2026-11-28 it was always today's wall-clock day, so the ``within_budget`` check and
    the report could judge different days for the same run."""
    if period == "day":
        billed = for_runs(data, list(run_ids or [])).lines
        d = day or (dt.date.fromisoformat(max(billed["day"])) if not billed.empty
                    else dt.datetime.now(dt.UTC).date())
        part = for_days(data, d, d)
        return BudgetStatus(f"day {d.isoformat()}", float(part.lines["dollars"].sum()) if not part.lines.empty
                            else 0.0, budget_usd)
    ids = list(run_ids or [])
    part = for_runs(data, ids)
    label = f"run {ids[0][:8]}" if ids else "run (none)"
    return BudgetStatus(label, float(part.lines["dollars"].sum()) if not part.lines.empty else 0.0, budget_usd)


def completed_attempt(data: CostData, stage: str, run_ids: Iterable[str]) -> dict[str, object] | None:
    """The latest recorded attempt of ``stage`` in these runs (a run group) when it completed,
    else None (never ran, or its latest attempt failed)."""
    a = data.attempts
    if a.empty:
        return None
    a = a[(a["stage"] == stage) & a["run_id"].isin(list(run_ids))]
    if a.empty:
        return None
    last = a.sort_values("started_at", kind="stable").iloc[-1]
    return last.to_dict() if last["status"] == "completed" else None


def work_after_checkpoint(sessions: pd.DataFrame, checkpoints: pd.DataFrame) -> tuple[int, float]:
    """(latest checkpoint step K, market hours of training done after K) for one stage's
    sessions and checkpoints (one run group).

    Only sessions that trained past K count, each on its own clock: from K's commit when that
    session committed K, else from its start (it resumed from K or earlier). A session that
    stopped at K (a re-execution that resumed at the final step and did nothing) adds no
    hours, however much later it ran: the clock gap between runs is not work."""
    ck = checkpoints.sort_values(["step", "committed_at"]).iloc[-1]
    k = int(ck["step"])
    behind = 0.0
    for s in sessions.itertuples(index=False):
        if pd.isna(s.last_step) or int(s.last_step) <= k or pd.isna(s.ended_at):
            continue
        same = (str(s.run_id), int(s.attempt), str(s.node_id)) == (str(ck["run_id"]), int(ck["attempt"]),
                                                                  str(ck["node_id"]))
        start = float(ck["committed_at"]) if same else float(s.launched_at if pd.isna(s.ready_at) else s.ready_at)
        behind = max(behind, float(s.ended_at) - start)
    return k, behind / 3600.0


# -- elastic multi-node stages: node-hours per node, the tax of each shrink / grow ---------

MEMBERSHIP_COLS = ["stage", "attempt", "step", "kind", "world_sizes", "state_from", "nodes",
                   "pause_seconds", "node_seconds", "membership_tax_usd"]
NODE_HOURS_COLS = ["stage", "attempt", "node_id", "zone", "spot", "end_reason", "billed_hours", "cost_usd"]


def load_membership(engine, pipeline: str) -> pd.DataFrame:
    """The ``membership_changes`` rows of one pipeline (fleet/providers/membership.py)."""
    from infra.db.models import MembershipChange
    from infra.db.recorder import read_table

    return read_table(engine, MembershipChange, pipeline)


def membership_table(membership: pd.DataFrame, run_ids: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per group change of the elastic stages of ``run_ids`` (None: all runs),
    in order: ``kind`` (shrink / grow / reform / restore), ``world_sizes`` ("4 -> 2"),
    the longest member pause in billed seconds, the node-seconds paused (every member
    that was training, from its hand-off to the group's first step) and their $
    (``membership_tax_usd``). The attempt's first group (``form``) is not a change."""
    m = membership
    if m.empty:
        return pd.DataFrame(columns=MEMBERSHIP_COLS)
    if run_ids is not None:
        m = m[m["run_id"].isin(set(run_ids))]
    m = m[m["kind"] != "form"].sort_values(["formed_at", "id"])
    if m.empty:
        return pd.DataFrame(columns=MEMBERSHIP_COLS)
    before = m["world_size_before"].map(lambda v: "?" if pd.isna(v) else str(int(v)))
    return pd.DataFrame({
        "stage": m["stage"].to_numpy(), "attempt": m["attempt"].astype(int).to_numpy(),
        "step": m["step"].astype(int).to_numpy(), "kind": m["kind"].to_numpy(),
        "world_sizes": (before + " -> " + m["world_size"].astype(int).astype(str)).to_numpy(),
        "state_from": m["state_from"].to_numpy(), "nodes": m["nodes"].to_numpy(),
        "pause_seconds": m["pause_seconds"].astype(float).to_numpy(),
        "node_seconds": m["node_seconds"].astype(float).to_numpy(),
        "membership_tax_usd": m["dollars"].astype(float).to_numpy()}, columns=MEMBERSHIP_COLS)


def elastic_node_hours(sessions: pd.DataFrame, membership: pd.DataFrame) -> pd.DataFrame:
    """Billed hours and $ of every node of the elastic stages' attempts (those that
    recorded membership groups), one row per node session in launch order."""
    if sessions.empty or membership.empty:
        return pd.DataFrame(columns=NODE_HOURS_COLS)
    s = sessions[sessions["attempt_id"].isin(set(membership["attempt_id"].dropna()))]
    if s.empty:
        return pd.DataFrame(columns=NODE_HOURS_COLS)
    s = s.sort_values(["stage", "attempt", "launched_at"])
    out = s[["stage", "attempt", "node_id", "zone", "spot", "end_reason", "billed_hours", "cost_usd"]].copy()
    out["spot"] = out["spot"].astype(bool)
    return out.reset_index(drop=True)[NODE_HOURS_COLS]
