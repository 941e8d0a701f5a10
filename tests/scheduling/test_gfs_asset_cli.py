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
            "fraction": 0.05, "data_dir": str(shared_data), "plot_dir": str(tmp_path)}}}},
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
    rc = main(["gfs-eval", "--trace", "v2026", "--days", "2", "--fraction", "0.05",
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
