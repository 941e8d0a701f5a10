"""Cost report tables and plot from the statistics DB (pure pandas / matplotlib).

Inputs are the ``cost_lines`` and ``node_sessions`` tables (infra/db). Money in $,
time in billed hours (market hours on the local fleet), rates per billed hour.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from checkpointing import costmodel

CATEGORIES = ("useful", "checkpoint", "redo", "restart", "idle")
GROUP = ["pipeline", "stage", "zone", "day"]


def session_costs(sessions: pd.DataFrame) -> pd.Series:
    """Billed $ of each ended session: (end - launch) x time_scale / 3600 x price."""
    if sessions.empty:
        return pd.Series(dtype=float)
    ended = sessions["ended_at"].notna()
    hours = (sessions["ended_at"] - sessions["launched_at"]).clip(lower=0) * \
        sessions["time_scale"].fillna(1.0) / 3600.0
    return (hours * sessions["price_per_hour"]).where(ended, 0.0)


def cost_table(lines: pd.DataFrame) -> pd.DataFrame:
    """Per (pipeline, stage, zone, day): spend, on-demand equivalent, savings, breakdown.

    Columns: ``spend_usd``, ``on_demand_usd`` (on-demand price of the same useful work),
    ``savings_usd``, ``savings_pct``, ``<category>_usd`` and ``<category>_hours`` for
    useful, checkpoint, redo, restart and idle.
    """
    cols = GROUP + ["spend_usd", "on_demand_usd", "savings_usd", "savings_pct"] + \
        [f"{c}_usd" for c in CATEGORIES] + [f"{c}_hours" for c in CATEGORIES]
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
    out["savings_pct"] = (100.0 * out["savings_usd"] / out["on_demand_usd"]).where(out["on_demand_usd"] > 0)
    return out.reset_index()[cols]


@dataclass(frozen=True)
class ObservedRates:
    """What the recorded sessions say (billed hours): lambda, C, R and prices."""

    spot_hours: float
    preemptions: int
    rate_per_hour: float
    ckpt_hours: float
    restart_hours: float
    spot_price: float
    on_demand_price: float


@dataclass(frozen=True)
class BreakEven:
    """The playbook's break-even analysis at the observed rates."""

    observed: ObservedRates
    break_even_rate_per_hour: float
    optimal_interval_hours: float | None
    eff_cost_per_useful_hour: float
    spot_wins: bool

    def as_dict(self) -> dict[str, float | int | bool | None]:
        d = {f"observed_{k}": v for k, v in asdict(self.observed).items()}
        d.update({k: v for k, v in asdict(self).items() if k != "observed"})
        return d


def observed_rates(sessions: pd.DataFrame, lines: pd.DataFrame, checkpoints: pd.DataFrame) -> ObservedRates:
    """Preemption rate per billed spot hour, mean checkpoint stall C and restart R (hours)."""
    spot = sessions[sessions["spot"].astype(bool) & sessions["ended_at"].notna()] if not sessions.empty else sessions
    scale = spot["time_scale"].fillna(1.0) if not spot.empty else pd.Series(dtype=float)
    hours = float(((spot["ended_at"] - spot["launched_at"]) * scale).sum() / 3600.0) if not spot.empty else 0.0
    npre = int((spot["end_reason"] == "preempted").sum()) if not spot.empty else 0
    mean_scale = float(sessions["time_scale"].fillna(1.0).mean()) if not sessions.empty else 1.0
    stalls = checkpoints["stall_seconds"].dropna() if not checkpoints.empty else pd.Series(dtype=float)
    ckpt_h = float(stalls.mean()) * mean_scale / 3600.0 if len(stalls) else 0.0
    restart = lines[lines["category"] == "restart"] if not lines.empty else lines
    n_sessions = max(1, len(sessions))
    restart_h = float(restart["seconds"].sum()) / 3600.0 / n_sessions if not restart.empty else 0.0
    sp = float(spot["price_per_hour"].mean()) if not spot.empty else float("nan")
    od_col = sessions["on_demand_price_per_hour"].dropna() if not sessions.empty else pd.Series(dtype=float)
    od = float(od_col.mean()) if len(od_col) else float("nan")
    return ObservedRates(hours, npre, npre / hours if hours > 0 else 0.0, ckpt_h, restart_h, sp, od)


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


def totals(table: pd.DataFrame) -> dict[str, float]:
    """Whole-report totals (the floats Dagster plots over time)."""
    out = {k: float(table[k].sum()) if not table.empty else 0.0 for k in
           ["spend_usd", "on_demand_usd", "savings_usd"] + [f"{c}_usd" for c in CATEGORIES]}
    out["savings_pct"] = 100.0 * out["savings_usd"] / out["on_demand_usd"] if out["on_demand_usd"] > 0 else 0.0
    return out


