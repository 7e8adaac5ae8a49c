"""The manual clock never moves backwards, and says so; instants parse without Python text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from adfunnel.clock import INSTANT_FORMAT, ClockWentBackwards, ManualClock, parse_instant

T0 = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)


def test_set_moves_forward_and_accepts_the_same_time() -> None:
    clock = ManualClock(T0)
    seen: list[datetime] = []
    clock.on_move(seen.append)
    assert clock.set(T0 + timedelta(seconds=5)) == T0 + timedelta(seconds=5)
    assert clock.set(T0 + timedelta(seconds=5)) == T0 + timedelta(seconds=5)
    assert seen == [T0 + timedelta(seconds=5)] * 2


def test_set_backwards_raises_and_changes_nothing() -> None:
    clock = ManualClock(T0)
    seen: list[datetime] = []
    clock.on_move(seen.append)
    with pytest.raises(ClockWentBackwards) as exc:
        clock.set(T0 - timedelta(microseconds=1))
    assert exc.value.current == T0 and exc.value.requested == T0 - timedelta(microseconds=1)
    assert clock.now() == T0 and seen == []


def test_first_set_of_a_wall_clock_manual_clock_may_go_anywhere() -> None:
    assert ManualClock().set(datetime(2013, 6, 6, tzinfo=UTC)).year == 2013


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2026-07-15T14:00:00+02:00", T0), ("2026-07-15T12:00:00Z", T0),
     ("2026-07-15T12:00:00.000+00:00", T0)],
)
def test_parse_instant(text: str, expected: datetime) -> None:
    assert parse_instant(text) == expected


@pytest.mark.parametrize("value", ["x", "2026-07-15T12:00:00", "2026-07-15", "", 5, None])
def test_parse_instant_refuses_with_one_plain_text(value: object) -> None:
    with pytest.raises(ValueError) as exc:
        parse_instant(value)
    assert str(exc.value) == INSTANT_FORMAT
