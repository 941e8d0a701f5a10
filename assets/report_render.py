"""Render the cost report: markdown (Dagster metadata), a stacked-bar plot, a styled HTML page.

Markdown is turned into HTML by markdown-it-py (CommonMark + GFM tables); the page
embeds the plot as a data URI so it is one self-contained file. Column names are
shown with readable headers (:data:`HEADERS`); zone names never break at their
hyphens (non-breaking hyphens in cells, ``white-space: nowrap`` in the CSS).
"""

from __future__ import annotations

import base64
import math
from pathlib import Path

import pandas as pd

from assets.cost_tables import CATEGORIES, MIN_PCT_BASE_USD, BreakEven, BudgetStatus

HEADERS = {
    "run_id": "Run", "started_utc": "Started (UTC)", "stage": "Stage", "zone": "Zone", "day": "Day (UTC)",
    "runs": "Runs", "stages": "Stages", "attempts": "Attempts", "lost_attempts": "Lost attempts",
    "sessions": "Node sessions", "preemptions": "Preemptions", "status": "Status", "attempt": "Attempt",
    "zones": "Zones (launch order)", "start_step": "Start step", "final_step": "Final step",
    "spend_usd": "Spend ($)", "on_demand_usd": "On-demand equiv. ($)", "savings_usd": "Savings ($)",
    "savings_pct": "Savings (%)", "useful_usd": "Useful ($)", "checkpoint_usd": "Checkpoint tax ($)",
    "redo_usd": "Redo tax ($)", "membership_usd": "Membership tax ($)", "launch_usd": "First launch ($)",
    "restart_usd": "Restart tax ($)",
    "idle_usd": "Idle tax ($)", "fallback_usd": "On-demand fallback premium ($)", "taxes_usd": "Taxes ($)",
    "node_id": "Node", "spot": "Spot", "end_reason": "End reason", "billed_hours": "Billed hours",
    "step": "Step", "kind": "Change", "world_sizes": "World size", "state_from": "State from",
    "pause_seconds": "Pause (billed s)", "node_seconds": "Node-seconds paused",
    "membership_tax_usd": "Membership tax ($)",
    "cost_usd": "Cost ($)", "tax": "Tax", "tax_usd": "Amount ($)", "share_pct": "Share of spend (%)",
    "spot_hours": "Spot hours (billed)", "rate_per_hour": "Preemptions per spot h", "ckpt_s": "C (s)",
    "restart_min": "R (min)", "spot_price": "Spot ($/h)", "on_demand_price": "On-demand ($/h)",
    "observed_usd_per_useful_h": "Observed ($/useful h)", "modelled_usd_per_useful_h": "Modelled ($/useful h)",
    "break_even_rate_per_hour": "Break-even rate (/h)", "verdict": "Verdict",
}
NBHYPHEN = "\u2011"  # non-breaking hyphen: "us-east-1f" stays on one line
COLORS = {"useful": "#2a9d8f", "checkpoint": "#e9c46a", "membership": "#9b5de5", "redo": "#f4a261",
          "launch": "#8ab17d", "restart": "#e76f51", "idle": "#adb5bd"}
TAX_LABELS = {"launch": "first launch (start-up, paid even without preemptions)",
              "restart": "restart (relaunches after preemptions / lost attempts)",
              "checkpoint": "checkpoint (training stalled for saves)",
              "membership": "membership (elastic stages: nodes paused by a shrink / grow)",
              "redo": "redo (work lost after the last checkpoint, recomputed)",
              "idle": "idle (notice grace, shutdown)",
              "fallback": "on-demand fallback premium (price over spot; overlaps the time taxes)"}


#: float columns a total row sums (besides the ``*_usd`` ones)
SUMMED_FLOATS = ("node_seconds", "billed_hours")
#: money columns shown with 4 decimals
FINE_USD = ("membership_tax_usd",)


