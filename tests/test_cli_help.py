"""The command line's help: ``--version``, and every option of every command shows its
default (or says it is required)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from adfunnel import __version__
from adfunnel.cli import app

ROOT = typer.main.get_command(app)


def commands(group: Any = ROOT, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], Any]]:
    """Every leaf command with its path of names (``("bench", "http")``); typer's own
    click commands, read by their attributes."""
    if hasattr(group, "commands"):
        for name, sub in sorted(group.commands.items()):
            yield from commands(sub, (*path, name))
    else:
        yield path, group


ALL = list(commands())


def test_version() -> None:
    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0 and done.output.strip() == f"adfunnel {__version__}"


def test_every_command_is_walked() -> None:
    names = {" ".join(p) for p, _ in ALL}
    assert {"serve", "tracker", "aggregator", "replay", "simulate", "budget-service",
            "bench http", "bench events", "model train"} <= names


@pytest.mark.parametrize(("path", "command"), ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_option_shows_its_default(path: tuple[str, ...], command: Any) -> None:
    options = [p for p in command.params
               if p.param_type_name == "option" and p.name != "help"]
    for opt in options:
        if opt.required:
            continue
        shown = opt.show_default
        assert shown is not False, f"{opt.name}: show_default is off"
        assert isinstance(shown, str) or opt.default is not None, \
            f"--{opt.name} defaults to None and says nothing of what that means"
    done = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400"})
    assert done.exit_code == 0, done.output
    for opt in options:
        # the option's own row of the table: it starts with the option's name
        line = next(ln for ln in done.output.splitlines()
                    if ln.lstrip("│ *").startswith(opt.opts[0] + " "))
        assert ("[default: " in line) or ("[required]" in line), line
