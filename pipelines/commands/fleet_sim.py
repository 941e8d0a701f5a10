"""``spotfleet fleet-sim``: run fleet policies over many start times on spot traces.

Prints a progress line per policy, then the table (mean cost, cost / on-demand,
cost / omniscient bound, deadline-met rate, completion time, preemptions, wasted work),
and optionally saves a plot. See docs/fleet-policies.md.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from fleet.contract import DEFAULT_CHECKPOINT_SECONDS, DEFAULT_RESTART_SECONDS
from fleet.market.config import DEFAULT_ON_DEMAND_PRICE, DEFAULT_SPOT_PRICE
from pipelines.commands.argtypes import counted, number


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fleet-sim",
        help="simulate fleet policies for a deadline job over spot availability traces",
        description=(
            "Trace-driven simulation of a job needing --work-hours of compute before "
            "--deadline-hours, started at --starts evenly spaced times (after a week of "
            "history), under every fleet policy, against the exact omniscient bound."),
    )
    p.add_argument("--traces-dir", "--traces", dest="traces", metavar="DIR", required=True,
                   help="any folder of the public collection (one JSON file per zone and "
                        "instance type), e.g. ../shared/data/spot-traces/availability/1-node/"
                        "aws-02-15-2023 or ../shared/data/gcp-h100-2025")
    p.add_argument("--nodes", type=number("--nodes", integer=True), default=None,
                   help="instances the job needs: a zone is available when its count >= this "
                        "(default: the folder's N-node, else 1)")
    p.add_argument("--instance-types", default="",
                   help="comma-separated instance types to keep when a folder has several")
    p.add_argument("--inverted", choices=("auto", "yes", "no"), default="auto",
                   help="0/1 convention of the files: yes = 1 means unavailable (SkyNomad), "
                        "no = counts (spot-traces); auto (default): per file, from "
                        "metadata.inverted or metadata.price_info")
    p.add_argument("--prices", default="",
                   help="per-tick spot price file to attach, e.g. ../shared/data/spot-prices/"
                        "aws-v100-02-15-2023.json (GCP H100 files carry their own prices)")
    p.add_argument("--checkpoint-gb", type=number("--checkpoint-gb", allow_zero=True),
                   default=0.0, help="checkpoint size (GB): cross-region moves pay its egress")
    p.add_argument("--egress-usd-per-gb", type=number("--egress-usd-per-gb", allow_zero=True),
                   default=None, help="inter-region egress $/GB (default: per-cloud default)")
    p.add_argument("--observe", choices=("probe", "oracle"), default="probe",
                   help="probe: a zone is known only when held or tried (default); oracle: "
                        "every zone's availability for free (offline checks; not how a real cloud works, "
                        "and the output says so)")
    p.add_argument("--work-hours", type=number("--work-hours"), default=24.0,
                   help="failure-free compute the job needs, hours (default 24)")
    p.add_argument("--deadline-hours", type=number("--deadline-hours"), default=36.0,
                   help="time from each start to the deadline, hours (default 36)")
    p.add_argument("--starts", type=number("--starts", integer=True), default=100,
                   help="evenly spaced start times simulated per policy (default 100)")
    p.add_argument("--notice-seconds", type=number("--notice-seconds", allow_zero=True),
                   default=0.0, help="preemption notice window (s); 120 = AWS")
    p.add_argument("--restart-minutes", type=number("--restart-minutes", allow_zero=True),
                   default=DEFAULT_RESTART_SECONDS / 60.0,
                   help="changeover delay R on every (re)launch (min; default fleet.contract's, 6)")
    p.add_argument("--checkpoint-minutes", type=number("--checkpoint-minutes", allow_zero=True),
                   default=DEFAULT_CHECKPOINT_SECONDS / 60.0,
                   help="time one checkpoint blocks training (min; default fleet.contract's, 1; "
                        "0 only with a notice, --notice-seconds > 0)")
    p.add_argument("--on-demand-price", type=number("--on-demand-price"),
                   default=DEFAULT_ON_DEMAND_PRICE,
                   help="$/h when the data has no on-demand prices")
    p.add_argument("--spot-price", type=number("--spot-price"), default=DEFAULT_SPOT_PRICE,
                   help="$/h when the data has no spot prices")
    p.add_argument("--warmup-hours", type=number("--warmup-hours", allow_zero=True),
                   default=168.0, help="history before the first start (h)")
    p.add_argument("--policies", default="",
                   help="comma-separated subset, e.g. failover,spotfleet (default: all)")
    p.add_argument("--no-omniscient", action="store_true", help="skip the offline DP bound")
    p.add_argument("--plot", default="", help="save a plot to this PNG path")
    p.set_defaults(handler=_run)


def best_baseline_line(res, gap_hours: float) -> str:
    """``spotfleet / <best baseline>: r [lo, hi] per start; [lo, hi] (k) per block`` (the
    paired bootstrap intervals of docs/fleet-policies.md: starts resampled one by one, and
    blocks of starts whose runs share market hours resampled whole); "" without spotfleet or
    a baseline. The best baseline is the cheapest policy other than spotfleet and on-demand."""
    import numpy as np

    from fleet.simulation.families import block_ci, bootstrap_ratio, start_blocks

    if "spotfleet" not in res.runs:
        return ""
    costs = {n: np.array([r.cost for r in runs]) for n, runs in res.runs.items()}
    others = [n for n in costs if n not in ("spotfleet", "on_demand")]
    if not others:
        return ""
    best = min(others, key=lambda n: costs[n].mean())
    r, lo, hi = bootstrap_ratio(costs["spotfleet"], costs[best])
    blocks = start_blocks([res.starts], [gap_hours], res.spec.deadline_hours)
    return (f"spotfleet / {best} (the cheapest other policy but on-demand): {r:.3f} "
            f"[{lo:.3f}, {hi:.3f}] per start; {block_ci(blocks, costs['spotfleet'], costs[best])} "
            "per block of starts whose runs overlap (95 % paired bootstrap intervals)")


#: what an oracle run is, said in its header, table title and plot title
ORACLE_NOTE = ("ORACLE observation: every zone's availability is seen for free at every tick, "
               "which is not how a real cloud works (a zone is known only when held or tried: "
               "--observe probe, the default)")


def mixed_instance_types_warning(market, spot_price: float, on_demand_price: float) -> str:
    """The warning for a market of several instance types ("" for one): fleet-sim runs every
    (zone, instance type) as an interchangeable location of one job, so a job would move
    between a 1-GPU and an 8-GPU machine; with a flat price (no per-tick spot prices, or no
    on-demand prices in the files) they are also billed alike."""
    kinds = sorted(set(market.instance_types))
    if len(kinds) < 2:
        return ""
    by_zone: dict[str, list[str]] = {}
    for z, it in zip(market.zones, market.instance_types, strict=True):
        by_zone.setdefault(z.split("/")[0], []).append(it)
    listing = "; ".join(f"{z}: {', '.join(its)}" for z, its in list(by_zone.items())[:4])
    flat = [what for what, none in ((f"spot {spot_price:g} $/h", market.spot_price is None),
                                    (f"on-demand {on_demand_price:g} $/h",
                                     market.on_demand_price is None)) if none]
    billed = (f"; the prices cannot tell them apart: every one is billed the flat "
              f"{' and '.join(flat)}, whatever its size" if flat else "")
    return (f"the folder holds {len(kinds)} instance types {kinds} ({listing}"
            f"{' ...' if len(by_zone) > 4 else ''}): fleet-sim runs all {market.n_zones} "
            f"(zone, instance type) entries as interchangeable locations of one job, as if it "
            f"could move between those machines{billed}; a job runs on one instance type: keep "
            f"one with --instance-types (e.g. --instance-types {kinds[0]})")


def mixed_clouds_warning(market, spec) -> str:
    """The warning for a market of several clouds ("" for one, or when the checkpoint is
    empty or ``--egress-usd-per-gb`` sets the rate): the simulator and the bound bill every
    move between regions at one flat rate, the first zone's cloud's, whatever clouds the
    move crosses, so the rate depends on which file sorts first."""
    from fleet.market.regions import EGRESS_USD_PER_GB

    clouds = sorted(set(market.clouds))
    if len(clouds) < 2 or spec.checkpoint_gb <= 0 or spec.egress_usd_per_gb is not None:
        return ""
    first = market.clouds[0]
    return (f"the folder mixes clouds {clouds}: every move of the {spec.checkpoint_gb:g} GB "
            f"checkpoint between regions is billed one flat egress rate, that of the first "
            f"zone's cloud ({market.zones[0]}: {first}, "
            f"{EGRESS_USD_PER_GB.get(first, float('nan')):g} $/GB), whatever clouds it crosses "
            "(egress between clouds is internet egress, dearer); load one cloud's files, or "
            "give the rate with --egress-usd-per-gb")


def _flag_or_default(flag: str, value: float, default: float, what: str) -> str:
    """Where a flat price came from, for the price warning: the flag, or its default when
    the flag was not given (the files carry no such price: a user who never typed the
    flag must not be told it set the price)."""
    if value != default:
        return flag
    return (f"{flag}'s default ({default:g} $/h, a p3.2xlarge's; the files carry no {what} "
            f"price: pass {flag} for this machine)")


def price_units_warning(market, spot_price: float, on_demand_price: float,
                        spot_from: str, on_demand_from: str) -> str:
    """The warning for zones whose spot price is at or above their on-demand price in at
    least 90 % of the ticks ("" when none): spot never pays off there, which is
    a unit slip (spot in cents) or a wrong price file far more often than a market."""
    import numpy as np

    sp, od = market.prices_for(spot_price, on_demand_price)
    above = (sp >= od[:, None]).mean(axis=1)
    bad = [i for i in range(market.n_zones) if above[i] >= 0.9]
    if not bad:
        return ""
    shown = ", ".join(f"{market.zones[i]}: median spot {float(np.median(sp[i])):.4g} $/h vs "
                      f"on-demand {float(od[i]):.4g} $/h" for i in bad[:4])
    return (f"spot is at or above on-demand in at least 90 % of the ticks of "
            f"{len(bad)} of {market.n_zones} zone(s) ({shown}{' ...' if len(bad) > 4 else ''}); "
            f"spot from {spot_from}, on-demand from {on_demand_from}: spot never pays off there "
            "(a policy that compares prices runs on-demand, one that holds spot anyway pays "
            "more than on-demand). Likely a unit slip (spot in cents, not $/h; on-demand per "
            "minute or per GPU) or a price file of another instance type, region or "
            "period: check the prices")


def _run(args: argparse.Namespace) -> int:
    """Warnings print as one ``spotfleet fleet-sim: warning:`` line (``pipelines.cli.main``)."""
    from fleet.policies.base import JobSpec
    from fleet.simulation.market import Market
    from fleet.simulation.sweep import (
        format_table,
        make_policies,
        run_sweep,
        start_ticks,
        summarize,
    )

    if args.deadline_hours < args.work_hours:  # JobSpec's own message names no flag
        raise ValueError(f"--deadline-hours {args.deadline_hours:g} is below --work-hours "
                         f"{args.work_hours:g}: the job cannot finish; give a deadline of at "
                         f"least {args.work_hours + args.restart_minutes / 60.0:g} h (work + one "
                         "restart)")
    spec = JobSpec(work_hours=args.work_hours, deadline_hours=args.deadline_hours,
                   restart_hours=args.restart_minutes / 60.0,
                   checkpoint_hours=args.checkpoint_minutes / 60.0,
                   notice_seconds=args.notice_seconds, on_demand_price=args.on_demand_price,
                   spot_price=args.spot_price, checkpoint_gb=args.checkpoint_gb,
                   egress_usd_per_gb=args.egress_usd_per_gb)
    if spec.checkpoint_hours <= 0 and not spec.notice_saves:
        # without a notice, 0 would mean two things: the policies never save (no interval
        # at zero cost) while the omniscient bound saves for free before every preemption
        raise ValueError(
            "--checkpoint-minutes 0 without a preemption notice (--notice-seconds 0) is "
            "refused: the policies would never checkpoint (a preemption loses all work since "
            "the start) while the omniscient bound saves for free before each one, so the "
            "comparison would be meaningless; for nearly free checkpoints give a small "
            "positive value (e.g. --checkpoint-minutes 0.01), or give the notice window "
            "(e.g. --notice-seconds 120), in which a 0-minute save is free for both")
    if args.plot:  # refuse a format matplotlib cannot write before the run, not after
        from pathlib import Path

        from matplotlib.backend_bases import FigureCanvasBase

        kinds = FigureCanvasBase.get_supported_filetypes()
        suffix = Path(args.plot).suffix.lstrip(".").lower()
        if suffix not in kinds:
            raise ValueError(f"--plot {args.plot}: the file name must end in one of "
                             f"{sorted('.' + k for k in kinds)}, e.g. sweep.png")
        import os

        folder = Path(args.plot).parent
        try:  # a folder that cannot be made (a file in the way) failed after the whole run
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"--plot {args.plot}: cannot create its folder {folder} ({exc}); "
                             "pass a path in a writable folder") from None
        if not os.access(folder, os.W_OK):
            raise ValueError(f"--plot {args.plot}: the folder {folder} is not writable; pass a "
                             "path in a writable folder")
    itypes = [x.strip() for x in args.instance_types.split(",") if x.strip()] or None
    market = Market.from_dir(args.traces, nodes=args.nodes, prices=args.prices or None,
                             instance_types=itypes,
                             inverted={"auto": None, "yes": True, "no": False}[args.inverted])
    slack = spec.deadline_hours - spec.work_hours
    # a tolerance: 8.1 - 8 is 0.0999... in floats, and a deadline of exactly work + restart
    # (the least the message below asks for) was refused with "give at least 8.1 h"
    if slack < spec.restart_hours - 1e-9:
        raise ValueError(
            f"--deadline-hours {spec.deadline_hours:g} leaves {slack:g} h of slack, less than one "
            f"--restart-minutes ({spec.restart_hours * 60:g} min): no schedule can finish "
            f"{spec.work_hours:g} h of work in time; give a deadline of at least "
            f"{spec.work_hours + spec.restart_hours:g} h")
    if market.gap_hours >= min(spec.work_hours, slack):
        warnings.warn(
            f"a tick ({market.gap_hours:g} h) is as long as the job's work ({spec.work_hours:g} h) "
            f"or slack ({slack:g} h): the policies see the market once per tick, so they can "
            "hardly use spot and the comparison says little; use traces with shorter ticks or "
            "a longer job", stacklevel=1)
    for note in (mixed_instance_types_warning(market, spec.spot_price, spec.on_demand_price),
                 mixed_clouds_warning(market, spec),
                 price_units_warning(
                     market, spec.spot_price, spec.on_demand_price,
                     spot_from=(f"--prices {args.prices}" if args.prices
                                else "the trace files' prices" if market.spot_price is not None
                                else _flag_or_default("--spot-price", spec.spot_price,
                                                      DEFAULT_SPOT_PRICE, "spot")),
                     on_demand_from=("the trace files' price_info"
                                     if market.on_demand_price is not None
                                     else _flag_or_default("--on-demand-price",
                                                           spec.on_demand_price,
                                                           DEFAULT_ON_DEMAND_PRICE,
                                                           "on-demand")))):
        if note:
            warnings.warn(f"{args.traces}: {note}", stacklevel=1)
    names = [n.strip() for n in args.policies.split(",") if n.strip()] or None
    policies = make_policies(names)
    starts = start_ticks(market, spec, args.starts, warmup_hours=args.warmup_hours)
    distinct = len(set(starts))
    if distinct < len(starts):
        warnings.warn(
            f"only {distinct} distinct start ticks fit between {args.warmup_hours:g} h of history "
            f"and the end of the traces: the {len(starts)} starts repeat them, so the table "
            f"averages {distinct} runs per policy, not {len(starts)}; lower --warmup-hours, "
            "--deadline-hours or --starts", stacklevel=1)
    priced = ("per-tick spot prices" if market.spot_price is not None
              else f"flat spot {spec.spot_price:g} $/h")
    priced += (", on-demand from the files" if market.on_demand_price is not None
               else f", flat on-demand {spec.on_demand_price:g} $/h")
    print(f"fleet-sim: {counted(market.n_zones, 'zone')} ({', '.join(market.zones)}) in "
          f"{counted(len(market.region_names), 'region')}, {market.nodes} node(s), {priced}, "
          f"{market.duration_hours:.0f} h of {market.gap_seconds:.0f} s ticks; "
          f"job {spec.work_hours:g} h of work, deadline {spec.deadline_hours:g} h, "
          f"notice {spec.notice_seconds:g} s; {counted(len(starts), 'start')} x "
          f"{len(policies)} {'policy' if len(policies) == 1 else 'policies'}"
          f"{'; ' + ORACLE_NOTE if args.observe == 'oracle' else ''}", flush=True)
    res = run_sweep(market, spec, policies, starts, with_omniscient=not args.no_omniscient,
                    progress=lambda line: print(line, flush=True), observe=args.observe)
    rows = summarize(res)
    print()
    if args.observe == "oracle":
        print(f"Costs under {ORACLE_NOTE}:")
    print(format_table(rows, markdown=False))
    ours = next((r for r in rows if r.policy == "spotfleet"), None)
    if ours is not None and res.omniscient:
        print(f"\nspotfleet / omniscient bound: {ours.cost_vs_omniscient:.3f} (mean cost / mean "
              f"bound); deadlines met {ours.deadline_met_rate:.0%}")
    line = best_baseline_line(res, market.gap_hours)
    if line:
        print(line)
    if args.plot:
        from fleet.simulation.plot import plot_sweeps

        title = (f"W={spec.work_hours:g} h, D={spec.deadline_hours:g} h, "
                 f"notice {spec.notice_seconds:g} s")
        if args.observe == "oracle":
            title += "\nORACLE observation: every zone seen for free\n(not how a real cloud works)"
        out = plot_sweeps([(title, res)], args.plot)
        print(f"plot saved to {out}")
    print(f"({res.wall_seconds:.1f} s)", file=sys.stderr)
    return 0
