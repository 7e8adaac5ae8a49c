"""Command-line entry points: ``adfunnel serve | tracker | aggregator | replay | simulate |
bench | events``.

The root app only: each family of commands lives in its own module (processes, simulation,
measure for ``bench``, data_model for ``events`` and ``model``; summary renders figures)."""

from __future__ import annotations

from typing import Annotated

import typer

from adfunnel.cli import data_model, measure, processes, simulation

app = typer.Typer(help="adfunnel: an ad server for owned-and-operated inventory.",
                  no_args_is_help=True, add_completion=False)


def _print_version(value: bool) -> None:
    if value:
        from adfunnel import __version__

        typer.echo(f"adfunnel {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """adfunnel: an ad server for owned-and-operated inventory."""


# Registered in the order `adfunnel --help` lists them.
app.command()(processes.serve)
app.command()(processes.tracker)
app.command()(processes.aggregator)
app.command()(simulation.replay)
app.command("budget-service")(processes.budget_service)
app.command()(processes.fleet)
app.command()(simulation.simulate)
app.add_typer(measure.bench_app, name="bench")
app.add_typer(data_model.events_app, name="events")
app.add_typer(data_model.model_app, name="model")


if __name__ == "__main__":
    app()
