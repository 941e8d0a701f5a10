"""``spotfleet simulate-training``: the thesis's training simulator (docs/training-simulator.md).

Examples::

    spotfleet simulate-training --thesis-table 6.2            # reproduce Table 6.2
    spotfleet simulate-training --thesis-table 6.3 --async-saver --stall-seconds 1,2
    spotfleet simulate-training --steps 20000 --step-seconds 1,1.2 --ckpt-seconds 8,10 \\
        --backup-seconds 30,40 --alloc-seconds 60,180 --prep-seconds 60,90 \\
        --mttp-hours 1,3,12 --policies adaptive,static:50,on-demand:1000
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from pipelines.commands.argtypes import number, number_list


def _range(flag: str):
    def parse(text: str):
        from checkpointing.training_sim.config import Range

        try:
            return Range.parse(text, flag)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--notice-probability expects a number in [0, 1], got {text!r}"
        ) from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"--notice-probability must be in [0, 1], got {text!r}")
    return value


def _policies(text: str):
    from checkpointing.training_sim.config import PolicySpec

    try:
        return [PolicySpec.parse(p) for p in text.split(",") if p.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--policies: {exc}") from None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate-training",
        help="simulate training latency and cost on preemptible VMs (thesis section 6.2.2)",
        description=(
            "Latency breakdown (compute, recompute, save, allocation, preparation), total "
            "latency, overhead vs on-demand and cost of a training job under checkpointing "
            "policies, averaged over seeds. Latency ranges are LOW,HIGH seconds sampled "
            "uniformly. --thesis-table 6.2|6.3 loads the parameters derived from the "
            "thesis's tables; any other flag overrides them."
        ),
    )
    p.add_argument("--thesis-table", choices=("6.2", "6.3"), help="start from a thesis preset")
    p.add_argument("--steps", type=number("--steps", integer=True), help="total training iterations")
    p.add_argument("--step-seconds", type=_range("--step-seconds"), help="per-step compute")
    p.add_argument("--ckpt-seconds", type=_range("--ckpt-seconds"), help="checkpoint dump delta")
    p.add_argument("--backup-seconds", type=_range("--backup-seconds"), help="backup beta")
    p.add_argument("--alloc-seconds", type=_range("--alloc-seconds"), help="VM allocation")
    p.add_argument("--prep-seconds", type=_range("--prep-seconds"), help="VM preparation")
    p.add_argument("--grace-seconds", type=number("--grace-seconds"), help="notice window")
    p.add_argument("--spot-price", type=number("--spot-price"), help="$/hour")
    p.add_argument("--on-demand-price", type=number("--on-demand-price"), help="$/hour")
    p.add_argument(
        "--mttp-hours",
        type=number_list("--mttp-hours", "1,3,12"),
        help="comma-separated mean times to preemption, hours (default 3)",
    )
    p.add_argument(
        "--policies",
        type=_policies,
        help="comma list: adaptive[:auto|always|off][@N], static:N (or N), "
        "on-demand:N (default: the preset's, else adaptive,static:50,on-demand:1000)",
    )
    p.add_argument(
        "--async-saver",
        action="store_true",
        help="only --stall-seconds of each save stalls training; the rest of the "
        "dump runs in the background with the backup",
    )
    p.add_argument(
        "--stall-seconds",
        type=_range("--stall-seconds"),
        help="async saver snapshot stall (default: 5%% of the dump)",
    )
    p.add_argument(
        "--notice-probability",
        type=_fraction,
        default=None,
        help="fraction of preemptions announced by a notice (default 1.0; the rest kill "
        "without warning)",
    )
    p.add_argument(
        "--seeds",
        type=number("--seeds", integer=True),
        default=20,
        help="runs per policy, averaged (default 20; the thesis used 100)",
    )
    p.add_argument("--seed-base", type=int, default=0, help="first seed (default 0)")
    p.set_defaults(handler=_simulate)


def _simulate(args: argparse.Namespace) -> int:
    from checkpointing.training_sim.config import PolicySpec, Range, SimConfig
    from checkpointing.training_sim.experiment import format_table, run_policies
    from checkpointing.training_sim.thesis import MTTP_SECONDS, preset, published_overheads

    if args.thesis_table:
        config, policies = preset(args.thesis_table)
        fields = {}
    else:
        missing = [
            flag
            for flag, value in (
                ("--steps", args.steps),
                ("--step-seconds", args.step_seconds),
                ("--ckpt-seconds", args.ckpt_seconds),
            )
            if value is None
        ]
        if missing:
            raise ValueError(
                f"{', '.join(missing)} required without --thesis-table (or start from "
                "--thesis-table 6.2|6.3 and override single flags)"
            )
        fields = {
            "name": "custom job",
            "backup_seconds": Range(0.0, 0.0),
            "alloc_seconds": Range(0.0, 0.0),
            "prep_seconds": Range(0.0, 0.0),
        }
        config = None
        policies = [
            PolicySpec("adaptive"),
            PolicySpec("static", every=50),
            PolicySpec("on-demand", every=1000),
        ]
    overrides = {
        "total_steps": args.steps,
        "step_seconds": args.step_seconds,
        "ckpt_seconds": args.ckpt_seconds,
        "backup_seconds": args.backup_seconds,
        "alloc_seconds": args.alloc_seconds,
        "prep_seconds": args.prep_seconds,
        "grace_seconds": args.grace_seconds,
        "spot_price_per_hour": args.spot_price,
        "on_demand_price_per_hour": args.on_demand_price,
        "notice_probability": args.notice_probability,
    }
    fields.update({k: v for k, v in overrides.items() if v is not None})
    if args.async_saver:
        ckpt = fields.get("ckpt_seconds") or config.ckpt_seconds
        fields["async_saver"] = True
        fields["stall_seconds"] = args.stall_seconds or Range(0.05 * ckpt.low, 0.05 * ckpt.low)
    config = dataclasses.replace(config, **fields) if config else SimConfig(**fields)
    if args.policies:
        policies = args.policies
    mttps = [h * 3600.0 for h in args.mttp_hours] if args.mttp_hours else [MTTP_SECONDS]
    seeds = range(args.seed_base, args.seed_base + args.seeds)

    print(
        f"{config.name}: {config.total_steps} steps, step {config.step_seconds} s, "
        f"dump {config.ckpt_seconds} s, backup {config.backup_seconds} s, alloc "
        f"{config.alloc_seconds} s, prep {config.prep_seconds} s, grace "
        f"{config.grace_seconds:g} s, ${config.spot_price_per_hour:g}/h spot, "
        f"${config.on_demand_price_per_hour:g}/h on-demand"
        + (f", async saver (stall {config.stall_seconds} s)" if config.async_saver else "")
        + (
            f", {config.notice_probability:.0%} of kills announced"
            if config.notice_probability < 1
            else ""
        )
    )
    for mttp in mttps:
        results = run_policies(
            config,
            policies,
            mttp_seconds=mttp,
            seeds=seeds,
            progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True),
        )
        print()
        print(
            format_table(results, f"MTTP {mttp:g} s ({mttp / 3600:g} h), mean of {len(seeds)} runs")
        )
        if args.thesis_table and mttp == MTTP_SECONDS and not args.async_saver:
            published = published_overheads(args.thesis_table)
            line = []
            for r in results:
                key = r.name if r.name in published else None
                if key and r.overhead_vs_on_demand is not None and key != "On-demand":
                    line.append(f"{key} {published[key] * 100:+.2f}%")
            print(f"{'Thesis':<10}published overheads: " + ", ".join(line))
    return 0
