"""Argument types shared by the CLI commands: numbers and number lists with clear errors.

Each factory takes the flag's name so the message says which option is wrong and what
it needs, e.g. ``--time-scale must be > 0, got '0'``.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable


def plain_text(doc: str) -> str:
    """A docstring's text for ``--help``: reST literals (````spotfleet run````) without
    their backticks, which argparse would print as they are."""
    return re.sub(r"``(.+?)``", r"\1", doc).replace("`", "")


def counted(n: int, noun: str) -> str:
    """``1 region``, ``2 regions``: a count and its noun, singular for one (the fleet-sim
    header said "1 regions" until 2026-11-27)."""
    return f"{n} {noun if n == 1 else noun + 's'}"


def number(flag: str, *, integer: bool = False, allow_zero: bool = False,
           below: float | None = None, at_most: float | None = None,
           why: str = "") -> Callable[[str], float]:
    """A finite number > 0 (``>= 0`` with ``allow_zero``; an ``int`` with ``integer``;
    ``< below`` / ``<= at_most`` when given, ``why`` saying why in the message)."""

    def parse(text: str):
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            kind = "an integer" if integer else "a number"
            raise argparse.ArgumentTypeError(f"{flag} expects {kind}, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(
                f"{flag} must be {'>= 0' if allow_zero else '> 0'}, got {text!r}")
        if below is not None and value >= below:
            raise argparse.ArgumentTypeError(f"{flag} must be < {below:g}{why}, got {text!r}")
        if at_most is not None and value > at_most:
            raise argparse.ArgumentTypeError(f"{flag} must be at most {at_most:g}{why}, got {text!r}")
        return value

    return parse


def number_list(flag: str, example: str, unit: str = "") -> Callable[[str], list[float]]:
    """Comma-separated finite numbers > 0 (at least one); ``unit`` ends the range message."""

    def parse(text: str) -> list[float]:
        out = []
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            try:
                value = float(item)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{flag} expects comma-separated numbers like {example}; {item!r} is not one"
                ) from None
            if not math.isfinite(value) or value <= 0:
                raise argparse.ArgumentTypeError(f"{flag} values must be > 0{unit}, got {item!r}")
            out.append(value)
        if not out:
            raise argparse.ArgumentTypeError(f"{flag} is empty; give e.g. {example}")
        return out

    return parse


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds ``(default: X)`` to an option's help only where it tells the reader something.

    ``argparse.ArgumentDefaultsHelpFormatter`` appends the default to every option, which
    printed ``--no-verify ... (default: True)`` (the default of the *destination*, the
    opposite of what the flag does), ``(default: False)`` on every switch,
    ``(default: None)`` on optional values, and a second default after help texts that
    already state theirs. Here: no default for switches (store_true/false/const), for
    None, or when the help already says "default".
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text.lower() or action.default in (None, argparse.SUPPRESS)
                or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                                       argparse._StoreConstAction, argparse._CountAction))
                or not action.option_strings):
            return text
        return text + " (default: %(default)s)"


def add_trace_dir(parser: argparse.ArgumentParser, help: str, *, required: bool = True) -> None:
    """The trace folder of a subcommand: ``--traces-dir DIR``, the spelling every subcommand
    accepts (``fleet-sim``, ``local-fleet run``), or the positional ``TRACE_DIR`` this
    subcommand always took (kept working). ``pipelines.cli.main`` puts whichever was given in
    ``args.trace_dir`` (``resolve_trace_dir``)."""
    parser.add_argument("trace_dir", nargs="?", metavar="TRACE_DIR",
                        help=f"{help}; or give it as --traces-dir")
    parser.add_argument("--traces-dir", dest="traces_dir_option", metavar="DIR",
                        help="the same folder as TRACE_DIR, in the spelling of fleet-sim and "
                             "local-fleet run")
    parser.set_defaults(trace_dir_parser=(parser, required))


def resolve_trace_dir(args: argparse.Namespace) -> None:
    """``args.trace_dir`` = the positional or ``--traces-dir`` (``add_trace_dir``); a usage
    error (exit 2) when both are given and differ, or neither where the folder is needed."""
    spec = getattr(args, "trace_dir_parser", None)
    if spec is None:
        return
    parser, required = spec
    positional, option = args.trace_dir, args.traces_dir_option
    if positional and option and positional != option:
        parser.error(f"two trace folders: TRACE_DIR {positional} and --traces-dir {option}; "
                     "give one")
    args.trace_dir = positional or option
    if required and not args.trace_dir:
        parser.error("the trace folder is required: give it as TRACE_DIR or --traces-dir DIR")