def _fmt(v: object, col: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        if col in FINE_USD:  # cents hide a short pause: 4 decimals
            return f"{v:,.4f}"
        return f"{v:.1f}" if col.endswith("_pct") else f"{v:,.2f}" if col.endswith("_usd") else f"{v:.4g}"
    text = str(v)
    if col == "run_id":
        text = text[:8]  # the full id is in the CSV files
    if col in ("zone", "zones", "run_id"):
        text = text.replace("-", NBHYPHEN)
    return text.replace("|", "\\|")


def md_table(df: pd.DataFrame, cols: list[str] | None = None, total: bool = False,
             total_cells: dict[str, object] | None = None) -> str:
    """A GFM table with readable headers; numbers right-aligned; optional total row.
    ``total_cells``: total-row values that are not the column's sum (e.g. the period's
    distinct runs: a run that billed on two days is one run, not two)."""
    cols = [c for c in (cols or list(df.columns)) if c in df.columns]
    if df.empty:
        return "_no rows_"
    num = [pd.api.types.is_numeric_dtype(df[c]) and c not in ("attempt",) for c in cols]
    lines = ["| " + " | ".join(HEADERS.get(c, c.replace("_", " ")) for c in cols) + " |",
             "|" + "|".join("---:" if n else "---" for n in num) + "|"]
    for r in df[cols].itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v, c) for v, c in zip(r, cols, strict=True)) + " |")
    if total:
        cells = []
        for i, c in enumerate(cols):
            if i == 0:
                cells.append("**total**")
            elif total_cells and c in total_cells:
                cells.append(f"**{_fmt(total_cells[c], c)}**")
            elif c.endswith("_usd") or c in SUMMED_FLOATS:
                cells.append(f"**{_fmt(float(df[c].sum()), c)}**")
            elif c in ("sessions", "preemptions", "attempts", "lost_attempts", "runs"):
                cells.append(f"**{_fmt(int(df[c].sum()), c)}**")
            elif c == "savings_pct" and "on_demand_usd" in df and df["on_demand_usd"].sum() >= MIN_PCT_BASE_USD:
                cells.append(f"**{100.0 * df['savings_usd'].sum() / df['on_demand_usd'].sum():.1f}**")
            else:
                cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _empty_period(table: pd.DataFrame) -> str:
    """The period table when no run billed on its days: say so and which days to pick."""
    days = sorted(set(table["day"])) if not table.empty and "day" in table else []
    where = (f"this run billed on {', '.join(days)}" if days else "this run billed nothing")
    return (f"_No run billed on these days (UTC days of the charges, the market clock on the local "
            f"fleet); {where}. Pick a period with those days: `--from` / `--to` of `spotfleet "
            f"cost-report`, or `first_day` / `last_day` of the cost_report asset's config._")


def tax_table(tot: dict[str, float]) -> pd.DataFrame:
    """Tax totals: each tax in $ and as a share of spend."""
    spend = tot.get("spend_usd", 0.0)
    rows = [{"tax": TAX_LABELS[t], "usd": tot.get(f"{t}_usd", 0.0),
             "share_pct": 100.0 * tot.get(f"{t}_usd", 0.0) / spend if spend > 0 else math.nan}
            for t in ("launch", "restart", "checkpoint", "membership", "redo", "idle", "fallback")]
    out = pd.DataFrame(rows)
    out = out.rename(columns={"usd": "tax_usd"})
    return out


def _preemption_kinds(o) -> str:
    """``N preemptions`` and what they were: the market's, fault injections, lost node groups
    (the demo's were all injected or lost; the line said only "lost node groups included")."""
    market = o.preemptions - o.injected - o.lost
    if not (o.injected or o.lost):
        return f"{o.preemptions} preemptions, all the market's"
    parts = [f"{market} by the market"]
    if o.injected:
        parts.append(f"{o.injected} injected (inject_preemptions_at_steps)")
    if o.lost:
        parts.append(f"{o.lost} node(s) lost with their node group")
    return (f"{o.preemptions} preemptions: {', '.join(parts)}; the rate and the verdict below count them "
            f"all, the preemption statistics and the planner only the market's")


