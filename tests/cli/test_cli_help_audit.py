"""Every `spotfleet` subcommand's --help: each option explains itself, defaults are stated once
and never misleadingly (`--no-verify (default: True)`), and DB URL mistakes are one line."""

from __future__ import annotations

import argparse

import pytest

from pipelines.cli import build_parser, main
from pipelines.commands.argtypes import DefaultsHelpFormatter


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))


PARSERS = list(_walk(build_parser(), ("spotfleet",)))


def _rendered(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    return formatter._expand_help(action) if action.help else ""


def test_every_subcommand_is_audited():
    names = {" ".join(p) for p, _ in PARSERS}
    assert {"spotfleet main", "spotfleet db", "spotfleet local-fleet run", "spotfleet plan"} <= names


@pytest.mark.parametrize(("path", "parser"), PARSERS, ids=[" ".join(p) for p, _ in PARSERS])
def test_help_of_every_option(path, parser):
    problems = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = "/".join(action.option_strings) or action.dest
        text = _rendered(parser, action)
        if not text.strip():
            problems.append(f"{name}: no help text")
        lowered = text.lower()
        if lowered.count("(default") > 1:
            problems.append(f"{name}: the default is stated twice: {text!r}")
        for wrong in ("(default: true)", "(default: false)", "(default: none)"):
            if wrong in lowered:
                problems.append(f"{name}: misleading {wrong}: {text!r}")
    assert not problems, f"{' '.join(path)}: " + "; ".join(problems)
    parser.format_help()  # renders without error


def test_defaults_formatter_states_a_default_only_where_it_helps():
    p = argparse.ArgumentParser(formatter_class=DefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="training steps")
    p.add_argument("--workdir", help="where (default: a temp dir)")
    p.add_argument("--deadline", type=float, help="seconds")
    p.add_argument("--no-verify", dest="verify", action="store_false", help="skip the check")
    p.add_argument("--quiet", action="store_true", help="less output")
    text = " ".join(p.format_help().split())
    assert "training steps (default: 300)" in text
    assert "where (default: a temp dir)" in text and "(default: None)" not in text
    assert "skip the check" in text and "(default: True)" not in text and "(default: False)" not in text


@pytest.mark.parametrize(("argv", "expected"), [
    (["db", "upgrade", "--url", "bogus://x"],
     "spotfleet db: error: statistics DB URL 'bogus://x' (from --url): unknown database type 'bogus'; "
     "use sqlite:///var/spotfleet.db or postgresql+psycopg://user@host:5432/spotfleet\n"),
    (["db", "current", "--url", "not a url"],
     "spotfleet db: error: statistics DB URL 'not a url' (from --url) is not a database URL; use "
     "sqlite:///var/spotfleet.db or postgresql+psycopg://user@host:5432/spotfleet\n"),
    (["db", "upgrade", "--url", "sqlite:////nonexistent-dir/x/spotfleet.db"],
     "spotfleet db: error: statistics DB URL 'sqlite:////nonexistent-dir/x/spotfleet.db' (from --url): "
     "cannot open the SQLite file (unable to open database file); check that the folder of "
     "/nonexistent-dir/x/spotfleet.db exists and is writable\n"),
])
def test_bad_db_urls_are_one_line(argv, expected, capsys):
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.err == expected and out.out == ""


def test_a_refused_postgres_connection_is_one_line_and_hides_the_password(capsys):
    assert main(["db", "upgrade", "--url", "postgresql+psycopg://me:s3cret@127.0.0.1:1/x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "s3cret" not in err and "me:***@127.0.0.1:1/x" in err
    assert "cannot connect" in err and "check host, port, user, password" in err


def test_the_ui_hint_names_a_dagster_that_exists(tmp_path, monkeypatch):
    """A fresh shell has no venv on PATH: the hint must name the venv's dagster itself."""
    import shlex
    import sys
    from pathlib import Path

    from pipelines.commands.main_job import ui_command

    monkeypatch.chdir(Path(sys.executable).parents[2])  # the checkout holding .venv
    home, var = tmp_path / "var" / "dagster_home", tmp_path / "var"
    words = shlex.split(ui_command(home, var, str(tmp_path / "p.yaml")))
    exe = next(w for w in words if "=" not in w)
    assert exe != "dagster" and Path(exe).is_file() and Path(exe).name == "dagster"
    assert words[words.index(exe) + 1:] == ["dev", "-m", "pipelines.definitions"]
    env = dict(w.split("=", 1) for w in words if "=" in w)
    assert env == {"DAGSTER_HOME": str(home), "SPOTFLEET_VAR_DIR": str(var),
                   "SPOTFLEET_PIPELINES": str(tmp_path / "p.yaml")}
    # the statistics DB the run wrote: named unless it is the default under the state folder
    assert "SPOTFLEET_DB_URL" not in ui_command(home, var, None, f"sqlite:///{var / 'spotfleet.db'}")
    pg = "postgresql+psycopg://postgres@127.0.0.1:5432/team"
    words = shlex.split(ui_command(home, var, None, pg))
    assert dict(w.split("=", 1) for w in words if "=" in w)["SPOTFLEET_DB_URL"] == pg
    secret = ui_command(home, var, None, "postgresql+psycopg://u:hunter2@db:5432/team")
    assert "hunter2" not in secret and "put the DB password back into SPOTFLEET_DB_URL" in secret


def _trace_folder_parsers():
    """Every subcommand that reads a spot-trace folder (gfs-report's --traces names GFS job
    traces, v2023,v2026: not a folder)."""
    for path, parser in PARSERS:
        if path[-1] == "gfs-report":
            continue
        names = {s for a in parser._actions for s in (*a.option_strings, a.dest)}
        if {"trace_dir", "--traces", "--traces-dir"} & names:
            yield path, parser


def test_every_trace_folder_subcommand_accepts_traces_dir():
    """One spelling everywhere (until 2026-11-27: --traces in fleet-sim, --traces-dir in
    local-fleet run, positional in stats / forecast / plan / market load / compare); the
    old spellings still work."""
    found = {" ".join(p): {s for a in parser._actions for s in a.option_strings}
             for p, parser in _trace_folder_parsers()}
    assert {"spotfleet fleet-sim", "spotfleet local-fleet run", "spotfleet stats",
            "spotfleet forecast", "spotfleet plan", "spotfleet market load",
            "spotfleet market compare"} <= set(found)
    assert [name for name, opts in found.items() if "--traces-dir" not in opts] == []
    assert "--traces" in found["spotfleet fleet-sim"]  # the old spelling, an alias


def test_traces_dir_and_the_positional_folder_are_one_argument(tmp_path, capsys):
    from fleet.market.synthetic import default_market_config, generate_market
    from fleet.market.traces import save_trace

    for t in generate_market(default_market_config(2), 48.0, seed=1):
        save_trace(t, tmp_path / "m")
    assert main(["market", "load", str(tmp_path / "m")]) == 0
    positional = capsys.readouterr().out
    assert main(["market", "load", "--traces-dir", str(tmp_path / "m")]) == 0
    assert capsys.readouterr().out == positional and "2 valid trace(s)" in positional
    with pytest.raises(SystemExit) as exc:
        main(["stats"])
    assert exc.value.code == 2
    assert "the trace folder is required: give it as TRACE_DIR or --traces-dir DIR" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["stats", str(tmp_path / "m"), "--traces-dir", str(tmp_path / "other")])
    assert "two trace folders" in capsys.readouterr().err


@pytest.mark.parametrize(("path", "parser"), PARSERS, ids=[" ".join(p) for p, _ in PARSERS])
def test_help_prints_no_markup(path, parser):
    """--help is plain text: no reST backticks (local-fleet's description, taken from its
    module docstring, printed ``spotfleet local-fleet run`` until 2026-11-27)."""
    assert "`" not in parser.format_help()


def test_counts_agree_with_their_nouns(tmp_path, capsys):
    """fleet-sim's header on a one-zone folder said "1 zones ... in 1 regions ... 1 starts
    x 1 policies" until 2026-11-27."""
    from fleet.market.synthetic import default_market_config, generate_market
    from fleet.market.traces import save_trace
    from pipelines.commands.argtypes import counted

    assert (counted(1, "region"), counted(2, "region"), counted(0, "zone")) == \
        ("1 region", "2 regions", "0 zones")
    for t in generate_market(default_market_config(1), 60.0, seed=0):
        save_trace(t, tmp_path / "one")
    assert main(["fleet-sim", "--traces-dir", str(tmp_path / "one"), "--starts", "1",
                 "--policies", "on_demand", "--no-omniscient", "--work-hours", "2",
                 "--deadline-hours", "3", "--warmup-hours", "12"]) == 0
    out = capsys.readouterr().out
    assert "fleet-sim: 1 zone (" in out and " in 1 region, " in out and "; 1 start x 1 policy" in out
    assert "on_demand                1 start  mean" in out
