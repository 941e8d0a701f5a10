"""``spotfleet market | stats | forecast | plan``: the spot market and what we know about it."""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from fleet.contract import DEFAULT_CHECKPOINT_SECONDS, DEFAULT_RESTART_SECONDS
from pipelines.commands.argtypes import add_trace_dir, number

#: the longest forecast horizon (a year): the Monte-Carlo paths grow with it (2000 h: 45 s;
#: 1e9 h ran out of memory with a traceback)
_HORIZON = number("--horizon", at_most=8760.0, why=" h (a year)")


def register(sub: argparse._SubParsersAction) -> None:
    market = sub.add_parser("market", help="synthesize, load or price a spot market")
    msub = market.add_subparsers(dest="market_command", metavar="ACTION")
    synth = msub.add_parser("synth", help="generate a synthetic market (trace JSON files)")
    synth.add_argument("--zones", type=int, default=3, help="number of zones, 1-9 (default 3)")
    synth.add_argument("--hours", type=number("--hours", at_most=8760.0,
                                              why=" h (a year; the real traces span 7-45 days)"),
                       default=7 * 24.0,
                       help="length in hours, at least two ticks, at most 8760 (default 168)")
    synth.add_argument("--seed", type=int, default=0, help="random seed of the market (default 0)")
    synth.add_argument("--nodes", type=number("--nodes", integer=True), default=1,
                       help="instance slots per zone (default 1)")
    synth.add_argument("--gap", type=number("--gap", at_most=86400.0, why=" s (one day, the longest "
                                            "tick the loader reads)"),
                       default=195.0, help="tick length in whole seconds, at most 86400 (default 195)")
    synth.add_argument("--config", help="JSON or YAML SyntheticMarketConfig instead of the default")
    synth.add_argument("--out", required=True, help="directory to write <zone>_<acc>_<n>.json into")
    synth.set_defaults(handler=_market_synth)
    load = msub.add_parser("load", help="validate a trace directory and summarize it")
    add_trace_dir(load, "folder of spot-trace JSON files <zone>_<accelerator>_<count>.json")
    load.set_defaults(handler=_market_load)
    prices = msub.add_parser("prices", help="print spot / on-demand prices ($/h)")
    prices.add_argument("--catalog", help="a SkyPilot catalogs/v8 folder to read offline")
    prices.add_argument("--cloud", default="aws",
                        help="with --catalog: the clouds to read, comma-separated (default aws), "
                             "e.g. aws,gcp; each needs <catalog>/<cloud>/vms.csv")
    prices.add_argument("--json", action="store_true", help="print JSON instead of a table")
    prices.set_defaults(handler=_market_prices)
    cmp = msub.add_parser("compare", help="real traces vs the calibrated synthetic market")
    add_trace_dir(cmp, "folder of real spot traces to compare with")
    cmp.add_argument("--seed", type=int, default=7, help="seed of the synthetic market (default 7)")
    cmp.add_argument("--plot", help="write a PNG figure here")
    cmp.set_defaults(handler=_market_compare)
    market.set_defaults(handler=lambda a: (market.print_help(), 2)[1])

    stats = sub.add_parser("stats", help="preemption statistics per zone of a trace directory")
    add_trace_dir(stats, "folder of spot-trace JSON files <zone>_<accelerator>_<count>.json")
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.add_argument("--correlation", action="store_true", help="also print zone correlation")
    stats.add_argument("--level", type=number("--level", below=1.0, why=" (a confidence level, e.g. 0.9)"),
                       default=0.90, help="CI level for MTTP, between 0 and 1 (default 0.90)")
    stats.add_argument("--plot", help="write a PNG (availability, MTTP CI, hour-of-day rate)")
    stats.set_defaults(handler=_stats)

    fc = sub.add_parser("forecast", help="probabilistic availability forecast per zone")
    add_trace_dir(fc, "folder of spot-trace JSON files <zone>_<accelerator>_<count>.json")
    fc.add_argument("--horizon", type=_HORIZON, default=6.0, help="hours ahead (default 6)")
    fc.add_argument("--now-tick", type=int, default=None, help="forecast from this tick (default: end)")
    fc.add_argument("--samples", type=int, default=1000,
                    help="Monte Carlo sample paths per zone (default 1000)")
    fc.add_argument("--evaluate", action="store_true",
                    help="score vs baselines on the held-back last 30%% of the traces")
    fc.add_argument("--json", action="store_true", help="print JSON instead of a table")
    fc.add_argument("--plot", help="write a PNG: P(up) per hour ahead and availability bands")
    fc.set_defaults(handler=_forecast)

    plan = sub.add_parser("plan", help="plan zones and the spot / on-demand mix for a stage")
    add_trace_dir(plan, "trace directory (default: synthetic market)", required=False)
    plan.add_argument("--work", type=float, required=True, help="work per node, hours")
    plan.add_argument("--deadline", type=float, default=None, help="deadline, hours from now")
    plan.add_argument("--nodes", type=int, default=1, help="nodes in the stage's node group (default 1)")
    plan.add_argument("--accelerator", default=None,
                      help="accelerator per node (default: the traces' accelerator when they "
                           "have one, e.g. H100 for gcp-h100-2025; else V100)")
    plan.add_argument("--ckpt-min", type=float, default=DEFAULT_CHECKPOINT_SECONDS / 60.0,
                      help="checkpoint cost, minutes (default: fleet.contract's, 1)")
    plan.add_argument("--restart-min", type=float, default=DEFAULT_RESTART_SECONDS / 60.0,
                      help="restart cost R, minutes, when the zone has no measured one "
                           "(default: fleet.contract's, 6)")
    plan.add_argument("--horizon", type=_HORIZON, default=12.0, help="forecast horizon, hours")
    plan.add_argument("--on-demand-core", type=int, default=0,
                      help="nodes kept on on-demand whatever the market (default 0)")
    plan.add_argument("--catalog", help="SkyPilot catalogs/v8 folder for prices (offline)")
    plan.add_argument("--cloud", default="aws",
                      help="with --catalog: the clouds whose prices to read, comma-separated "
                           "(default aws), as a stage's resources.clouds; each needs "
                           "<catalog>/<cloud>/vms.csv")
    plan.add_argument("--prices", default="",
                      help="per-tick spot price file to attach, as fleet-sim --prices, e.g. "
                           "../shared/data/spot-prices/aws-v100-02-15-2023.json: it replaces "
                           "the files' spot prices; the plan uses each zone's mean over the "
                           "last 24 h (GCP H100 files carry their own prices)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(handler=_plan)


def _load(trace_dir: str):
    from fleet.market.traces import load_trace_dir

    return load_trace_dir(trace_dir)


def _market_synth(args: argparse.Namespace) -> int:
    from fleet.market.synthetic import default_market_config, generate_market
    from fleet.market.traces import save_trace

    if args.config:
        cfg = _synth_config(args.config)
    else:
        cfg = default_market_config(args.zones, nodes_per_zone=args.nodes, gap_seconds=args.gap)
    if cfg.gap_seconds != int(cfg.gap_seconds):
        # the files would be written, then refused by every reader of the collection
        # (load_trace: "a tick must be a whole number of seconds"); until 2026-11-28 they were
        where = (f"--config {args.config}: gap_seconds = {cfg.gap_seconds:g}" if args.config
                 else f"--gap {cfg.gap_seconds:g}")
        raise ValueError(f"{where}: a tick must be a whole number of "
                         "seconds (the trace loader, the simulator and the omniscient bound read "
                         "no other); give e.g. 195")
    if args.hours * 3600.0 <= cfg.gap_seconds:  # one tick: files the loader refuses
        raise ValueError(f"--hours {args.hours:g} makes one tick of {cfg.gap_seconds:g} s, and "
                         f"a trace needs at least 2: give more than {cfg.gap_seconds / 3600.0:.3g} "
                         "hours (or a shorter --gap)")
    traces = generate_market(cfg, args.hours, seed=args.seed)
    for t in traces:
        p = save_trace(t, args.out)
        print(f"wrote {p}  ({t.n_ticks} ticks of {t.gap_seconds:g} s, "
              f"available {100 * t.up().mean():.0f}% of the time)")
    print(f"next: spotfleet stats {args.out}")
    return 0


def _synth_config(path: str):
    """The ``SyntheticMarketConfig`` of a JSON or YAML file; ``ValueError`` naming the file
    when it cannot be read, is not a mapping or holds invalid fields (until 2026-11-28 a
    file holding a list ended in a ``TypeError`` traceback)."""
    from pathlib import Path

    import yaml
    from pydantic import ValidationError

    from fleet.market.synthetic import SyntheticMarketConfig

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"--config {path}: cannot read it ({' '.join(str(exc).split())}); pass a JSON or YAML file "
                         "of SyntheticMarketConfig fields") from None
    if not isinstance(raw, dict):
        raise ValueError(f"--config {path}: must be a mapping of SyntheticMarketConfig fields "
                         f"(zones, gap_seconds, ...), got {type(raw).__name__}")
    try:
        return SyntheticMarketConfig(**raw)
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or '(top level)'}: {e['msg']}"
                           for e in exc.errors())
        raise ValueError(f"--config {path}: {exc.error_count()} invalid field(s): {fields}; fix "
                         "them (fleet/market/synthetic.py: SyntheticMarketConfig)") from None


