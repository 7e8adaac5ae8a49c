"""An availability forecast judged against the traffic it did not see (issue #26,
"Evidence"): the embedded app (SQLite in memory, no forecast flag) on a manual clock,
driven over HTTP (httpx's ASGI transport through the whole app, in one event loop:
Starlette's TestClient costs ~6 ms a request in thread hops on a loaded machine).

A week of ad requests is sent with the iPinYou log's hour-of-day shape
(:func:`adfunnel.sim.traffic.ipinyou_hourly`: the real log under ``shared/data`` when
there, its built-in counts otherwise), attributes drawn at random (country, device type).
A guaranteed line (mobile devices, an impression goal over the next week) is booked,
and ``POST /v1/forecasts`` asked about the next week for a candidate targeting (US on
placement ``feed``). Then the next week is sent: the same shape, fresh random draws,
each of the line's served ads rendered (its impression beacon fired) so it bills and
paces toward its goal. Compared:

- ``matching_impressions`` within ±20 % of the US requests actually sent;
- ``available_impressions`` within ±20 % of the US requests the line did not serve
  (counted from the served answers).

The request sample keeps at most ``PER_HOUR`` requests an hour, fewer than the busy
hours carry, so the basis's ``sample_rate`` is below 1 and the weights are exercised.

Mutations seen red: the sample weights left out (each sampled request counted 1 where
:func:`adfunnel.forecast.availability.forecast` sums ``r.weight``): 1,087 matching
forecast for 2,144 sent; the booked line's demand never set (its allocation skipped):
no contending line, and ``available_impressions`` would equal ``matching_impressions``
(~2,100 for ~1,670 left). Measured (seed 26): 2,114 matching forecast for 2,144 sent,
1,652 available for 1,673 left; the line served 895 of its 900.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from adfunnel.sim.traffic import ipinyou_hourly
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY

pytestmark = pytest.mark.slow  # ~1 min on a loaded 2-core machine (in process, no server)

MONDAY = datetime(2026, 11, 2, tzinfo=UTC)  # the history week starts here
WEEK2 = MONDAY + timedelta(days=7)
PER_DAY = 600  # requests a day
PER_HOUR = 15  # most requests the sample keeps an hour (the busy hours carry ~43)
STEP_S = 600  # the clock moves every 10 minutes
COUNTRIES = (("US", 0.5), ("GB", 0.3), ("DE", 0.2))
MOBILE = 0.6
GOAL = 900  # the booked line's impressions over week 2 (~36 % of its ~2,520 requests)
BROWSER = {"user-agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 "
                         "Firefox/128.0"}


@pytest.fixture
def rt() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY, ivt_tier2=False, seed=7,
                             forecast_sample_per_hour=PER_HOUR, rollup_refresh_s=3600.0)
    runtime = build_runtime(settings, ManualClock(MONDAY - timedelta(hours=1)), seed=7)
    yield runtime
    runtime.close()


def _week(rng: random.Random, start: datetime) -> list[tuple[datetime, str, str]]:
    """A week of requests (time, country, device type), in time order: each day
    ``PER_DAY`` requests whose hours follow the iPinYou shape, fresh draws."""
    shape = ipinyou_hourly()
    out = []
    for day in range(7):
        for hour in rng.choices(range(24), weights=shape, k=PER_DAY):
            at = start + timedelta(days=day, hours=hour, seconds=rng.randrange(3600))
            country = rng.choices([c for c, _ in COUNTRIES], [w for _, w in COUNTRIES])[0]
            device = "mobile" if rng.random() < MOBILE else "desktop"
            out.append((at, country, device))
    return sorted(out)


async def _send(c: httpx.AsyncClient, week: list[tuple[datetime, str, str]], line: int | None,
          ) -> Counter[str]:
    """Send ``week`` (the clock moved to each 10-minute step first); fire the impression
    beacon of every ad ``line`` is served. Counts: ``us`` requests, ``us_served`` of them
    the line served, ``served`` all the line served."""
    counts: Counter[str] = Counter()
    step = None
    for k, (at, country, device) in enumerate(week):
        at_step = at - timedelta(seconds=at.timestamp() % STEP_S)
        if at_step != step:
            step = at_step
            r = await c.put("/v1/admin/clock", json={"now": step.isoformat()})
            assert r.status_code == 200, r.text
        r = await c.post("/v1/ads:select", json={
            "user": {"key": f"u{k % 5000}",
                     "attributes": {"geo.country": country, "device_type": device}},
            "placement": {"id": "feed"},
            "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}]})
        assert r.status_code in (200, 204), r.text
        ads = r.json()["ads"] if r.status_code == 200 else []
        took = any(ad["campaign_id"] == line for ad in ads)
        for ad in ads:
            beacon = await c.get(ad["impression_url"], headers=BROWSER)
            assert beacon.status_code in (200, 204), beacon.text
        counts["served"] += took
        if country == "US":
            counts["us"] += 1
            counts["us_served"] += took
    return counts


async def _book(c: httpx.AsyncClient) -> int:
    adv = await c.post("/v1/advertisers", json={"name": "Mobile deal"})
    assert adv.status_code == 201, adv.text
    r = await c.post("/v1/campaigns", json={
        "advertiser_id": adv.json()["id"], "name": "mobile-week", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": 4_000_000, "time_zone": "UTC",
        "flight_start": WEEK2.date().isoformat(),
        "flight_end": (WEEK2 + timedelta(days=6)).date().isoformat(),
        "billable_event": "rendered", "priority": "guaranteed",
        "goal": {"metric": "impressions", "total": GOAL},
        "targeting": {"attr": "device_type", "in": ["mobile"]}})
    assert r.status_code == 201, r.text
    assert "warnings" not in r.json()  # the forecast has room for it
    cid = int(r.json()["id"])
    ad = await c.post(f"/v1/campaigns/{cid}/ads", json={
        "landing_url": "https://mobile.example/", "creative_ref": "m.png",
        "format": "banner", "width": 300, "height": 250})
    assert ad.status_code == 201, ad.text
    return cid


def test_forecast_of_next_week_within_20_percent(rt: Runtime) -> None:
    f, sent = asyncio.run(_run(rt))
    left = sent["us"] - sent["us_served"]
    basis = f["basis"]
    facts = (f"forecast {f['matching_impressions']} matching, {f['available_impressions']} "
             f"available, line takes {f['contending_lines'][0]['takes_impressions']}; sent "
             f"{sent['us']} US requests, the line served {sent['us_served']} of them "
             f"({sent['served']} in all, goal {GOAL}): {left} left; basis {basis}")
    print(facts)
    assert abs(f["matching_impressions"] - sent["us"]) <= 0.2 * sent["us"], facts
    assert abs(f["available_impressions"] - left) <= 0.2 * left, facts
    assert f["available_impressions"] <= f["matching_impressions"], facts


async def _run(rt: Runtime) -> tuple[dict[str, Any], Counter[str]]:
    """The history week, the booking and the forecast, then the next week."""
    rng = random.Random(26)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(rt)),
                                 base_url="http://adfunnel.test", headers=ADMIN_HEADERS) as c:
        r = await c.post("/v1/placements", json={"id": "feed", "name": "Feed"})
        assert r.status_code == 201, r.text
        await _send(c, _week(rng, MONDAY), None)
        r = await c.put("/v1/admin/clock", json={"now": WEEK2.isoformat()})
        assert r.status_code == 200, r.text
        line = await _book(c)
        r = await c.post("/v1/forecasts", json={
            "targeting": {"attr": "geo.country", "in": ["US"]}, "placements": ["feed"],
            "flight_start": WEEK2.date().isoformat(),
            "flight_end": (WEEK2 + timedelta(days=6)).date().isoformat(),
            "time_zone": "UTC", "goal": 600})
        assert r.status_code == 200, r.text
        f: dict[str, Any] = r.json()
        basis = f["basis"]
        assert basis["history_days"] == 7.0 and basis["slots"] == "hour_of_week"
        assert 0 < basis["sample_rate"] < 1
        assert basis["sampled_requests"] <= 7 * 24 * PER_HOUR
        assert [ln["campaign_id"] for ln in f["contending_lines"]] == [line]
        assert f["goal_fits"] is True
        sent = await _send(c, _week(rng, WEEK2), line)
    return f, sent
