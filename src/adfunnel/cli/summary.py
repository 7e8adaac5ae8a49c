"""What ``adfunnel simulate`` and ``adfunnel bench`` show a person: a progress bar while
they run and, after, a table of the figures with their units (the JSON report, with
``--json``, keeps the exact values).

A figure's unit is read from its name, the house convention (``_ms`` milliseconds,
``_us`` microseconds, ``_s`` seconds, ``_per_s`` per second, ``_micros`` money micros,
``_bytes``, ``_pct`` percent); shares, rates and ratios are fractions, shown as such.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

#: (name suffix, unit), the longest suffixes first.
UNITS: tuple[tuple[str, str], ...] = (
    ("_per_s", "/s"), ("per_core", "/s per busy core"), ("_micros", "micros"),
    ("_bytes", "bytes"), ("_pct", "%"), ("_cores", "cores"), ("_ms", "ms"), ("_us", "µs"),
    ("_s", "s"), ("_share", "fraction"), ("_rate", "fraction"), ("_ratio", "ratio"),
    ("agreement", "fraction"),
)


def unit_of(name: str) -> str:
    """The unit a figure's name states (``p99_ms`` → ``ms``), or "" when it states none
    (counts)."""
    for suffix, unit in UNITS:
        if name.endswith(suffix):
            return unit
    return ""


def flatten(result: dict[str, Any], prefix: str = "", depth: int = 2) -> Iterator[
        tuple[str, Any]]:
    """(dotted name, value) of every figure, nested dicts up to ``depth`` levels down;
    lists are summarised by their length."""
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and depth > 0:
            yield from flatten(value, name + ".", depth - 1)
        elif isinstance(value, list | tuple):
            yield name, f"[{len(value)} items]"
        else:
            yield name, value


def format_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "n/a" if value is None else str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)


def summary_table(title: str, result: dict[str, Any]) -> Table:
    """A three-column table (figure, value, unit) of ``result``."""
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("unit")
    for name, value in flatten(result):
        table.add_row(name, format_value(value), unit_of(name.rsplit(".", 1)[-1]))
    return table


@contextmanager
def progress_bar(console: Console, what: str,
                 total: float | None = None) -> Iterator[Callable[[float, float], None]]:
    """A progress bar on ``console`` while the block runs; yields ``update(done, total)``
    for work that can tell how far it is. Without a total the bar pulses and the time
    elapsed counts up (a benchmark that cannot tell)."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
               TaskProgressColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(what, total=total)

        def update(done: float, of: float) -> None:
            bar.update(task, completed=done, total=of)

        yield update
        task_total = bar.tasks[0].total
        bar.update(task, completed=task_total if task_total is not None else 1,
                   total=task_total if task_total is not None else 1)
