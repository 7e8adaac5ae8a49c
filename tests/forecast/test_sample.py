"""The request sample: a reservoir per UTC hour whose weights add up to exactly the
requests seen (:mod:`adfunnel.forecast.sample`), kept in SQLite and pruned
(:mod:`adfunnel.forecast.store`), and recorded by the embedded server with no flag.

Mutations seen red: a kept request weighted 1 instead of ``seen / kept``
(``test_weights_add_up_to_the_requests_seen``); ``drain`` taking the hour in progress
(``test_only_closed_hours_are_drained``); ``prune`` never called by the keeper
(``test_the_keeper_writes_closed_hours_and_prunes``); the select route not recording
(``sample=None`` in ``build_app``: ``test_the_embedded_server_samples_by_default``).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.campaigns.migrate import upgrade
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine
from adfunnel.forecast.sample import RequestSampler, SampledRequest
from adfunnel.forecast.store import SampleKeeper, SqlRequestSample
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY

T0 = datetime(2026, 11, 2, tzinfo=UTC)


def _view(n: int) -> dict[str, frozenset[str]]:
    return {"placement": frozenset({"feed"}), "interests": frozenset({f"i{n % 3}"})}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 200), min_size=1, max_size=4), st.integers(1, 30))
def test_weights_add_up_to_the_requests_seen(per_hour: list[int], cap: int) -> None:
    clock = ManualClock(T0)
    sampler = RequestSampler(clock.now, _view, per_hour=cap, seed=1)
    for h, n in enumerate(per_hour):
        clock.set(T0 + timedelta(hours=h))
        for i in range(n):
            sampler.record(i)
    rows = sampler.drain(final=True)
    by_hour: Counter[datetime] = Counter()
    kept: Counter[datetime] = Counter()
    for r in rows:
        by_hour[r.at.replace(minute=0)] += r.weight
        kept[r.at.replace(minute=0)] += 1
    for h, n in enumerate(per_hour):
        hour = T0 + timedelta(hours=h)
        assert by_hour[hour] == pytest.approx(n)
        assert kept[hour] == min(n, cap)
    assert sampler.pending() == 0


def test_only_closed_hours_are_drained() -> None:
    clock = ManualClock(T0 + timedelta(minutes=10))
    sampler = RequestSampler(clock.now, _view, per_hour=5, seed=1)
    for i in range(8):
        sampler.record(i)
    assert sampler.drain() == [] and sampler.pending() == 8
    clock.set(T0 + timedelta(hours=1))
    sampler.record(99)
    rows = sampler.drain()
    assert len(rows) == 5 and {r.weight for r in rows} == {8 / 5}
    assert sampler.pending() == 1


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=[
    pytest.mark.postgres, pytest.mark.slow])])
def test_the_keeper_writes_closed_hours_and_prunes(backend: str,
                                                   request: pytest.FixtureRequest) -> None:
    """The table on both engines: inserts, the read by hours, the pruning."""
    engine = make_engine("sqlite://" if backend == "sqlite"
                         else request.getfixturevalue("pg_schema_url"))
    upgrade(engine)
    clock = ManualClock(T0)
    store = SqlRequestSample(engine)
    keeper = SampleKeeper(RequestSampler(clock.now, _view, per_hour=10, seed=2), store,
                          history_days=2)
    for day in range(4):
        clock.set(T0 + timedelta(days=day))
        for i in range(20):
            keeper.sampler.record(i)
        clock.set(T0 + timedelta(days=day, hours=1))
        keeper.flush()
    rows = store.rows(T0, T0 + timedelta(days=5))
    # days 0 and 1 are older than 2 days at day 3's flush; days 2 and 3 stay
    assert sorted({r.at.date() for r in rows}) == [(T0 + timedelta(days=d)).date()
                                                    for d in (2, 3)]
    assert len(rows) == 20 and sum(r.weight for r in rows) == pytest.approx(40)
    assert rows[0].attributes["placement"] == frozenset({"feed"})
    assert store.first_hour(T0) == T0 + timedelta(days=2)
    engine.dispose()


def test_the_embedded_server_samples_by_default() -> None:
    """No forecast setting: the select route records every valid request, the forecast
    sees them once their hour is over."""
    settings_ = load_settings(database_url="sqlite://", clock="manual",
                              token_secret="k" * 32, admin_key=ADMIN_KEY)
    rt = build_runtime(settings_, ManualClock(T0), seed=1)
    try:
        with TestClient(build_app(rt), headers=ADMIN_HEADERS) as c:
            for i in range(30):
                r = c.post("/v1/ads:select", json={
                    "user": {"key": f"u{i}", "attributes": {"geo.country": "fr"}},
                    "placement": {"id": "feed"},
                    "slots": [{"id": "s", "position": 1, "width": 300, "height": 250}]})
                assert r.status_code in (200, 204)
            assert c.put("/v1/admin/clock", json={
                "now": (T0 + timedelta(hours=1)).isoformat()}).status_code == 200
            f = c.post("/v1/forecasts", json={
                "targeting": {"attr": "geo.country", "in": ["FR"]},
                "flight_start": "2026-11-03", "flight_end": "2026-11-03",
                "time_zone": "UTC"})
            assert f.status_code == 200, f.text
            assert rt.requests is not None
            rows = rt.requests.store.rows(T0, T0 + timedelta(hours=1))
        assert len(rows) == 30 and rows[0].attributes["geo.country"] == frozenset({"FR"})
        assert rows[0].attributes["slot_size"] == frozenset({"300x250"})
        # one hour of history (hours of day; the other 23 at its mean): 30 an hour
        assert f.json()["matching_impressions"] == 24 * 30
        assert f.json()["basis"]["sampled_requests"] == 30
    finally:
        rt.close()


def test_settled_hours_are_read_once() -> None:
    """An hour closed more than ``SETTLED`` ago is read from the database once and kept
    parsed; a younger hour is read again (another process may still add to it). Red when
    every hour is cached (``settled_before`` = ``until``): the late row is missed."""
    engine = make_engine("sqlite://")
    upgrade(engine)
    store = SqlRequestSample(engine)
    view = _view(0)
    store.add([SampledRequest(T0 + timedelta(minutes=5), view, 2.0),
               SampledRequest(T0 + timedelta(hours=2, minutes=5), view, 1.0)])
    now = T0 + timedelta(hours=3, minutes=1)
    assert len(store.rows(T0, T0 + timedelta(hours=3), now)) == 2
    # late rows: one in the settled hour 0 (not seen: it is final), one in hour 2
    store.add([SampledRequest(T0 + timedelta(minutes=6), view, 1.0),
               SampledRequest(T0 + timedelta(hours=2, minutes=6), view, 1.0)])
    rows = store.rows(T0, T0 + timedelta(hours=3), now)
    assert [r.at.hour for r in rows] == [0, 2, 2]
    store.prune(T0 + timedelta(hours=1))
    assert [r.at.hour for r in store.rows(T0, T0 + timedelta(hours=3), now)] == [2, 2]
    engine.dispose()


def test_several_servers_add_up(sqlite_file_url: str) -> None:
    """Two ad-server processes (two samplers, one database file) sample the same hour
    apart: their rows' weights add up to every request either saw."""
    engines = [make_engine(sqlite_file_url) for _ in range(2)]
    upgrade(engines[0])
    clock = ManualClock(T0)
    keepers = [SampleKeeper(RequestSampler(clock.now, _view, per_hour=7, seed=s),
                            SqlRequestSample(e)) for s, e in enumerate(engines)]
    for keeper, n in zip(keepers, (40, 13), strict=True):
        for i in range(n):
            keeper.sampler.record(i)
    clock.set(T0 + timedelta(hours=1))
    for keeper in keepers:
        keeper.flush()
    rows = keepers[0].store.rows(T0, T0 + timedelta(hours=1))
    assert len(rows) == 14 and sum(r.weight for r in rows) == pytest.approx(53)
    for e in engines:
        e.dispose()
