"""Clocks injected into domain code, so budget days and dayparts can follow a replay.

Every clock returns timezone-aware UTC datetimes. Deadlines of a single request use
``time.monotonic`` instead: they measure elapsed server time, not domain time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
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


class ClockWentBackwards(ValueError):
    """A :meth:`ManualClock.set` to a time before the clock's current time."""

    def __init__(self, current: datetime, requested: datetime) -> None:
        super().__init__(f"the clock is at {current.isoformat()}; it cannot move back to "
                         f"{requested.isoformat()}")
        self.current = current
        self.requested = requested


class ManualClock:
    """A clock moved by its owner (a replay or a simulation); thread-safe.

    Before the first ``set`` it reads the wall clock. It never moves backwards: an
    earlier ``set`` raises :class:`ClockWentBackwards` and leaves the time as it was,
    so out-of-order callers cannot rewind budgets and are told so.
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
        """Move to ``at`` (the same time again is allowed); return the resulting time.

        Raises:
            ClockWentBackwards: ``at`` is before the current time (nothing changes).
            ValueError: ``at`` is naive.
        """
        at = _aware(at)
        with self._lock:
            if self._at is not None and at < self._at:
                raise ClockWentBackwards(self._at, at)
            self._at = at
        return self._moved(at)

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            base = self._at if self._at is not None else datetime.now(UTC)
            self._at = base + timedelta(seconds=seconds)
            now = self._at
        return self._moved(now)


#: The instants the domain represents: [EARLIEST_INSTANT, LATEST_INSTANT). Events carry
#: non-negative epoch milliseconds, and the domain adds days, zones and windows (a
#: campaign's local day, flights, attribution, rollup ranges) to the clock's time:
#: 9999-12-31 (``datetime.max``) made the next select overflow. Nothing in the domain
#: adds more than a few years, so a millennium before ``datetime.max`` is headroom.
EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)
#: The calendar days of that range (campaign flights, report ranges), both included.
EARLIEST_DAY = EARLIEST_INSTANT.date()
LATEST_DAY = (LATEST_INSTANT - timedelta(days=1)).date()
#: The problem text of an instant outside the domain's range.
INSTANT_RANGE = (f"must be from {EARLIEST_INSTANT.isoformat()} to before "
                 f"{LATEST_INSTANT.isoformat()}")
#: The problem text of a day outside the domain's range.
DAY_RANGE = f"must be from {EARLIEST_DAY.isoformat()} to {LATEST_DAY.isoformat()}"


def day_problem(day: date) -> str | None:
    """:data:`DAY_RANGE` when ``day`` is outside the domain's days, else None."""
    return None if EARLIEST_DAY <= day <= LATEST_DAY else DAY_RANGE


#: The problem text of a time that :func:`parse_instant` refuses.
INSTANT_FORMAT = "must be an ISO 8601 date-time with a UTC offset, e.g. 2026-07-15T12:00:00Z"


def parse_instant(value: object) -> datetime:
    """An ISO 8601 date-time with a UTC offset (``Z`` or ``±HH:MM``), as UTC, within
    the domain's range (:data:`EARLIEST_INSTANT` to :data:`LATEST_INSTANT`).

    Raises:
        ValueError: with :data:`INSTANT_FORMAT` (no parser internals) for a non-string,
            a malformed text or a time without an offset; :data:`INSTANT_RANGE` for an
            instant the domain cannot represent.
    """
    if not isinstance(value, str):
        raise ValueError(INSTANT_FORMAT)
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(INSTANT_FORMAT) from None
    if at.tzinfo is None:
        raise ValueError(INSTANT_FORMAT)
    try:
        at = at.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 pushed out of range by the offset
        raise ValueError(INSTANT_RANGE) from None
    if not EARLIEST_INSTANT <= at < LATEST_INSTANT:
        raise ValueError(INSTANT_RANGE)
    return at


def _aware(at: datetime) -> datetime:
    if at.tzinfo is None:
        raise ValueError("clock times must be timezone-aware")
    return at.astimezone(UTC)


def monotonic_ms() -> float:
    """Milliseconds from an arbitrary origin, for request deadlines."""
    return time.monotonic() * 1000.0