def markdown_report(pipeline: str, table: pd.DataFrame, tot: dict[str, float], be: BreakEven | None) -> str:
    """The report as markdown (Dagster metadata)."""
    lines = [f"### Cost report: {pipeline}", "",
             f"Spend **${tot['spend_usd']:.4f}** vs on-demand **${tot['on_demand_usd']:.4f}** "
             f"for the same useful work: savings **${tot['savings_usd']:.4f} ({tot['savings_pct']:.1f}%)**.", "",
             "| stage | zone | day | spend $ | on-demand $ | savings $ | useful $ | ckpt tax $ | redo tax $ | restart tax $ | idle $ |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in table.itertuples(index=False):
        lines.append(f"| {r.stage} | {r.zone} | {r.day} | {r.spend_usd:.4f} | {r.on_demand_usd:.4f} | "
                     f"{r.savings_usd:.4f} | {r.useful_usd:.4f} | {r.checkpoint_usd:.4f} | "
                     f"{r.redo_usd:.4f} | {r.restart_usd:.4f} | {r.idle_usd:.4f} |")
    if be is not None:
        o = be.observed
        verdict = "spot wins" if be.spot_wins else "ON-DEMAND would be cheaper"
        lines += ["", "**Break-even at the observed rates** (playbook c_eff, optimal interval):", "",
                  f"- observed preemption rate {o.rate_per_hour:.3f}/h over {o.spot_hours:.2f} spot hours "
                  f"({o.preemptions} preemptions); checkpoint cost C = {o.ckpt_hours * 3600:.1f} s; "
                  f"restart R = {o.restart_hours * 60:.1f} min",
                  f"- prices: spot {o.spot_price:.3f} $/h, on-demand {o.on_demand_price:.3f} $/h",
                  f"- break-even rate {be.break_even_rate_per_hour:.3f}/h; effective spot cost "
                  f"{be.eff_cost_per_useful_hour:.3f} $/useful hour: **{verdict}**"]
    return "\n".join(lines)


def write_plot(table: pd.DataFrame, tot: dict[str, float], path: Path, title: str,
               stage_order: list[str] | None = None) -> Path:
    """Stacked bar per stage (useful + taxes) next to the on-demand equivalent; PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    by_stage = table.groupby("stage")[[f"{c}_usd" for c in CATEGORIES] + ["on_demand_usd"]].sum() \
        if not table.empty else pd.DataFrame(columns=[f"{c}_usd" for c in CATEGORIES] + ["on_demand_usd"])
    if stage_order:
        by_stage = by_stage.reindex([s for s in stage_order if s in by_stage.index])
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    colors = {"useful": "#2a9d8f", "checkpoint": "#e9c46a", "redo": "#f4a261", "restart": "#e76f51", "idle": "#adb5bd"}
    x = range(len(by_stage))
    bottom = [0.0] * len(by_stage)
    for c in CATEGORIES:
        vals = list(by_stage[f"{c}_usd"]) if len(by_stage) else []
        ax.bar([i - 0.2 for i in x], vals, width=0.4, bottom=bottom, label=f"spot: {c}", color=colors[c])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.bar([i + 0.2 for i in x], list(by_stage["on_demand_usd"]) if len(by_stage) else [], width=0.4,
           label="on-demand, same useful work", color="#264653")
    ax.set_xticks(list(x), list(by_stage.index))
    ax.set_ylabel("$")
    ax.set_title(f"{title}: spot spend \\${tot['spend_usd']:.2f} vs on-demand \\${tot['on_demand_usd']:.2f} "
                 f"for the same useful work ({tot['savings_pct']:.0f}% saved)", fontsize=9)
    top = max([*bottom, *(list(by_stage["on_demand_usd"]) if len(by_stage) else [])], default=1.0)
    ax.set_ylim(0, top * 1.45 if top > 0 else 1.0)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_html(markdown: str, table: pd.DataFrame, png: Path, path: Path) -> Path:
    """A self-contained HTML page: the table, the break-even text and the plot."""
    import base64
    import html

    img = base64.b64encode(png.read_bytes()).decode()
    body = "<br>".join(html.escape(x) for x in markdown.splitlines() if not x.startswith("|"))
    path.write_text(
        "<!doctype html><meta charset='utf-8'><title>spotfleet cost report</title>"
        f"<body style='font-family:sans-serif'><p>{body}</p>"
        f"<img src='data:image/png;base64,{img}'>{table.to_html(index=False, float_format=lambda v: f'{v:.4f}')}"
        "</body>", encoding="utf-8")
    return path
