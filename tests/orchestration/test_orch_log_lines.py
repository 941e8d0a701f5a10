"""The run log's lines for a committed save and an insurance interval say which clock they
are in. On the local fleet one wall second is many market seconds (10 wall s per market
hour by default), and before session 14 the two lines stood side by side unlabelled: a save
"stall 0.782 s" (market seconds, converted by the provider) next to "delta 0.0036 s" (the
training process's own seconds) for the same saves, with 16-digit floats."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from checkpointing.events import Event
from pipelines.node_runner import describe_event

REPO = Path(__file__).resolve().parents[2]


def _fidelity_bench():
    spec = importlib.util.spec_from_file_location("bench_decision_fidelity",
                                                  REPO / "benchmarks" / "bench_decision_fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_committed_save_says_its_stall_is_market_time():
    line = describe_event(Event("save_committed", 0.0, "n0", {"step": 157, "kind": "insurance",
                                                               "stall_seconds": 0.78213}))
    assert line == "[n0] checkpoint committed: step 157 (insurance), stall 0.782 s (market time)"


def test_the_interval_line_names_the_process_clock_and_still_parses():
    line = describe_event(Event("interval", 0.0, "n0", {
        "tau_seconds": 0.5526720265710329, "mttp_seconds": 39.318008, "restart_seconds": 3.205635,
        "delta_seconds": 0.0035914887272726435}))
    assert line == ("[n0] insurance interval tau 0.552672 s (MTTP 39.318 s, R 3.20564 s, delta "
                    "0.00359149 s; the training process's clock)")
    bench = _fidelity_bench()  # the decision-fidelity benchmark reads these lines back
    m, detail = bench.INTERVAL.match(line), bench.INTERVAL_DETAIL.search(line)
    assert m and float(m.group(2)) == 0.552672
    assert detail and [float(x) for x in detail.groups()] == [39.318, 3.20564, 0.00359149]
    # a missing figure stays visible as such
    assert "R None s" in describe_event(Event("interval", 0.0, "n0", {"tau_seconds": 1.0}))


def test_an_elastic_groups_interval_line_says_it_insures_against_losing_every_zone():
    line = describe_event(Event("interval", 0.0, "n0", {
        "tau_seconds": 1.22, "mttp_seconds": 14.0, "restart_seconds": 1.0, "delta_seconds": 0.05,
        "node_mttp_seconds": 4.0, "loss_units": 2}))
    assert line == ("[n0] insurance interval tau 1.22 s (MTTP 14 s, R 1 s, delta 0.05 s; the "
                    "training process's clock; MTTP of losing all 2 zones at once, one zone's 4 s)")
    detail = _fidelity_bench().INTERVAL_DETAIL.search(line)  # still parses
    assert detail and [float(x) for x in detail.groups()] == [14.0, 1.0, 0.05]
    single = describe_event(Event("interval", 0.0, "n0", {"tau_seconds": 1.0, "loss_units": 1}))
    assert "zones" not in single