def _market_load(args: argparse.Namespace) -> int:
    traces = _load(args.trace_dir)
    for t in traces:
        print(f"{t.zone:<14}{t.accelerator:<6}x{t.count:<3} {t.n_ticks:>7} ticks x {t.gap_seconds:g} s"
              f" = {t.duration_hours:7.1f} h   up {100 * t.up().mean():5.1f}%")
    print(f"{len(traces)} valid trace(s) in {args.trace_dir}")
    return 0


def _market_compare(args: argparse.Namespace) -> int:
    from fleet.market.compare import compare_markets, correlation_summary, plot_comparison
    from fleet.market.synthetic import (
        SyntheticMarketConfig,
        default_market_config,
        generate_market,
    )

    real = _load(args.trace_dir)
    full = default_market_config(9)
    names = {t.zone for t in real}
    zones = [z for z in full.zones if z.zone in names]
    if not zones:
        raise ValueError(f"{args.trace_dir}: none of its zones is in the calibrated market "
                         f"({', '.join(z.zone for z in full.zones)})")
    regions = {z.region for z in zones}
    cfg = SyntheticMarketConfig(**{**full.model_dump(), "zones": [z.model_dump() for z in zones],
                                   "region_reclaim_rate": {r: v for r, v in
                                                           full.region_reclaim_rate.items()
                                                           if r in regions},
                                   "gap_seconds": real[0].gap_seconds})
    print(f"generating {real[0].duration_hours:.0f} h of the synthetic market (seed {args.seed})...",
          file=sys.stderr)
    syn = generate_market(cfg, real[0].duration_hours, seed=args.seed)
    print(compare_markets(real, syn).round(2).to_string())
    cr, cs = correlation_summary(real), correlation_summary(syn)
    print(f"correlation of unavailability: same region {cr['same_region']:.2f} real / "
          f"{cs['same_region']:.2f} synthetic; cross region {cr['cross_region']:.2f} / "
          f"{cs['cross_region']:.2f}")
    if args.plot:
        print(f"wrote {plot_comparison(real, syn, args.plot)}")
    return 0


