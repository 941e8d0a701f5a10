"""``spotfleet cost-table`` and ``spotfleet intervals``: the checkpointing math on the CLI.

cost-table   the playbook's Output 18.6.2 for any prices, checkpoint cost, restart cost
             and preemption rates, with the break-even line (docs/cost-model.md)
intervals    Young / Daly / thesis Eq. 4.5 checkpoint intervals for one job
"""

from __future__ import annotations

import argparse
import math

from pipelines.commands.argtypes import number, number_list


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "cost-table",
        help="effective spot cost per useful hour vs preemption rate (playbook Output 18.6.2)",
        description=(
            "Effective spot cost per useful node-hour c_eff = c_sp (1 + C/T) / "
            "(1 - lambda (T/2 + R)) at each preemption rate, and the break-even rate. "
            "Defaults reproduce the playbook's Output 18.6.2."
        ),
    )
    p.add_argument(
        "--on-demand",
        type=number("--on-demand"),
        default=1.0,
        help="on-demand price, $/node-hour (default 1.0)",
    )
    p.add_argument(
        "--spot",
        type=number("--spot"),
        default=0.7,
        help="spot price, $/node-hour (default 0.7)",
    )
    p.add_argument(
        "--ckpt-hours",
        type=number("--ckpt-hours"),
        default=0.05,
        help="wall-clock hours to write one checkpoint C (default 0.05 = 3 min)",
    )
    p.add_argument(
        "--restart-hours",
        type=number("--restart-hours", allow_zero=True),
        default=0.0,
        help="restore-and-rejoin hours R paid per preemption (default 0)",
    )
    p.add_argument(
        "--rates",
        type=number_list("--rates", "0.1,0.5,2", unit=" per hour"),
        default=[0.1, 0.5, 2.0, 8.0],
        help="comma-separated preemption rates per hour (default 0.1,0.5,2,8)",
    )
    p.add_argument(
        "--interval",
        choices=("young", "optimal"),
        default="young",
        help="checkpoint interval rule: young = sqrt(2C/lambda) as in the playbook; "
        "optimal = exact minimiser of c_eff (includes R)",
    )
    p.add_argument(
        "--search-step",
        type=number("--search-step"),
        default=0.005,
        help="grid step (per hour) of the break-even search (default 0.005, the one "
        "that reproduces the playbook's line)",
    )
    p.set_defaults(handler=_cost_table)

    q = subparsers.add_parser(
        "intervals",
        help="Young / Daly / thesis optimum checkpoint intervals",
        description="Optimum checkpoint intervals (seconds) for a checkpoint dump time, a mean "
        "time to preemption and a restart cost.",
    )
    q.add_argument(
        "--ckpt-seconds",
        type=number("--ckpt-seconds"),
        required=True,
        help="checkpoint dump time delta, seconds",
    )
    q.add_argument(
        "--mttp-hours",
        type=number("--mttp-hours"),
        required=True,
        help="mean time to preemption, hours",
    )
    q.add_argument(
        "--restart-seconds",
        type=number("--restart-seconds", allow_zero=True),
        default=0.0,
        help="restart latency R per preemption, seconds (default 0)",
    )
    q.add_argument(
        "--step-seconds",
        type=number("--step-seconds"),
        default=None,
        help="optional mean training step time, to print intervals in steps",
    )
    q.set_defaults(handler=_intervals)


def _cost_table(args: argparse.Namespace) -> int:
    from checkpointing import costmodel as cm

    if args.spot >= args.on_demand:
        print(
            f"note: --spot ({args.spot}) is not cheaper than --on-demand ({args.on_demand}); "
            "spot cannot win at any preemption rate"
        )
    rows = cm.cost_table(
        on_demand_price=args.on_demand,
        spot_price=args.spot,
        ckpt_hours=args.ckpt_hours,
        rates_per_hour=args.rates,
        restart_hours=args.restart_hours,
        interval=args.interval,
    )
    print(f"On-demand: ${args.on_demand:.3f} per useful node-hour (baseline)")
    print(f"{'pre/hr':>7} {'ckpt_int':>9} {'eff_$/useful':>13} {'wasted%':>9} {'vs on-demand':>14}")
    for r in rows:
        verdict = "spot WINS" if r.spot_wins else "spot LOSES"
        eff = (
            "thrash"
            if math.isinf(r.eff_cost_per_useful_hour)
            else f"{r.eff_cost_per_useful_hour:.3f}"
        )
        interval = "-" if math.isnan(r.interval_hours) else f"{r.interval_hours:.3f}"
        print(
            f"{r.rate_per_hour:>7.2f} {interval:>9} {eff:>13} {r.wasted_fraction * 100:>8.1f}% "
            f"{verdict:>14}"
        )
    print("Break-even search (highest preemption rate where spot still wins):")
    lam = cm.break_even_rate_per_hour(
        on_demand_price=args.on_demand,
        spot_price=args.spot,
        ckpt_hours=args.ckpt_hours,
        restart_hours=args.restart_hours,
        interval=args.interval,
        step_per_hour=args.search_step,
    )
    if lam <= 0:
        print("spot never wins at these prices")
    else:
        print(
            f"spot wins up to ~{lam:.2f} preemptions/hour (mean lifetime ~{60.0 / lam:.1f} min "
            "between preemptions)"
        )
    if args.interval == "young":
        best = cm.break_even_rate_per_hour(
            on_demand_price=args.on_demand,
            spot_price=args.spot,
            ckpt_hours=args.ckpt_hours,
            restart_hours=args.restart_hours,
            interval="optimal",
            step_per_hour=None,
        )
        if best > 0:
            print(
                f"(at the exact optimum interval instead of sqrt(2C/lambda): up to "
                f"{best:.3f}/hour, mean lifetime {60.0 / best:.1f} min)"
            )
    return 0


def _intervals(args: argparse.Namespace) -> int:
    from checkpointing import intervals as iv

    d, m, r = args.ckpt_seconds, args.mttp_hours * 3600.0, args.restart_seconds
    rows = [
        ("Young sqrt(2 delta M)", iv.young_interval_seconds(d, m)),
        ("Daly first order", iv.daly_first_order_seconds(d, m)),
        ("Daly higher order", iv.daly_higher_order_seconds(d, m)),
        ("thesis Eq. 4.5 sqrt(2 delta (M+R))", iv.thesis_optimum_seconds(d, m, r)),
        ("thesis Eq. 4.4 exact minimiser", iv.thesis_exact_optimum_seconds(d, m, r)),
    ]
    print(f"delta = {d:g} s, MTTP = {m:g} s ({args.mttp_hours:g} h), R = {r:g} s")
    header = f"{'rule':<36} {'seconds':>10} {'minutes':>9}"
    if args.step_seconds:
        header += f" {'steps':>7}"
    print(header)
    for name, sec in rows:
        line = f"{name:<36} {sec:>10.1f} {sec / 60:>9.2f}"
        if args.step_seconds:
            line += f" {int(sec // args.step_seconds):>7d}"
        print(line)
    return 0
