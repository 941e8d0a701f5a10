"""A stage is never priced as a V100 because its own accelerator has no price.

The policy driver's fallback prices (0.918 / 3.06 $/h) are p3.2xlarge's; they apply to a
V100 stage (or a driver that does not say its accelerator). An H100 stage whose plan
carried no prices (the catalog in use lacks H100) is an error naming the accelerator and
the fix, and the local fleet refuses to bill an H100 at its default p3.2xlarge price.
"""

from __future__ import annotations

import pytest

from fleet.contract import RunPriors
from fleet.providers.decisions import (
    FALLBACK_ON_DEMAND_PRICE,
    FALLBACK_SPOT_PRICE,
    PolicyDriver,
    Progress,
)

ZONES = ["us-east-1f", "us-east-1c"]


def _spec(accelerator, priors=None):
    return PolicyDriver("spotfleet", ZONES, priors=priors or RunPriors(), deadline_seconds=7200.0,
                        accelerator=accelerator).job_spec(Progress())


def test_v100_without_prices_uses_the_p3_2xlarge_fallback():
    for acc in ("V100", "v100", None):
        spec = _spec(acc)
        assert (spec.spot_price, spec.on_demand_price) == (FALLBACK_SPOT_PRICE, FALLBACK_ON_DEMAND_PRICE)


def test_h100_without_prices_is_an_error_not_a_v100_price():
    with pytest.raises(ValueError, match=r"no spot price for accelerator H100: .*V100 \(p3.2xlarge\) only; "
                                         r"add a catalog with H100"):
        _spec("H100")
    only_spot = RunPriors(spot_price_per_hour={"us-east-1f": 2.1})
    with pytest.raises(ValueError, match="no on-demand price for accelerator H100"):
        _spec("H100", only_spot)


def test_h100_with_prices_from_the_plan_uses_them():
    priced = RunPriors(spot_price_per_hour={"us-east-1f": 2.5, "us-east-1c": 2.2}, on_demand_price_per_hour=6.9)
    spec = _spec("H100", priced)
    assert (spec.spot_price, spec.on_demand_price) == (2.2, 6.9)


@pytest.mark.parametrize("priors", [RunPriors(), RunPriors(spot_price_per_hour={z: 2.2 for z in ZONES},
                                                             on_demand_price_per_hour=6.9)])
def test_the_local_fleet_does_not_bill_an_h100_as_its_default_p3_2xlarge(tmp_path, priors):
    """Without prices the policy cannot decide; with the plan's prices but no instance type the
    node would be billed at the local fleet's default p3.2xlarge (a V100): both fail, no launch."""
    import sys

    from fleet.emulation.injector import CapacitySchedule, TimeScale
    from fleet.providers.base import StageSpec
    from fleet.providers.local import LocalFleetConfig, LocalFleetProvider

    cfg = LocalFleetConfig(schedule=CapacitySchedule.rotating(ZONES), time_scale=TimeScale(1.0),
                           allocation_seconds=0.01, preparation_seconds=0.01, workdir=tmp_path / "w")
    spec = StageSpec(name="h", command=[sys.executable, "-c", "raise SystemExit(3)"],
                     checkpoint_uri=str(tmp_path / "ck"), accelerator="H100", zones=tuple(ZONES), priors=priors)
    with pytest.raises(ValueError, match=r"no (spot|on-demand) price for accelerator H100"):
        LocalFleetProvider(cfg).run_stage(spec)
    assert not list((tmp_path / "w").rglob("*.log"))  # no node process was started
