"""The advertiser API over an SQLite store and a MemoryLedger: happy paths and every refusal.

Every error must be a 4xx with a JSON body naming the field and the problem.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.billing.ledger import MemoryLedger
from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.campaigns.sql_store import SqlCampaignStore

URL = "https://x.test/p?a=1&b=2&c=%20"
TARGETING: dict[str, Any] = {
    "all": [
        {"attr": "geo.country", "in": ["US", "CA"]},
        {"not": {"attr": "interests", "in": ["gambling"]}},
    ]
}


def campaign_body(advertiser_id: int, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "advertiser_id": advertiser_id,
        "name": "Fall sale",
        "objective": "clicks",
        "bid_type": "CPC",
        "bid_micros": 1_500_000,
        "daily_budget_micros": 50_000_000,
        "time_zone": "America/New_York",
        "flight_start": "2026-11-01",
        "dayparts": [{"weekdays": [0, 1, 2, 3, 4], "start_hour": 8, "end_hour": 20}],
        "frequency_caps": [{"count": 3, "window": "day", "level": "campaign"}],
        "targeting": TARGETING,
    }
    body.update(over)
    return body


def ad_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "landing_url": URL,
        "creative_ref": "cr-1",
        "format": "banner",
        "width": 300,
        "height": 250,
    }
    body.update(over)
    return body


@pytest.fixture
def advertiser(client: TestClient) -> dict[str, Any]:
    r = client.post("/v1/advertisers", json={"name": "Acme"})
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture
def campaign(client: TestClient, advertiser: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/v1/campaigns", json=campaign_body(advertiser["id"]))
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture
def ad(client: TestClient, campaign: dict[str, Any]) -> dict[str, Any]:
    r = client.post(f"/v1/campaigns/{campaign['id']}/ads", json=ad_body())
    assert r.status_code == 201, r.text
    return r.json()


def fields_of(r: Any) -> dict[str, str]:
    body = r.json()
    assert isinstance(body, dict) and "error" in body, body
    return {f["field"]: f["problem"] for f in body.get("fields", [])}


def assert_invalid(r: Any, field: str, status: int = 422) -> str:
    assert r.status_code == status, r.text
    found = fields_of(r)
    assert field in found, found
    assert found[field]
    return found[field]


# --- advertisers ------------------------------------------------------------------------


def test_advertisers_create_list_get(client: TestClient) -> None:
    a = client.post("/v1/advertisers", json={"name": "Acme"}).json()
    b = client.post("/v1/advertisers", json={"name": "Beta"}).json()
    assert a == {"id": a["id"], "name": "Acme", "version": 1}
    assert client.get("/v1/advertisers").json() == {"items": [a, b], "next_cursor": None}
    assert client.get(f"/v1/advertisers/{b['id']}").json() == b
    r = client.get("/v1/advertisers/999")
    assert r.status_code == 404
    assert r.json()["error"] == "not_found" and r.json()["entity"] == "advertiser"
    assert_invalid(client.post("/v1/advertisers", json={"name": "  "}), "name")
    assert_invalid(client.post("/v1/advertisers", json={"name": "x", "vip": True}), "vip")


# --- campaigns --------------------------------------------------------------------------


def test_campaign_create_and_read_back(
    client: TestClient, campaign: dict[str, Any], advertiser: dict[str, Any]
) -> None:
    assert campaign["version"] == 1
    assert campaign["flight_start"] == "2026-11-01"
    assert campaign["flight_end"] is None
    assert campaign["targeting"] == TARGETING
    assert campaign["status"] == "active" and campaign["pacing_mode"] == "even"
    assert campaign["dayparts"] == [{"weekdays": [0, 1, 2, 3, 4], "start_hour": 8, "end_hour": 20}]
    assert client.get(f"/v1/campaigns/{campaign['id']}").json() == campaign
    listed = client.get("/v1/campaigns", params={"advertiser_id": advertiser["id"]}).json()
    assert listed["items"] == [campaign]
    assert client.get("/v1/campaigns", params={"advertiser_id": 999}).json()["items"] == []
    assert client.get("/v1/campaigns/999").status_code == 404


def test_targeting_is_stored_byte_identically(
    client: TestClient, campaign: dict[str, Any], store: SqlCampaignStore
) -> None:
    stored = store.get_campaign(campaign["id"]).targeting
    assert stored == json.dumps(TARGETING, separators=(",", ":"))
    read = client.get(f"/v1/campaigns/{campaign['id']}").json()
    r = client.patch(
        f"/v1/campaigns/{campaign['id']}",
        json={"targeting": read["targeting"], "version": read["version"]},
    )
    assert r.status_code == 200, r.text
    assert store.get_campaign(campaign["id"]).targeting == stored


def test_unknown_advertiser_is_named(client: TestClient) -> None:
    assert_invalid(client.post("/v1/campaigns", json=campaign_body(999)), "advertiser_id")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("daily_budget_micros", -1),
        ("daily_budget_micros", 1.5),
        ("daily_budget_micros", 100.0),
        ("daily_budget_micros", "100"),
        ("daily_budget_micros", True),
        ("daily_budget_micros", None),
        ("bid_micros", 0),
        ("bid_micros", -5),
        ("bid_micros", 2.5),
        ("lifetime_budget_micros", -1),
        ("lifetime_budget_micros", "1e6"),
        ("time_zone", "Mars/Olympus_Mons"),
        ("time_zone", ""),
        ("objective", "fame"),
        ("bid_type", "CPX"),
        ("status", "sleeping"),
        ("pacing_mode", "fast"),
        ("flight_start", "2026/11/01"),
        ("flight_start", "yesterday"),
        ("name", ""),
    ],
)
def test_bad_campaign_fields_are_named(
    client: TestClient, advertiser: dict[str, Any], field: str, value: Any
) -> None:
    r = client.post("/v1/campaigns", json=campaign_body(advertiser["id"], **{field: value}))
    assert_invalid(r, field)
    assert r.json()["error"] == "validation"


@pytest.mark.slow
def test_money_problem_texts(client: TestClient, advertiser: dict[str, Any]) -> None:
    neg = client.post("/v1/campaigns", json=campaign_body(advertiser["id"], daily_budget_micros=-1))
    assert fields_of(neg)["daily_budget_micros"] == "must be >= 0"
    flt = client.post("/v1/campaigns", json=campaign_body(advertiser["id"], bid_micros=1.0))
    assert "integer" in fields_of(flt)["bid_micros"]


def test_nan_money_is_refused(client: TestClient, advertiser: dict[str, Any]) -> None:
    body = json.dumps(campaign_body(advertiser["id"])).replace(
        '"daily_budget_micros": 50000000', '"daily_budget_micros": NaN'
    )
    assert "NaN" in body
    r = client.post("/v1/campaigns", content=body, headers={"content-type": "application/json"})
    assert_invalid(r, "daily_budget_micros")


def test_flight_and_daypart_rules(client: TestClient, advertiser: dict[str, Any]) -> None:
    aid = advertiser["id"]
    r = client.post("/v1/campaigns", json=campaign_body(aid, flight_end="2026-10-31"))
    assert_invalid(r, "flight_end")
    bad_parts = [
        ({"weekdays": [7], "start_hour": 0, "end_hour": 5}, "dayparts[0].weekdays[0]"),
        ({"weekdays": [], "start_hour": 0, "end_hour": 5}, "dayparts[0].weekdays"),
        ({"weekdays": [1], "start_hour": 24, "end_hour": 24}, "dayparts[0].start_hour"),
        ({"weekdays": [1], "start_hour": 0, "end_hour": 25}, "dayparts[0].end_hour"),
        ({"weekdays": [1], "start_hour": 9, "end_hour": 9}, "dayparts[0].end_hour"),
    ]
    for part, field in bad_parts:
        assert_invalid(
            client.post("/v1/campaigns", json=campaign_body(aid, dayparts=[part])), field
        )
    caps = [{"count": 0, "window": "day", "level": "ad"}]
    r = client.post("/v1/campaigns", json=campaign_body(aid, frequency_caps=caps))
    assert_invalid(r, "frequency_caps[0].count")
    caps = [{"count": 1, "window": "month", "level": "ad"}]
    r = client.post("/v1/campaigns", json=campaign_body(aid, frequency_caps=caps))
    assert_invalid(r, "frequency_caps[0].window")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("targeting", "field"),
    [
        ({"attr": "geo.country", "in": []}, "targeting.in"),
        ({"attr": "geo.country", "in": [""]}, "targeting.in[0]"),
        ({"all": [{"attr": "shoe_size", "in": ["42"]}]}, "targeting.all[0].attr"),
        ({"attr": "geo.country", "between": ["US"]}, "targeting"),
        ({"xor": [{"attr": "os", "in": ["ios"]}]}, "targeting"),
        ({"all": []}, "targeting.all"),
    ],
)
def test_bad_targeting_names_the_node(
    client: TestClient, advertiser: dict[str, Any], targeting: Any, field: str
) -> None:
    r = client.post("/v1/campaigns", json=campaign_body(advertiser["id"], targeting=targeting))
    assert_invalid(r, field)


def test_dnf_blow_up_is_refused(client: TestClient, advertiser: dict[str, Any]) -> None:
    dnf = pytest.importorskip("adfunnel.targeting.dnf")
    assert hasattr(dnf, "compile_dnf")
    # 6 ANDed ORs of 3 terms on different attributes: 3**6 = 729 conjunctions.
    attrs = ["geo.country", "age_band", "gender", "os", "device_type", "browser"]
    blow_up = {
        "all": [
            {"any": [{"attr": attrs[(i + j) % 6], "in": [f"v{i}_{j}"]} for j in range(3)]}
            for i in range(6)
        ]
    }
    r = client.post("/v1/campaigns", json=campaign_body(advertiser["id"], targeting=blow_up))
    assert r.status_code == 422, r.text
    assert any(f.startswith("targeting") for f in fields_of(r))


def test_malformed_json_and_wrong_bodies(client: TestClient, campaign: dict[str, Any]) -> None:
    headers = {"content-type": "application/json"}
    r = client.post("/v1/campaigns", content=b'{"name": "x",', headers=headers)
    assert r.status_code in (400, 422)
    assert r.json()["error"] in ("malformed_json", "validation")
    assert "body" in fields_of(r)
    r = client.post("/v1/advertisers", content=b"[1, 2]", headers=headers)
    assert r.status_code == 422 and fields_of(r)
    r = client.patch(f"/v1/campaigns/{campaign['id']}", content=b"nope", headers=headers)
    assert r.status_code in (400, 422) and "body" in fields_of(r)
    r = client.post("/v1/advertisers", json={})
    assert_invalid(r, "name")


def test_unknown_route_and_method_are_json(client: TestClient) -> None:
    r = client.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = client.delete("/v1/advertisers")
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"


def test_patch_with_version_and_conflict(client: TestClient, campaign: dict[str, Any]) -> None:
    cid = campaign["id"]
    r = client.patch(f"/v1/campaigns/{cid}", json={"name": "Winter", "version": 1})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "Winter" and r.json()["version"] == 2
    stale = client.patch(f"/v1/campaigns/{cid}", json={"name": "Spring", "version": 1})
    assert stale.status_code == 409
    body = stale.json()
    assert body["error"] == "version_conflict"
    assert (body["expected_version"], body["current_version"]) == (1, 2)
    assert client.get(f"/v1/campaigns/{cid}").json()["name"] == "Winter"
    # Nullable fields clear with null; others refuse it.
    r = client.patch(f"/v1/campaigns/{cid}", json={"targeting": None, "flight_end": "2026-12-31"})
    assert r.status_code == 200 and r.json()["targeting"] is None
    assert r.json()["flight_end"] == "2026-12-31"
    assert_invalid(client.patch(f"/v1/campaigns/{cid}", json={"name": None}), "name")
    assert_invalid(client.patch(f"/v1/campaigns/{cid}", json={"version": 3}), "body")
    assert_invalid(client.patch(f"/v1/campaigns/{cid}", json={"advertiser_id": 2}), "advertiser_id")
    assert_invalid(
        client.patch(f"/v1/campaigns/{cid}", json={"flight_start": "2027-01-01"}), "flight_end"
    )
    assert_invalid(client.patch(f"/v1/campaigns/{cid}", json={"time_zone": "Nowhere"}), "time_zone")
    assert client.patch("/v1/campaigns/999", json={"name": "x"}).status_code == 404


@pytest.mark.slow
@pytest.mark.parametrize("style", [":{}", "/{}"])
def test_pause_and_resume(client: TestClient, campaign: dict[str, Any], style: str) -> None:
    cid = campaign["id"]
    r = client.post(f"/v1/campaigns/{cid}" + style.format("pause"))
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["version"]) == ("paused", 2)
    again = client.post(f"/v1/campaigns/{cid}" + style.format("pause"))
    assert again.json()["version"] == 2  # already paused: no write
    stale = client.post(f"/v1/campaigns/{cid}" + style.format("resume"), json={"version": 1})
    assert stale.status_code == 409
    r = client.post(f"/v1/campaigns/{cid}" + style.format("resume"), json={"version": 2})
    assert (r.json()["status"], r.json()["version"]) == ("active", 3)
    assert client.post("/v1/campaigns/999" + style.format("pause")).status_code == 404


def test_ended_campaign_cannot_resume(client: TestClient, campaign: dict[str, Any]) -> None:
    cid = campaign["id"]
    client.patch(f"/v1/campaigns/{cid}", json={"status": "ended"})
    r = client.post(f"/v1/campaigns/{cid}:resume")
    assert r.status_code == 409 and r.json()["error"] == "conflict"


def test_budget_edit(client: TestClient, campaign: dict[str, Any]) -> None:
    cid = campaign["id"]
    r = client.put(f"/v1/campaigns/{cid}/budget", json={"daily_budget_micros": 80_000_000})
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["daily_budget_micros"], got["lifetime_budget_micros"], got["version"]) == (
        80_000_000,
        None,
        2,
    )
    r = client.put(
        f"/v1/campaigns/{cid}/budget",
        json={"daily_budget_micros": 1, "lifetime_budget_micros": 5_000_000, "version": 2},
    )
    assert (r.json()["lifetime_budget_micros"], r.json()["version"]) == (5_000_000, 3)
    r = client.put(f"/v1/campaigns/{cid}/budget", json={"daily_budget_micros": 9})
    assert r.json()["lifetime_budget_micros"] == 5_000_000  # absent: kept
    stale = client.put(f"/v1/campaigns/{cid}/budget", json={"daily_budget_micros": 2, "version": 1})
    assert stale.status_code == 409
    for bad in ("-1", "2.0", '"5"', "NaN", "Infinity", "1e6", "true", "null"):
        r = client.put(
            f"/v1/campaigns/{cid}/budget",
            content='{"daily_budget_micros": ' + bad + "}",
            headers={"content-type": "application/json"},
        )
        assert_invalid(r, "daily_budget_micros", 422)
    assert client.get(f"/v1/campaigns/{cid}").json()["daily_budget_micros"] == 9


# --- ads ----------------------------------------------------------------------------------


def test_ads_create_list_get_patch(
    client: TestClient, campaign: dict[str, Any], ad: dict[str, Any], store: SqlCampaignStore
) -> None:
    assert ad["landing_url"] == URL
    assert ad["review_state"] == "approved" and ad["status"] == "active" and ad["version"] == 1
    assert store.get_ad(ad["id"]).landing_url == URL
    assert client.get(f"/v1/campaigns/{campaign['id']}/ads").json()["items"] == [ad]
    assert client.get(f"/v1/ads/{ad['id']}").json() == ad
    r = client.patch(f"/v1/ads/{ad['id']}", json={"landing_url": ad["landing_url"], "version": 1})
    assert r.status_code == 200 and r.json()["version"] == 2
    assert store.get_ad(ad["id"]).landing_url == URL  # saved again: same bytes
    r = client.patch(f"/v1/ads/{ad['id']}", json={"status": "paused", "version": 1})
    assert r.status_code == 409 and r.json()["error"] == "version_conflict"
    assert client.get("/v1/ads/999").status_code == 404
    assert client.get("/v1/campaigns/999/ads").status_code == 404
    assert client.post("/v1/campaigns/999/ads", json=ad_body()).status_code == 404


@pytest.mark.slow
@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        " javascript:alert(1)",
        "data:text/html;base64,PHNjcmlwdD4=",
        "ftp://x.test/file",
        "//x.test/p",
        "/relative/path",
        "https://",
        "https://x.test/a b",
        "https://x.test/\nSet-Cookie:x",
        "",
    ],
)
def test_bad_landing_urls(client: TestClient, campaign: dict[str, Any], url: str) -> None:
    r = client.post(f"/v1/campaigns/{campaign['id']}/ads", json=ad_body(landing_url=url))
    assert_invalid(r, "landing_url")


def test_urls_are_kept_byte_identical(client: TestClient, campaign: dict[str, Any]) -> None:
    for url in (
        "HTTP://Example.TEST:8080/a/../b?q=%7e&x=%E2%82%AC#frag",
        "https://x.test/path?utm=a%2Fb&empty=&dup=1&dup=2",
        "https://bücher.test/ü",
    ):
        r = client.post(f"/v1/campaigns/{campaign['id']}/ads", json=ad_body(landing_url=url))
        assert r.status_code == 201, r.text
        assert client.get(f"/v1/ads/{r.json()['id']}").json()["landing_url"] == url


@pytest.mark.slow
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("width", 0),
        ("height", -3),
        ("width", 300.0),
        ("height", "250"),
        ("review_state", "maybe"),
        ("status", "gone"),
        ("format", ""),
        ("creative_ref", " "),
    ],
)
def test_bad_ad_fields(
    client: TestClient, campaign: dict[str, Any], field: str, value: Any
) -> None:
    r = client.post(f"/v1/campaigns/{campaign['id']}/ads", json=ad_body(**{field: value}))
    assert_invalid(r, field)


# --- report ---------------------------------------------------------------------------------


def _bill(ledger: MemoryLedger, campaign_id: int, day: date, imps: int, clicks: int) -> None:
    for i in range(imps):
        imp = f"{campaign_id}-{day}-{i}"
        at = datetime(day.year, day.month, day.day, 15, tzinfo=UTC)
        common = {
            "impression_id": imp,
            "campaign_id": campaign_id,
            "ad_id": 1,
            "placement": "feed",
            "billing_type": "CPM",
            "occurred_at": at,
            "day": day,
        }
        ledger.record(
            LedgerEvent(event_type=EventType.IMPRESSION, charge_micros=2_500, **common),
            daily_budget_micros=10_000,
        )
        if i < clicks:
            ledger.record(
                LedgerEvent(event_type=EventType.CLICK, charge_micros=0, **common),
                daily_budget_micros=10_000,
            )


@pytest.mark.slow
def test_report(client: TestClient, campaign: dict[str, Any], ledger: MemoryLedger) -> None:
    cid = campaign["id"]
    _bill(ledger, cid, date(2026, 11, 1), imps=3, clicks=1)
    _bill(ledger, cid, date(2026, 11, 2), imps=6, clicks=0)  # 4 fit the budget, 2 absorbed
    _bill(ledger, cid, date(2026, 11, 9), imps=1, clicks=0)  # outside the range
    _bill(ledger, cid + 1, date(2026, 11, 1), imps=5, clicks=5)  # another campaign
    r = client.get(f"/v1/campaigns/{cid}/report", params={"from": "2026-11-01", "to": "2026-11-03"})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["from"] == "2026-11-01" and got["to"] == "2026-11-03"
    assert (got["impressions"], got["clicks"]) == (9, 1)
    assert got["billed_micros"] == 7_500 + 10_000
    assert got["absorbed_overspend_micros"] == 5_000
    assert got["ctr"] == pytest.approx(1 / 9)
    assert got["ecpm_micros"] == (17_500 * 1000 * 2 + 9) // 18  # half up: 1,944,444
    assert isinstance(got["ecpm_micros"], int)
    assert [d["day"] for d in got["days"]] == ["2026-11-01", "2026-11-02"]
    day1 = got["days"][0]
    assert (day1["impressions"], day1["clicks"], day1["billed_micros"]) == (3, 1, 7_500)
    assert day1["ecpm_micros"] == 2_500_000 and day1["ctr"] == pytest.approx(1 / 3)
    assert got["days"][1]["absorbed_overspend_micros"] == 5_000


@pytest.mark.slow
def test_report_defaults_and_errors(client: TestClient, campaign: dict[str, Any]) -> None:
    cid = campaign["id"]
    r = client.get(f"/v1/campaigns/{cid}/report")  # today in New York per the fixed clock
    assert r.status_code == 200
    assert (r.json()["from"], r.json()["to"], r.json()["ecpm_micros"]) == (
        "2026-11-03",
        "2026-11-03",
        0,
    )
    assert r.json()["ctr"] == 0.0 and r.json()["days"] == []
    assert_invalid(
        client.get(
            f"/v1/campaigns/{cid}/report", params={"from": "2026-11-05", "to": "2026-11-01"}
        ),
        "from",
    )
    assert_invalid(
        client.get(
            f"/v1/campaigns/{cid}/report", params={"from": "2020-01-01", "to": "2026-11-01"}
        ),
        "to",
    )
    assert_invalid(client.get(f"/v1/campaigns/{cid}/report", params={"from": "soon"}), "from")
    assert client.get("/v1/campaigns/999/report").status_code == 404


@pytest.mark.parametrize("day", ["1793664000", "2026-11-03T00:00", "2026-11-03T00:00:00Z"])
def test_report_dates_are_local_dates_only(
        client: TestClient, campaign: dict[str, Any], day: str) -> None:
    """``from``/``to`` are local dates YYYY-MM-DD: a Unix time or a timestamp is 422
    naming the field. Red when pydantic's lax date parsing reads them as days (a UTC
    instant taken for a local day in the campaign's zone)."""
    for name in ("from", "to"):
        assert_invalid(client.get(f"/v1/campaigns/{campaign['id']}/report",
                                  params={name: day}), name)


