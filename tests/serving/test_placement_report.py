"""The operator's placement report (issue #26), ``GET /v1/placements/{id}/report``: its
requests and filled slots are what the test sent and got back, per local day and tier,
and its impressions and revenue what the ledger billed (the campaigns' own reports). The
embedded server in process (in-memory SQLite, memory event log, manual clock), in a
+5:30 zone so that a request at 00:10 local lies in a UTC hour of the day before."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.embedded import Runtime
from adfunnel.serving.placement_traffic import PlacementTraffic
from tests.serving.helpers import ad_request, make_campaign

ZONE = "Asia/Kolkata"  # UTC+5:30
HOUSE = {"creative_ref": "house/app.png", "landing_url": "https://operator.test/app",
         "format": "banner", "width": 728, "height": 90}
#: Three rectangles (sponsorship, guaranteed line, auction) and a leaderboard (house ad).
PAGE = [{"id": f"s{i}", "position": i, "width": 300, "height": 250} for i in (1, 2, 3)] + [
    {"id": "s4", "position": 4, "width": 728, "height": 90}]
#: A slot nothing fits: a request answered without an ad.
SKYSCRAPER = [{"id": "k", "position": 1, "width": 160, "height": 600}]
TIERS = ("sponsorship", "guaranteed", "auction", "house")


@pytest.fixture
def budget_mode() -> str:
    return "local"  # no pacing: the guaranteed line takes its slot on every request


def _world(client: TestClient) -> dict[int, str]:
    """The placement with its house ad and three lines, one per paid tier; campaign id ->
    tier."""
    r = client.post("/v1/placements", json={"id": "feed", "name": "Feed", "house_ad": HOUSE})
    assert r.status_code == 201, r.text
    lines = {
        "sponsorship": {"priority": "sponsorship", "goal": {"metric": "share", "share": 1},
                        "bid_micros": 4_000_000},
        "guaranteed": {"priority": "guaranteed", "bid_micros": 1_500_000,
                       "goal": {"metric": "impressions", "total": 100_000},
                       "flight_end": "2026-07-31"},
        "auction": {"bid_micros": 2_000_000},
    }
    tier_of = {}
    for tier, fields in lines.items():
        made = make_campaign(client, time_zone=ZONE, **fields)
        tier_of[int(made["campaign"]["id"])] = tier
    return tier_of


def _send(client: TestClient, slots: list[dict[str, Any]], n: int, fire_every: int,
          tier_of: dict[int, str], sent: dict[str, list[int]]) -> None:
    """``n`` requests of ``slots``; fires the impressions of every ``fire_every``-th one.
    ``sent``: [requests, slots, filled per tier…] of the local day, added to."""
    day = sent
    for i in range(n):
        r = client.post("/v1/ads:select", json=ad_request(
            deadline_ms=5_000, slots=slots, placement={"id": "feed"}, request_id=f"q{i}"))
        assert r.status_code in (200, 204), r.text
        day["requests"][0] += 1
        day["slots"][0] += len(slots)
        ads = r.json()["ads"] if r.status_code == 200 else []
        for ad in ads:
            tier = "house" if ad["house"] else tier_of[ad["campaign_id"]]
            day[tier][0] += 1
            if i % fire_every == 0:
                assert client.get(ad["impression_url"],
                                  headers={"user-agent": "Mozilla/5.0"}).status_code == 204


def _move(client: TestClient, to: datetime) -> None:
    r = client.put("/v1/admin/clock", json={"now": to.isoformat()})
    assert r.status_code == 200, r.text


def _ledger_days(client: TestClient, tier_of: dict[int, str]
                 ) -> dict[str, dict[str, tuple[int, int]]]:
    """Local day -> tier -> (impressions, billed micros), from each campaign's ledger
    report (its days are local to the same zone)."""
    out: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)
    for cid, tier in tier_of.items():
        rep = client.get(f"/v1/campaigns/{cid}/report",
                         params={"from": "2026-07-15", "to": "2026-07-16"}).json()
        for d in rep["days"]:
            out[d["day"]][tier] = (d["impressions"], d["billed_micros"])
    return out


def test_requests_fill_and_revenue_per_local_day_and_tier_are_what_was_sent_and_billed(
        client: TestClient, runtime: Runtime) -> None:
    """Per local day and tier: requests, slots and filled slots equal the requests sent
    and the ads answered; impressions and revenue equal the ledger's (the campaigns'
    reports); the totals are the days'; fill rate, eCPM and ``currency`` follow.
    Mutations that turn it red: counting the quarter by its UTC hour (the 00:10 local
    requests land on the day before), counting shed/no-fill requests not at all (the
    skyscraper requests go missing), filing a campaign's revenue under another tier,
    dropping the house tier from ``filled_slots``."""
    tier_of = _world(client)
    sent: dict[str, dict[str, list[int]]] = defaultdict(
        lambda: {k: [0] for k in ("requests", "slots", *TIERS)})
    # 2026-07-15 12:00 UTC = 17:30 local
    _send(client, PAGE, 6, 1, tier_of, sent["2026-07-15"])
    _send(client, SKYSCRAPER, 3, 1, tier_of, sent["2026-07-15"])
    _move(client, datetime(2026, 7, 15, 18, 40, tzinfo=UTC))  # 00:10 local on the 16th
    _send(client, PAGE, 5, 2, tier_of, sent["2026-07-16"])
    _move(client, datetime(2026, 7, 15, 18, 50, tzinfo=UTC))  # the rollups refresh
    r = client.get("/v1/placements/feed/report",
                   params={"from": "2026-07-15", "to": "2026-07-16", "time_zone": ZONE})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["placement"], body["currency"], body["time_zone"]) == ("feed", "USD", ZONE)
    assert "hours" not in body
    ledger = _ledger_days(client, tier_of)
    assert [d["day"] for d in body["days"]] == ["2026-07-15", "2026-07-16"]
    for d in body["days"]:
        want = sent[d["day"]]
        assert (d["requests"], d["slots_requested"]) == (want["requests"][0],
                                                        want["slots"][0]), d["day"]
        for tier in TIERS:
            got = d["by_tier"][tier]
            billed = ledger[d["day"]].get(tier, (0, 0))
            assert got["filled_slots"] == want[tier][0], (d["day"], tier)
            assert (got["impressions"], got["revenue_micros"]) == billed, (d["day"], tier)
        assert d["filled_slots"] == sum(want[t][0] for t in TIERS)
        assert d["fill_rate"] == d["filled_slots"] / d["slots_requested"]
        assert d["revenue_micros"] == sum(v[1] for v in ledger[d["day"]].values())
    # every tier filled, and billed where it bills
    assert all(sent["2026-07-16"][t][0] == 5 for t in TIERS)
    assert all(ledger["2026-07-16"][t][0] == 3 for t in ("sponsorship", "guaranteed",
                                                         "auction"))
    assert body["by_tier"]["house"]["revenue_micros"] == 0
    for key in ("requests", "slots_requested", "filled_slots", "impressions",
                "revenue_micros"):
        assert body[key] == sum(d[key] for d in body["days"]), key
    assert body["revenue_micros"] > 0
    assert body["ecpm_micros"] == body["revenue_micros"] * 1000 // body["impressions"]


def test_hourly_periods_are_local_hours_and_add_up(client: TestClient,
                                                   runtime: Runtime) -> None:
    """``granularity=hour``: every local hour of the span (``hours``, no ``days``), the
    requests in the local hours they were answered in (17:00 and 00:00 +05:30), adding
    up to the totals. Mutation that turns it red: bucketing by UTC hour (17:30 local is
    12:00 UTC, so the first requests would start a :30 period)."""
    tier_of = _world(client)
    sent: dict[str, dict[str, list[int]]] = defaultdict(
        lambda: {k: [0] for k in ("requests", "slots", *TIERS)})
    _send(client, PAGE, 2, 1, tier_of, sent["a"])
    _move(client, datetime(2026, 7, 15, 18, 40, tzinfo=UTC))
    _send(client, PAGE, 3, 1, tier_of, sent["b"])
    r = client.get("/v1/placements/feed/report", params={
        "from": "2026-07-15", "to": "2026-07-16", "time_zone": ZONE, "granularity": "hour"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert "days" not in body and len(body["hours"]) == 48
    busy = {h["hour"]: h["requests"] for h in body["hours"] if h["requests"]}
    assert busy == {"2026-07-15T17:00:00+05:30": 2, "2026-07-16T00:00:00+05:30": 3}
    assert body["requests"] == 5 == sum(h["requests"] for h in body["hours"])


def test_counts_of_several_processes_and_restarts_add_up(runtime: Runtime) -> None:
    """Two processes' counters on one table, one of them flushing twice (a restart): the
    table holds the sums. Mutation that turns it red: an upsert that replaces instead of
    adding."""
    engine = runtime.engine
    clock = ManualClock(datetime(2026, 7, 15, 12, 7, tzinfo=UTC))
    a, b = PlacementTraffic(clock, engine), PlacementTraffic(clock, engine)
    a.counter.add("p", 2, ["auction", "house"])
    b.counter.add("p", 1, ["sponsorship"])
    a.flush()
    b.flush()
    a.counter.add("p", 3)
    a.flush()
    clock.set(datetime(2026, 7, 15, 12, 16, tzinfo=UTC))
    b.counter.add("p", 1, ["guaranteed"])
    start = datetime(2026, 7, 15, 12, tzinfo=UTC)
    got = b.quarters("p", start, start + timedelta(hours=1))
    assert [q for q, _ in got] == [start, start + timedelta(minutes=15)]
    assert got[0][1] == {"requests": 3, "slots": 6, "filled_sponsorship": 1,
                         "filled_guaranteed": 0, "filled_auction": 1, "filled_house": 1}
    assert got[1][1]["filled_guaranteed"] == 1 and got[1][1]["requests"] == 1


@pytest.mark.parametrize(("params", "field"), [
    ({"from": "2026-07-16", "to": "2026-07-15"}, "from"),
    ({"from": "soon"}, "from"),
    ({"to": "2026-13-01"}, "to"),
    ({"from": "2026-01-01", "to": "2026-07-15", "granularity": "hour"}, "to"),
    ({"granularity": "week"}, "granularity"),
    ({"time_zone": "Mars/Olympus"}, "time_zone"),
])
def test_bad_parameters_are_422_naming_the_field(client: TestClient, params: dict[str, str],
                                                 field: str) -> None:
    """Mutation that turns it red: skipping the time zone check (a 500 or a 200)."""
    client.post("/v1/placements", json={"id": "feed", "name": "Feed"})
    r = client.get("/v1/placements/feed/report", params=params)
    assert r.status_code == 422, r.text
    assert field in {f["field"] for f in r.json()["fields"]}, r.json()


def test_unknown_placement_is_404_and_a_requested_one_is_known(client: TestClient) -> None:
    """An unconfigured placement that was requested has a report (the replay's slots);
    one neither configured nor requested is 404. Mutation that turns it red: answering
    every id (no 404), or only configured ones (the requested one 404s)."""
    assert client.get("/v1/placements/nowhere/report").status_code == 404
    client.post("/v1/ads:select", json=ad_request(placement={"id": "seen"}))
    r = client.get("/v1/placements/seen/report")
    assert r.status_code == 200, r.text
    assert r.json()["requests"] == 1 and r.json()["fill_rate"] == 0.0


def test_only_an_admin_reads_a_placement_report(client: TestClient) -> None:
    """403 for an advertiser's key, 401 without one. Mutation that turns it red: the
    route's admin guard removed while the auth middleware lets advertiser keys into
    ``/v1/placements`` (either guard alone keeps it green: both are checked)."""
    adv = client.post("/v1/advertisers", json={"name": "a"}).json()
    key = client.post("/v1/api-keys", json={"role": "advertiser",
                                            "advertiser_id": adv["id"]}).json()["key"]
    client.post("/v1/placements", json={"id": "feed", "name": "Feed"})
    r = client.get("/v1/placements/feed/report", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 403, r.text
    assert r.json()["fields"][0]["field"] == "authorization"
    r = client.get("/v1/placements/feed/report", headers={"Authorization": ""})
    assert r.status_code == 401, r.text
