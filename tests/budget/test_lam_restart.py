"""λ survives a budget-service restart (issue #27): the process writes the λ state of its
automatic campaign-days to ``budget_multipliers`` and a new process on the same store and
clock resumes it (SQLite and PostgreSQL); new strategy terms still restart λ at the safe
value, and a new day still starts from yesterday's λ at the nearest quarter hour."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import Engine, func, select, update

from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.budget.kept_lams import KEEP_DAYS, LAM_SAVE_S, KeptLams, SqlLamStore
from adfunnel.budget.lam_resume import HEARD_WITHIN_S
from adfunnel.budget.multiplier_tables import budget_multipliers
from adfunnel.budget.multipliers import LAM_SLOTS, START_LAMBDA
from adfunnel.budget.process import BudgetServiceProcess
from adfunnel.budget.protocol import CampaignSpend, Report, ReportEntry
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import BidType, Objective
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine
from adfunnel.pacing.bid_multiplier import DEFAULT_GAINS, LAMBDA_MIN

NOW = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)
SINCE = NOW - timedelta(hours=3)
BUDGET = 100_000_000  # 100 USD a day: the plan asks ~11,600 micros per 10 s step
STEP_S = 10


@dataclass
class World:
    engine: Engine
    clock: ManualClock
    store: SqlCampaignStore
    cid: int


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest, tmp_path) -> Iterator[World]:
    """An automatic campaign (max_clicks, v = 1 USD) in a migrated store: SQLite in
    tmp_path, PostgreSQL in a schema of its own."""
    engine = make_engine(f"sqlite:///{tmp_path / 'lam.sqlite3'}" if request.param == "sqlite"
                         else request.getfixturevalue("pg_schema_url"))
    upgrade(engine)
    clock = ManualClock(NOW)
    store = SqlCampaignStore(engine, clock)
    adv = store.create_advertiser("a")
    c = store.create_campaign(
        advertiser_id=adv.id, name="auto", objective=Objective.CLICKS, bid_type=BidType.CPC,
        bid_micros=1_000_000, daily_budget_micros=BUDGET, time_zone="UTC",
        flight_start=date(2026, 10, 1), bid_strategy="max_clicks", bid_cap_micros=1_000_000,
        bid_strategy_since=SINCE)
    yield World(engine, clock, store, c.id)
    engine.dispose()


def _start(w: World) -> BudgetServiceProcess:
    """A fresh process on the world's store and clock, loaded and warm (no wait for
    servers: the tests report as one)."""
    p = BudgetServiceProcess(w.store, SqlLedger(w.engine), w.clock, engine=w.engine,
                             warmup_s=0.0)
    p.load()
    _tick(p)
    return p


def _tick(p: BudgetServiceProcess) -> None:
    """Run what is due at the clock's now: the schedule and the λ writes."""
    p.ticker.run_due()
    p.lam_ticker.run_due()


def _run(p: BudgetServiceProcess, cid: int, steps: int, spend: int) -> None:
    """``steps`` control steps, each after a report of ``spend`` micros (10 charges)."""
    svc = p.service
    for i in range(steps):
        p.clock.advance(STEP_S)
        t = p.clock.now().timestamp()
        day = p.clock.now().date().isoformat()
        entry = ReportEntry(i + 1, t, [CampaignSpend(cid, day, spend, 0, spend,
                                                     10 if spend else 0)])
        with p.lock:
            svc.handle_report(Report(f"s{id(p)}", 0, t, [entry], epoch=svc.epoch))
        _tick(p)


def _lam(p: BudgetServiceProcess, cid: int) -> float:
    with p.lock:
        return p.service.current(cid, p.clock.now().timestamp()).lam


def _published(p: BudgetServiceProcess, cid: int) -> float:
    """λ of the campaign's directive, as ad servers read it."""
    with p.lock:
        (d,) = [d for d in p.service.directives() if d.campaign_id == cid]
    return d.lam


