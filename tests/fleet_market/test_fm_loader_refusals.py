"""What the loader refuses (an error naming the file, the field and the fix) and what it
only warns about, on malformed copies of the collection's formats built in ``tmp_path``.

Each case here was found by running ``spotfleet fleet-sim`` on such a copy: before the
fix it was read silently (a price file for another folder, ``Infinity`` prices, string
prices, a SkyNomad file without ``price_info``) or failed with a message that named no
file (NaN gap, one-tick file, negative on-demand price, no zone ever up).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from fleet.market.traces import TraceFormatError, attach_spot_prices, load_trace, load_trace_dir
from fleet.simulation.market import Market

INFO = {"price": 18.98, "on_demand_price": 88.49, "machine_type": "a3-highgpu-8g"}


def _file(path, data, gap=195, raw=None, **extra):
    """Write one trace file (``raw``: the exact text, for NaN / Infinity / truncation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"gap_seconds": gap, **extra.pop("meta", {})}
    path.write_text(raw if raw is not None else json.dumps({"metadata": meta, "data": data, **extra}))
    return path


def _folder(d, zones=("us-east-1a", "us-east-2a"), data=(1, 1, 0, 1) * 50, **kw):
    for z in zones:
        _file(d / f"{z}_v100_1.json", list(data), **kw)
    return d


@pytest.mark.parametrize(("case", "payload", "needle"), [
    ("gap NaN", '{"metadata": {"gap_seconds": NaN}, "data": [1, 0]}', "gap_seconds"),
    ("gap Infinity", '{"metadata": {"gap_seconds": Infinity}, "data": [1, 0]}', "gap_seconds"),
    ("one tick", '{"metadata": {"gap_seconds": 60}, "data": [1]}', "at least 2 ticks"),
    ("prices Infinity", '{"metadata": {"gap_seconds": 60}, "data": [1, 0], "prices": [1, Infinity]}',
     "price [1] = inf"),
    ("prices null", '{"metadata": {"gap_seconds": 60}, "data": [1, 0], "prices": [1, null]}',
     "price [1] = None"),
])
def test_non_finite_or_too_short_fields_name_the_file(tmp_path, case, payload, needle):
    p = _file(tmp_path / "us-east-1a_v100_1.json", None, raw=payload)
    with pytest.raises(TraceFormatError) as exc:
        load_trace(p)
    assert needle in str(exc.value) and str(p) in str(exc.value), case


@pytest.mark.parametrize(("info", "needle"), [
    ({**INFO, "on_demand_price": -1}, "on_demand_price = -1"),
    ({**INFO, "price": "18.98"}, "price = '18.98'"),
    ({**INFO, "on_demand_price": None}, "on_demand_price = None"),
])
def test_price_info_must_hold_positive_numbers(tmp_path, info, needle):
    p = _file(tmp_path / "us-central1-a_h100_16.json", [0, 1], gap=600,
              meta={"zone": "us-central1-a", "price_info": info})
    with pytest.raises(TraceFormatError, match="price_info") as exc:
        load_trace(p)
    assert needle in str(exc.value) and str(p) in str(exc.value)


def test_skynomad_file_without_price_info_is_refused_not_guessed(tmp_path):
    # the same 0/1 read both ways differs on every tick: refuse instead of guessing
    p = _file(tmp_path / "us-central1-a_h100_16.json", [0, 0, 1], gap=600,
              meta={"zone": "us-central1-a", "start_time": "2025-10-04T00:00:00"})
    with pytest.raises(TraceFormatError, match='"inverted": true or false') as exc:
        load_trace(p)
    assert str(p) in str(exc.value)
    q = _file(tmp_path / "x" / "us-central1-a_h100_16.json", [0, 0, 1], gap=600,
              meta={"zone": "us-central1-a", "inverted": True})
    assert load_trace(q).up().tolist() == [True, True, False]
    r = _file(tmp_path / "y" / "us-central1-a_h100_16.json", [0, 0, 1], gap=600,
              meta={"zone": "us-central1-a", "inverted": False})
    assert load_trace(r).up().tolist() == [False, False, True]
    assert load_trace(p, inverted=True).up().tolist() == [True, True, False]  # caller decides
    bad = _file(tmp_path / "z" / "us-central1-a_h100_16.json", [0, 1], gap=600,
                meta={"inverted": "yes"})
    with pytest.raises(TraceFormatError, match="metadata.inverted must be true"):
        load_trace(bad)


def _prices(path, series):
    path.write_text(series if isinstance(series, str) else json.dumps(series))
    return path


