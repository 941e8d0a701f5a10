"""``spotfleet fleet-sim`` on malformed folders: exit 2 with one ``error:`` line naming the
file and the fix (never a traceback), warnings as one ``warning:`` line each."""

from __future__ import annotations

import json

import pytest

from fleet.policies.base import JobSpec
from fleet.simulation.sweep import _each, start_ticks
from pipelines.cli import main

ARGS = ["--starts", "2", "--policies", "failover", "--warmup-hours", "24",
        "--work-hours", "12", "--deadline-hours", "18", "--no-omniscient"]


def _folder(d, n=2000, gap=195, zones=("us-east-1a", "us-east-2a"), **first):
    d.mkdir(parents=True, exist_ok=True)
    for i, z in enumerate(zones):
        obj = {"metadata": {"gap_seconds": gap}, "data": [1, 1, 0, 1] * (n // 4)}
        if i == 0:
            obj.update(first)
        (d / f"{z}_v100_1.json").write_text(json.dumps(obj))
    return d


@pytest.mark.parametrize(("case", "first", "needle"), [
    ("truncated", None, "not valid JSON"),
    ("gap string", {"metadata": {"gap_seconds": "195"}}, "metadata.gap_seconds"),
    ("value null", {"data": [1, None, 0]}, "data[1] = None"),
    ("empty data", {"data": []}, "non-empty list"),
    ("no metadata", {"metadata": None}, "missing metadata.gap_seconds"),
    # before 2026-11-28 read, the header printed "196 s ticks", then the run failed naming no file
    ("fractional gap", {"metadata": {"gap_seconds": 195.5}}, "whole number of seconds"),
])
def test_malformed_file_exit_2_naming_the_file(tmp_path, capsys, case, first, needle):
    d = _folder(tmp_path / "t", **({} if first is None else first))
    bad = d / "us-east-1a_v100_1.json"
    if first is None:
        bad.write_text(bad.read_text()[:300])
    rc = main(["fleet-sim", "--traces", str(d), *ARGS])
    out, err = capsys.readouterr()
    assert rc == 2, case
    assert err.startswith("spotfleet fleet-sim: error: ") and str(bad) in err and needle in err
    assert "Traceback" not in err and "fleet-sim:" not in out  # refused before the header


def test_price_file_of_another_folder_is_refused(tmp_path, capsys):
    d = _folder(tmp_path / "t")
    p = tmp_path / "prices.json"
    p.write_text(json.dumps({f"{z}_v100_1": [1.0] * 2500 for z in ("us-east-1a", "us-east-2a")}))
    rc = main(["fleet-sim", "--traces", str(d), "--prices", str(p), *ARGS])
    err = capsys.readouterr().err
    assert rc == 2 and "2500 prices for 2000 ticks" in err and str(p) in err


def test_nodes_above_every_count_is_refused(tmp_path, capsys):
    d = _folder(tmp_path / "t")
    rc = main(["fleet-sim", "--traces", str(d), "--nodes", "2", *ARGS])
    err = capsys.readouterr().err
    assert rc == 2 and "no zone ever has 2 instance(s)" in err and "--nodes" in err


def test_warnings_are_one_line_each_and_the_run_goes_on(tmp_path, capsys):
    d = _folder(tmp_path / "t", prices=[0.9] * 2000)  # only one file carries prices
    (d / "notes.txt").write_text("collected by hand")
    rc = main(["fleet-sim", "--traces", str(d), *ARGS])
    cap = capsys.readouterr()
    assert rc == 0 and "flat spot 0.918 $/h, flat on-demand 3.06 $/h" in cap.out
    lines = cap.err.strip().splitlines()
    warned = [ln for ln in lines if ln.startswith("spotfleet fleet-sim: warning: ")]
    assert any("only 1 of 2 traces carry per-tick spot prices" in ln for ln in warned)
    assert any("notes.txt" in ln for ln in warned)
    assert "UserWarning" not in cap.err and "warnings.warn" not in cap.err


def test_tick_longer_than_the_job_warns(tmp_path, capsys):
    d = _folder(tmp_path / "t", n=400, gap=86400)
    rc = main(["fleet-sim", "--traces", str(d), *ARGS])
    err = capsys.readouterr().err
    assert rc == 0 and "a tick (24 h) is as long as the job's work" in err


def test_too_short_traces_say_how_much_history_fits(tmp_path, capsys):
    d = _folder(tmp_path / "t", n=696, gap=600)  # like the GCP H100 folder: 116 h
    rc = main(["fleet-sim", "--traces", str(d), "--starts", "2", "--no-omniscient"])
    err = capsys.readouterr().err
    assert rc == 2 and "at most 54 h of history fits (--warmup-hours 54 or less" in err
    from fleet.simulation.market import Market

    m = Market.from_dir(d)
    spec = JobSpec(work_hours=24, deadline_hours=36)
    assert len(start_ticks(m, spec, 3, warmup_hours=54)) == 3  # the suggestion works


def test_long_phases_report_progress():
    lines: list[str] = []
    out = _each(lambda s: s * 2, [1, 2, 3], "omniscient", lines.append, every_s=0.0)
    assert out == [2, 4, 6]
    assert lines == ["  omniscient               1/3 starts ...  (0 s)",
                     "  omniscient               2/3 starts ...  (0 s)"]


def test_repeated_start_ticks_are_said(tmp_path, capsys):
    d = _folder(tmp_path / "t", n=696, gap=600)  # 116 h; 54 h of history leaves 5 ticks
    rc = main(["fleet-sim", "--traces", str(d), "--starts", "100", "--warmup-hours", "54",
               "--no-omniscient", "--policies", "on_demand"])
    err = capsys.readouterr().err
    assert rc == 0 and "only 5 distinct start ticks fit" in err and "not 100" in err


def test_unwritable_plot_format_is_refused_before_the_run(tmp_path, capsys):
    d = _folder(tmp_path / "t")
    rc = main(["fleet-sim", "--traces", str(d), "--plot", str(tmp_path / "out.txt"), *ARGS])
    cap = capsys.readouterr()
    assert rc == 2 and "--plot" in cap.err and ".png" in cap.err
    assert "fleet-sim:" not in cap.out  # nothing was simulated


def test_every_command_prints_loader_warnings_as_one_line(tmp_path, capsys):
    d = _folder(tmp_path / "t")
    (d / "notes.txt").write_text("collected by hand")
    assert main(["stats", str(d)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("spotfleet stats: warning: ") and "notes.txt" in err
    assert "UserWarning" not in err


def test_deadline_without_room_for_a_restart_is_refused_up_front(tmp_path, capsys):
    d = _folder(tmp_path / "t")
    args = [a if a != "18" else "12" for a in ARGS]  # deadline = work = 12 h
    rc = main(["fleet-sim", "--traces", str(d), *args])
    cap = capsys.readouterr()
    assert rc == 2 and "give a deadline of at least 12.1 h" in cap.err
    assert "tick" not in cap.err and "fleet-sim:" not in cap.out


def test_zero_checkpoint_time_without_a_notice_is_refused_with_one_meaning_for_both(
        tmp_path, capsys):
    # without a notice 0 min meant "never save" to the policies but "free saves" to the
    # omniscient bound: refused up front, naming the flag and both fixes
    d = _folder(tmp_path / "t")
    rc = main(["fleet-sim", "--traces", str(d), "--checkpoint-minutes", "0", *ARGS])
    cap = capsys.readouterr()
    assert rc == 2 and cap.err.startswith("spotfleet fleet-sim: error: --checkpoint-minutes 0")
    assert "--checkpoint-minutes 0.01" in cap.err and "--notice-seconds 120" in cap.err
    assert "fleet-sim:" not in cap.out and "Traceback" not in cap.err  # nothing simulated
    # with the omniscient bound on (its side of the old disagreement) the same refusal
    no_flag = [a for a in ARGS if a != "--no-omniscient"]
    assert main(["fleet-sim", "--traces", str(d), "--checkpoint-minutes", "0", *no_flag]) == 2
    assert "--checkpoint-minutes 0" in capsys.readouterr().err
    # with a notice a 0-minute save is the notice's free emergency save for both: it runs
    rc = main(["fleet-sim", "--traces", str(d), "--checkpoint-minutes", "0",
               "--notice-seconds", "120", *ARGS])
    cap = capsys.readouterr()
    assert rc == 0 and "error" not in cap.err and "notice 120 s" in cap.out
    rc = main(["fleet-sim", "--traces", str(d), "--checkpoint-minutes", "0.01", *ARGS])
    assert rc == 0 and "error" not in capsys.readouterr().err


def test_output_piped_into_head_stops_quietly(tmp_path, monkeypatch, capsys):
    import pipelines.commands.fleet_sim as cmd

    def closed_pipe(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cmd, "_run", closed_pipe)
    assert main(["fleet-sim", "--traces", str(tmp_path)]) == 141
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(("case", "gap", "first", "needle"), [
    # a tick of 1e12 s: stats / forecast printed garbage, fleet-sim hung in the bound's DP
    ("gap 1e12 s", 1e12, {}, "metadata.gap_seconds = 1e+12 s"),
    ("gap in ms", 195000, {}, "check the unit"),
    ("gap 400 digits", 10**400, {}, "metadata.gap_seconds must be a positive number"),
    ("count 2**40", 195, {"data": [1, 2**40, 0, 1]}, "data[1] = 1099511627776"),
    ("price_info a string", 195, {"metadata": {"gap_seconds": 195, "price_info": "x"}},
     "metadata.price_info must be an object"),
], ids=["gap-1e12", "gap-in-ms", "gap-400-digits", "count-2**40", "price_info-string"])
def test_out_of_range_fields_exit_2_naming_the_file(tmp_path, capsys, case, gap, first, needle):
    # found by the outside evaluation (session 10): before, OverflowError tracebacks
    # (400-digit gap, count 2**40), a silent run (gap in ms, price_info "x") or a hang
    d = _folder(tmp_path / "t", gap=gap, **first)
    rc = main(["fleet-sim", "--traces", str(d), *ARGS])
    err = capsys.readouterr().err
    assert rc == 2, case
    assert err.startswith("spotfleet fleet-sim: error: ") and "us-east-1a_v100_1.json" in err
    assert needle in err, err


def test_price_file_with_a_400_digit_price_is_refused(tmp_path, capsys):
    d = _folder(tmp_path / "t")
    p = tmp_path / "prices.json"
    series = {f"{z}_v100_1": [1.0] * 2000 for z in ("us-east-1a", "us-east-2a")}
    series["us-east-2a_v100_1"][7] = 10**400
    p.write_text(json.dumps(series))
    rc = main(["fleet-sim", "--traces", str(d), "--prices", str(p), *ARGS])
    err = capsys.readouterr().err
    assert rc == 2 and str(p) in err and "price [7]" in err and "us-east-2a_v100_1" in err


def test_plot_path_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys):
    # before: the whole sweep ran, then a FileExistsError traceback (a file named like the
    # plot's folder)
    d = _folder(tmp_path / "t")
    (tmp_path / "out").write_text("a file, not a folder")
    rc = main(["fleet-sim", "--traces", str(d), *ARGS, "--plot", str(tmp_path / "out" / "x.png")])
    cap = capsys.readouterr()
    assert rc == 2 and "cannot create its folder" in cap.err and "out" in cap.err
    assert "fleet-sim:" not in cap.out  # refused before the header and the run


def _nomad_folder(d, zones=("us-central1-a", "us-east4-a"), n=400):
    """SkyNomad-format files (``price_info``: 1 = unavailable); the first zone always up."""
    d.mkdir(parents=True, exist_ok=True)
    info = {"price": 18.98, "on_demand_price": 88.49, "machine_type": "a3-highgpu-8g"}
    for i, z in enumerate(zones):
        data = [0] * n if i == 0 else [0, 0, 1, 0] * (n // 4)
        (d / f"{z}_h100_16.json").write_text(json.dumps(
            {"metadata": {"gap_seconds": 600, "zone": z, "price_info": info}, "data": data}))
    return d


def test_inverted_no_against_skynomad_files_warns_once_and_names_the_convention(tmp_path, capsys):
    # Found running `fleet-sim --inverted no` on ../shared/data/gcp-h100-2025 (2026-11-28): the
    # always-available zone read as never available, and the only warning advised "Lower nodes
    # (--nodes)" for a 1-node job; nothing said the files' own convention was overridden.
    d = _nomad_folder(tmp_path / "gcp")
    args = ["--warmup-hours", "12", "--work-hours", "4", "--deadline-hours", "8", "--starts", "2",
            "--policies", "failover", "--no-omniscient"]
    assert main(["fleet-sim", "--traces-dir", str(d), "--inverted", "no", *args]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "against its own metadata.price_info" in ln]
    assert len(lines) == 1, err  # one line for the folder, not one per file
    assert lines[0].startswith("spotfleet fleet-sim: warning: ") and "2 of 2 file(s)" in lines[0]
    never = [ln for ln in err.splitlines() if "never has 1 instance(s)" in ln]
    assert len(never) == 1 and "--inverted yes" in never[0] and "Lower nodes" not in never[0], err
    assert "Traceback" not in err
    # the files' own convention (auto) or the same one given explicitly: no such warning
    for flag in ([], ["--inverted", "yes"]):
        assert main(["fleet-sim", "--traces-dir", str(d), *flag, *args]) == 0
        err = capsys.readouterr().err
        assert "against its own" not in err and "never has" not in err, err


@pytest.mark.parametrize(("work", "deadline"), [("8", "8.1"), ("12", "12.1")])
def test_deadline_of_exactly_work_plus_restart_runs(tmp_path, capsys, work, deadline):
    """The least deadline the refusal above asks for is accepted: 8.1 - 8 is 0.0999... in
    floats, and until 2026-11-28 ``--deadline-hours 8.1`` with 8 h of work was refused with
    "give a deadline of at least 8.1 h". Every policy meets it (on-demand from the start)
    at or above the bound."""
    d = _folder(tmp_path / "t")
    rc = main(["fleet-sim", "--traces", str(d), "--starts", "2", "--warmup-hours", "24",
               "--work-hours", work, "--deadline-hours", deadline,
               "--policies", "on_demand,failover,spotfleet"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "error" not in cap.err
    assert "spotfleet / omniscient bound: " in cap.out and "deadlines met 100%" in cap.out


def test_too_short_traces_give_hours_that_do_not_contradict_each_other(tmp_path, capsys):
    """A 5.6 h folder (1000 ticks of 20 s) and a 3 h job: the message said "6 h cannot hold 0 h
    of history plus a 3 h job (each start needs 6 h of trace ...)" until 2026-11-28."""
    d = _folder(tmp_path / "t", n=1000, gap=20)
    rc = main(["fleet-sim", "--traces", str(d), "--starts", "2", "--warmup-hours", "0.5",
               "--work-hours", "2", "--deadline-hours", "3", "--no-omniscient"])
    err = capsys.readouterr().err
    assert rc == 2 and "traces too short: 5.6 h cannot hold 0.5 h of history plus a 3 h job " \
                       "(each start needs 6 h of trace" in err


def test_deadline_below_the_work_names_the_flags(tmp_path, capsys):
    """Was "JobSpec.deadline_hours = 6.0 is invalid (must be >= work_hours ...)"."""
    d = _folder(tmp_path / "t")
    rc = main(["fleet-sim", "--traces", str(d), "--work-hours", "8", "--deadline-hours", "6",
               "--starts", "2", "--no-omniscient"])
    cap = capsys.readouterr()
    assert rc == 2 and "--deadline-hours 6 is below --work-hours 8" in cap.err
    assert "at least 8.1 h" in cap.err and "fleet-sim:" not in cap.out


def test_a_folder_of_two_clouds_warns_that_one_egress_rate_bills_every_move(tmp_path, capsys):
    """AWS and GCP files of one gap load as one market (documented); every move between
    regions is billed the first zone's cloud's egress rate (here GCP's 0.05 $/GB, because
    us-central1-a sorts before us-east-1a), which was said nowhere until 2026-11-28."""
    d = _folder(tmp_path / "t", zones=("us-central1-a", "us-east-1a"))
    rc = main(["fleet-sim", "--traces", str(d), "--checkpoint-gb", "100", *ARGS])
    err = capsys.readouterr().err
    assert rc == 0 and "warning: " in err
    assert "mixes clouds ['aws', 'gcp']" in err and "(us-central1-a: gcp, 0.05 $/GB)" in err
    rc = main(["fleet-sim", "--traces", str(d), "--checkpoint-gb", "100",
               "--egress-usd-per-gb", "0.09", *ARGS])
    assert rc == 0 and "mixes clouds" not in capsys.readouterr().err