def catalog_prices(catalog: str | None, clouds: str = "aws"):
    """The price book of ``--catalog`` / ``--cloud``: each listed cloud's SkyPilot catalog
    read offline and merged (``PriceBook.merged``, as ``fleet_plan`` prices a stage that lists
    several clouds); the built-in table without ``--catalog``. A cloud without
    ``<catalog>/<cloud>/vms.csv`` is an error naming the file (until 2026-11-28 these commands
    read AWS only, whatever the stage's cloud)."""
    from pathlib import Path

    from fleet.market.prices import PriceBook

    if not catalog:
        return PriceBook.default()
    names = list(dict.fromkeys(c.strip().lower() for c in clouds.split(",") if c.strip()))
    if not names:
        raise ValueError(f"--cloud {clouds!r}: name at least one cloud, e.g. --cloud aws")
    missing = [c for c in names if not (Path(catalog) / c / "vms.csv").is_file()]
    if missing:
        have = sorted(d.name for d in Path(catalog).iterdir() if (d / "vms.csv").is_file()) \
            if Path(catalog).is_dir() else []
        raise ValueError(f"--cloud {','.join(missing)}: the catalog {catalog} has no "
                         f"{' or '.join(f'{c}/vms.csv' for c in missing)} (it has "
                         f"{', '.join(have) or 'no cloud'}); add a copy of SkyPilot's "
                         "catalogs/v8/<cloud>/ there, or leave that cloud out of --cloud")
    books = [PriceBook.from_skypilot(catalog, cloud=c) for c in names]
    return books[0] if len(books) == 1 else PriceBook.merged(books)


def _market_prices(args: argparse.Namespace) -> int:

    book = catalog_prices(args.catalog, args.cloud)
    if args.json:
        print(json.dumps(book.to_dict(), indent=2))
        return 0
    print(f"source: {book.source}")
    for (t, z), p in sorted(book.spot.items()):
        print(f"  spot      {t:<14}{z:<14}{p:8.4f} $/h")
    for (t, r), p in sorted(book.on_demand.items()):
        print(f"  on-demand {t:<14}{r:<14}{p:8.4f} $/h")
    for t, (od, sp) in book.fallback.items():
        print(f"  fallback  {t:<14}on-demand {od:.3f} $/h, spot {sp:.3f} $/h (any zone)")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from fleet.stats.preemption import format_stats_table, zone_correlation, zone_stats

    traces = _load(args.trace_dir)
    st = zone_stats(traces, level=args.level)
    if args.json:
        out = {"zones": [s.to_dict() for s in st]}
        if args.correlation:
            out["correlation"] = json.loads(zone_correlation(traces).round(4).to_json())
        print(json.dumps(out, indent=2))
        return 0
    print(format_stats_table(st))
    print(f"MTTP CI: {int(100 * args.level)}% {st[0].ci_method}; regain = time to regain capacity")
    if args.correlation:
        print("\ncorrelation of unavailability:")
        print(zone_correlation(traces).round(2).to_string())
    if args.plot:
        from fleet.stats.plots import plot_zone_stats

        print(f"wrote {plot_zone_stats(st, args.plot, title=str(args.trace_dir))}")
    return 0