def tax_total_line(tot: dict[str, float]) -> str:
    """What the tax rows add up to: the time taxes are the headline's "Taxes"; the fallback
    premium is a price split that overlaps them, so the column does not sum to a total."""
    spend = tot.get("spend_usd", 0.0)
    share = f" ({100.0 * tot['taxes_usd'] / spend:.1f} % of spend)" if spend > 0 else ""
    fb = tot.get("fallback_usd", 0.0)
    return (f"Time taxes (first launch, restart, checkpoint, membership, redo, idle): "
            f"**${tot['taxes_usd']:,.2f}**{share}, the headline's Taxes"
            + (f"; the on-demand fallback premium (${fb:,.2f}) is part of the same hours' cost, "
               f"so it is not added to them" if fb > 0 else "") + ".")


def effective_cost_lines(be: BreakEven | None) -> list[str]:
    """Observed vs modelled effective cost per useful hour, and the break-even verdict."""
    if be is None:
        return ["_no spot sessions with prices recorded: no break-even analysis_"]
    o = be.observed
    verdict = "spot wins" if be.spot_wins else "ON-DEMAND would be cheaper"
    observed = o.observed_cost_per_useful_hour
    if math.isfinite(be.eff_cost_per_useful_hour):
        modelled = f"{be.eff_cost_per_useful_hour:.3f} $ per useful hour"
    else:  # lambda * R >= 1: c_eff has no finite value (the "–" it showed said nothing)
        modelled = (f"**no finite cost**: at {o.rate_per_hour:.3f} preemptions/h and R = "
                    f"{o.restart_hours * 60:.1f} min (lambda x R = {o.rate_per_hour * o.restart_hours:.2f} "
                    f">= 1) the model expects a preemption before each restart has paid off, so a long "
                    f"job would not finish on spot: cut R (faster start-up / restore) or run on-demand")
    if math.isfinite(observed):
        observed_text = f"**{observed:.3f} $ per useful hour** (spend ${o.spend_usd:,.2f} / {o.useful_hours:.2f} useful h)"
    else:  # no useful hour: "– $ per useful hour" said nothing
        observed_text = (f"**none: no useful training hour was recorded** (spend ${o.spend_usd:,.2f}); the "
                         f"node sessions logged no training progress: see the stage's node logs")
    return [
        f"- **observed** effective cost: {observed_text}; on-demand {o.on_demand_price:.3f} $/h",
        f"- **modelled** effective cost (playbook c_eff at the observed rates, optimal interval): {modelled}",
        f"- observed preemption rate {o.rate_per_hour:.3f}/h over {o.spot_hours:.2f} spot hours "
        f"({_preemption_kinds(o)}); checkpoint cost C = "
        f"{o.ckpt_hours * 3600:.1f} s; restart R = {o.restart_hours * 60:.1f} min; spot {o.spot_price:.3f} $/h",
        f"- break-even rate {be.break_even_rate_per_hour:.3f}/h: **{verdict}**",
    ]


def stage_break_even_lines(stage_be: pd.DataFrame | None) -> list[str]:
    """The per-stage break-even table (``cost_tables.stage_break_even``) under the run's
    lines; nothing for a run with at most one stage on spot (the run lines say it all)."""
    if stage_be is None or len(stage_be) < 2:
        return []
    shown = stage_be.copy()
    col = "modelled_usd_per_useful_h"
    if col in shown and (shown[col] == math.inf).any():  # lambda x R >= 1: no finite c_eff ("inf" before)
        shown[col] = [("no finite cost (lambda x R >= 1)" if v == math.inf else v) for v in shown[col]]
    return ["Per stage (each stage's own C, R and preemption rate: stages save and restore "
            "different models, and the planner plans each with its own):", "",
            md_table(shown), ""]


def budget_line(b: BudgetStatus | None, enforced: bool) -> str:
    if b is None:
        return ""
    state = "within budget" if b.within else "**OVER BUDGET**"
    return (f"Budget ({b.period}): spend ${b.spend_usd:,.2f} of ${b.budget_usd:,.2f} "
            f"({100 * b.used_fraction:.1f} %), {state}; "
            + ("enforced: a stage that would exceed it is not launched." if enforced else "not enforced (warn only)."))


