"""Clocks injected into domain code, so budget days and dayparts can follow a replay.

Every clock returns timezone-aware UTC datetimes. Deadlines of a single request use
``time.monotonic`` instead: they measure elapsed server time, not domain time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Source of the current domain time."""

    def now(self) -> datetime:
        """Current time, timezone-aware UTC."""
        ...


class SystemClock:
    """The machine's wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock:
    """A clock that stays where it is set (tests)."""

    def __init__(self, at: datetime) -> None:
        self._at = _aware(at)

    def now(self) -> datetime:
        return self._at

    def set(self, at: datetime) -> None:
        self._at = _aware(at)


class ManualClock:
    """A clock moved by its owner (a replay or a simulation); thread-safe.

    Before the first ``set`` it reads the wall clock. It never moves backwards:
    an earlier ``set`` is ignored, so out-of-order callers cannot rewind budgets.
    Listeners added with :meth:`on_move` run after every move, in the mover's thread
    (the embedded budget service runs its due work there, so a replay is deterministic).
    """

    def __init__(self, at: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._at = _aware(at) if at else None
        self._listeners: list[Callable[[datetime], None]] = []

    def on_move(self, listener: Callable[[datetime], None]) -> None:
        """Call ``listener(now)`` after each ``set`` or ``advance``."""
        self._listeners.append(listener)

    def _moved(self, at: datetime) -> datetime:
        for listener in list(self._listeners):
            listener(at)
        return at

    def now(self) -> datetime:
        with self._lock:
            return self._at if self._at is not None else datetime.now(UTC)

    def set(self, at: datetime) -> datetime:
        """Move to ``at`` unless that is in the past; return the resulting time."""
        at = _aware(at)
        with self._lock:
            if self._at is None or at > self._at:
                self._at = at
            now = self._at
        return self._moved(now)

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            base = self._at if self._at is not None else datetime.now(UTC)
            self._at = base + timedelta(seconds=seconds)
            now = self._at
        return self._moved(now)


def _aware(at: datetime) -> datetime:
    if at.tzinfo is None:
        raise ValueError("clock times must be timezone-aware")
    return at.astimezone(UTC)


def monotonic_ms() -> float:
    """Milliseconds from an arbitrary origin, for request deadlines."""
    return time.monotonic() * 1000.0
