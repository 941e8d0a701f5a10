"""``spotfleet local-fleet run`` options that only mean something together."""

from __future__ import annotations

import json

import pytest

from pipelines.cli import main


def _folder(d):
    d.mkdir(parents=True, exist_ok=True)
    for z in ("us-east-1a", "us-west-2b"):
        (d / f"{z}_v100_1.json").write_text(
            json.dumps({"metadata": {"gap_seconds": 195}, "data": [1, 1, 0, 1] * 400}))
    return d


@pytest.mark.parametrize("market", [None, "synthetic", "rotating"])
def test_traces_dir_without_market_traces_is_refused_not_ignored(tmp_path, capsys, market):
    # Found in the s17 audit: `spotfleet local-fleet run --traces-dir ../shared/data/gcp-h100-2025`
    # (no --market) replayed the synthetic market's us-east-1f / us-east-1c / us-west-2b at
    # 0.918 $/h, ignoring the folder without a word.
    work = tmp_path / "work"
    argv = ["local-fleet", "run", "--traces-dir", str(_folder(tmp_path / "t")),
            "--workdir", str(work), "--no-verify"]
    if market:
        argv += ["--market", market]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("spotfleet local-fleet: error: --traces-dir "), err
    assert f"--market {market or 'synthetic'}" in err and "add --market traces" in err
    assert "Traceback" not in err and not (work / "fleet").exists()
