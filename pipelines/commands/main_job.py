"""``spotfleet main`` (the whole graph of the example pipeline, in-process) and ``spotfleet db``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "main", help="materialize the whole Dagster graph of the example pipeline on the local fleet",
        description="Materialize market -> statistics -> forecast -> plan -> training stages -> cost "
                    "report in-process, on the local emulated fleet with a synthetic market that "
                    "preempts it (SQLite + local checkpoints under --var-dir). Prints where the cost "
                    "report and plots are.")
    p.add_argument("--pipelines", default=None, help="pipelines YAML (default: pipelines/examples/two_stage.yaml)")
    p.add_argument("--pipeline", default=None, help="which pipeline of the file (default: the first)")
    p.add_argument("--var-dir", default=None, help="state folder (default: $SPOTFLEET_VAR_DIR or ./var)")
    p.add_argument("--db-url", default=None, help="statistics DB URL (default: $SPOTFLEET_DB_URL or SQLite in var)")
    p.add_argument("--verbose", action="store_true", help="show Dagster's DEBUG events too")
    p.set_defaults(handler=run_main, exit_fast=exit_fast)

    db = sub.add_parser("db", help="statistics database: schema migrations",
                        description="Apply or show the statistics DB schema revision (alembic).")
    db.add_argument("action", choices=["upgrade", "current"],
                    help="upgrade: migrate to the newest schema; current: show the revision")
    db.add_argument("--url", default=None, help="DB URL (default: $SPOTFLEET_DB_URL or ./var/spotfleet.db)")
    db.set_defaults(handler=run_db)


def run_db(args) -> int:
    from infra.db.session import current_revision, db_url, head_revision, upgrade
    from pipelines.commands.db_errors import require_existing_sqlite, shown_url, with_db

    # `current` only reads: no state folder and no database are created for it
    url = db_url(args.url, create_dir=args.action == "upgrade")
    shown = shown_url(url)
    flag = "--url" if args.url else None
    if args.action == "current":
        require_existing_sqlite(url, flag, "so it has no revision to show; nothing was created. "
                                "Point --url (or $SPOTFLEET_DB_URL) at an existing database, "
                                "or create it at the newest revision with `spotfleet db upgrade` "
                                "(`spotfleet main` does too)")
    if args.action == "upgrade":
        rev = with_db(url, flag, lambda: upgrade(url))
        print(f"statistics DB {shown} is at revision {rev} (head {head_revision()})")
    else:
        rev = with_db(url, flag, lambda: current_revision(url))
        head = head_revision()
        state = "up to date" if rev == head else "behind: run `spotfleet db upgrade`"
        print(f"statistics DB {shown}: revision {rev or '(none)'}; code head {head} ({state})")
    return 0


def run_main(args) -> int:
    t0 = time.perf_counter()
    from pipelines.home import prepare_dagster_home, var_dir

    var = var_dir(args.var_dir)
    home = prepare_dagster_home(var)
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ.setdefault("SPOTFLEET_VAR_DIR", str(var))
    print(f"[spotfleet main] state in {var} (DAGSTER_HOME={home})", flush=True)

    # configuration first (no Dagster import yet): a wrong YAML is reported once, with no run.
    # --pipelines goes to the loader, not into os.environ: nothing in this run reads the
    # variable again (the configs are passed on), and a later in-process call must not see it
    from pipelines.config import load_default_pipelines

    configs = load_default_pipelines(str(Path(args.pipelines).resolve()) if args.pipelines else None)
    cfg = next((c for c in configs if c.name == args.pipeline), None) if args.pipeline else configs[0]
    if cfg is None:
        raise ValueError(f"--pipeline {args.pipeline!r} is not in the file; choose from {[c.name for c in configs]}")
    from pipelines.commands.db_errors import with_db
    from pipelines.resources import StatsDB

    stats_db = StatsDB(url=args.db_url or "", var_dir=str(var))
    with_db(stats_db.resolved_url(), "--db-url" if args.db_url else None, stats_db.engine)  # migrate first
    print("[spotfleet main] loading the Dagster code location ...", flush=True)
    _start_fork_server()  # warms up (imports torch) while Dagster loads and the market is analysed

    from dagster import DagsterInstance

    from pipelines.code_location import build_definitions, main_job_name
    from pipelines.commands.console_log import concise_console_logger
    from pipelines.commands.main_fleet import MainFleetResource  # runners fork from the server

    defs = build_definitions(configs, resources={"stats_db": stats_db,
                                                 "fleet": MainFleetResource(var_dir=str(var))},
                             # the console without configuration errors' stack traces (--verbose: all)
                             loggers=None if args.verbose else {"console": concise_console_logger})
    job = defs.resolve_job_def(main_job_name(cfg.name))  # the whole graph and its checks, one run
    print(f"[spotfleet main] pipeline {cfg.name}: stages {' -> '.join(s.name for s in cfg.stages)} on the "
          f"{cfg.provider} fleet; market {cfg.market.kind} (seed {cfg.market.seed}), one market hour = "
          f"{cfg.market.wall_seconds_per_market_hour:g} wall s", flush=True)
    level = "DEBUG" if args.verbose else "INFO"
    t_start = time.perf_counter()
    from pipelines.home import fast_dagster_sqlite

    fast_dagster_sqlite(home)  # no fsync per Dagster event (local run history only; see the function)
    with DagsterInstance.get() as instance:
        result = job.execute_in_process(
            instance=instance, raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": level}}}})
        t_run = time.perf_counter() - t_start
        from pipelines.commands.main_report import (
            check_line,
            print_report_paths,
            print_stage_summary,
            run_checks,
        )

        checks = run_checks(defs, cfg, instance, result, level)  # this run's, or a report run's after a failure
    print("", flush=True)
    print_stage_summary(cfg, stats_db, result.run_id)
    failed_checks = [c for c in checks if c.passed is False]  # skipped: None
    for c in checks:
        print(check_line(c))
    total = time.perf_counter() - t0
    print(f"\n[spotfleet main] run {result.run_id} {'succeeded' if result.success else 'FAILED'} in "
          f"{t_run:.0f} s ({total:.0f} s with setup)")
    print_report_paths(cfg, var, result.run_id)
    print(f"  statistics DB: {stats_db.resolved_url()}")
    print(f"  UI:          {ui_command(home, var, args.pipelines, stats_db.resolved_url())}")
    if not result.success:
        config_errors = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"
                         and "configuration error" in str(getattr(e.event_specific_data.error, "message", ""))]
        if config_errors:  # printed once more, without the stack, where the user reads last
            err = config_errors[0].event_specific_data.error
            print(f"spotfleet main: {err.message.strip().removeprefix('dagster._core.definitions.events.Failure: ')}"
                  "\n  (not retried: a configuration error fails the same way every time; fix it and rerun)",
                  file=sys.stderr)
            return 2
        print("  the run failed: read the step errors above; fix the config or the cause and rerun "
              "(stages resume from their checkpoints only within a run and its retries)", file=sys.stderr)
        return 1
    return 1 if any(c.severity.value == "ERROR" for c in failed_checks) else 0


_FORK_SERVER = None
#: what the fork server imports besides torch and numpy: the node runner's modules, so that
#: each stage attempt's runner forks from it too (pipelines/commands/main_fleet.py)
NODE_RUNNER_PRELOAD = ("pipelines.node_runner", "dagster_pipes", "fleet.providers.local.provider",
                       "fleet.market.config", "fleet.market.synthetic")


def _start_fork_server() -> None:
    """A warm fork server for the local fleet's training processes, stopped at exit.

    Node launches (first ones and relaunches after preemptions) then fork an interpreter
    that already imported torch instead of starting a fresh one
    (``fleet/providers/local/forkserver.py``). ``SPOTFLEET_FORK_SERVER=off`` disables it.
    """
    import atexit
    import tempfile

    from fleet.providers.local.forkserver import ENV_FORK_SERVER, start_server

    global _FORK_SERVER
    if os.environ.get(ENV_FORK_SERVER, "").lower() in ("off", "0", "no", "false"):
        os.environ.pop(ENV_FORK_SERVER, None)
        return
    if _FORK_SERVER is not None:  # a previous `main` in this process (tests): one server at a time
        _FORK_SERVER.stop()
    _FORK_SERVER = start_server(Path(tempfile.gettempdir()) / f"spotfleet-fork-{os.getpid()}.sock",
                                preload=NODE_RUNNER_PRELOAD)
    os.environ[ENV_FORK_SERVER] = _FORK_SERVER.socket_path  # inherited by node runners -> providers
    atexit.register(_FORK_SERVER.stop)


def exit_fast(code: int) -> None:
    """End the ``spotfleet main`` process now that everything is written and printed.

    Only the console command calls this (``pipelines.cli.main`` without argv): the run,
    its reports and the statistics DB are committed, the Dagster instance is closed. It
    stops the fork server, flushes stdio and logging and skips the interpreter's teardown
    of dagster/pandas/sqlalchemy (~0.5-1.5 s the user waits for after the summary).
    """
    import logging

    if _FORK_SERVER is not None:
        _FORK_SERVER.stop()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def ui_command(home: Path, var: Path, pipelines: str | None = None, db_url: str | None = None) -> str:
    """The shell line that opens this state in the Dagster UI (works in a fresh shell).

    ``dagster`` is not on PATH unless the venv is activated, so the command names the
    ``dagster`` next to this interpreter (``.venv/bin/dagster`` from the checkout).
    ``db_url``: the statistics DB this run wrote; named as ``SPOTFLEET_DB_URL`` unless it is
    the default ``<var>/spotfleet.db`` (without it the UI opened an empty SQLite there, and a
    report run from the UI overwrote the reports with empty ones). A password in it is
    shown redacted: the line then says to put it back.
    """
    import shlex

    exe = Path(sys.executable).with_name("dagster")
    try:
        shown = f"./{exe.relative_to(Path.cwd())}" if exe.is_relative_to(Path.cwd()) else str(exe)
    except ValueError:
        shown = str(exe)
    env = [f"DAGSTER_HOME={shlex.quote(str(home))}"]
    if var != (Path.cwd() / "var").resolve():
        env.append(f"SPOTFLEET_VAR_DIR={shlex.quote(str(var))}")
    if pipelines:
        env.append(f"SPOTFLEET_PIPELINES={shlex.quote(str(Path(pipelines).resolve()))}")
    note = ""
    if db_url and db_url != f"sqlite:///{var / 'spotfleet.db'}":
        from sqlalchemy.engine import make_url

        shown_url = make_url(db_url).render_as_string(hide_password=True)  # the user stays
        env.append(f"SPOTFLEET_DB_URL={shlex.quote(shown_url)}")
        if shown_url != db_url:
            note = "   (put the DB password back into SPOTFLEET_DB_URL)"
    return f"{' '.join(env)} {shlex.quote(shown)} dev -m pipelines.definitions{note}"
