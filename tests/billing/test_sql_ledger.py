"""SqlLedger specifics beyond the contract suite: several processes on one SQLite file,
an in-memory SQLite engine shared by threads, and agreement with MemoryLedger."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.billing.batch_model import LedgerWrite
from adfunnel.billing.ledger import MemoryLedger
from adfunnel.billing.model import EventType, LedgerEvent, Outcome
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.billing.sql_ledger_rows import LedgerConflict, LoadedView
from adfunnel.billing.tables import (
    campaign_day_spend,
    campaign_spend,
    ledger,
    ledger_counters,
    ledger_held,
    ledger_ivt,
)
from adfunnel.db import make_engine, metadata

DAY = date(2026, 3, 14)
TABLES = [ledger, campaign_day_spend, campaign_spend, ledger_counters, ledger_ivt, ledger_held]


def event(
    imp: str, kind: EventType = EventType.IMPRESSION, charge: int = 1_000, day: date = DAY
) -> LedgerEvent:
    return LedgerEvent(
        imp, kind, 1, 10, "feed", "CPM", charge, datetime(2026, 3, 14, tzinfo=UTC), day
    )


_WORKER = textwrap.dedent(
    """
    import sys
    from datetime import UTC, date, datetime
    from adfunnel.billing.model import EventType, LedgerEvent
    from adfunnel.billing.sql_ledger import SqlLedger
    from adfunnel.db import make_engine

    ledger = SqlLedger(make_engine(sys.argv[1]))
    order = range(40) if int(sys.argv[2]) % 2 == 0 else reversed(range(40))
    for k in order:
        ev = LedgerEvent(f"imp-{k}", EventType.IMPRESSION, 1, 10, "feed", "CPM", 7_000,
                         datetime(2026, 3, 14, tzinfo=UTC), date(2026, 3, 14))
        ledger.record(ev, 200_000)
    """
)


@pytest.mark.slow
def test_processes_sharing_a_sqlite_file_bill_each_beacon_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = make_engine(url)
    metadata.create_all(engine, tables=TABLES)
    # Separate processes do not share the in-process lock: SQLite's own lock must hold.
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, url, str(i)], stderr=subprocess.PIPE)
        for i in range(4)
    ]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
    sql = SqlLedger(engine)
    assert sql.stats().rows == 40
    assert sql.counters() == {"duplicates_rejected": 120}
    [totals] = sql.day_totals(1, DAY, DAY)
    assert (totals.impressions, totals.billed_micros) == (40, 200_000)
    assert totals.absorbed_micros == 40 * 7_000 - 200_000
    engine.dispose()


@pytest.mark.slow
def test_in_memory_sqlite_shared_by_threads() -> None:
    engine = make_engine("sqlite://")  # one connection (StaticPool) for every thread
    metadata.create_all(engine, tables=TABLES)
    sql = SqlLedger(engine)
    outcomes: list[Outcome] = []

    def work() -> None:
        for k in range(20):
            outcomes.append(sql.record(event(f"imp-{k}", charge=7_000), 100_000).outcome)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count(Outcome.BILLED) == 20
    assert sql.billed_on(DAY) == {1: 100_000}
    assert sql.stats().duplicates_rejected == 100
    engine.dispose()


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 4),
            st.sampled_from([EventType.IMPRESSION, EventType.CLICK]),
            st.integers(0, 3_000),
            st.integers(0, 1),
            st.integers(0, 8_000),  # the budget may change between calls (edits)
        ),
        max_size=25,
    )
)
def test_sql_ledger_agrees_with_memory_ledger(
    steps: list[tuple[int, EventType, int, int, int]],
) -> None:
    engine = make_engine("sqlite://")
    metadata.create_all(engine, tables=TABLES)
    sql, mem = SqlLedger(engine), MemoryLedger()
    for imp, kind, charge, offset, budget in steps:
        ev = event(f"i{imp}", kind, charge, DAY + timedelta(days=offset))
        assert sql.record(ev, budget) == mem.record(ev, budget)
    last = DAY + timedelta(days=1)
    assert sql.day_totals(1, DAY, last) == mem.day_totals(1, DAY, last)
    assert sql.billed_on(DAY) == mem.billed_on(DAY)
    assert sql.stats() == mem.stats()
    assert sql.counters() == mem.counters()
    engine.dispose()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_row_recorded_behind_the_ledgers_back_rolls_the_whole_batch_back(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A writer that did not queue on the campaign's row recorded a row the batch plans
    to insert (here: the batch's read of the ledger misses it): LedgerConflict, and
    nothing of the batch stays (on PostgreSQL the rows go in by COPY)."""
    url = (f"sqlite:///{tmp_path / 'ledger.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_schema_url"))
    engine = make_engine(url)
    metadata.create_all(engine, tables=TABLES)
    sql = SqlLedger(engine)
    sql.record(event("imp-1"), 1_000_000)
    monkeypatch.setattr(LoadedView, "row_time", lambda self, key: None)
    with pytest.raises(LedgerConflict):
        sql.record_many([LedgerWrite(event("imp-2"), 1_000_000),
                         LedgerWrite(event("imp-1"), 1_000_000)])
    monkeypatch.undo()
    assert sql.stats().rows == 1
    [totals] = sql.day_totals(1, DAY, DAY)
    assert (totals.impressions, totals.billed_micros) == (1, 1_000)
    assert sql.record(event("imp-2"), 1_000_000).outcome is Outcome.BILLED
    engine.dispose()


def test_settled_since_reads_the_day_index(tmp_path: Path) -> None:
    """The budget feed asks ``settled_since`` on every tick: SQLite's plan for it searches
    ``ix_ledger_day_served`` (one day's rows since the watermark), never scans the whole
    ledger. Red when the index is dropped."""
    from sqlalchemy import event as sa_event

    engine = make_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    metadata.create_all(engine)
    seen: list[tuple[str, object]] = []
    sa_event.listen(engine, "before_cursor_execute",
                    lambda conn, cur, sql, params, *_: seen.append((sql, params)))
    day = date(2026, 7, 15)
    SqlLedger(engine).settled_since(day, datetime(2026, 7, 15, 9, tzinfo=UTC))
    sql, params = next((s, p) for s, p in seen if "FROM ledger" in s)
    with engine.connect() as conn:
        plan = " ".join(str(row[-1]) for row in
                        conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params))
    assert "ix_ledger_day_served" in plan and "SCAN ledger" not in plan, plan
    engine.dispose()

