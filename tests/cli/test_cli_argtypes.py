"""Shared CLI argument types: every bad value is rejected with the flag and the rule named."""

from __future__ import annotations

import argparse

import pytest

from pipelines.commands.argtypes import number, number_list


def test_number_accepts_and_rejects_with_the_flag_named():
    assert number("--x")("2.5") == 2.5
    assert number("--n", integer=True)("7") == 7
    assert number("--z", allow_zero=True)("0") == 0.0
    for parser, text, msg in [(number("--x"), "0", "--x must be > 0, got '0'"),
                              (number("--x"), "nan", "--x must be > 0"),
                              (number("--z", allow_zero=True), "-1", "--z must be >= 0"),
                              (number("--x"), "abc", "--x expects a number, got 'abc'"),
                              (number("--n", integer=True), "1.5", "--n expects an integer")]:
        with pytest.raises(argparse.ArgumentTypeError, match=msg):
            parser(text)


def test_number_list_parses_and_names_the_bad_item():
    parse = number_list("--rates", "0.1,0.5,2", unit=" per hour")
    assert parse("0.1, 0.5,,2") == [0.1, 0.5, 2.0]
    with pytest.raises(argparse.ArgumentTypeError, match="'x' is not one"):
        parse("1,x")
    with pytest.raises(argparse.ArgumentTypeError, match="must be > 0 per hour, got '0'"):
        parse("1,0")
    with pytest.raises(argparse.ArgumentTypeError, match="--rates is empty; give e.g. 0.1,0.5,2"):
        parse(" , ")
