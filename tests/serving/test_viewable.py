"""Viewable and rendered impressions end to end (issue 24): the select answer's
``viewable_url``, ``/i`` and ``/vi`` against a campaign's ``billable_event``, the ledger,
and the report's rendered, viewable and viewability rate. The embedded server (memory
event log applied inline, in-memory SQLite, manual clock)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.runtime.embedded import Runtime
from tests.serving.helpers import make_campaign
from tests.serving.test_conversions_api import UA, move_clock, report

GOOGLEBOT = {"user-agent": "Googlebot/2.1 (+http://www.google.com/bot.html)"}
SLOTS = [{"id": "s1", "position": 1, "width": 300, "height": 250, "reserve_cpm_micros": 20}]


@pytest.fixture
def budget_mode() -> str:
    return "local"  # no pacing: every request is served


def serve(client: TestClient) -> dict[str, Any]:
    from tests.serving.helpers import ad_request

    r = client.post("/v1/ads:select", json=ad_request(deadline_ms=5_000, slots=SLOTS))
    assert r.status_code == 200, r.text
    [ad] = r.json()["ads"]
    return ad


def campaign(client: TestClient, billable_event: str | None) -> int:
    fields = {} if billable_event is None else {"billable_event": billable_event}
    made = make_campaign(client, **fields)
    return int(made["campaign"]["id"])


def settled_report(client: TestClient, runtime: Runtime, cid: int) -> dict[str, Any]:
    move_clock(client, runtime, 10)  # the rollups refresh on the server's clock
    return report(client, cid)


def test_the_answer_carries_a_viewable_url_beside_the_impression_url(
        client: TestClient) -> None:
    campaign(client, "viewable")
    ad = serve(client)
    assert ad["impression_url"] == f"/i?t={ad['token']}"
    assert ad["viewable_url"] == f"/vi?t={ad['token']}"


def test_a_new_campaign_bills_on_viewable_by_default(client: TestClient) -> None:
    adv = client.post("/v1/advertisers", json={"name": "a"}).json()
    r = client.post("/v1/campaigns", json={
        "advertiser_id": adv["id"], "name": "c", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": 2_000_000, "daily_budget_micros": 10**8,
        "time_zone": "UTC", "flight_start": "2026-07-01"})
    assert r.status_code == 201, r.text
    assert r.json()["billable_event"] == "viewable"
    got = client.get(f"/v1/campaigns/{r.json()['id']}").json()
    assert got["billable_event"] == "viewable"


def test_a_viewable_billed_serve_bills_once_on_vi_and_never_on_i(
        client: TestClient, runtime: Runtime) -> None:
    cid = campaign(client, "viewable")
    ad = serve(client)
    assert client.get(ad["impression_url"], headers=UA).status_code == 204
    got = settled_report(client, runtime, cid)
    assert (got["impressions"], got["billed_micros"], got["rendered"], got["viewable"]) == (
        0, 0, 1, 0)
    assert got["viewability_rate"] == 0.0
    for _ in range(2):  # the second /vi is a duplicate: billed once
        assert client.get(ad["viewable_url"], headers=UA).status_code == 204
    got = settled_report(client, runtime, cid)
    assert (got["impressions"], got["rendered"], got["viewable"]) == (1, 1, 1)
    assert got["billed_micros"] == ad["price_micros"] // 1000
    assert got["viewability_rate"] == 1.0
    [day] = got["days"]
    assert (day["rendered"], day["viewable"], day["viewability_rate"]) == (1, 1, 1.0)


def test_a_rendered_billed_serve_bills_on_i_and_vi_adds_no_bill(
        client: TestClient, runtime: Runtime) -> None:
    cid = campaign(client, "rendered")
    ad = serve(client)
    assert client.get(ad["impression_url"], headers=UA).status_code == 204
    billed = settled_report(client, runtime, cid)
    assert (billed["impressions"], billed["rendered"], billed["viewable"]) == (1, 1, 0)
    assert billed["billed_micros"] == ad["price_micros"] // 1000
    assert client.get(ad["viewable_url"], headers=UA).status_code == 204
    got = settled_report(client, runtime, cid)
    assert (got["impressions"], got["billed_micros"]) == (1, billed["billed_micros"])
    assert (got["rendered"], got["viewable"], got["viewability_rate"]) == (1, 1, 1.0)


def test_viewability_is_measured_over_renders_and_null_without_any(
        client: TestClient, runtime: Runtime) -> None:
    """Four renders, one viewable: 0.25; before any render the rate is null, not 0."""
    cid = campaign(client, "viewable")
    assert settled_report(client, runtime, cid)["viewability_rate"] is None
    ads = [serve(client) for _ in range(4)]
    for ad in ads:
        assert client.get(ad["impression_url"], headers=UA).status_code == 204
    assert client.get(ads[0]["viewable_url"], headers=UA).status_code == 204
    got = settled_report(client, runtime, cid)
    assert (got["rendered"], got["viewable"], got["viewability_rate"]) == (4, 1, 0.25)
    assert got["impressions"] == 1


def test_invalid_traffic_renders_and_views_are_not_counted_as_valid(
        client: TestClient, runtime: Runtime) -> None:
    cid = campaign(client, "viewable")
    ad = serve(client)
    assert client.get(ad["impression_url"], headers=GOOGLEBOT).status_code == 204
    assert client.get(ad["viewable_url"], headers=GOOGLEBOT).status_code == 204
    got = settled_report(client, runtime, cid)
    assert (got["impressions"], got["billed_micros"], got["rendered"], got["viewable"]) == (
        0, 0, 0, 0)
    assert got["ivt"] == {"crawler_ua": 1}  # the invalid impression, counted once
    counters = client.get("/v1/ledger/stats").json()["counters"]
    assert counters["ivt_render_crawler_ua"] == counters["ivt_viewable_crawler_ua"] == 1


def test_vi_refuses_a_bad_token_as_i_does_and_answers_a_pixel(client: TestClient) -> None:
    r = client.get("/vi", params={"t": "junk"}, headers=UA)
    assert r.status_code == 400 and r.json()["fields"][0]["field"] == "t"
    campaign(client, "viewable")
    ad = serve(client)
    r = client.get(ad["viewable_url"], headers={**UA, "accept": "image/webp,*/*"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/gif"


def test_patch_validates_billable_event_and_applies_to_later_serves(
        client: TestClient, runtime: Runtime) -> None:
    cid = campaign(client, "viewable")
    r = client.patch(f"/v1/campaigns/{cid}", json={"billable_event": "served"})
    assert r.status_code == 422
    assert [f["field"] for f in r.json()["fields"]] == ["billable_event"]
    before = serve(client)  # issued while the campaign billed on viewable
    r = client.patch(f"/v1/campaigns/{cid}", json={"billable_event": "rendered"})
    assert r.status_code == 200 and r.json()["billable_event"] == "rendered"
    assert client.get(f"/v1/campaigns/{cid}").json()["billable_event"] == "rendered"
    after = serve(client)
    for ad in (before, after):
        assert client.get(ad["impression_url"], headers=UA).status_code == 204
    got = settled_report(client, runtime, cid)
    assert (got["impressions"], got["rendered"]) == (1, 2)  # only the later serve billed


def test_post_refuses_an_unknown_billable_event(client: TestClient) -> None:
    adv = client.post("/v1/advertisers", json={"name": "a"}).json()
    r = client.post("/v1/campaigns", json={
        "advertiser_id": adv["id"], "name": "c", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": 2_000_000, "daily_budget_micros": 10**8,
        "time_zone": "UTC", "flight_start": "2026-07-01", "billable_event": "always"})
    assert r.status_code == 422
    assert [f["field"] for f in r.json()["fields"]] == ["billable_event"]


def test_a_version_3_token_bills_on_i(client: TestClient, runtime: Runtime) -> None:
    """A token issued before the billable event was a claim (v3) reads as ``rendered``:
    its ``/i`` bills, even for a campaign that now bills on viewable."""
    import base64
    import hashlib
    import hmac

    import msgspec

    cid = campaign(client, "viewable")
    ad = serve(client)
    body = ad["token"].split(".")[0]
    fields = msgspec.json.decode(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    assert fields[0] == 4 and fields[-1] == "viewable"
    old = base64.urlsafe_b64encode(msgspec.json.encode([3, *fields[1:-1]])).rstrip(b"=")
    mac = hmac.new(b"k" * 32, old, hashlib.sha256).digest()
    v3 = f"{old.decode()}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    assert client.get("/i", params={"t": v3}, headers=UA).status_code == 204
    got = settled_report(client, runtime, cid)
    assert (got["impressions"], got["rendered"]) == (1, 1)
    assert got["billed_micros"] == ad["price_micros"] // 1000


def test_the_operators_placement_report_shows_viewability_over_every_campaign(
        client: TestClient, runtime: Runtime) -> None:
    """``GET /v1/placements/{id}/report/rollups``: the placement's renders and views of every
    campaign (two here), per placement by default and per ad on ``group_by=ad``."""
    from tests.serving.helpers import ad_request

    r = client.post("/v1/placements", json={"id": "feed", "name": "Feed"})
    assert r.status_code == 201, r.text
    campaign(client, "viewable")
    campaign(client, "rendered")
    served = []
    for _ in range(4):
        r = client.post("/v1/ads:select", json=ad_request(
            deadline_ms=5_000, slots=SLOTS, placement={"id": "feed"}))
        assert r.status_code == 200, r.text
        served.append(r.json()["ads"][0])
    for ad in served:
        assert client.get(ad["impression_url"], headers=UA).status_code == 204
    assert client.get(served[0]["viewable_url"], headers=UA).status_code == 204
    move_clock(client, runtime, 10)
    day = runtime.clock.now().date().isoformat()
    r = client.get("/v1/placements/feed/report/rollups", params={"from": day, "to": day})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["placement"] == "feed" and body["group_by"] == "placement"
    assert (body["totals"]["rendered"], body["totals"]["viewable"]) == (4, 1)
    assert body["totals"]["viewability_rate"] == 0.25
    [row] = body["rows"]
    assert row["placement"] == "feed" and row["rendered"] == 4
    by_ad = client.get("/v1/placements/feed/report/rollups",
                       params={"from": day, "to": day, "group_by": "ad"}).json()
    assert sum(r["rendered"] for r in by_ad["rows"]) == 4
    assert {r["ad_id"] for r in by_ad["rows"]} <= {a["ad_id"] for a in served}
    assert client.get("/v1/placements/nowhere/report/rollups").status_code == 404
