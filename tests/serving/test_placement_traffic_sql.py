"""The ``placement_traffic`` table on both SQL engines: two processes (two engines on one
database) and a restart add up per placement and UTC quarter-hour, and a read gives
aware UTC quarters back (SQLite stores naive UTC wall time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from adfunnel.campaigns.migrate import upgrade
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine
from adfunnel.serving.placement_traffic import PlacementTraffic

START = datetime(2026, 7, 15, 12, tzinfo=UTC)


def _sums(url: str) -> None:
    engines = [make_engine(url), make_engine(url)]
    try:
        upgrade(engines[0])
        clock = ManualClock(START + timedelta(minutes=44, seconds=59))
        a, b = (PlacementTraffic(clock, e) for e in engines)
        a.counter.add("p", 1, ["auction"])
        b.counter.add("p", 2, ["sponsorship", "house"])
        b.counter.add("q", 1)
        a.flush()
        b.flush()
        a = PlacementTraffic(clock, engines[0])  # a restarted process
        a.counter.add("p", 1)
        clock.set(START + timedelta(minutes=45))
        a.counter.add("p", 3, ["guaranteed"])
        got = a.quarters("p", START, START + timedelta(hours=1))
        assert [(q, c["requests"], c["slots"]) for q, c in got] == [
            (START + timedelta(minutes=30), 3, 4), (START + timedelta(minutes=45), 1, 3)]
        assert got[0][0].tzinfo is not None
        assert got[0][1]["filled_sponsorship"] == got[0][1]["filled_house"] == 1
        assert got[1][1]["filled_guaranteed"] == 1
        assert b.table.seen("q") and not b.table.seen("r")
        assert a.quarters("p", START, START + timedelta(minutes=30)) == []
    finally:
        for e in engines:
            e.dispose()


def test_sqlite_counts_add_up(sqlite_file_url: str) -> None:
    """Mutation that turns it red: the upsert replacing the stored counts."""
    _sums(sqlite_file_url)


@pytest.mark.postgres
def test_postgres_counts_add_up(pg_schema_url: str) -> None:
    _sums(pg_schema_url)


def test_counts_a_failed_write_refused_are_kept_for_the_next(sqlite_file_url: str) -> None:
    """The database refuses a flush (its table is gone): the counts stay held, and once
    it is back the next flush stores them. Mutation that turns it red: a flush that
    drops what it drained when the write fails."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    engine = make_engine(sqlite_file_url)
    try:
        upgrade(engine)
        traffic = PlacementTraffic(ManualClock(START), engine)
        traffic.counter.add("p", 2, ["auction"])
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE placement_traffic RENAME TO away"))
        with pytest.raises(SQLAlchemyError):
            traffic.flush()
        traffic.counter.add("p", 1)
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE away RENAME TO placement_traffic"))
        [(_, counts)] = traffic.quarters("p", START, START + timedelta(hours=1))
        assert (counts["requests"], counts["slots"], counts["filled_auction"]) == (2, 3, 1)
    finally:
        engine.dispose()
