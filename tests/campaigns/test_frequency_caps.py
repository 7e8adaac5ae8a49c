"""Frequency caps of a campaign: counters (hour, day, week, lifetime) and cooldowns,
through the API, the store's rules and the stored forms (old rows included)."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from adfunnel.campaigns import codec
from adfunnel.campaigns.errors import InvalidChange
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import (
    MAX_COOLDOWN_S,
    BidType,
    CapLevel,
    CapWindow,
    FrequencyCap,
    Objective,
)
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.campaigns.tables import campaigns
from adfunnel.clock import FixedClock
from adfunnel.db import make_engine
from tests.campaigns.conftest import NOW
from tests.campaigns.test_api import assert_invalid, campaign_body

COUNTER = {"count": 5, "window": "day", "level": "campaign"}
COOLDOWN = {"level": "campaign", "cooldown_s": 1800}


@pytest.fixture
def aid(client: TestClient) -> int:
    r = client.post("/v1/advertisers", json={"name": "Acme"})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def test_every_window_and_a_cooldown_round_trip(
    client: TestClient, aid: int, store: SqlCampaignStore
) -> None:
    caps = [
        {"count": 1, "window": "hour", "level": "ad"},
        COUNTER,
        {"count": 9, "window": "week", "level": "advertiser"},
        {"count": 20, "window": "lifetime", "level": "campaign"},
        COOLDOWN,
        {"level": "ad", "cooldown_s": MAX_COOLDOWN_S},
    ]
    r = client.post("/v1/campaigns", json=campaign_body(aid, frequency_caps=caps))
    assert r.status_code == 201, r.text
    assert r.json()["frequency_caps"] == caps  # each kind without the other's keys
    assert client.get(f"/v1/campaigns/{r.json()['id']}").json() == r.json()
    assert store.get_campaign(r.json()["id"]).frequency_caps == (
        FrequencyCap.counter(1, CapWindow.HOUR, CapLevel.AD),
        FrequencyCap.counter(5, CapWindow.DAY, CapLevel.CAMPAIGN),
        FrequencyCap.counter(9, CapWindow.WEEK, CapLevel.ADVERTISER),
        FrequencyCap.counter(20, CapWindow.LIFETIME, CapLevel.CAMPAIGN),
        FrequencyCap.cooldown(1800, CapLevel.CAMPAIGN),
        FrequencyCap.cooldown(MAX_COOLDOWN_S, CapLevel.AD),
    )


def test_explicit_nulls_of_the_other_kind_are_accepted(client: TestClient, aid: int) -> None:
    caps = [{"level": "ad", "count": None, "window": None, "cooldown_s": 60},
            {"level": "ad", "count": 2, "window": "hour", "cooldown_s": None}]
    r = client.post("/v1/campaigns", json=campaign_body(aid, frequency_caps=caps))
    assert r.status_code == 201, r.text
    assert r.json()["frequency_caps"] == [{"level": "ad", "cooldown_s": 60},
                                          {"count": 2, "window": "hour", "level": "ad"}]


@pytest.mark.parametrize(
    ("cap", "field"),
    [
        ({"level": "campaign", "count": 5, "window": "day", "cooldown_s": 60}, "count"),
        ({"level": "campaign", "window": "day", "cooldown_s": 60}, "window"),
        ({"level": "campaign", "count": 5, "cooldown_s": 60}, "count"),
        ({"level": "campaign"}, "count"),
        ({"level": "campaign", "window": "day"}, "count"),
        ({"level": "campaign", "count": 5}, "window"),
        ({"level": "campaign", "cooldown_s": 0}, "cooldown_s"),
        ({"level": "campaign", "cooldown_s": MAX_COOLDOWN_S + 1}, "cooldown_s"),
        ({"level": "campaign", "cooldown_s": 1.5}, "cooldown_s"),
        ({"level": "campaign", "cooldown_s": "1800"}, "cooldown_s"),
        ({"level": "campaign", "cooldown_s": True}, "cooldown_s"),
        ({"count": 5, "window": "day"}, "level"),
        ({"level": "user", "cooldown_s": 60}, "level"),
        ({"level": "campaign", "count": 5, "window": "month"}, "window"),
        ({"level": "campaign", "cooldown_s": 60, "every": 2}, "every"),
    ],
)
def test_a_cap_is_a_counter_or_a_cooldown(
    client: TestClient, aid: int, cap: dict[str, Any], field: str
) -> None:
    caps = [COUNTER, cap]
    r = client.post("/v1/campaigns", json=campaign_body(aid, frequency_caps=caps))
    assert_invalid(r, f"frequency_caps[1].{field}")


def test_patch_caps_follows_the_same_rules(client: TestClient, aid: int) -> None:
    created = client.post("/v1/campaigns", json=campaign_body(aid)).json()
    url = f"/v1/campaigns/{created['id']}"
    bad = {"frequency_caps": [{"level": "ad", "count": 1, "window": "hour", "cooldown_s": 5}]}
    assert_invalid(client.patch(url, json=bad), "frequency_caps[0].count")
    r = client.patch(url, json={"frequency_caps": [COOLDOWN]})
    assert r.status_code == 200, r.text
    assert r.json()["frequency_caps"] == [COOLDOWN]
    assert client.get(url).json()["frequency_caps"] == [COOLDOWN]


def campaign_values(aid: int, caps: tuple[FrequencyCap, ...]) -> dict[str, Any]:
    return {
        "advertiser_id": aid, "name": "x", "objective": Objective.CLICKS,
        "bid_type": BidType.CPC, "bid_micros": 1, "daily_budget_micros": 10,
        "time_zone": "UTC", "flight_start": date(2026, 11, 1), "frequency_caps": caps,
    }


@pytest.mark.parametrize(
    ("cap", "field"),
    [
        (FrequencyCap(5, CapWindow.DAY, CapLevel.AD, 60), "count"),
        (FrequencyCap(None, CapWindow.DAY, CapLevel.AD, 60), "window"),
        (FrequencyCap(None, None, CapLevel.AD), "count"),
        (FrequencyCap(3, None, CapLevel.AD), "window"),
        (FrequencyCap(0, CapWindow.DAY, CapLevel.AD), "count"),
        (FrequencyCap.cooldown(0, CapLevel.AD), "cooldown_s"),
        (FrequencyCap.cooldown(MAX_COOLDOWN_S + 1, CapLevel.AD), "cooldown_s"),
    ],
)
def test_the_store_refuses_a_cap_of_both_kinds_or_neither(
    store: SqlCampaignStore, cap: FrequencyCap, field: str
) -> None:
    aid = store.create_advertiser("A").id
    with pytest.raises(InvalidChange) as err:
        store.create_campaign(**campaign_values(aid, (cap,)))
    assert err.value.field == f"frequency_caps[0].{field}"


def test_rows_written_before_cooldowns_still_decode() -> None:
    engine = make_engine("sqlite://")
    upgrade(engine)
    store = SqlCampaignStore(engine, FixedClock(NOW))
    aid = store.create_advertiser("A").id
    camp = store.create_campaign(**campaign_values(aid, ()))
    old = json.dumps([{"count": 3, "window": "day", "level": "campaign"}])
    with engine.begin() as conn:  # the JSON of a row from before cooldowns
        conn.execute(update(campaigns).where(campaigns.c.id == camp.id)
                     .values(frequency_caps=old))
    assert store.get_campaign(camp.id).frequency_caps == (
        FrequencyCap.counter(3, CapWindow.DAY, CapLevel.CAMPAIGN),
    )
    payload = codec.to_payload(camp)
    payload["frequency_caps"] = json.loads(old)
    decoded = codec.from_payload("campaign", payload)
    assert isinstance(decoded.frequency_caps[0], FrequencyCap)
    assert decoded.frequency_caps[0].cooldown_s is None
    engine.dispose()


def test_stored_forms_keep_only_the_keys_of_each_kind() -> None:
    counter = FrequencyCap.counter(3, CapWindow.LIFETIME, CapLevel.AD)
    cool = FrequencyCap.cooldown(1800, CapLevel.ADVERTISER)
    row = codec.to_row("campaign", {"frequency_caps": (counter, cool)})
    assert json.loads(row["frequency_caps"]) == [
        {"count": 3, "window": "lifetime", "level": "ad"},
        {"level": "advertiser", "cooldown_s": 1800},
    ]
    assert codec.coerce_fields("campaign", {"frequency_caps": json.loads(
        row["frequency_caps"])})["frequency_caps"] == (counter, cool)
    assert cool.is_cooldown and not counter.is_cooldown
