"""The console every command prints to, and an error's first line as one command shows it."""

from __future__ import annotations

from rich.console import Console

console = Console()


def first_line(exc: BaseException) -> str:
    """The first non-blank line of ``exc``'s message (its type's name when there is none)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__
