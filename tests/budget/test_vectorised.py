"""The budget service's vectorised pieces equal their per-campaign definitions bit for
bit: the controller step over arrays, target curves from hourly weights, traffic shapes
in bulk; and the benchmark's figures are produced (their values are not judged here)."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.bench.budget import run_budget_bench
from adfunnel.budget.campaign_table import read_campaign_columns
from adfunnel.budget.columns import CampaignColumns
from adfunnel.budget.service import BudgetService
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import (
    BidType,
    Campaign,
    CampaignStatus,
    Daypart,
    Objective,
    PacingMode,
)
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine
from adfunnel.pacing import controller
from adfunnel.pacing.curve import curve_for_day
from adfunnel.pacing.curve_bank import CurveBank
from adfunnel.pacing.traffic_log import SqlTrafficLog, shape_matrix, shapes, window_start

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe",
         "Asia/Kathmandu", "Pacific/Chatham"]
DAYS = [date(2026, 3, 29), date(2026, 10, 25), date(2026, 11, 1), date(2026, 3, 8),
        date(2026, 7, 1), date(2026, 4, 5), date(2026, 10, 4), date(2026, 9, 27)]


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    hourly=st.lists(st.one_of(st.just(0.0), st.floats(0.0, 100.0)), min_size=24, max_size=24)
    .filter(lambda h: sum(h) > 0),
    tz=st.sampled_from(ZONES), day=st.sampled_from(DAYS),
    elapsed=st.lists(st.floats(-100.0, 95_000.0), min_size=1, max_size=40),
)
def test_curve_bank_equals_curve_for_day(hourly, tz, day, elapsed) -> None:
    ref = curve_for_day(hourly, day, tz)
    bank = CurveBank()
    bank.shapes.add([1.0] * 24)  # another shape first: ids are not all 0
    sid = int(bank.shapes.add(hourly)[0])
    dz = bank.zones.get(tz, day)
    k = len(elapsed)
    s, d = np.full(k, sid), np.full(k, dz)
    got = bank.share_at(s, d, np.array(elapsed))
    assert got.tolist() == [ref.share_at(e) for e in elapsed]
    assert bank.facts(s[:1], d[:1]).peak[0] == ref.peak_share_per_s()
    assert bank.curve(sid, dz) == ref


def test_a_service_follows_its_curves_with_cursors_bit_for_bit() -> None:
    """Targets of a campaign-day stepped forward (and asked for an earlier time) equal
    the materialised plan's, including a day created mid-day (its curve anchored)."""
    rng = random.Random(5)
    start = datetime(2026, 3, 29, 0, 0, 30, tzinfo=UTC)
    clock = ManualClock(start)
    svc = BudgetService(clock, warmup_s=0.0)
    camps = [Campaign(cid, 1, f"c{cid}", Objective.IMPRESSIONS, BidType.CPM, 2_000_000,
                      1_000_000_000, tz, date(2026, 1, 1), pacing_mode=PacingMode.EVEN)
             for cid, tz in enumerate(["UTC", "Europe/Berlin", "Asia/Kathmandu"], start=1)]
    for c in camps[:2]:
        svc.upsert_campaign(c)
    svc.set_traffic_shape(1, [rng.random() for _ in range(24)])
    clock.advance(5 * 3600 + 17.25)
    svc.upsert_campaign(camps[2], created_at=clock.now().timestamp())
    svc.directives()
    for _ in range(40):
        clock.advance(rng.choice([10.0, 10.0, 61.5, 900.0]))
        now = clock.now().timestamp()
        rows = np.array([svc.current(c.id, now).row for c in camps])
        back = now - 3600.0 * rng.random()
        for when in (now, back, now):
            elapsed = when - svc._rows.start_s[rows]
            got = svc._targets(rows, elapsed)
            want = [svc.campaign_day(c.id, svc.current(c.id, now).day).plan.target_micros(e)
                    for c, e in zip(camps, elapsed.tolist(), strict=True)]
            assert got.tolist() == want


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    p=st.floats(controller.P_FLOOR, 1.0), integral=st.floats(-0.03, 0.03),
    spend_avg=st.one_of(st.just(-1.0), st.floats(0, 1e9)),
    target_avg=st.one_of(st.just(-1.0), st.floats(0, 1e9)),
    charges_avg=st.one_of(st.just(-1.0), st.floats(0, 1e3)),
    spend=st.floats(0, 1e9), target=st.floats(0, 1e9), dt=st.floats(0.5, 120),
    charges=st.integers(0, 1000), budget=st.integers(1, 10**12),
    delta=st.one_of(st.none(), st.floats(-1e9, 1e9)), behind=st.floats(-1e9, 1e9),
    band=st.floats(0, 1e8), charge=st.integers(0, 10**7),
)
def test_step_arrays_equals_step(p, integral, spend_avg, target_avg, charges_avg, spend,
                                 target, dt, charges, budget, delta, behind, band,
                                 charge) -> None:
    state = controller.ControllerState(p, integral, spend_avg, target_avg, charges_avg)
    want, _ = controller.step(state, spend, target, dt, budget_micros=budget, charges=charges,
                              committed_delta_micros=delta, behind_micros=behind,
                              hold_band_micros=band, charge_micros=charge)

    def one(x: float) -> np.ndarray:
        return np.array([x])

    got = controller.step_arrays(
        controller.ControllerArrays(one(p), one(integral), one(spend_avg), one(target_avg),
                                    one(charges_avg)),
        one(spend), one(target), one(dt), budget_micros=np.array([budget]),
        charges=np.array([charges]), committed_delta_micros=one(delta or 0.0),
        has_delta=np.array([delta is not None]), behind_micros=one(behind),
        hold_band_micros=one(band), charge_micros=np.array([charge]))
    for name in ("p", "integral", "spend_avg", "target_avg", "charges_avg"):
        assert getattr(got, name)[0] == getattr(want, name)


