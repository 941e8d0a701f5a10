"""Regenerate the figures of docs/cost-model.md and docs/training-simulator.md.

    python docs/scripts/plot_checkpointing_math.py            # both figures, ~1 min on 2 cores
    python docs/scripts/plot_checkpointing_math.py --only cost

Writes docs/img/cost-model-ceff.png and docs/img/training-sim-mttp.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from checkpointing import costmodel as cm  # noqa: E402
from checkpointing.training_sim import PolicySpec, Range, run_policies  # noqa: E402
from checkpointing.training_sim.thesis import preset  # noqa: E402

IMG = Path(__file__).resolve().parents[1] / "img"


def cost_figure(path: Path) -> None:
    od, sp, c = 1.0, 0.7, 0.05
    lam = np.logspace(-2, 1, 400)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    curves = [
        ("R = 0, T* = sqrt(2C/λ) (playbook)", 0.0, "young", "C0", "-"),
        ("R = 0, optimal T", 0.0, "optimal", "C0", "--"),
        ("R = 0.05 h, optimal T", 0.05, "optimal", "C1", "--"),
        ("R = 0.2 h, optimal T", 0.2, "optimal", "C3", "--"),
    ]
    for label, r, rule, color, style in curves:
        y = []
        for x in lam:
            if x * r >= 1:
                y.append(np.nan)
                continue
            t = (
                cm.young_interval_hours(c, x)
                if rule == "young"
                else cm.optimal_interval_hours(c, x, r)
            )
            e = cm.effective_cost_per_useful_hour(sp, c, t, x, r)
            y.append(e if np.isfinite(e) else np.nan)
        ax.plot(lam, y, style, color=color, label=label)
        be = cm.break_even_rate_per_hour(
            on_demand_price=od,
            spot_price=sp,
            ckpt_hours=c,
            restart_hours=r,
            interval=rule,
            step_per_hour=None,
        )
        ax.plot([be], [od], "o", color=color, ms=4)
    ax.axhline(od, color="k", lw=0.8)
    ax.text(0.011, od * 1.03, r"on-demand \$1.00", fontsize=8)
    ax.set_xscale("log")
    ax.set_ylim(0.6, 2.0)
    ax.set_xlabel("preemption rate λ (per hour)")
    ax.set_ylabel("effective $ per useful node-hour")
    ax.set_title(r"Spot at \$0.70 vs on-demand \$1.00, checkpoint C = 0.05 h (dots: break-even)")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def mttp_figure(path: Path, seeds: int) -> None:
    config, _ = preset("6.3")
    async_cfg = dataclasses.replace(config, async_saver=True, stall_seconds=Range(1.0, 1.5))
    mttps_h = [1, 2, 3, 6, 12]
    series = {
        "Adaptive": (config, PolicySpec("adaptive", every=10_000, label="Adaptive")),
        "Per-10": (config, PolicySpec("static", every=10)),
        "Per-33": (config, PolicySpec("static", every=33)),
        "Per-100": (config, PolicySpec("static", every=100)),
        "Adaptive, async saver": (
            async_cfg,
            PolicySpec("adaptive", every=10_000, label="Adaptive, async saver"),
        ),
    }
    od = PolicySpec("on-demand", every=1_000, label="On-demand")
    ys: dict[str, list[float]] = {k: [] for k in series}
    for h in mttps_h:
        for name, (cfg, pol) in series.items():
            res = run_policies(cfg, [pol, od], mttp_seconds=h * 3600.0, seeds=range(seeds))
            ys[name].append(res[0].overhead_vs_on_demand * 100)
        print(f"MTTP {h} h done", file=sys.stderr, flush=True)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, y in ys.items():
        ax.plot(mttps_h, y, "o-" if "Adaptive" in name else "s--", label=name, ms=4)
    ax.set_xscale("log")
    ax.set_xticks(mttps_h, [str(h) for h in mttps_h])
    ax.set_xlabel("MTTP (hours)")
    ax.set_ylabel("latency overhead vs on-demand (%)")
    ax.set_title(f"GPT-1.3B preset (Table 6.3), mean of {seeds} runs per point")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    for name, y in ys.items():
        print(
            f"{name:24s} " + "  ".join(f"{h}h {v:6.2f}%" for h, v in zip(mttps_h, y, strict=True))
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", choices=("cost", "mttp"))
    ap.add_argument("--seeds", type=int, default=10, help="runs per simulator point")
    args = ap.parse_args()
    IMG.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "cost"):
        cost_figure(IMG / "cost-model-ceff.png")
        print(f"wrote {IMG / 'cost-model-ceff.png'}")
    if args.only in (None, "mttp"):
        mttp_figure(IMG / "training-sim-mttp.png", args.seeds)
        print(f"wrote {IMG / 'training-sim-mttp.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