def test_a_restarted_service_publishes_the_lambda_it_had(world: World) -> None:
    """Stepped from 10⁴ down to some λ, stopped, restarted on the same store and clock:
    the new process publishes the same λ and steps on from the same controller state.
    Breaks if the start skips the read-back (tried: ``resume_lams`` not called in
    ``load``: λ 10⁴), if ``stop`` writes nothing (tried: no ``save_lams`` in ``stop``
    with the last write before the last steps: λ of 30 s earlier) or if the controller
    state is not resumed (tried: the averages left out of ``_resume_row``)."""
    p = _start(world)
    assert _lam(p, world.cid) == START_LAMBDA
    _run(p, world.cid, 20, 0)  # behind plan: λ falls from the bound
    _run(p, world.cid, 2, 11_000)
    lam = _lam(p, world.cid)
    assert 1.0 < lam < START_LAMBDA / 100
    with p.lock:
        row = p.service.current(world.cid, p.clock.now().timestamp()).row
        t = p.service._rows
        before = (t.lam_integral[row], t.lam_spend_avg[row], t.lam_target_avg[row],
                  t.lam_charges_avg[row])
    p.stop()

    q = _start(world)
    assert _lam(q, world.cid) == lam
    assert _published(q, world.cid) == lam
    with q.lock:
        row = q.service.current(world.cid, q.clock.now().timestamp()).row
        t = q.service._rows
        assert (t.lam_integral[row], t.lam_spend_avg[row], t.lam_target_avg[row],
                t.lam_charges_avg[row]) == before
    q.stop()


def test_lambda_is_written_on_the_schedule_without_a_stop(world: World) -> None:
    """A crash loses at most ``LAM_SAVE_S`` of λ's walk: the periodic job writes it.
    Breaks if the ``lams`` job is left off the ticker (tried: the table stays empty and
    the restart reads 10⁴; now: ``lam_ticker`` holding no job)."""
    p = _start(world)
    _run(p, world.cid, 20, 0)
    with world.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(budget_multipliers)).scalar() == 1
    lam_then = _lam(p, world.cid)
    p.ticker.stop()  # a crash: no final write
    p.lam_ticker.stop()
    q = _start(world)
    # written at the last run of the job, at most 3 steps (30 s) before the crash
    assert lam_then <= _lam(q, world.cid) <= lam_then / 0.75 ** (LAM_SAVE_S / STEP_S)
    assert _lam(q, world.cid) < START_LAMBDA


def test_new_strategy_terms_while_down_restart_at_the_safe_value(world: World) -> None:
    """A strategy change made while the service was down (``bid_strategy_since`` moved)
    is not resumed over: the campaign restarts at ``START_LAMBDA`` as any switch with no
    bid in its unit does. Breaks if the read-back ignores the strategy instant (tried:
    ``_same`` always true: the old λ is resumed)."""
    p = _start(world)
    _run(p, world.cid, 20, 0)
    assert _lam(p, world.cid) < START_LAMBDA
    p.stop()
    world.store.update_campaign(world.cid, {"bid_strategy_since": NOW})
    q = _start(world)
    assert _lam(q, world.cid) == START_LAMBDA
    q.stop()


def test_a_new_day_after_a_restart_starts_from_yesterdays_kept_quarter(
        world: World) -> None:
    """A service restarted on the next day (yesterday's row is gone with the old
    process) starts the day from yesterday's λ at the nearest quarter hour, read from
    the kept quarters. Breaks if the kept quarters are not consulted (tried: the
    yesterday branch of ``_resume_kept`` skipped: the day starts at the latest λ, the
    one of 23:59, not the one of 12:00)."""
    p = _start(world)
    _run(p, world.cid, 20, 0)
    noonish = _lam(p, world.cid)  # the 12:00 quarter hour's λ
    p.clock.set(datetime(2026, 10, 20, 23, 59, tzinfo=UTC))
    _run(p, world.cid, 3, 0)  # λ falls further in the last quarter of the day
    assert _lam(p, world.cid) < noonish
    p.stop()
    p.clock.set(datetime(2026, 10, 21, 12, 5, tzinfo=UTC))
    q = _start(world)
    assert _lam(q, world.cid) == pytest.approx(noonish, rel=1e-6)  # float32 quarters
    q.stop()


