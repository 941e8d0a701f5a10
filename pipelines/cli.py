"""The ``spotfleet`` command line.

Each subsystem registers its subcommands from a module in ``pipelines/commands/``
(a ``register(subparsers)`` function). Heavy imports happen inside the handlers so
``spotfleet --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from pipelines.commands.argtypes import resolve_trace_dir

COMMAND_MODULES = (
    "pipelines.commands.costs",  # cost-table, intervals          (checkpointing math)
    "pipelines.commands.training_sim",  # simulate-training        (thesis simulator)
    "pipelines.commands.fleet_cmds",  # market, stats, forecast, plan
    "pipelines.commands.fleet_sim",  # fleet-sim                    (fleet policies)
    "pipelines.commands.local_fleet",  # local-fleet               (providers)
    "pipelines.commands.gfs",  # gfs-eval, gfs-forecast        (GFS scheduling)
    "pipelines.commands.main_job",  # main, db                      (Dagster main job)
    "pipelines.commands.cost_report_cmd",  # cost-report         (cost report of a run / period)
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spotfleet",
        description="Spot GPU fleets that train like on-demand. See README.md and docs/.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # subsystem not built yet
            raise
        module.register(sub)
    return parser


_OWN = ("builtins", "fleet", "checkpointing", "pipelines", "assets", "infra")  # not libraries


def _one_line_warnings(command: str, fallback):
    """A ``warnings.showwarning`` printing the project's own warnings (``UserWarning`` and
    the project's subclasses of it: the loader's "zone never available", "only some files
    carry prices", ...) as one
    ``spotfleet <command>: warning: ...`` line, without the source line; other
    categories (library deprecations) keep Python's format."""
    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UserWarning) and category.__module__.split(".")[0] in _OWN:
            print(f"spotfleet {command}: warning: {message}", file=sys.stderr, flush=True)
        else:
            fallback(message, category, filename, lineno, file, line)
    return show


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve_trace_dir(args)  # TRACE_DIR or --traces-dir (argtypes.add_trace_dir)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warnings(args.command, warnings.showwarning)
            code = int(args.handler(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"spotfleet {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed: stop quietly, as cat does
        if argv is None:  # the console command: keep the interpreter's final flush quiet
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    if argv is None and getattr(args, "exit_fast", None):  # the console command, not a caller in-process
        args.exit_fast(code)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
