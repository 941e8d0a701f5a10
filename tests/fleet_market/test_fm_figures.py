"""Every fleet figure renders to a PNG through the shared helpers in fleet.figures."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from fleet.figures import bars_with_interval, pyplot, save_figure
from fleet.market.compare import plot_comparison
from fleet.market.synthetic import default_market_config, generate_market
from fleet.policies.base import JobSpec
from fleet.simulation.market import Market
from fleet.simulation.plot import plot_sweeps
from fleet.simulation.sweep import make_policies, run_sweep
from fleet.stats.forecast import forecast_zones
from fleet.stats.plots import plot_forecasts, plot_zone_stats
from fleet.stats.preemption import zone_stats

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def traces():
    return generate_market(default_market_config(n_zones=3), 96.0, seed=1)


def _is_png(path) -> bool:
    return path.exists() and path.read_bytes()[:8] == PNG


def test_bars_with_interval_never_draws_negative_error_bars(tmp_path):
    fig, ax = pyplot().subplots()
    bars_with_interval(ax, np.arange(3), [2.0, 1.0, 3.0], [1.0, 1.5, 2.0], [3.0, 0.5, 4.0],
                       interval_label="ci")
    [err] = ax.containers[1:]
    lines = err.lines[2][0].get_segments()  # one vertical segment per bar
    assert [tuple(round(v, 6) for v in (s[0][1], s[1][1])) for s in lines] == \
        [(1.0, 3.0), (1.0, 1.0), (2.0, 4.0)]  # the 2nd interval lies below its bar: clipped to 0
    out = save_figure(fig, tmp_path / "sub" / "bars.png")
    assert _is_png(out) and not plt.fignum_exists(fig.number)


def test_fleet_figures_render(tmp_path, traces):
    assert _is_png(plot_zone_stats(zone_stats(traces), tmp_path / "a" / "stats.png", title="t"))
    fc = forecast_zones(traces, None, 12.0, n_samples=50, seed=0)
    assert _is_png(plot_forecasts(fc, tmp_path / "fc.png"))
    assert _is_png(plot_comparison(traces, generate_market(default_market_config(n_zones=3), 96.0, seed=2),
                                   tmp_path / "cmp.png"))
    spec = JobSpec(work_hours=4.0, deadline_hours=8.0)
    res = run_sweep(Market.from_traces(traces), spec, make_policies()[:2], [0, 12, 24],
                    with_omniscient=False)
    assert _is_png(plot_sweeps([("small", res)], tmp_path / "sweep.png"))
    with pytest.raises(ValueError, match="no statistics"):
        plot_zone_stats([], tmp_path / "x.png")


def test_sweep_plot_shows_policies_far_cheaper_than_on_demand(tmp_path, traces, monkeypatch):
    # the GCP H100 folder's spot is about 0.18x on-demand: the axis was fixed at 0.25-1.05,
    # so `fleet-sim --plot` drew only on-demand and the one-zone baselines, not spotfleet
    import fleet.simulation.plot as sweep_plot

    figs = []
    monkeypatch.setattr(sweep_plot, "save_figure",
                        lambda fig, path, **kw: figs.append(fig) or save_figure(fig, path, **kw))
    spec = JobSpec(work_hours=4.0, deadline_hours=8.0, spot_price=0.5, on_demand_price=10.0)
    res = run_sweep(Market.from_traces(traces), spec, make_policies(), [0, 12, 24],
                    with_omniscient=True)
    od = res.on_demand_cost or res.spec.on_demand_cost
    ratios = [r.cost / od for runs in res.runs.values() for r in runs]
    ratios += [c / od for c in res.omniscient]
    assert min(ratios) < 0.25  # the case: spot far cheaper than on-demand
    assert _is_png(plot_sweeps([("cheap spot", res)], tmp_path / "sweep.png"))
    lo, hi = figs[0].axes[0].get_xlim()
    assert lo < min(ratios) and hi > max(ratios)


def test_family_panels_keep_spotfleet_and_the_cheapest_policy_in_view():
    """plot_families' scale (before session 14 a fixed 0.98-1.6: the all-break regime, where
    every policy pays 1.3-3x the bound, drew empty panels): 1.6 while everything fits, raised
    to show spotfleet and the cheapest other policy at each D/W, never for on-demand alone
    or a far dearer baseline, capped at 4."""
    from fleet.simulation.plot import _families_ylim_top

    calm = {"spotfleet": [1.02, 1.01], "failover": [1.10, 1.05], "on_demand": [3.0, 3.1]}
    assert _families_ylim_top(calm) == 1.6
    broken = {"spotfleet": [1.35, 2.42], "greedy_1zone": [1.37, 2.38], "failover": [1.35, 2.49],
              "uniform_progress_multi": [9.0, 9.0], "on_demand": [1.32, 2.30]}
    top = _families_ylim_top(broken)
    assert top == pytest.approx(1.05 * 2.42) and top < 9.0
    assert _families_ylim_top({"spotfleet": [7.0], "failover": [8.0]}) == 4.0
