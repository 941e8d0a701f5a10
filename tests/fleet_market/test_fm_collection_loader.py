"""The loader reads every format of the public collection with the right availability."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from fleet.market.traces import TraceFormatError, load_trace, load_trace_dir
from fleet.simulation.market import Market


def _write(path, data, gap=60, **extra):
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"gap_seconds": gap, **extra.pop("meta", {})}
    path.write_text(json.dumps({"metadata": meta, "data": data, **extra}))
    return path


def test_multi_node_folder_needs_count_at_least_nodes(tmp_path):
    d = tmp_path / "availability" / "16-node" / "aws-08-27-2023"
    _write(d / "us-east-2b_v100_1.json", [16, 15, 1, 0, 16])
    t = load_trace(d / "us-east-2b_v100_1.json")
    assert t.nodes == 16
    assert t.up().tolist() == [True, False, False, False, True]  # count >= 16, not >= 1
    assert (t.available >= 1).tolist() != t.up().tolist()
    t4 = load_trace(d / "us-east-2b_v100_1.json", nodes=4)
    assert t4.up().tolist() == [True, True, False, False, True]
    assert t.key == ("aws", "us-east-2", "us-east-2b", "v100_1", 16)


def test_trailing_number_is_part_of_the_instance_not_a_node_count(tmp_path):
    # r5.16xlarge traces are named ..._intel_64: 64 vCPUs, one instance per tick
    p = _write(tmp_path / "1-node" / "aws-04-19-2023" / "us-east-1b_intel_64.json", [1, 0, 1])
    t = load_trace(p)
    assert t.up().tolist() == [True, False, True]
    assert t.instance_type == "intel_64" and t.nodes == 1


def test_gcp_style_names_and_regions(tmp_path):
    p = _write(tmp_path / "us-central1-c_c3-88.json", [0, 1, 1])
    t = load_trace(p)
    assert (t.cloud, t.region, t.zone, t.instance_type) == ("gcp", "us-central1", "us-central1-c", "c3-88")
    assert t.up().tolist() == [False, True, True]


def test_gcp_h100_inverted_with_prices(tmp_path):
    info = {"price": 18.979, "on_demand_price": 82.525, "machine_type": "a3-highgpu-8g",
            "region": "us-central1"}
    p = _write(tmp_path / "us-central1-a_h100_16.json", [1, 0, 0, 1], gap=600,
               meta={"zone": "us-central1-a", "price_info": info}, prices=[18.979, 18.979, 19.5, 19.5])
    t = load_trace(p)
    assert t.up().tolist() == [False, True, True, False]  # 1 = unavailable here
    assert t.on_demand_price == pytest.approx(82.525)
    assert t.spot_prices.tolist() == [18.979, 18.979, 19.5, 19.5]
    assert t.instance_type == "a3-highgpu-8g"
    m = Market.from_traces([t])
    assert m.on_demand_price.tolist() == [pytest.approx(82.525)]
    assert m.spot_price[0, 2] == pytest.approx(19.5)


def test_several_instance_types_share_a_zone(tmp_path):
    d = tmp_path / "1-node" / "aws-10-26-2022"
    _write(d / "us-west-2a_k80_1.json", [1, 1, 0])
    _write(d / "us-west-2a_v100_1.json", [0, 1, 1])
    _write(d / "us-west-2a_v100_8.json", [0, 0, 1])
    m = Market.from_dir(d)
    assert m.zones == ("us-west-2a/k80_1", "us-west-2a/v100_1", "us-west-2a/v100_8")
    assert m.available.tolist() == [[True, True, False], [False, True, True], [False, False, True]]
    assert set(m.regions) == {"us-west-2"}
    only = Market.from_dir(d, instance_types=["v100_8"])
    assert only.available.tolist() == [[False, False, True]]


@pytest.mark.parametrize(("name", "payload", "needle"), [
    ("trace.json", {"metadata": {"gap_seconds": 60}, "data": [1]}, "<zone>_<instance>.json"),
    ("us-east-1a.json", {"metadata": {"gap_seconds": 60}, "data": [1]}, "<zone>_<instance>.json"),
    ("us-east-1a_v100_1.json", {"metadata": {"gap_seconds": 60}, "data": [1, 2.5]}, "data[1]"),
    ("us-central1-a_h100_16.json", {"metadata": {"gap_seconds": 600, "price_info": {"price": 1}},
                                    "data": [0, 1]}, "on_demand_price"),
    ("us-central1-a_h100_16.json", {"metadata": {"gap_seconds": 600}, "data": [0, 1],
                                    "prices": [1.0]}, "one positive spot"),
    ("us-central1-a_h100_16.json", {"metadata": {"gap_seconds": 600, "price_info": {"price": 1, "on_demand_price": 2}}, "data": [0, 3],
                                    "prices": [1.0, 1.0]}, "inverted"),
    ("us-central1-a_h100_16.json", {"metadata": {"gap_seconds": 600, "zone": "us-east4-a"},
                                    "data": [0]}, "metadata.zone"),
])
def test_uninterpretable_files_are_errors_naming_file_and_fix(tmp_path, name, payload, needle):
    p = _write(tmp_path / name, payload["data"], gap=payload["metadata"]["gap_seconds"],
               meta={k: v for k, v in payload["metadata"].items() if k != "gap_seconds"},
               **{k: v for k, v in payload.items() if k not in ("metadata", "data")})
    with pytest.raises(TraceFormatError) as exc:
        load_trace(p)
    assert needle in str(exc.value) and str(p) in str(exc.value)


def test_unreadable_file_is_a_clear_error(tmp_path):
    p = tmp_path / "us-east-1a_v100_1.json"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceFormatError, match="us-east-1a_v100_1.json"):
        load_trace_dir(tmp_path)


def test_zone_never_available_for_the_nodes_warns(tmp_path):
    d = tmp_path / "4-node" / "x"
    _write(d / "us-east-1f_v100_1.json", [3, 2, 3])
    with pytest.warns(UserWarning, match="never has 4 instance"):
        t = load_trace(d / "us-east-1f_v100_1.json")
    assert not t.up().any()


def test_real_collection_folders_load(shared_data):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = Market.from_dir(shared_data / "spot-traces/availability/1-node/aws-02-15-2023",
                            prices=shared_data / "spot-prices/aws-v100-02-15-2023.json")
        h = Market.from_dir(shared_data / "gcp-h100-2025")
    assert v.n_zones == 9 and v.spot_price.shape == v.available.shape
    assert v.spot_price.min() >= 0.918 and v.spot_price.max() <= 1.85
    assert h.n_zones == 13 and len(h.region_names) == 8
    avail = dict(zip(h.zones, h.available.mean(axis=1), strict=True))
    assert avail["asia-south2-b"] == 1.0  # never preempted (all zeros in the inverted file)
    assert 0.1 < avail["europe-west3-c"] < 0.25
    assert np.all(h.on_demand_price / h.spot_price[:, 0] > 1.4)


def test_prices_list_without_price_info_is_not_inverted(tmp_path):
    # the April 2023 spot-traces preemption files carry a flat 'prices' list, 1 = available
    p = _write(tmp_path / "us-east-1c_v100_1.json", [1, 1, 0], gap=32, prices=[0.918] * 3)
    t = load_trace(p)
    assert t.up().tolist() == [True, True, False]
    assert t.spot_prices.tolist() == [0.918] * 3