def _forecast(args: argparse.Namespace) -> int:
    from fleet.stats.forecast import evaluate_forecasts, forecast_zones

    traces = _load(args.trace_dir)
    if args.evaluate:
        print(f"evaluating on the held-back last 30% (horizon {args.horizon:g} h)...", file=sys.stderr)
        df = evaluate_forecasts(traces, horizon_hours=args.horizon)
        table = df.groupby("model")[["crps", "brier", "pinball"]].mean().sort_values("crps")
        print(table.round(4).to_string())
        return 0
    fcs = forecast_zones(traces, args.now_tick, args.horizon, n_samples=args.samples)
    if args.json:
        print(json.dumps([f.to_dict() for f in fcs], indent=2))
        return 0
    print(f"{'zone':<14}{'now':>5}{'age h':>7}{'avail mean':>11}{'p10':>6}{'p50':>6}{'p90':>6}"
          f"{'preempt mean':>13}{'p90':>5}{'P(up@H)':>9}")
    for f in fcs:
        print(f"{f.zone:<14}{'up' if f.state_up else 'down':>5}{f.age_hours:>7.2f}"
              f"{f.availability_mean:>11.2f}{f.availability_p10:>6.2f}{f.availability_p50:>6.2f}"
              f"{f.availability_p90:>6.2f}{f.preemptions_mean:>13.2f}{f.preemptions_p90:>5.0f}"
              f"{f.p_up_at_end:>9.2f}")
    print(f"next {args.horizon:g} h; semi-Markov model with hour-of-day profile "
          "(see docs/market-and-statistics.md)")
    if args.plot:
        from fleet.stats.plots import plot_forecasts

        print(f"wrote {plot_forecasts(fcs, args.plot, title=str(args.trace_dir))}")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from fleet.market.traces import attach_spot_prices
    from fleet.planning.planner import StageRequest, plan_stage
    from fleet.stats.forecast import forecast_zones
    from fleet.stats.preemption import zone_correlation, zone_stats

    if args.prices and not args.trace_dir:
        raise ValueError(f"--prices {args.prices}: a price file is aligned tick for tick with a "
                         "trace folder; give that folder too (e.g. spotfleet plan "
                         "../shared/data/spot-traces/availability/1-node/aws-02-15-2023 "
                         "--prices ../shared/data/spot-prices/aws-v100-02-15-2023.json)")
    if args.trace_dir:
        traces = _load(args.trace_dir)
    else:
        from fleet.market.synthetic import default_market_config, generate_market

        print("no trace directory: planning on the embedded synthetic market (3 zones, 7 days)",
              file=sys.stderr)
        traces = generate_market(default_market_config(3), 7 * 24.0, seed=0)
    spot_source = "each trace file's per-tick prices"
    if args.prices:
        traces = attach_spot_prices(traces, args.prices)  # fleet-sim --prices' rules
        spot_source = f"the per-tick prices of --prices {args.prices}"
    prices = catalog_prices(args.catalog, args.cloud)
    # the files' own prices (or --prices), as fleet-sim bills them
    prices = prices.with_traces(traces, spot_source=spot_source)
    accs = sorted({t.accelerator.upper() for t in traces})
    accelerator = args.accelerator or (accs[0] if len(accs) == 1 else "V100")
    req = StageRequest(work_hours=args.work, deadline_hours=args.deadline, num_nodes=args.nodes,
                       accelerator=accelerator, ckpt_hours=args.ckpt_min / 60.0,
                       restart_hours=args.restart_min / 60.0, on_demand_core=args.on_demand_core)
    forecasts = forecast_zones(traces, None, args.horizon)  # warns when it cuts the traces
    with warnings.catch_warnings():  # ... so the correlation's same cut is not said twice
        warnings.filterwarnings("ignore", message="zone correlation: traces differ in length")
        correlation = zone_correlation(traces)
    plan = plan_stage(req, zone_stats(traces), forecasts, prices, correlation=correlation)
    print(plan.to_json() if args.json else plan.explain())
    return 0
