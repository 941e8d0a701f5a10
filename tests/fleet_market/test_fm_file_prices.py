"""The prices a trace folder carries (SkyNomad ``price_info`` + per-tick ``prices``) reach
the planner as they reach the fleet simulator: one parser (``load_trace``), one price
book (``PriceBook.with_traces``).

Before 2026-11-27 `spotfleet plan` on gcp-h100-2025 priced the H100 zones as V100
(p3.2xlarge, 0.918 $/h) by default and found no price with --accelerator H100.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from nomad_traces import write_nomad_trace

from fleet.market.prices import PriceBook
from fleet.market.traces import load_trace_dir
from fleet.planning.planner import StageRequest, plan_stage
from fleet.stats.preemption import zone_stats
from pipelines.cli import main

GAP = 600  # s: 144 ticks = 24 h
TABLE = "the built-in table (p3.2xlarge spot 0.918 / on-demand 3.06 $/h)"


def _nomad(d, zone, spot_early, spot_late, on_demand, period, down=3):
    """A SkyNomad-format file: inverted 0/1 data (1 = unavailable), per-tick prices
    (``spot_early`` for the first 96 h, ``spot_late`` for the last 24 h), price_info."""
    n = 120 * 3600 // GAP
    data = np.resize([0] * period + [1] * down, n).tolist()
    prices = [spot_early] * (n - 144) + [spot_late] * 144
    write_nomad_trace(d, zone, data, prices, spot_late, on_demand, GAP)


@pytest.fixture
def h100_dir(tmp_path):
    d = tmp_path / "gcp-h100"
    _nomad(d, "us-central1-a", 30.0, 19.0, 82.5, period=40)
    _nomad(d, "us-east4-a", 40.0, 15.0, 82.5, period=30)
    _nomad(d, "europe-west1-c", 16.0, 16.0, 90.9, period=60)
    return d


def test_price_book_from_trace_files(h100_dir):
    traces = load_trace_dir(h100_dir)
    book = PriceBook.default().with_traces(traces)
    # spot: the mean of the last 24 h of each file's series (the planning "now" is the end)
    assert book.spot_price("a3-highgpu-8g", "us-east4-a") == pytest.approx(15.0)
    assert book.spot_price("a3-highgpu-8g", "us-central1-a") == pytest.approx(19.0)
    assert book.on_demand_price("a3-highgpu-8g", "europe-west1") == pytest.approx(90.9)
    assert book.instance_types_for("H100") == ["a3-highgpu-8g"]
    assert book.source == ("spot of 3 zone(s) = mean of the last 24 h of each trace file's per-tick "
                           "prices; on-demand of 3 zone(s) = the trace files' "
                           "price_info.on_demand_price; other prices: fallback")
    # a longer window reaches back into the dearer early prices
    wide = PriceBook.default().with_traces(traces, window_hours=48)
    assert wide.spot_price("a3-highgpu-8g", "us-east4-a") == pytest.approx(27.5)
    # statistics name the same machine type, so plan and prices meet
    assert {s.instance_type for s in zone_stats(traces)} == {"a3-highgpu-8g"}
    # files without prices leave the book as it was
    assert PriceBook.default().with_traces([]).source == "fallback"


def test_planner_prices_h100_zones_from_the_files(h100_dir):
    traces = load_trace_dir(h100_dir)
    book = PriceBook.default().with_traces(traces)
    plan = plan_stage(StageRequest(work_hours=8, deadline_hours=12, accelerator="H100"),
                      zone_stats(traces), None, book)
    assert plan.instance_type == "a3-highgpu-8g" and plan.spot_nodes == 1
    prices = {z.zone: z.spot_price for z in plan.zones}
    assert prices == pytest.approx({"us-central1-a": 19.0, "us-east4-a": 15.0,
                                    "europe-west1-c": 16.0})
    assert plan.on_demand_price == pytest.approx(82.5)  # cheapest region of the files
    assert "prices: spot of 3 zone(s) = mean of the last 24 h of each trace file's" in plan.explain()
    # an accelerator the files do not carry is not priced as their a3-highgpu-8g
    other = plan_stage(StageRequest(work_hours=8, accelerator="A100"), zone_stats(traces),
                       None, book)
    assert other.spot_nodes == 0 and all(r["reason"].startswith("no price")
                                         for r in other.rejected)


def test_cli_plan_uses_the_files_prices_and_accelerator(h100_dir, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["plan", str(h100_dir), "--work", "8", "--deadline", "12", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["accelerator"] == "H100" and plan["instance_type"] == "a3-highgpu-8g"
    assert {z["zone"]: z["spot_price"] for z in plan["zones"]}["us-east4-a"] == pytest.approx(15.0)
    assert plan["on_demand_price"] == pytest.approx(82.5)
    assert plan["price_source"].startswith("spot of 3 zone(s) = mean of the last 24 h of each "
                                           "trace file's per-tick prices; on-demand of 3 zone(s) = "
                                           "the trace files' price_info.on_demand_price")


def test_cli_plan_on_the_real_gcp_h100_folder(shared_data, capsys):
    d = shared_data / "gcp-h100-2025"
    if not d.is_dir():
        pytest.skip(f"{d} is absent")
    assert main(["plan", str(d), "--work", "24", "--deadline", "36"]) == 0
    text = capsys.readouterr().out
    assert "x a3-highgpu-8g (H100)" in text and "spot 0.918 $/h" not in text
    assert "spot 14.853 $/h" in text  # us-east4-a, the cheapest per useful hour
    assert ("prices: spot of 13 zone(s) = mean of the last 24 h of each trace file's per-tick "
            "prices; on-demand of 13 zone(s) = the trace files' price_info.on_demand_price; other "
            f"prices: {TABLE}") in text


def test_cli_plan_reads_a_price_file_as_fleet_sim_does(tmp_path, capsys):
    """`plan --prices FILE` (until 2026-11-27 only fleet-sim took it): the file's series
    replace the folder's spot prices; the plan uses each zone's mean of the last 24 h."""
    d = tmp_path / "v100"
    d.mkdir()
    n = 48 * 3600 // 195  # 886 ticks of 195 s, always up
    for z in ("us-east-1a", "us-west-2b"):
        (d / f"{z}_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 195},
                                                         "data": [1] * n}))
    last = int(np.ceil(24 * 3600 / 195))  # 444 ticks
    series = {"us-east-1a_v100_1": [9.0] * (n - last) + [1.5] * last,
              "us-west-2b_v100_1": [9.0] * (n - last) + [1.2] * last}
    pf = tmp_path / "prices.json"
    pf.write_text(json.dumps(series))
    args = ["plan", str(d), "--work", "8", "--deadline", "12", "--json"]
    assert main(args + ["--prices", str(pf)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert {z["zone"]: z["spot_price"] for z in plan["zones"]} == pytest.approx(
        {"us-east-1a": 1.5, "us-west-2b": 1.2})
    # each price says where it came from: spot from --prices, on-demand from the table (until
    # 2026-11-27 the line began "trace files (...)", though no trace file held a price)
    assert plan["price_source"] == (f"spot of 2 zone(s) = mean of the last 24 h of the per-tick "
                                    f"prices of --prices {pf}; on-demand and other prices: {TABLE}")
    assert plan["on_demand_price"] == pytest.approx(3.06)  # the file holds spot only
    assert main(args) == 0  # without it: the built-in 0.918 $/h, as before
    assert {z["spot_price"] for z in json.loads(capsys.readouterr().out)["zones"]} == {0.918}
    # a price file needs its folder; no synthetic market is generated first
    assert main(["plan", "--work", "8", "--prices", str(pf)]) == 2
    err = capsys.readouterr().err
    assert "give that folder too" in err and "synthetic" not in err


def test_cli_plan_names_each_price_s_origin_with_prices_on_a_priced_folder(h100_dir, tmp_path,
                                                                          capsys):
    """--prices on a folder whose files carry prices: spot from the price file, on-demand from
    the files' price_info, each said (until 2026-11-27 both went under "trace files (...)")."""
    n = 120 * 3600 // GAP
    pf = tmp_path / "h100-prices.json"
    pf.write_text(json.dumps({f"{z}_h100_16": [7.0] * n
                              for z in ("us-central1-a", "us-east4-a", "europe-west1-c")}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["plan", str(h100_dir), "--work", "8", "--deadline", "12", "--json",
                     "--prices", str(pf)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert {z["spot_price"] for z in plan["zones"]} == {7.0}
    assert plan["on_demand_price"] == pytest.approx(82.5)
    assert plan["price_source"] == (f"spot of 3 zone(s) = mean of the last 24 h of the per-tick "
                                    f"prices of --prices {pf}; on-demand of 3 zone(s) = the trace "
                                    f"files' price_info.on_demand_price; other prices: {TABLE}")


def test_pipeline_market_prices_come_from_the_files(h100_dir):
    """The pipeline's MarketConfig.price_book (the fleet_plan asset and the local fleet)."""
    from fleet.market.config import MarketConfig

    m = MarketConfig(kind="traces", trace_dir=str(h100_dir), hours=96)
    book = m.price_book()
    # the history window ends at hour 96: its last 24 h still hold the early prices
    assert book.spot_price("a3-highgpu-8g", "us-east4-a") == pytest.approx(40.0)
    assert book.on_demand_price("a3-highgpu-8g", "us-central1") == pytest.approx(82.5)
    assert book.spot_price("p3.2xlarge", "us-east4-a") == pytest.approx(m.spot_price_per_hour)