def test_embedded_listener_sees_api_writes(
    client: TestClient, store: SqlCampaignStore, advertiser: dict[str, Any]
) -> None:
    seen: list[Any] = []
    store.subscribe(seen.append)
    r = client.post("/v1/campaigns", json=campaign_body(advertiser["id"]))
    client.post(f"/v1/campaigns/{r.json()['id']}:pause")
    assert [(c.entity, c.version) for c in seen] == [("campaign", 1), ("campaign", 2)]


# --- warnings on campaign writes ---------------------------------------------------------


def warnings_of(r: Any) -> dict[str, str]:
    return {w["field"]: w["problem"] for w in r.json().get("warnings", [])}


@pytest.mark.slow
def test_a_campaign_that_can_deliver_has_no_warnings_key(
    client: TestClient, campaign: dict[str, Any]
) -> None:
    assert "warnings" not in campaign
    assert client.get(f"/v1/campaigns/{campaign['id']}").json() == campaign


@pytest.mark.slow
@pytest.mark.parametrize(
    ("zone", "flight_end", "warned"),
    [
        ("America/New_York", "2026-11-02", True),  # NOW is 2026-11-03 10:00 in New York
        ("America/New_York", "2026-11-03", False),  # ends today: still serves today
        ("Pacific/Auckland", "2026-11-03", True),  # already 2026-11-04 04:00 there
        ("Pacific/Honolulu", "2026-11-03", False),  # 05:00 on 2026-11-03
    ],
)
def test_flight_already_over_is_a_warning(
    client: TestClient, advertiser: dict[str, Any], zone: str, flight_end: str, warned: bool
) -> None:
    body = campaign_body(advertiser["id"], time_zone=zone, flight_start="2026-10-01",
                         flight_end=flight_end)
    r = client.post("/v1/campaigns", json=body)
    assert r.status_code == 201, r.text
    got = warnings_of(r)
    assert ("flight_end" in got) is warned
    if warned:
        assert flight_end in got["flight_end"] and "will not serve" in got["flight_end"]
        assert client.get(f"/v1/campaigns/{r.json()['id']}").json()["flight_end"] == flight_end