def test_the_in_process_service_keeps_lambda_across_a_restart(world: World) -> None:
    """The ad server's embedded shard (``InProcessBudget``, its own tickers) writes λ on
    its schedule and at stop, and a new one resumes it. Breaks if its stop writes
    nothing (tried: ``process.stop`` left out of ``InProcessBudget.stop``: the λ of the
    last scheduled write, 3 steps earlier) or if neither writes (tried: also the manual
    clock's moves no longer running ``lam_ticker``: λ 10⁴ again)."""
    from adfunnel.budget.embedded import InProcessBudget

    gate = InProcessBudget(world.store, SqlLedger(world.engine), world.clock,
                           engine=world.engine, background=False)
    for _ in range(20):  # behind plan with no spend: λ falls from the bound
        world.clock.advance(STEP_S)
    lam = gate.snapshot().multipliers()[0]
    assert 1.0 < lam < START_LAMBDA
    gate.stop()
    again = InProcessBudget(world.store, SqlLedger(world.engine), world.clock,
                            engine=world.engine, background=False)
    assert again.snapshot().multipliers()[0] == lam
    again.stop()


def test_a_standby_that_no_server_reports_to_writes_no_lambda(world: World) -> None:
    """An instance no ad server reports to (a standby) steps λ on no spend; it writes
    nothing, so it never overwrites the λ the servers' instance wrote. Breaks if the
    write ignores who reports (tried: the ``HEARD_WITHIN_S`` check removed: 1 row)."""
    p = _start(world)
    for _ in range(20):
        world.clock.advance(STEP_S)
        _tick(p)
    assert _lam(p, world.cid) < START_LAMBDA  # it stepped
    p.stop()
    with world.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(budget_multipliers)).scalar() == 0


def test_a_failed_write_is_retried_at_the_next(world: World) -> None:
    """The rows of a write that failed (the database away) are written by the next one.
    Breaks if the marks are not put back (tried: no ``mark_unsaved`` call: 0 rows)."""
    p = _start(world)
    _run(p, world.cid, 2, 0)
    save = p.lams.save

    def away(_kept: object) -> int:
        raise OSError("database away")

    p.lams.save = away  # type: ignore[method-assign]
    with pytest.raises(OSError):
        p.save_lams()
    p.lams.save = save  # type: ignore[method-assign]
    assert p.save_lams() == 1
    p.stop()


def _kept_lam(w: World) -> float:
    """The λ the table holds for the world's campaign (one campaign-day)."""
    with w.engine.connect() as conn:
        return conn.execute(select(budget_multipliers.c.lam)).scalar_one()


def test_an_instance_the_servers_left_stops_writing_lambda(world: World) -> None:
    """An instance the ad servers reported to, then left (they follow another now), keeps
    stepping λ on no spend; once ``HEARD_WITHIN_S`` passed since the last report it writes
    none of it, so it never overwrites what the servers' instance writes. Breaks if only
    an instance never reported to is held back (tried: ``if not self._heard`` for the
    ``HEARD_WITHIN_S`` test in ``kept_multipliers``: the λ of the step after the silence
    is written)."""
    p = _start(world)
    _run(p, world.cid, 2, 0)
    p.save_lams()
    heard = _kept_lam(world)
    assert heard == _lam(p, world.cid) < START_LAMBDA
    world.clock.advance(HEARD_WITHIN_S + STEP_S)  # no report since
    _tick(p)
    assert _lam(p, world.cid) != heard  # it stepped
    assert p.save_lams() == 0
    p.stop()
    assert _kept_lam(world) == heard


def test_a_corrupt_kept_lambda_resumes_in_range(world: World) -> None:
    """A kept λ under 1 (a corrupt row) would bid above the value: the read-back clamps
    it. Breaks if ``SqlLamStore.load`` takes λ as stored (tried: ``clamp_lambda``
    removed: λ 0.25 published, bids 4 × the value)."""
    p = _start(world)
    _run(p, world.cid, 20, 0)
    p.stop()
    with world.engine.begin() as conn:
        conn.execute(update(budget_multipliers).values(lam=0.25))
    q = _start(world)
    assert _published(q, world.cid) == _lam(q, world.cid) == LAMBDA_MIN
    q.stop()