@pytest.mark.parametrize(("series", "needle"), [
    ({"us-east-1a_v100_1": [1.2] * 250, "us-east-2a_v100_1": [0.9] * 250}, "250 prices for 200 ticks"),
    ({"us-east-1a_v100_1": [1.2] * 190, "us-east-2a_v100_1": [0.9] * 200}, "190 prices for 200 ticks"),
    ({"us-east-1a_v100_1": ["1.2"] * 200, "us-east-2a_v100_1": [0.9] * 200}, "price [0] = '1.2'"),
    ({"us-east-1a_v100_1": [None] * 200, "us-east-2a_v100_1": [0.9] * 200}, "price [0] = None"),
    ({"us-east-1a_v100_1": [1.2] * 199 + [0], "us-east-2a_v100_1": [0.9] * 200}, "price [199] = 0"),
    ('{"us-east-1a_v100_1": [NaN' + ", 1.2" * 199 + '], "us-east-2a_v100_1": [' +
     ", ".join(["0.9"] * 200) + "]}", "price [0] = nan"),
    ('{"us-east-1a_v100_1": [Infinity' + ", 1.2" * 199 + '], "us-east-2a_v100_1": [' +
     ", ".join(["0.9"] * 200) + "]}", "price [0] = inf"),
    ({"us-east-1a_v100_1": [1.2] * 200}, "no price series for 1 (zone, instance) of the traces: ['us-east-2a_v100_1']"),
    ({"us-west-2c_v100_1": [1.2] * 200}, "covers none of the market's zones"),
    ({"us-east-1a_v100_1": {"0": 1.2}, "us-east-2a_v100_1": [0.9] * 200}, "got dict"),
])
def test_price_file_must_match_the_folder_tick_for_tick(tmp_path, series, needle):
    d = _folder(tmp_path / "traces")
    p = _prices(tmp_path / "prices.json", series)
    with pytest.raises(TraceFormatError) as exc:
        Market.from_dir(d, prices=p)
    assert needle in str(exc.value) and str(p) in str(exc.value)
    # `spotfleet plan --prices` reads the file by the same rules, with the same message
    with pytest.raises(TraceFormatError) as plan_exc:
        attach_spot_prices(load_trace_dir(d), p)
    assert str(plan_exc.value) == str(exc.value)


def test_price_file_aligned_with_files_of_different_lengths(tmp_path):
    # the 16-node folder's files span 11 and 16 days: each series matches its own file
    d = tmp_path / "traces"
    _file(d / "us-east-1a_v100_1.json", [1, 0] * 100)
    _file(d / "us-east-2a_v100_1.json", [1, 1] * 80)
    p = _prices(tmp_path / "prices.json",
                {"us-east-1a_v100_1": [1.5] * 200, "us-east-2a_v100_1": [0.9] * 160})
    with pytest.warns(UserWarning, match="cut to the shortest"):
        m = Market.from_dir(d, prices=p)
    assert m.n_ticks == 160 and m.spot_price.shape == (2, 160)
    assert m.spot_price[:, 0].tolist() == [1.5, 0.9]


def test_no_zone_ever_has_the_nodes_is_an_error_one_zone_a_warning(tmp_path):
    d = tmp_path / "4-node" / "aws-x"
    _file(d / "us-east-1a_v100_1.json", [0, 1, 2, 3] * 50)
    _file(d / "us-east-2a_v100_1.json", [0, 1, 2, 2] * 50)
    with pytest.raises(TraceFormatError, match="at most 3") as exc:
        Market.from_dir(d)  # the folder says 4 nodes; no file ever holds 4
    assert "no zone ever has 4 instance(s)" in str(exc.value)
    with pytest.raises(TraceFormatError, match="no zone ever has 9"):
        Market.from_dir(d, nodes=9)
    with pytest.warns(UserWarning, match="us-east-2a never has 3 instance"):
        m = Market.from_dir(d, nodes=3)  # one zone can: warn about the other, go on
    assert m.available.sum(axis=1).tolist() == [50, 0]


def test_partial_prices_and_different_lengths_warn_naming_the_files(tmp_path):
    d = tmp_path / "mixed"
    _folder(d)
    _file(d / "us-central1-a_h100_16.json", [0, 1] * 100, meta={"zone": "us-central1-a",
          "price_info": INFO}, prices=[18.98] * 200)
    with pytest.warns(UserWarning) as rec:
        m = Market.from_dir(d)
    text = " | ".join(str(w.message) for w in rec)
    assert "only 1 of 3 traces carry per-tick spot prices" in text
    assert "only 1 of 3 traces carry an on-demand price" in text
    assert "us-central1-a_h100_16.json" in text and "us-east-1a_v100_1.json" in text
    assert m.spot_price is None and m.on_demand_price is None  # flat job prices, said aloud
    p = _prices(tmp_path / "p.json", {f"{z}_{i}": [1.0] * 200 for z, i in (
        ("us-east-1a", "v100_1"), ("us-east-2a", "v100_1"), ("us-central1-a", "h100_16"))})
    with warnings.catch_warnings(record=True) as rec2:
        warnings.simplefilter("always")
        m2 = Market.from_dir(d, prices=p)  # a full price file replaces them: no spot warning
    assert not any("per-tick spot prices" in str(w.message) for w in rec2)
    assert m2.spot_price.shape == (3, 200)


def test_folder_hints_nested_folders_and_ignored_files(tmp_path):
    _folder(tmp_path / "collection" / "aws-x")
    with pytest.raises(TraceFormatError, match=r"pass one of \['aws-x'\]"):
        load_trace_dir(tmp_path / "collection")
    d = _folder(tmp_path / "flat")
    (d / "us-west-2a_v100_1.csv").write_text("1,0,1\n")
    with pytest.warns(UserWarning, match=r"ignored 1 file\(s\).*us-west-2a_v100_1.csv"):
        assert len(load_trace_dir(d)) == 2


