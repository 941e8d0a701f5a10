"""The synthetic market and prices read through SkyPilot's offline catalog."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from fleet.market.synthetic import (
    SyntheticMarketConfig,
    ZoneMarketConfig,
    default_market_config,
    generate_market,
)
from fleet.market.traces import load_trace_dir
from fleet.stats.preemption import zone_correlation, zone_stats

AVAIL = "spot-traces/availability/1-node/aws-02-15-2023"


def test_default_market_is_deterministic_and_spans_two_regions():
    cfg = default_market_config()
    assert [z.zone for z in cfg.zones] == ["us-east-1f", "us-east-1c", "us-west-2b"]
    assert cfg.regions == ["us-east-1", "us-west-2"]
    a = generate_market(cfg, 24.0, seed=3)
    b = generate_market(cfg, 24.0, seed=3)
    c = generate_market(cfg, 24.0, seed=4)
    assert all(np.array_equal(x.available, y.available) for x, y in zip(a, b, strict=True))
    assert any(not np.array_equal(x.available, y.available) for x, y in zip(a, c, strict=True))
    assert a[0].n_ticks == int(np.ceil(24 * 3600 / 195))


def test_multi_node_counts():
    cfg = default_market_config(2, nodes_per_zone=4, gap_seconds=60)
    traces = generate_market(cfg, 48.0, seed=1)
    for t in traces:
        assert t.count == 4 and t.available.min() >= 0 and t.available.max() <= 4
        assert len(set(t.available.tolist())) > 2  # partial capacity happens
        # "up" for a 4-node trace means all four are available
        assert np.array_equal(t.up(), t.available >= 4)


def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="hour_profile"):
        ZoneMarketConfig(zone="us-east-1a", base_hazard_per_hour=0.1, regain_mean_hours=1,
                         hour_profile=[1.0] * 23)
    with pytest.raises(ValidationError, match="base_hazard_per_hour"):
        ZoneMarketConfig(zone="us-east-1a", base_hazard_per_hour=-1, regain_mean_hours=1)
    z = ZoneMarketConfig(zone="us-east-1a", base_hazard_per_hour=0.1, regain_mean_hours=1)
    with pytest.raises(ValidationError, match="eu-west-1"):
        SyntheticMarketConfig(zones=[z], region_reclaim_rate={"eu-west-1": 0.1})
    with pytest.raises(ValueError, match="n_zones"):
        default_market_config(10)


def test_synthetic_resembles_real_traces(shared_data):
    """The calibrated 9-zone market reproduces availability, MTTP and regional correlation."""
    real = load_trace_dir(shared_data / AVAIL)
    syn = generate_market(default_market_config(9), real[0].duration_hours, seed=7)
    r = {s.zone: s for s in zone_stats(real)}
    s = {x.zone: x for x in zone_stats(syn)}
    for zone in r:
        assert s[zone].availability == pytest.approx(r[zone].availability, abs=0.12), zone
        assert s[zone].mttp_hours == pytest.approx(r[zone].mttp_hours, rel=0.45), zone
    # ordering of reliability is kept: the best zone is far better than the worst
    assert s["us-west-2b"].availability > s["us-east-1a"].availability + 0.5
    cr, cs = zone_correlation(real), zone_correlation(syn)
    same = [("us-east-1c", "us-east-1d"), ("us-east-1c", "us-east-1f"), ("us-west-2a", "us-west-2c")]
    cross = [("us-east-1c", "us-west-2b"), ("us-east-2a", "us-west-2c")]
    assert np.mean([cs.loc[a, b] for a, b in same]) > 0.2
    assert np.mean([cs.loc[a, b] for a, b in cross]) < 0.1
    assert np.mean([cr.loc[a, b] for a, b in same]) > np.mean([cr.loc[a, b] for a, b in cross])


@pytest.fixture(scope="module")
def skypilot_book(tmp_path_factory, shared_data):
    catalog = shared_data / "skypilot-catalog-v8"
    if not catalog.is_dir():
        pytest.skip(f"{catalog} absent")
    from fleet.market.prices import PriceBook

    return PriceBook.from_skypilot(catalog, home_dir=tmp_path_factory.mktemp("skyhome"))


def test_prices_from_offline_skypilot_catalog(skypilot_book):
    book = skypilot_book
    assert book.source.startswith("skypilot:")
    # numbers from the catalog subset (vms.csv rows), read back through sky.catalog
    assert book.on_demand_price("g5.4xlarge", "us-east-1") == pytest.approx(1.624)
    assert book.spot_price("g5.4xlarge", "us-east-1a") == pytest.approx(0.6438)
    assert book.spot_price("g6.xlarge", "us-east-2b") == pytest.approx(0.2599)
    assert book.instance_types_for("A10G") == ["g5.4xlarge"]
    # V100 (p3.2xlarge) is not in the subset: the trace-price fallback answers
    assert book.instance_types_for("V100") == ["p3.2xlarge"]
    assert book.spot_price("p3.2xlarge", "us-west-2b") == pytest.approx(0.918)
    assert book.on_demand_price("p3.2xlarge", "us-west-2") == pytest.approx(3.06)
    with pytest.raises(KeyError, match="prices.spot.x9.huge"):
        book.spot_price("x9.huge", "us-east-1a")


def test_price_overrides(skypilot_book):
    from fleet.market.prices import PriceOverrides

    book = skypilot_book.with_overrides({"spot": {"g5.4xlarge": {"us-east-1a": 0.5, "*": 0.6}},
                                         "on_demand": {"p3.2xlarge": {"*": 3.5}}})
    assert book.spot_price("g5.4xlarge", "us-east-1a") == 0.5
    assert book.spot_price("g5.4xlarge", "us-west-2c") == 0.6
    assert book.on_demand_price("p3.2xlarge", "us-east-1") == 3.5
    with pytest.raises(ValidationError):
        PriceOverrides(spot={"g5.4xlarge": {"us-east-1a": -1.0}})


def test_offline_catalog_validates_resources(tmp_path, shared_data):
    """sky.Resources(...).validate() works offline with the catalog subset."""
    catalog = shared_data / "skypilot-catalog-v8"
    if not catalog.is_dir():
        pytest.skip(f"{catalog} absent")
    import sky

    from fleet.market.catalog import offline_catalog

    with offline_catalog(tmp_path, catalog) as cat_dir:
        assert (cat_dir / "aws" / "vms.csv").is_file()
        assert not (cat_dir / ".meta" / "aws" / "vms.csv.md5").exists()
        r = sky.Resources(infra="aws/us-east-1", accelerators="A10G:1", use_spot=True)
        r.validate()
        import sky.catalog as skycat

        assert skycat.get_hourly_cost("g6.xlarge", use_spot=False, region="us-west-2",
                                      zone=None, clouds="aws") == pytest.approx(0.8048)


def test_offline_catalog_rejects_a_folder_that_is_not_a_catalog(tmp_path):
    from fleet.market.catalog import install_catalog

    (tmp_path / "src").mkdir()
    with pytest.raises(FileNotFoundError, match="aws/vms.csv"):
        install_catalog(tmp_path / "home", tmp_path / "src")


def test_default_prices_without_skypilot():
    from fleet.market.prices import PriceBook

    book = PriceBook.default()
    assert book.spot_price("p3.2xlarge", "us-east-1a") == pytest.approx(0.918)
    assert book.on_demand_price("p3.2xlarge", "us-east-1a") == pytest.approx(3.06)
    d = book.to_dict()
    assert d["fallback"]["p3.2xlarge"] == {"on_demand": 3.06, "spot": 0.918}
    with pytest.raises(KeyError, match="prices.on_demand.g5.4xlarge"):
        book.on_demand_price("g5.4xlarge", "us-east-1")


def test_market_cache_gives_the_generated_market_and_survives_a_broken_file(tmp_path):
    """Node runners load the run's synthetic market from ``cache_dir``: the same traces as a
    fresh generation; a truncated cache file is regenerated, not an error."""
    import numpy as np

    from fleet.market.config import MarketConfig

    m = MarketConfig(seed=7, hours=48.0, future_hours=24.0)
    fresh = m.traces("all")
    first = m.traces("all", cache_dir=tmp_path)  # generates and writes
    [cached_file] = list(tmp_path.glob("market-*.pkl"))
    again = m.traces("all", cache_dir=tmp_path)  # loads
    for got in (first, again):
        assert [t.zone for t in got] == [t.zone for t in fresh]
        for a, b in zip(got, fresh, strict=True):
            assert np.array_equal(a.available, b.available)
            assert (a.spot_prices is None) == (b.spot_prices is None)
            if a.spot_prices is not None:
                assert np.array_equal(a.spot_prices, b.spot_prices)
    other = MarketConfig(seed=8, hours=48.0, future_hours=24.0).traces("all", cache_dir=tmp_path)
    assert len(list(tmp_path.glob("market-*.pkl"))) == 2  # the seed is part of the key
    assert not all(np.array_equal(a.available, b.available) for a, b in zip(other, fresh, strict=True))
    cached_file.write_bytes(cached_file.read_bytes()[:100])
    history = m.traces("history", cache_dir=tmp_path)
    assert [t.n_ticks for t in history] == [t.n_ticks for t in m.traces("history")]
    assert np.array_equal(history[0].available, fresh[0].available[:history[0].n_ticks])
