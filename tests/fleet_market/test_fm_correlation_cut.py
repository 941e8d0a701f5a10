"""``spotfleet stats --correlation`` says when it cuts traces to the shortest.

``zone_correlation`` cut files of different lengths to the shortest silently; it now
uses the loaders' rule (``cut_to_common_length``) and its one warning, which names the
files and how many ticks each lost. The correlation itself is unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest

from fleet.market.traces import load_trace_dir
from fleet.stats.preemption import zone_correlation
from pipelines.cli import main


def _file(path, data, gap=195):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))


def _uneven(tmp_path):
    d = tmp_path / "uneven"
    _file(d / "us-east-1a_v100_1.json", [1, 1, 0, 1, 0, 1] + [0] * 4)  # 10 ticks
    _file(d / "us-east-2a_v100_1.json", [0, 1, 1, 0, 1, 1])  # 6 ticks
    _file(d / "us-west-2a_v100_1.json", [1, 0, 0, 1, 1, 1, 0, 0])  # 8 ticks
    return d


WARN = "spotfleet stats: warning: zone correlation: traces differ in length"


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_stats_correlation_warns_once_naming_the_cut_files(tmp_path, capsys, extra):
    assert main(["stats", str(_uneven(tmp_path)), "--correlation", *extra]) == 0
    err = capsys.readouterr().err
    assert err.count(WARN) == 1 and err.count("warning") == 1
    assert "us-east-1a_v100_1.json: 4 ticks cut" in err
    assert "us-west-2a_v100_1.json: 2 ticks cut" in err
    assert "us-east-2a_v100_1.json: " not in err.split("lose their later ticks")[1]  # not cut


def test_stats_without_correlation_cuts_nothing_and_says_nothing(tmp_path, capsys):
    assert main(["stats", str(_uneven(tmp_path))]) == 0
    assert "warning" not in capsys.readouterr().err


def test_the_correlation_is_the_one_of_the_common_ticks(tmp_path):
    traces = load_trace_dir(_uneven(tmp_path))
    with pytest.warns(UserWarning, match="differ in length"):
        c = zone_correlation(traces)
    short = [dataclasses.replace(t, available=t.available[:6]) for t in traces]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one length: no cut, no warning
        assert c.round(12).equals(zone_correlation(short).round(12))


def test_plan_says_the_cut_once(tmp_path, capsys):
    # plan forecasts (which warns about the cut) and correlates the same traces: one line
    assert main(["plan", str(_uneven(tmp_path)), "--work", "0.2", "--deadline", "1", "--json"]) == 0
    err = capsys.readouterr().err
    assert err.count("traces differ in length") == 1 and "zone correlation:" not in err