def elastic_sections(membership: pd.DataFrame | None, nodes: pd.DataFrame | None,
                     membership_usd: float | None = None) -> list[str]:
    """Elastic multi-node stages: node-hours per node and the tax of each shrink / grow
    (nothing when the run has no elastic stage). ``membership_usd``: the run's
    ``membership`` cost category, which bills the same pauses."""
    out: list[str] = []
    if nodes is not None and not nodes.empty:
        out += ["### Elastic stages: node-hours per node", "",
                md_table(nodes, ["stage", "attempt", "node_id", "zone", "spot", "end_reason",
                                 "billed_hours", "cost_usd"], total=True), ""]
    if membership is not None and not membership.empty:
        taxed = membership[membership["kind"] != "restore"]
        tax = float(taxed["membership_tax_usd"].sum())
        if membership_usd is not None and tax > 0 and membership_usd < 0.5 * tax:
            # recorded before the cost split had the category: the pauses are in `useful`
            where = (f"The cost split of this run has only ${membership_usd:,.4f} in `membership`: "
                     f"its attempts were recorded before that category existed, so these pauses "
                     f"are still inside `useful` (and the on-demand comparison).")
        else:
            where = ("The same pauses are the `membership` tax of the cost split (per stage, per "
                     "zone, taxes below): moved out of `useful`, so the useful hours and the "
                     "on-demand comparison exclude them.")
        out += ["### Elastic stages: membership changes (the tax of each shrink / grow)", "",
                f"Each change pauses every node that was training, from its own hand-off to the new "
                f"group's first completed step (nodes that just joined were starting up: their "
                f"sessions' launch / restart time); the tax is those pauses at each node's price: "
                f"{taxed['node_seconds'].sum():,.1f} billed node-seconds, "
                f"**${tax:,.4f}** over {len(taxed)} change(s). {where} A `restore` "
                f"(every node lost) is paid as `restart`.", "",
                md_table(membership, ["stage", "attempt", "step", "kind", "world_sizes", "state_from",
                                      "pause_seconds", "node_seconds", "membership_tax_usd"], total=True), ""]
    return out


def unpriced_lines(unpriced: pd.DataFrame | None) -> list[str]:
    """A loud warning section when the run has node sessions without a price (else nothing)."""
    from assets.cost_tables import UNPRICED_FIX

    if unpriced is None or unpriced.empty:
        return []
    n = len(unpriced)
    hours = float(unpriced["billed_hours"].sum())
    return [f"> **WARNING: {n} node session{'s' if n != 1 else ''} ({hours:,.2f} billed h) could not be "
            f"priced and {'are' if n != 1 else 'is'} counted at $0: spend, taxes and savings below are "
            f"lower bounds.** Sessions: {', '.join(str(x) for x in unpriced['node_id'])}. Fix: {UNPRICED_FIX}.",
            "", md_table(unpriced, ["node_id", "run_id", "stage", "attempt", "zone", "instance_type", "spot",
                                    "billed_hours"]), ""]


