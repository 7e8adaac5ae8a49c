"""The placement counter's bound: the select route is open and its placement id is the
client's, so one process counts at most ``MAX_PLACEMENTS_PER_QUARTER`` distinct ids in a
quarter-hour and the rest under ``OTHER``, losing nothing from the totals.

Mutation seen red: the bound removed (every made-up id its own row)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from adfunnel.clock import ManualClock
from adfunnel.serving import placement_traffic
from adfunnel.serving.placement_traffic import OTHER, PlacementCounter


def test_ids_beyond_the_bound_count_as_other_and_totals_hold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement_traffic, "MAX_PLACEMENTS_PER_QUARTER", 3)
    clock = ManualClock(datetime(2026, 11, 2, 10, 0, tzinfo=UTC))
    counter = PlacementCounter(clock)
    for i in range(10):
        counter.add(f"made-up-{i}", 2, ["auction"])
    counter.add("made-up-0", 1)  # an id counted before keeps its own row
    first = counter.drain()  # a flush within the quarter does not reset the bound
    counter.add("made-up-11", 1)
    rows = {**{(p, q): n for (p, q), n in first.items()}}
    names = {p for p, _ in first} | {p for p, _ in counter.drain()}
    assert names == {"made-up-0", "made-up-1", "made-up-2", OTHER}
    assert sum(n[0] for n in rows.values()) == 11 and sum(n[1] for n in rows.values()) == 21
    assert rows[(OTHER, next(iter(rows))[1])][0] == 7
    clock.advance(900.0)  # a new quarter-hour: new ids count again
    counter.add("made-up-12", 1)
    assert {p for p, _ in counter.drain()} == {"made-up-12"}


def test_a_created_placement_is_never_counted_as_other(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A flood of made-up ids cannot empty a created placement's report (a trial sent
    2,001 made-up ids, then ``feed``'s hour read 0 requests). Mutation seen red: the
    bound applied to created placements too."""
    monkeypatch.setattr(placement_traffic, "MAX_PLACEMENTS_PER_QUARTER", 3)
    clock = ManualClock(datetime(2026, 11, 2, 10, 0, tzinfo=UTC))
    counter = PlacementCounter(clock, configured=lambda p: p == "feed")
    for i in range(10):
        counter.add(f"junk-{i}", 1)
    counter.add("feed", 2, ["auction", "house"])
    counts = {p: n for (p, _), n in counter.drain().items()}
    assert counts["feed"][:2] == [1, 2] and counts[OTHER][0] == 7