@pytest.fixture(params=["sqlite", "postgres"])
def traffic_log(request: pytest.FixtureRequest, tmp_path):
    url = (f"sqlite:///{tmp_path / 't.db'}" if request.param == "sqlite"
           else request.getfixturevalue("pg_schema_url"))
    engine = make_engine(url)
    upgrade(engine)
    yield SqlTrafficLog(engine)
    engine.dispose()


def test_bulk_shapes_equal_the_per_campaign_shapes(traffic_log: SqlTrafficLog) -> None:
    t0 = datetime(2026, 7, 15, 0, 0, tzinfo=UTC)  # a week without a DST change
    rnd = random.Random(3)
    counts = {(cid, t0 + timedelta(hours=h)): rnd.randint(0, 9)
              for cid in (1, 2, 3, 4, 7) for h in range(7 * 24)}
    counts[(6, t0)] = 3  # too little history: the average
    for h in range(7 * 24 - 36, 7 * 24):  # a young one: its last day and a half
        counts[(8, t0 + timedelta(hours=h))] = 50 + h % 24
    traffic_log.add({k: v for k, v in counts.items() if v})
    now = t0 + timedelta(days=7)
    zones = ["UTC", "Europe/Vienna", "America/New_York", "Asia/Kolkata"]
    ids, zone_of = np.arange(1, 10), np.array([0, 1, 2, 3, 0, 1, 2, 3, 0])
    own, matrix, average = shape_matrix(ids, zone_of, zones,
                                        traffic_log.by_utc_hour(window_start(now), now), now)
    ref = shapes(traffic_log.hourly(window_start(now)),
                 {int(c): zones[z] for c, z in zip(ids, zone_of, strict=True)}, now)
    assert own.tolist() == [1, 2, 3, 4, 7, 8]
    for cid, row in zip(own.tolist(), matrix, strict=True):
        assert np.allclose(row, ref[cid])
    assert np.allclose(average, ref[9])


@pytest.mark.slow
def test_the_benchmark_reports_its_figures(tmp_path) -> None:
    got = run_budget_bench(300, workdir=str(tmp_path))
    for key in ("campaigns", "setup_s", "start_s", "load_s", "billed_s", "shapes_s",
                "first_step_s", "step_s", "report_s", "report_per_campaign_us",
                "client_first_reply_s", "scrape_s", "scrape_status_s", "scrape_speedup"):
        assert key in got
    assert got["campaigns"] == 300 and got["first_reply_directives"] == 300
    assert got["report_directives"] <= got["report_campaigns"] + 300
    assert list(tmp_path.iterdir()) == []  # the database file is gone


@pytest.fixture(params=["sqlite", "postgres"])
def engine_url(request: pytest.FixtureRequest, tmp_path) -> str:
    return (f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite"
            else request.getfixturevalue("pg_schema_url"))


@pytest.mark.slow
def test_campaign_columns_read_in_sql_equal_those_of_the_records(engine_url: str) -> None:
    engine = make_engine(engine_url)
    upgrade(engine)
    store = SqlCampaignStore(engine, ManualClock(datetime(2026, 7, 15, tzinfo=UTC)))
    adv = store.create_advertiser("a")
    kinds = [(BidType.CPM, PacingMode.EVEN, None, None), (BidType.CPC, PacingMode.ACCELERATED,
             date(2026, 9, 30), 50_000_000), (BidType.CPA, PacingMode.EVEN, None, 7)]
    for i in range(9):
        bid, pacing, end, life = kinds[i % 3]
        c = store.create_campaign(
            advertiser_id=adv.id, name=f"c{i}", objective=Objective.CLICKS, bid_type=bid,
            bid_micros=1_000_000 + i, daily_budget_micros=10_000_000 * (i + 1),
            time_zone=("UTC", "Asia/Tokyo", "Europe/Berlin", "Asia/Kolkata")[i % 4],
            flight_start=date(2026, 1, 1 + i), flight_end=end, lifetime_budget_micros=life,
            pacing_mode=pacing,
            dayparts=(Daypart((0, 2), 6, 9), Daypart((5,), 18, 21)) if i % 4 == 1 else ())
        if i == 4:
            store.update_campaign(c.id, {"status": CampaignStatus.PAUSED})
    got = read_campaign_columns(engine)
    want = CampaignColumns.of(store.list_campaigns())
    order_got, order_want = np.argsort(got.ids), np.argsort(want.ids)
    for name in ("ids", "versions", "bid", "bid_micros", "daily", "lifetime", "active", "even",
                 "accel", "fstart", "fend"):
        assert getattr(got, name)[order_got].tolist() == getattr(want, name)[order_want].tolist()
    zones_got = [got.zones[z] for z in got.tz[order_got]]
    assert zones_got == [want.zones[z] for z in want.tz[order_want]]
    assert got.charges()[order_got].tolist() == want.charges()[order_want].tolist()
    assert got.dayparts == want.dayparts and len(got.dayparts) == 2  # the curves keep to them
    engine.dispose()
