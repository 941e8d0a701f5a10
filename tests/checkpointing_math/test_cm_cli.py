"""`spotfleet cost-table` and `spotfleet intervals` print the playbook's numbers."""

from __future__ import annotations

import pytest

from pipelines.cli import main


def test_cost_table_defaults_print_output_18_6_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "cost-table",
            "--on-demand",
            "1.0",
            "--spot",
            "0.7",
            "--ckpt-hours",
            "0.05",
            "--restart-hours",
            "0",
            "--rates",
            "0.1,0.5,2,8",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "   0.50     0.447         0.876     20.1%      spot WINS" in out
    assert "   8.00     0.112         1.833     61.8%     spot LOSES" in out
    assert "spot wins up to ~1.25 preemptions/hour (mean lifetime ~48.2 min" in out


def test_intervals_in_steps(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "intervals",
            "--ckpt-seconds",
            "19.5",
            "--mttp-hours",
            "3",
            "--restart-seconds",
            "465",
            "--step-seconds",
            "19.75",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    line = next(x for x in out.splitlines() if x.startswith("thesis Eq. 4.5"))
    assert line.split()[-1] == "33"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["cost-table", "--rates", "0.1,abc"], "--rates"),
        (["cost-table", "--spot", "0"], "--spot"),
        (["intervals", "--ckpt-seconds", "-2", "--mttp-hours", "1"], "--ckpt-seconds"),
    ],
)
def test_bad_flags_are_named(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


def test_simulate_training_custom_job(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "simulate-training",
            "--steps",
            "2000",
            "--step-seconds",
            "1,1.2",
            "--ckpt-seconds",
            "5",
            "--backup-seconds",
            "10,12",
            "--alloc-seconds",
            "60,90",
            "--prep-seconds",
            "30",
            "--mttp-hours",
            "0.5,2",
            "--seeds",
            "3",
            "--policies",
            "adaptive,adaptive:always,static:50,on-demand:500",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("MTTP ") == 2
    for name in ("Adaptive", "Adaptive (always)", "Per-50", "On-demand (Per-500)", "Overhead"):
        assert name in out


def test_simulate_training_thesis_preset_prints_published_overheads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc = main(["simulate-training", "--thesis-table", "6.2", "--seeds", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Per-51" in out and "published overheads: Adaptive +2.86%" in out


def test_simulate_training_errors_name_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate-training", "--thesis-table", "6.2", "--step-seconds", "3,1"])
    assert "--step-seconds" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["simulate-training", "--thesis-table", "6.2", "--notice-probability", "2"])
    assert "--notice-probability" in capsys.readouterr().err
    assert main(["simulate-training", "--step-seconds", "1"]) == 2
    err = capsys.readouterr().err
    assert "--steps" in err and "--ckpt-seconds" in err
