"""Every command's ``--help`` usage line, and its one-line errors, name the command as it
is typed: ``python -m simfl COMMAND`` (``run`` included, though it may be left out)."""

from __future__ import annotations

import pytest

from simfl.cli import COMMANDS, main

TRACE_SUBCOMMANDS = ("convert", "stats", "fit")
TYPED = [[name] for name in COMMANDS] + [["trace", sub] for sub in TRACE_SUBCOMMANDS]


@pytest.mark.parametrize("words", TYPED, ids=" ".join)
def test_the_usage_line_names_the_command(words: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*words, "--help"])
    assert stop.value.code == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"usage: python -m simfl {' '.join(words)} [-h]"), first


@pytest.mark.parametrize("words", TYPED, ids=" ".join)
def test_a_bad_argument_names_the_command_and_its_help(
        words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*words, "--no-such-option"]) == 2
    err = capsys.readouterr().err
    typed = f"python -m simfl {' '.join(words)}"
    assert err.startswith(f"simfl: error: {typed}: ") and err.count("\n") == 1, err
    assert err.endswith(f"({typed} --help shows the usage)\n"), err


def test_run_left_out_is_named_in_the_error(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m simfl SCENARIO.toml`` is the run command: its errors say ``run``."""
    assert main(["scenario.toml", "--no-such-option"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simfl: error: python -m simfl run: unrecognized arguments: "
                          "--no-such-option (python -m simfl run --help"), err