def markdown_report(*, pipeline: str, run_label: str, table: pd.DataFrame, tot: dict[str, float],
                    by_stage: pd.DataFrame, by_zone: pd.DataFrame, stages: pd.DataFrame,
                    be: BreakEven | None, budget: BudgetStatus | None, budget_enforced: bool,
                    period_label: str, by_day: pd.DataFrame, all_time: pd.DataFrame,
                    image_uri: str | None = None, membership: pd.DataFrame | None = None,
                    elastic_nodes: pd.DataFrame | None = None, unpriced: pd.DataFrame | None = None,
                    stage_be: pd.DataFrame | None = None, period_runs: int | None = None,
                    as_of: str | None = None, rebuild: str | None = None,
                    time_note: str | None = None) -> str:
    """The whole report as markdown: run, period and all-time sections, each its own table.
    ``unpriced``: the run's node sessions recorded without a price (``cost_tables.unpriced_sessions``),
    shown first: every $ figure below is then a lower bound. ``period_runs``: the distinct
    runs that billed in the period (the period table's total; its rows count per day).
    ``as_of``: when the report was written; the period and all-time tables then say that runs
    recorded later are not in them, and ``rebuild`` (a command) how to get them.
    ``time_note``: what clock the hours and days are on (``cost_report.time_basis``)."""
    money = ["spend_usd", "on_demand_usd", "savings_usd", "savings_pct"]
    taxes = [f"{c}_usd" for c in CATEGORIES if c != "useful"] + ["fallback_usd"]
    saved = tot["savings_usd"]
    if tot["on_demand_usd"] <= 0:
        verdict = "no useful work was done, so nothing to compare with"
    elif tot["on_demand_usd"] < MIN_PCT_BASE_USD:
        verdict = (f"too little useful work for a meaningful comparison (difference ${-saved:,.4f}; "
                   "no percentage)")
    elif saved >= 0:
        verdict = f"savings **${saved:,.2f} ({tot['savings_pct']:.1f} %)**"
    else:
        verdict = f"spot cost **${-saved:,.2f} MORE ({-tot['savings_pct']:.1f} %)**"
    # the run's own figures never change; the period and all-time tables are as of the writing
    stamp = f", as of {as_of}" if as_of else ""
    snapshot = ([f"_Written {as_of}: runs recorded after that are not in the period and all-time "
                 f"tables" + (f"; `{rebuild}` rebuilds this report with them" if rebuild else "") + "._", ""]
                if as_of else [])
    out = [f"## Cost report: {pipeline}, {run_label}", "",
           f"Spend **${tot['spend_usd']:,.2f}** vs **${tot['on_demand_usd']:,.2f}** on-demand for the same "
           f"useful work: {verdict}. Taxes ${tot['taxes_usd']:,.2f}.", ""]
    out += unpriced_lines(unpriced)
    if time_note:
        out += [f"_{time_note}_", ""]
    if budget is not None:
        out += [budget_line(budget, budget_enforced), ""]
    if image_uri:
        out += [f"![cost per stage: useful work and taxes vs on-demand]({image_uri})", ""]
    out += ["### Stages (all attempts)", "",
            md_table(stages, ["stage", "attempts", "lost_attempts", "sessions", "preemptions", "zones", "cost_usd"],
                     total=True), "",
            *elastic_sections(membership, elastic_nodes, tot.get("membership_usd")),
            "### Per stage", "", md_table(by_stage, ["stage", *money, *taxes], total=True), "",
            "### Per zone", "", md_table(by_zone, ["zone", *money, *taxes], total=True), "",
            "### Taxes", "", md_table(tax_table(tot), ["tax", "tax_usd", "share_pct"]), "",
            tax_total_line(tot), "",
            "### Effective cost: observed vs modelled", "", *effective_cost_lines(be), "",
            *stage_break_even_lines(stage_be),
            "### Lines (stage x zone x day)", "",
            md_table(table, ["stage", "zone", "day", *money, "useful_usd", *taxes], total=True), "",
            f"### Period: {period_label} (every run that billed on these days{stamp})", "",
            *snapshot,
            (md_table(by_day, ["day", "runs", *money, "taxes_usd", "fallback_usd"], total=True,
                      total_cells=None if period_runs is None else {"runs": int(period_runs)})
             if not by_day.empty else _empty_period(table)), "",
            f"### All time (every recorded run of this pipeline{stamp})", "",
            md_table(all_time, ["run_id", "started_utc", "stages", "attempts", "lost_attempts", "sessions",
                                "preemptions", *money, "taxes_usd"], total=True)]
    return "\n".join(out)


_PREWARM: list = []


def _import_pyplot() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import markdown_it  # noqa: F401 - the HTML report's renderer, same reason
    import matplotlib.pyplot  # noqa: F401 - imported for its side effect (warm module cache)


def prewarm_plotting() -> None:
    """Import matplotlib (Agg) and markdown-it in a background thread, once per process.

    Called when a training stage launches: the step then mostly waits for its node
    processes, so the ~0.5-1 s import happens off the critical path instead of at the
    start of the cost report, after training.
    """
    import sys
    import threading

    if _PREWARM or "matplotlib.pyplot" in sys.modules:
        return
    t = threading.Thread(target=_import_pyplot, name="spotfleet-prewarm-plotting", daemon=True)
    _PREWARM.append(t)
    t.start()


