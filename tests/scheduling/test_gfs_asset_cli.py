"""The Dagster asset and the CLI run a real (small) evaluation end to end."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.gfs import gfs_assets, gfs_evaluation
from pipelines.cli import main


@pytest.mark.slow
def test_asset_materializes_table_and_plot(shared_data, tmp_path):
    result = dg.materialize(
        [gfs_evaluation],
        run_config={"ops": {"gfs_evaluation": {"config": {
            "trace": "v2026", "level": "medium", "policies": ["GFS", "Lyra"], "days": 3,
            "fraction": 0.05, "node_fraction": 0.05, "data_dir": str(shared_data), "plot_dir": str(tmp_path)}}}},
    )
    assert result.success
    df = result.output_for_node("gfs_evaluation")
    assert list(df["policy"]) == ["GFS", "Lyra"]
    assert (df["HP JQT (s)"] >= 0).all() and df["Spot e (%)"].notna().all()
    mats = result.asset_materializations_for_node("gfs_evaluation")
    md = mats[0].metadata["table"].value
    assert "| GFS |" in md
    assert (tmp_path / "gfs-v2026-medium.png").stat().st_size > 10_000
    assert gfs_assets == [gfs_evaluation]


def test_cli_eval_prints_table(shared_data, capsys):
    rc = main(["gfs-eval", "--trace", "v2026", "--days", "2", "--fraction", "0.05", "--node-fraction", "0.05",
               "--policies", "GFS,YARN-CS", "--data-dir", str(shared_data)])
    out = capsys.readouterr()
    assert rc == 0
    assert "| GFS |" in out.out and "| YARN-CS |" in out.out
    assert "jobs done" in out.err or "done in" in out.err  # progress on stderr


def test_cli_rejects_bad_input(shared_data, capsys):
    with pytest.raises(SystemExit):
        main(["gfs-eval", "--policies", "GFS,Foo"])
    assert "unknown policy Foo" in capsys.readouterr().err
    rc = main(["gfs-eval", "--fraction", "2", "--data-dir", str(shared_data)])
    assert rc == 2 and "--fraction" in capsys.readouterr().err
    rc = main(["gfs-eval", "--data-dir", "/nonexistent"])
    assert rc == 2 and "shared/data" in capsys.readouterr().err


def test_improvement_row_and_report_markdown():
    import pandas as pd

    from fleet.scheduling.evaluation import COLUMNS, improvement_row, report_markdown

    cols = list(COLUMNS.values())
    # columns: HP p99, HP JCT, HP JQT, spot JCT, spot JQT, e, e/gh, preempt, alloc, unfinished
    t = pd.DataFrame([[100, 50, 10, 200, 40, 2.0, 1.0, 2.0, 60, 0],
                      [100, 45, 5, 300, 80, 1.0, 0.5, 1.0, 55, 0],
                      [100, 40, 0, 100, 20, 4.0, 2.0, 4.0, 70, 0],
                      [100, 40, 0, 90, 10, 3.0, 1.5, 3.0, 72, 0]],
                     index=["Lyra", "Lyra+Q", "GFS", "GFS-BF"], columns=cols)
    imp = improvement_row(t, against=["Lyra"])
    assert imp["HP JCT (s)"] == 20.0 and imp["Spot JQT (s)"] == 50.0
    assert imp["Spot e (%)"] == -100.0 and pd.isna(imp["HP JCT-p99 (s)"]) is False
    md = report_markdown({("v2023", "low"): t})
    assert "| IMP. vs ungated |" in md and "+50.0%" in md and "gfs-v2023-low.png" in md
    assert "| IMP. vs gated |" in md and "+75.0%" in md  # spot JQT 20 vs Lyra+Q's 80
    assert "| Lyra+Q | gated (+Q) |" in md and "| Lyra | ungated |" in md
    # GFS is better than Lyra+Q on spot JQT but not on evictions: the verdict says so
    assert "Spot JQT (s) yes" in md and "Spot e (%) **no**" in md
    # GFS-BF dominates GFS (lower on all three axes) and is itself not dominated
    assert "GFS-BF is not dominated by any policy" in md