def test_folder_hint_leaves_out_folders_of_price_files(tmp_path):
    # `fleet-sim --traces ../shared/data` suggested 'spot-prices' (a price file, not traces)
    _folder(tmp_path / "data" / "aws-x")
    (tmp_path / "data" / "spot-prices").mkdir()
    (tmp_path / "data" / "spot-prices" / "aws-v100-02-15-2023.json").write_text("{}")
    with pytest.raises(TraceFormatError, match=r"pass one of \['aws-x'\]$"):
        load_trace_dir(tmp_path / "data")


def test_real_folders_still_load_without_warnings(shared_data):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = Market.from_dir(shared_data / "spot-traces/availability/1-node/aws-02-15-2023",
                            prices=shared_data / "spot-prices/aws-v100-02-15-2023.json")
        h = Market.from_dir(shared_data / "gcp-h100-2025")
    assert v.spot_price.shape == (9, 20158) and np.isfinite(v.spot_price).all()
    assert h.on_demand_price.shape == (13,)
    # the February price file does not fit the April traces (32 s ticks, 19,961 of them)
    with pytest.raises(TraceFormatError, match="20158 prices for 19961 ticks"):
        Market.from_dir(shared_data / "spot-traces/preemption/1-node/aws-04-22-2023",
                        prices=shared_data / "spot-prices/aws-v100-02-15-2023.json")


def test_counts_above_one_without_a_node_count_warn(tmp_path):
    # a 16-node folder copied away from its "16-node" parent: count >= 1 is not count >= 16
    d = tmp_path / "copied" / "aws-08-27-2023"
    _file(d / "us-east-2b_v100_1.json", [16, 15, 3, 0])
    with pytest.warns(UserWarning, match="counts reach 16 but no node count was given"):
        t = load_trace(d / "us-east-2b_v100_1.json")
    assert t.up().tolist() == [True, True, True, False]  # read as asked (1 node), said aloud
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_trace(d / "us-east-2b_v100_1.json", nodes=16).up().tolist() == [
            True, False, False, False]
        _file(tmp_path / "16-node" / "x" / "us-east-2b_v100_1.json", [16, 15, 3, 0])
        assert load_trace(tmp_path / "16-node" / "x" / "us-east-2b_v100_1.json").nodes == 16


def test_duplicate_entries_and_node_counts_name_files_bom_is_read(tmp_path):
    d = tmp_path / "dup"
    for name in ("us-central1-a_h100_16.json", "us-central1-a_h100_8.json"):  # same machine
        _file(d / name, [0, 1] * 10, gap=600, meta={"zone": "us-central1-a", "price_info": INFO},
              prices=[18.98] * 20)
    with pytest.raises(ValueError, match="appears twice") as exc:
        Market.from_dir(d)
    assert "us-central1-a_h100_8.json" in str(exc.value)
    n = tmp_path / "nodes"
    _file(n / "us-east-1a_v100_1.json", [2, 1] * 10, meta={"nodes": 2})
    _file(n / "us-east-2a_v100_1.json", [4, 1] * 10, meta={"nodes": 4})
    with pytest.raises(ValueError, match=r"--nodes N") as exc:
        Market.from_dir(n)
    assert "us-east-2a_v100_1.json" in str(exc.value)
    assert Market.from_dir(n, nodes=2).available.sum(axis=1).tolist() == [10, 10]
    b = tmp_path / "bom" / "us-east-1a_v100_1.json"
    b.parent.mkdir()
    b.write_bytes(b'\xef\xbb\xbf{"metadata": {"gap_seconds": 60}, "data": [1, 0]}')
    assert load_trace(b).up().tolist() == [True, False]
    with pytest.raises(TraceFormatError, match="is a file; pass the folder"):
        load_trace_dir(b)


def test_price_file_with_a_bom_crlf_and_blank_lines_is_read_as_a_trace_file_is(tmp_path):
    """A price file saved by an editor that writes a UTF-8 byte-order mark, CRLF line ends and
    trailing blank lines is read like a trace file with them (until 2026-11-28 the BOM alone
    refused it: "Unexpected UTF-8 BOM (decode using utf-8-sig)"), by ``fleet-sim --prices``
    (``Market.from_dir``) and ``plan --prices`` (``attach_spot_prices``) alike."""
    d = _folder(tmp_path / "traces")
    series = {"us-east-1a_v100_1": [1.5] * 200, "us-east-2a_v100_1": [0.9] * 200}
    text = json.dumps(series, indent=1).replace("\n", "\r\n") + "\r\n\r\n"
    p = tmp_path / "prices.json"
    p.write_bytes(b"\xef\xbb\xbf" + text.encode())
    m = Market.from_dir(d, prices=p)
    assert m.spot_price[:, 0].tolist() == [1.5, 0.9]
    assert [t.spot_prices[0] for t in attach_spot_prices(load_trace_dir(d), p)] == [1.5, 0.9]
