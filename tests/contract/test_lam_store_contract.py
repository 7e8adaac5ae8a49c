"""The kept-λ store (``budget_multipliers``, migration 0024) on SQLite and PostgreSQL:
a write reads back bit for bit (λ state, no strategy instant as NaN, float32 quarters), a
second write of a campaign-day replaces it, and days past keeping are dropped."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from adfunnel.budget.kept_lams import KEEP_DAYS, KeptLams, SqlLamStore
from adfunnel.budget.multipliers import LAM_SLOTS
from adfunnel.campaigns.migrate import upgrade
from adfunnel.db import make_engine

DAY = date(2026, 10, 20)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlLamStore]:
    """A migrated database (up to 0024) per test: SQLite in tmp_path, PostgreSQL in a
    schema of its own."""
    url = (f"sqlite:///{tmp_path / 'k.db'}" if request.param == "sqlite"
           else request.getfixturevalue("pg_schema_url"))
    engine = make_engine(url)
    upgrade(engine)
    try:
        yield SqlLamStore(engine)
    finally:
        engine.dispose()


def _kept(cids: list[int], days: list[date], lam: list[float]) -> KeptLams:
    n = len(cids)
    quarters = np.full((n, LAM_SLOTS), np.nan, dtype=np.float32)
    quarters[0, 3] = np.float32(lam[0])
    f = np.array
    return KeptLams(f(cids, dtype=np.int64), f([d.toordinal() for d in days], dtype=np.int64),
                    f(lam, dtype=np.float64), f([0.0123456789] * n), f([11_600.5] * n),
                    f([-1.0] * n), f([3.25] * n), f([1_792_490_400.125] * n),
                    f([1_792_480_000.5] + [np.nan] * (n - 1)), quarters)


def _same(a: KeptLams, b: KeptLams) -> None:
    for name in KeptLams.__slots__:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_kept_lambda_reads_back_bit_for_bit(store: SqlLamStore) -> None:
    """Breaks if a column loses precision (tried: migration 0024's ``integral`` as
    ``REAL``: PostgreSQL's single precision rounds it) or NULL ``strategy_since`` does
    not read as NaN (tried: read as 0.0; the resume would not match a campaign without
    one)."""
    kept = _kept([1, 2], [DAY, DAY], [7.123456789012345, 1.0])
    assert store.save(kept) == 2
    _same(store.load(DAY, LAM_SLOTS), kept)
    assert len(store.load(date(2026, 10, 21), LAM_SLOTS)) == 0


def test_a_second_write_of_a_day_replaces_it(store: SqlLamStore) -> None:
    """Breaks if the upsert leaves the old row (tried: ``on_conflict_do_nothing``)."""
    store.save(_kept([1], [DAY], [9.0]))
    store.save(_kept([1], [DAY], [4.5]))
    assert store.load(DAY, LAM_SLOTS).lam.tolist() == [4.5]


def test_days_past_keeping_are_dropped(store: SqlLamStore) -> None:
    """Breaks if ``forget`` keeps nothing or everything (tried: ``<=`` for ``<``)."""
    old = date.fromordinal(DAY.toordinal() - KEEP_DAYS - 1)
    edge = date.fromordinal(DAY.toordinal() - KEEP_DAYS)
    store.save(_kept([1, 1, 1], [old, edge, DAY], [2.0, 3.0, 4.0]))
    assert store.forget(DAY) == 1
    got = store.load(old, LAM_SLOTS)
    assert [date.fromordinal(d) for d in got.day.tolist()] == [edge, DAY]
