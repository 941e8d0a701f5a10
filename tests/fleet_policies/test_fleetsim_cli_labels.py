"""``spotfleet fleet-sim`` says what the loader cannot: several instance types run as one
job's locations, prices whose units make spot never pay, and an oracle run that is not how
a real cloud works. Malformed folders are built in ``tmp_path``; the real ones are read from
``../shared/data`` by path.

Found by an audit (2026-11-28): each case ran silently before (``us-east-1a_v100_8`` billed
like ``v100_1``; spot in cents made every policy pay 30x on-demand; an oracle run printed
the header, table and plot title of a probe run).
"""

from __future__ import annotations

import json

import pytest

from pipelines.cli import main

ARGS = ["--starts", "2", "--policies", "failover", "--warmup-hours", "24",
        "--work-hours", "6", "--deadline-hours", "9", "--no-omniscient"]
V100 = "spot-traces/availability/1-node/aws-02-15-2023"
V100_PRICES = "spot-prices/aws-v100-02-15-2023.json"


def _folder(d, names=("us-east-1a_v100_1", "us-east-2a_v100_1"), n=2000):
    d.mkdir(parents=True, exist_ok=True)
    for name in names:
        (d / f"{name}.json").write_text(json.dumps(
            {"metadata": {"gap_seconds": 195}, "data": [1, 1, 0, 1] * (n // 4)}))
    return d


def _warnings(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("spotfleet fleet-sim: warning: ")]


def test_several_instance_types_warn_naming_them_and_the_option(tmp_path, capsys):
    d = _folder(tmp_path / "t", names=("us-east-1a_v100_1", "us-east-1a_v100_8",
                                       "us-east-2a_v100_1"))
    assert main(["fleet-sim", "--traces", str(d), *ARGS]) == 0
    mixed = [w for w in _warnings(capsys.readouterr().err) if "instance types" in w]
    assert len(mixed) == 1
    assert "['v100_1', 'v100_8']" in mixed[0] and "us-east-1a: v100_1, v100_8" in mixed[0]
    assert "interchangeable locations" in mixed[0] and "--instance-types" in mixed[0]
    assert "billed the flat spot 0.918 $/h and on-demand 3.06 $/h" in mixed[0]
    # one type kept: no warning, the documented use of --instance-types
    assert main(["fleet-sim", "--traces", str(d), "--instance-types", "v100_8", *ARGS]) == 0
    assert not [w for w in _warnings(capsys.readouterr().err) if "instance types" in w]


@pytest.mark.parametrize(("extra", "needle"), [
    # --on-demand-price not given: its default is named as such (until 2026-11-28 the warning
    # said "on-demand from --on-demand-price" to a user who never passed it; s17 audit, on GCP
    # H100 files stripped of price_info)
    (["--spot-price", "5"], "spot from --spot-price, on-demand from --on-demand-price's default "
                            "(3.06 $/h, a p3.2xlarge's; the files carry no on-demand price"),
    (["--on-demand-price", "0.5"], "median spot 0.918 $/h vs on-demand 0.5 $/h"),
    (["--on-demand-price", "0.5"], "spot from --spot-price's default (0.918 $/h, a p3.2xlarge's; "
                                   "the files carry no spot price: pass --spot-price for this "
                                   "machine), on-demand from --on-demand-price:"),
])
def test_flat_spot_at_or_above_on_demand_warns(tmp_path, capsys, extra, needle):
    d = _folder(tmp_path / "t")
    assert main(["fleet-sim", "--traces", str(d), *extra, *ARGS]) == 0
    units = [w for w in _warnings(capsys.readouterr().err) if "at or above on-demand" in w]
    assert len(units) == 1 and needle in units[0] and "2 of 2 zone(s)" in units[0]


def test_a_price_file_in_cents_warns_naming_it(shared_data, tmp_path, capsys):
    raw = json.loads((shared_data / V100_PRICES).read_text())
    cents = tmp_path / "cents.json"
    cents.write_text(json.dumps({k: [x * 100 for x in v] for k, v in raw.items()}))
    args = ["fleet-sim", "--traces", str(shared_data / V100), *ARGS]
    assert main([*args, "--prices", str(cents)]) == 0
    units = [w for w in _warnings(capsys.readouterr().err) if "at or above on-demand" in w]
    assert len(units) == 1
    assert "9 of 9 zone(s)" in units[0] and f"spot from --prices {cents}" in units[0]
    assert "vs on-demand 3.06 $/h" in units[0] and "unit slip (spot in cents" in units[0]
    # the real file in $/h: no warning
    assert main([*args, "--prices", str(shared_data / V100_PRICES)]) == 0
    assert _warnings(capsys.readouterr().err) == []


def test_the_real_gcp_h100_folder_gives_no_price_warning(shared_data, capsys):
    """On-demand is 1.42x spot in asia-south2-b: dear spot, not a unit slip."""
    assert main(["fleet-sim", "--traces", str(shared_data / "gcp-h100-2025"),
                 *ARGS[:-1]]) == 0
    assert _warnings(capsys.readouterr().err) == []


def test_an_oracle_run_says_so_in_header_table_and_plot(tmp_path, capsys, monkeypatch):
    import fleet.simulation.plot as plot

    titles = []
    monkeypatch.setattr(plot, "plot_sweeps",
                        lambda sweeps, path: titles.extend(t for t, _ in sweeps) or path)
    d = _folder(tmp_path / "t")
    for mode in ("probe", "oracle"):
        assert main(["fleet-sim", "--traces", str(d), *ARGS, "--observe", mode,
                     "--plot", str(tmp_path / f"{mode}.png")]) == 0
        out = capsys.readouterr().out.splitlines()
        header = next(ln for ln in out if ln.startswith("fleet-sim: "))
        table = out.index(next(ln for ln in out if ln.startswith("policy ")))
        if mode == "probe":
            assert "ORACLE" not in "\n".join(out) and "ORACLE" not in titles[0]
            continue
        assert "ORACLE observation: every zone's availability is seen for free" in header
        assert "not how a real cloud works" in header
        assert out[table - 1].startswith("Costs under ORACLE observation")
        assert "ORACLE observation: every zone seen for free" in titles[1]
        assert "not how a real cloud works" in titles[1]
