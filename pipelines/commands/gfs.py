"""``spotfleet gfs-eval``, ``gfs-forecast`` and ``gfs-report``: GFS-style cluster scheduling.

gfs-eval      simulate GFS and baselines/ablations on one trace and spot workload level
gfs-forecast  evaluate the GDE forecasters on the real v2026 hourly demand series
gfs-report    regenerate every table and plot of docs/gfs.md (both traces, all levels)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

DEFAULT_DATA = os.environ.get("SPOTFLEET_SHARED_DATA", str(Path.cwd().parent / "shared" / "data"))


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _policies(text: str) -> list[str]:
    from fleet.scheduling.baselines import POLICIES

    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [n for n in names if n not in POLICIES]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown policy {', '.join(bad) or '(none)'}; choose from {', '.join(POLICIES)}")
    return names


def _scale(args):
    from fleet.scheduling.evaluation import EvalScale

    if not 0 < args.fraction <= 1:
        raise ValueError(f"--fraction must be in (0, 1], got {args.fraction}")
    if args.days < 1:
        raise ValueError(f"--days must be >= 1, got {args.days}")
    if not 0 < args.node_fraction <= 1:
        raise ValueError(f"--node-fraction must be in (0, 1], got {args.node_fraction}")
    return EvalScale(days=args.days, fraction=args.fraction, node_fraction=args.node_fraction, seed=args.seed)


def _eval(args) -> int:
    from fleet.scheduling.evaluation import (
        improvement_row,
        plot_comparison,
        run_comparison,
        to_markdown,
    )
    from fleet.scheduling.sqa import SQAParams

    if args.horizon < 1:
        raise ValueError(f"--horizon must be >= 1 hour, got {args.horizon}")
    comp = run_comparison(args.trace, args.level, args.data_dir, args.policies, _scale(args), progress=_say,
                          sqa=SQAParams(horizon_h=args.horizon, aggregate=args.aggregate, hp_count=args.hp_count),
                          refit=args.refit)
    print(f"\n{comp.trace} ({args.level} spot workload)\n")
    print(to_markdown(comp.table))
    if "GFS" in comp.table.index and len(comp.table) > 1:
        imp = improvement_row(comp.table)
        print("\nGFS vs best other policy (%, positive = GFS lower): "
              + ", ".join(f"{k} {v:+.1f}" for k, v in imp.items()))
    if args.plot:
        print(f"plot: {plot_comparison(comp, args.plot)}")
    if args.csv:
        comp.table.to_csv(args.csv)
        print(f"table: {args.csv}")
    return 0


def _forecast(args) -> int:
    _say(f"loading the forecasters (torch) and the hourly demand series from {args.data_dir} ...")
    from fleet.scheduling.gde import evaluate_forecasters, load_hourly_demand

    series = load_hourly_demand(args.data_dir, args.column)
    _say(f"series {args.column}: {series.values.shape[1]} hours; lookback {args.lookback} h, "
         f"horizon {args.horizon} h, train {args.train_frac:.0%} / test rest (chronological)")
    t0 = time.perf_counter()
    res = {}
    names = ("orglinear", "dlinear", "seasonal_naive", "lastweek_peak")
    for i, name in enumerate(names, 1):  # one at a time: a progress line each (the fits take ~30 s)
        _say(f"[{i}/{len(names)}] fitting and testing {name} ...")
        t1 = time.perf_counter()
        with _heartbeat(name, t1):
            res.update(evaluate_forecasters(series, names=(name,), lookback=args.lookback,
                                            horizon=args.horizon, train_frac=args.train_frac,
                                            epochs=args.epochs))
        _say(f"[{i}/{len(names)}] {name} done in {time.perf_counter() - t1:.1f}s")
    _say(f"done in {time.perf_counter() - t0:.1f}s")
    cols = ["MAE", "MSE", "RMSE", "MAPE", "0.9-MAQE", "0.95-MAQE", "0.9-QL", "0.95-QL", "train_s"]
    print("| model | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for name, m in res.items():
        print(f"| {name} | " + " | ".join(f"{m[c]:,.3f}" for c in cols) + " |")
    return 0


class _heartbeat:
    """Context manager: every ``every`` seconds, say that ``what`` is still running."""

    def __init__(self, what: str, t0: float, every: float = 5.0) -> None:
        import threading

        self.what, self.t0, self.every = what, t0, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            _say(f"      ... {self.what} still running ({time.perf_counter() - self.t0:.0f}s)")

    def __enter__(self) -> _heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _report(args) -> int:
    """All Table 5 / 8-10 analogues for both traces, markdown to --out, plots to --img-dir."""
    import pandas as pd

    from fleet.scheduling.baselines import POLICIES
    from fleet.scheduling.evaluation import (
        plot_comparison,
        plot_pareto,
        report_markdown,
        run_comparison,
    )
    from fleet.scheduling.sqa import SQAParams

    tables = {}
    img = Path(args.img_dir)
    img.mkdir(parents=True, exist_ok=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for trace in args.traces.split(","):
        for level in ("low", "medium", "high"):
            if args.from_csv:
                tables[(trace, level)] = pd.read_csv(Path(args.from_csv) / f"gfs-{trace}-{level}.csv", index_col=0)
                continue
            comp = run_comparison(trace, level, args.data_dir, list(POLICIES), _scale(args), progress=_say,
                                  sqa=SQAParams(aggregate=args.aggregate, hp_count=args.hp_count), refit=args.refit)
            tables[(trace, level)] = comp.table
            plot_comparison(comp, img / f"gfs-{trace}-{level}.png")
            if args.csv_dir:
                Path(args.csv_dir).mkdir(parents=True, exist_ok=True)
                comp.table.to_csv(Path(args.csv_dir) / f"gfs-{trace}-{level}.csv")
    pareto = plot_pareto(tables, img / "gfs-pareto.png")
    head = (f"<!-- generated by `spotfleet gfs-report` (v2026 scale: {args.days} days, "
            f"{args.fraction:.0%} of jobs on {args.node_fraction:.0%} of nodes; GDE refit {args.refit}, "
            f"aggregate {args.aggregate}, HP count {args.hp_count}) -->\n")
    Path(args.out).write_text(head + report_markdown(tables) + "\n")
    print(f"wrote {args.out}" + ("" if args.from_csv else f" and plots under {img}") + f"; Pareto plot {pareto}")
    return 0


def register(subparsers) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", default=DEFAULT_DATA, help="shared/data folder (default: %(default)s)")
    common.add_argument("--days", type=int, default=14, help="v2026: simulated days (default 14)")
    common.add_argument("--fraction", type=float, default=0.25,
                        help="v2026: share of the jobs simulated (default 0.25)")
    common.add_argument("--node-fraction", type=float, default=0.18,
                        help="v2026: share of each GPU model's nodes (default 0.18; 1 = all 10,412 GPUs)")
    common.add_argument("--seed", type=int, default=0, help="seed of the simulated workload (default 0)")
    common.add_argument("--refit", choices=["daily", "once"], default="daily",
                        help="GDE: refit daily on the past only (rolling origin, default) or fit once "
                             "on the first 40%% of hours (the earlier, partly in-sample protocol)")
    common.add_argument("--aggregate", choices=["sum_of_quantiles", "quantile_of_sum"], default="sum_of_quantiles",
                        help="Eq. 9 across organizations: sum of per-org p-quantiles (paper text, default) or "
                             "p-quantile of the summed Gaussian (authors' code)")
    common.add_argument("--hp-count", choices=["gang", "pod"], default="gang",
                        help="GPUs per HP job in the demand series: g x w (default) or g, one pod (authors' code)")

    p = subparsers.add_parser("gfs-eval", parents=[common],
                              help="simulate GFS vs baselines/ablations on a trace (paper Table 5)")
    p.add_argument("--trace", choices=["v2023", "v2026"], default="v2026",
                   help="v2023: FGD's cluster trace; v2026: the GFS paper's cluster (default v2026)")
    p.add_argument("--level", choices=["low", "medium", "high"], default="low",
                   help="spot workload: x1, x2, x4 spot submission rate (§4.1)")
    p.add_argument("--policies", type=_policies,
                   default=_policies("YARN-CS,Chronus,Lyra,FGD,YARN-CS+Q,Lyra+Q,FGD+Q,GFS,GFS-BF"),
                   help="comma-separated, from GFS, GFS-BF, GFS-e, GFS-d, GFS-s, GFS-p, GFS-sp, "
                        "YARN-CS, Chronus, Lyra, FGD (ungated), YARN-CS+Q, Lyra+Q, FGD+Q (quota-gated)")
    p.add_argument("--horizon", type=int, default=1, help="SQA guarantee hours H (Table 6: 1, 2, 4)")
    p.add_argument("--plot", help="write a PNG (allocation over time, spot JQT/evictions)")
    p.add_argument("--csv", help="write the table as CSV")
    p.set_defaults(handler=_eval)

    f = subparsers.add_parser("gfs-forecast", help="GDE forecasters on the real v2026 hourly demand")
    f.add_argument("--data-dir", default=DEFAULT_DATA, help="shared/data folder (default: %(default)s)")
    f.add_argument("--column", default="gpu_demand", help="hourly_summary.csv column (gpu_demand or jobs)")
    f.add_argument("--lookback", type=int, default=168, help="hours of history each forecast sees (default 168)")
    f.add_argument("--horizon", type=int, default=24, help="hours forecast ahead (default 24)")
    f.add_argument("--train-frac", type=float, default=0.7,
                   help="first share of the hours used for fitting, the rest for testing (default 0.7)")
    f.add_argument("--epochs", type=int, default=40, help="training epochs of the linear models (default 40)")
    f.set_defaults(handler=_forecast)

    r = subparsers.add_parser("gfs-report", parents=[common],
                              help="regenerate the docs/gfs.md tables and plots (both traces, 3 levels)")
    r.add_argument("--traces", default="v2023,v2026", help="comma-separated traces (default v2023,v2026)")
    r.add_argument("--out", default="var/gfs-report/gfs-report.md",
                   help="markdown file to write (default var/gfs-report/gfs-report.md)")
    r.add_argument("--img-dir", default="var/gfs-report/img",
                   help="folder for the plots (default var/gfs-report/img; docs/img only when you "
                        "mean to update the docs)")
    r.add_argument("--csv-dir", help="also save each table as CSV here")
    r.add_argument("--from-csv", help="re-render the markdown from CSVs saved by --csv-dir (no simulation)")
    r.set_defaults(handler=_report)