def plotted_categories(by_stage: pd.DataFrame) -> list[str]:
    """The categories the plot stacks and its legend lists: those with $ in the run (a
    category that is zero for every stage, e.g. ``membership`` outside elastic stages or
    ``redo`` without a preemption, is neither drawn nor listed)."""
    if by_stage.empty:
        return []
    return [c for c in CATEGORIES if f"{c}_usd" in by_stage
            and float(pd.to_numeric(by_stage[f"{c}_usd"], errors="coerce").fillna(0.0).abs().sum()) > 0.0]


def plot_figure(by_stage_cat: pd.DataFrame, tot: dict[str, float], title: str,
                stage_order: list[str] | None = None, dpi: int = 110):
    """The report's figure (matplotlib ``Figure``): a stacked bar per stage of the run's
    non-zero categories (:func:`plotted_categories`) next to the on-demand equivalent.

    ``by_stage_cat``: one row per stage with ``<category>_usd`` and ``on_demand_usd``.
    """
    for t in _PREWARM:  # a warm-up import still running: let it finish (same modules)
        t.join()
    _import_pyplot()
    import matplotlib.pyplot as plt

    cols = [f"{c}_usd" for c in CATEGORIES] + ["on_demand_usd"]
    by_stage = by_stage_cat.set_index("stage")[cols] if not by_stage_cat.empty else pd.DataFrame(columns=cols)
    if stage_order:  # the YAML's order first, then stages it no longer names (were dropped from the plot)
        known = [s for s in stage_order if s in by_stage.index]
        by_stage = by_stage.reindex(known + [s for s in by_stage.index if s not in set(known)])
    fig, ax = plt.subplots(figsize=(7, 4), dpi=dpi)
    x = list(range(len(by_stage)))
    bottom = [0.0] * len(by_stage)
    for c in plotted_categories(by_stage):
        vals = [float(v) for v in by_stage[f"{c}_usd"]]
        ax.bar([i - 0.2 for i in x], vals, width=0.4, bottom=bottom, label=f"spot: {c}", color=COLORS[c])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    od = [float(v) for v in by_stage["on_demand_usd"]] if len(by_stage) else []
    ax.bar([i + 0.2 for i in x], od, width=0.4, label="on-demand, same useful work", color="#264653")
    ax.set_xticks(x, list(by_stage.index))
    ax.set_ylabel("$")
    pct = tot["savings_pct"]
    verdict = ("no percentage: too little useful work" if math.isnan(pct) else f"{pct:.0f}% saved" if pct >= 0
               else f"{-pct:.0f}% MORE than on-demand")
    ax.set_title(f"{title}\nspot \\${tot['spend_usd']:.2f} vs on-demand \\${tot['on_demand_usd']:.2f} "
                 f"for the same useful work ({verdict})", fontsize=9)
    top = max([*bottom, *od], default=1.0)
    ax.set_ylim(0, top * 1.45 if top > 0 else 1.0)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    fig.tight_layout()
    return fig


def write_plot(by_stage_cat: pd.DataFrame, tot: dict[str, float], path: Path, title: str,
               stage_order: list[str] | None = None, dpi: int = 110) -> Path:
    """:func:`plot_figure` as a PNG at ``path``."""
    fig = plot_figure(by_stage_cat, tot, title, stage_order, dpi)
    import matplotlib.pyplot as plt  # after plot_figure: it selects the backend first
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def data_uri(png: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1500px;
       color: #1d2833; line-height: 1.45; padding: 0 1em; }
h2 { border-bottom: 2px solid #264653; padding-bottom: .2em; }
h3 { margin-top: 1.6em; color: #264653; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: 0.9em; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; }
td { white-space: nowrap; }
th { background: #264653; color: #fff; font-weight: 600; text-align: center; min-width: 4.5em; }
tbody tr:nth-child(even) { background: #f3f6f8; }
tbody tr:last-child td strong { color: #264653; }
td[style*="right"] { font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #d0d7de; }
code { background: #f3f6f8; padding: 0 .3em; }
"""


def markdown_to_html(markdown: str, title: str) -> str:
    """A complete, styled HTML page from the report's markdown (markdown-it-py, GFM tables)."""
    import html

    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    body = md.render(markdown)
    return (f"<!doctype html>\n<html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>\n{body}</body></html>\n")


def write_html(markdown: str, path: Path, title: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown_to_html(markdown, title), encoding="utf-8")
    return path
