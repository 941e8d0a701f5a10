"""Argument types shared by the CLI commands: numbers and number lists with clear errors.

Each factory takes the flag's name so the message says which option is wrong and what
it needs, e.g. ``--time-scale must be > 0, got '0'``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


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