@pytest.mark.slow
@pytest.mark.parametrize(
    ("bid_type", "bid", "daily", "warned"),
    [
        ("CPC", 1_500_001, 1_500_000, True),
        ("CPC", 1_500_000, 1_500_000, False),
        ("CPA", 20_000_000, 5_000_000, True),
        ("CPM", 2_000_000, 1_999, True),  # one impression costs 2,000 micros
        ("CPM", 2_000_000, 2_000, False),
        ("CPM", 2_000_001, 2_000, True),  # ceil(2,000.001) = 2,001 micros
        ("CPM", 1, 0, True),  # a zero budget fits no charge
    ],
)
def test_one_charge_above_the_daily_budget_is_a_warning(
    client: TestClient, advertiser: dict[str, Any], bid_type: str, bid: int, daily: int,
    warned: bool,
) -> None:
    objective = {"CPC": "clicks", "CPA": "conversions", "CPM": "impressions"}[bid_type]
    body = campaign_body(advertiser["id"], bid_type=bid_type, objective=objective,
                         bid_micros=bid, daily_budget_micros=daily)
    r = client.post("/v1/campaigns", json=body)
    assert r.status_code == 201, r.text
    assert ("bid_micros" in warnings_of(r)) is warned
    if warned:
        assert str(daily) in warnings_of(r)["bid_micros"]


def test_both_warnings_together(client: TestClient, advertiser: dict[str, Any]) -> None:
    body = campaign_body(advertiser["id"], flight_start="2026-01-01", flight_end="2026-01-31",
                         bid_micros=9_000_000, daily_budget_micros=1_000_000)
    r = client.post("/v1/campaigns", json=body)
    assert r.status_code == 201
    assert [w["field"] for w in r.json()["warnings"]] == ["flight_end", "bid_micros"]


def test_edits_that_stop_delivery_are_warned(
    client: TestClient, campaign: dict[str, Any]
) -> None:
    cid = campaign["id"]
    r = client.put(f"/v1/campaigns/{cid}/budget", json={"daily_budget_micros": 1_000_000})
    assert r.status_code == 200 and "bid_micros" in warnings_of(r)  # bid is 1,500,000
    r = client.patch(f"/v1/campaigns/{cid}", json={"flight_end": "2026-11-02"})
    assert r.status_code == 200 and set(warnings_of(r)) == {"bid_micros", "flight_end"}
    r = client.patch(f"/v1/campaigns/{cid}", json={"flight_end": None, "bid_micros": 900_000})
    assert r.status_code == 200 and "warnings" not in r.json()
