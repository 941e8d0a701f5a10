"""Dagster asset ``gfs_evaluation``: GFS vs baselines/ablations on a trace (paper Table 5).

A thin wrapper over :mod:`fleet.scheduling.evaluation`: it builds the trace, trains the
GDE forecaster, simulates each policy, and publishes the comparison table (the asset
value, a pandas DataFrame) with a markdown copy and a plot in the metadata.
"""


import base64
import os
import tempfile
from pathlib import Path

import dagster as dg
import pandas as pd
from pydantic import Field


class GfsEvalConfig(dg.Config):
    trace: str = Field("v2023", description="v2023 (real Alibaba pods) or v2026 (synthetic, real node list)")
    level: str = Field("low", description="spot workload: low (x1), medium (x2), high (x4)")
    policies: list[str] = Field(
        default_factory=lambda: ["YARN-CS", "Chronus", "Lyra", "FGD", "YARN-CS+Q", "Lyra+Q", "FGD+Q", "GFS", "GFS-BF"],
        description="policies to compare: ungated YARN-CS, Chronus, Lyra, FGD; quota-gated YARN-CS+Q, Lyra+Q, "
                    "FGD+Q (same GDE + SQA as GFS, eta fixed at 1); GFS; GFS-BF (beyond the paper); "
                    "ablations GFS-e, GFS-d, GFS-s, GFS-p, GFS-sp")
    refit: str = Field("daily", description="GDE: 'daily' (rolling origin, no future data) or 'once'")
    days: int = Field(14, description="v2026: simulated days")
    fraction: float = Field(0.25, description="v2026: share of the jobs")
    node_fraction: float = Field(0.18, description="v2026: share of each model's nodes (1 = 10,412 GPUs)")
    data_dir: str = Field("", description="shared/data folder; empty = $SPOTFLEET_SHARED_DATA or ../shared/data")
    plot_dir: str = Field("", description="where to write the PNG; empty = a temporary folder")


def _data_dir(cfg: GfsEvalConfig) -> str:
    if cfg.data_dir:
        return cfg.data_dir
    return os.environ.get("SPOTFLEET_SHARED_DATA", str(Path.cwd().parent / "shared" / "data"))


@dg.asset(group_name="gfs", description=__doc__.splitlines()[0])
def gfs_evaluation(context: dg.AssetExecutionContext, config: GfsEvalConfig) -> dg.Output[pd.DataFrame]:
    from fleet.scheduling.evaluation import (
        EvalScale,
        improvement_row,
        plot_comparison,
        run_comparison,
        to_markdown,
    )

    comp = run_comparison(config.trace, config.level, _data_dir(config), config.policies,
                          EvalScale(days=config.days, fraction=config.fraction,
                                    node_fraction=config.node_fraction),
                          progress=lambda msg: context.log.info(msg), refit=config.refit)
    plot_dir = Path(config.plot_dir or tempfile.mkdtemp(prefix="gfs-"))
    png = plot_comparison(comp, plot_dir / f"gfs-{config.trace}-{config.level}.png")
    md = to_markdown(comp.table)
    meta: dict = {
        "trace": comp.trace,
        "level": config.level,
        "table": dg.MetadataValue.md(md),
        "plot_path": dg.MetadataValue.path(str(png)),
        "plot": dg.MetadataValue.md(
            f"![gfs](data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()})"),
    }
    if "GFS" in comp.table.index and len(comp.table) > 1:
        imp = improvement_row(comp.table)
        meta["gfs_improvement_pct"] = dg.MetadataValue.json({k: round(float(v), 2) for k, v in imp.items()})
    return dg.Output(comp.table.reset_index(), metadata=meta)


gfs_assets = [gfs_evaluation]