def test_the_integral_leaks_over_the_time_down(world: World) -> None:
    """The controller's integral, resumed after the service was down, has leaked as it
    would between steps (``exp(-gap / leak_s)``). Breaks if it is resumed as kept
    (tried: the leak dropped in ``_resume_row``: the integral of 10 minutes earlier)."""
    p = _start(world)
    _run(p, world.cid, 20, 0)
    _run(p, world.cid, 2, 11_000)
    with p.lock:
        row = p.service.current(world.cid, p.clock.now().timestamp()).row
        integral = float(p.service._rows.lam_integral[row])
    assert integral != 0.0
    p.stop()
    gap = 600.0
    world.clock.advance(gap)
    q = _start(world)
    with q.lock:
        row = q.service.current(world.cid, q.clock.now().timestamp()).row
        got = float(q.service._rows.lam_integral[row])
    assert got == pytest.approx(integral * math.exp(-gap / DEFAULT_GAINS.leak_s), rel=1e-9)
    q.stop()


def test_the_running_service_drops_days_past_keeping(world: World) -> None:
    """The table keeps ``KEEP_DAYS`` days before today: the process's writes drop older
    ones (once a UTC day). Breaks if the process never asks (tried: the ``forget`` call
    removed from ``save_lams``: the row of 3 days ago stays)."""
    old = NOW.date() - timedelta(days=KEEP_DAYS + 1)
    one = np.array
    SqlLamStore(world.engine).save(KeptLams(
        one([world.cid], dtype=np.int64), one([old.toordinal()], dtype=np.int64),
        one([5.0]), one([0.0]), one([-1.0]), one([-1.0]), one([-1.0]),
        one([NOW.timestamp() - 3 * 86_400]), one([SINCE.timestamp()]),
        np.full((1, LAM_SLOTS), np.nan, dtype=np.float32)))
    p = _start(world)
    _run(p, world.cid, 3, 0)
    p.stop()
    with world.engine.connect() as conn:
        days = conn.execute(select(budget_multipliers.c.day)).scalars().all()
    assert days == [NOW.date()]


def test_a_restart_late_in_the_next_day_takes_yesterdays_late_quarter(
        world: World) -> None:
    """The nearest quarter hour is the one of the time of day now: restarted at 23:50
    the next day, the day starts from yesterday's λ of 23:45–24:00, not of 12:00.
    Breaks if the quarter is not the time of day (tried: ``q = 0`` in
    ``_resume_kept``: the earliest kept quarter, 12:00's λ)."""
    p = _start(world)
    _run(p, world.cid, 20, 0)
    noonish = _lam(p, world.cid)
    p.clock.set(datetime(2026, 10, 20, 23, 59, tzinfo=UTC))
    _run(p, world.cid, 3, 0)
    late = _lam(p, world.cid)
    assert late < noonish
    p.stop()
    p.clock.set(datetime(2026, 10, 21, 23, 50, tzinfo=UTC))
    q = _start(world)
    assert _lam(q, world.cid) == pytest.approx(late, rel=1e-6)  # float32 quarters
    q.stop()


def test_a_restart_after_a_day_down_starts_from_the_latest_kept_lambda(
        world: World) -> None:
    """Down the whole of the next day (no yesterday kept), a restart starts the day from
    the campaign's latest kept λ, not from 10⁴. Breaks if the kept λ is not the
    campaign's latest (tried: ``s.lam_last[slot] = kept.lam[i]`` removed from
    ``resume_multipliers``: λ 10⁴)."""
    p = _start(world)
    _run(p, world.cid, 20, 0)
    lam = _lam(p, world.cid)
    assert lam < START_LAMBDA
    p.stop()
    p.clock.set(datetime(2026, 10, 22, 12, 0, tzinfo=UTC))
    q = _start(world)
    assert _lam(q, world.cid) == lam
    q.stop()
