"""What every command of the command line shares: the argument parser that makes bad
arguments one line, the argument types, and the output lines (stdout that survives a
closed pipe, messages kept to one line)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

from simfl.errors import InputError

LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")  # str.splitlines' breaks


class Parser(argparse.ArgumentParser):
    """argparse with bad arguments as simfl's other bad input: one line, exit status 2
    (argparse's own prints its usage text over several lines). Its ``prog`` is the
    command as typed, ``python -m simfl COMMAND``: the usage line of ``--help`` starts
    with it."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{self.prog}: {message} ({self.prog} --help shows the usage)")


def output_path(text: str) -> Path:
    """An output path argument: not empty (Path('') would be the current folder)."""
    if not text:
        raise argparse.ArgumentTypeError("an output path must not be empty")
    return Path(text)


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def say(line: object) -> None:
    """Print a line to stdout. If its reader has gone (``python -m simfl ... | head``),
    print nothing more and go on: what a command does, and its exit status, do not
    depend on who reads its output (stdout is pointed at /dev/null, so the buffered
    rest is not flushed into the closed pipe either)."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def one_line(text: str) -> str:
    """``text`` with its line breaks escaped: a message quoting user input stays one line."""
    return LINE_BREAKS.sub(lambda m: repr(m.group())[1:-1], text)
