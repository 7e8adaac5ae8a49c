"""The tracker: verify the token, apply tier-1 IVT, append one event to the log (a real
in-memory log behind a real publisher), and count what it refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from adfunnel.campaigns.model import HOUSE_ID
from adfunnel.clock import ManualClock
from adfunnel.events.memory_log import MemoryEventLog
from adfunnel.events.model import MAX_USER_AGENT_CHARS, Event, EventType
from adfunnel.events.publisher import EventPublisher
from adfunnel.ivt.rules import Tier1Rules
from adfunnel.tracking.beacons import (
    APPENDED,
    CONVERSION_GRACE_S,
    EXPIRED,
    HOUSE,
    UNAVAILABLE,
    UNLANDED,
    Tracker,
)
from adfunnel.tracking.click_id import sign_click_id, verify_click_id
from adfunnel.tracking.client import ClientFacts
from adfunnel.tracking.token import TokenClaims, sign

KEY = b"k" * 32
START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)
T0 = int(START.timestamp())
TTL_S = 3_600
BROWSER = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
           "Chrome/124.0.0.0 Safari/537.36")
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
HOME_IP = "81.2.69.142"
PERSON = ClientFacts(HOME_IP, BROWSER)


class Landing:
    """A tiny creatives read model: ad 42 lands on the shop, the placement ``feed`` has a
    house ad."""

    def landing_url(self, ad_id: int) -> str | None:
        return {42: "https://shop.test/p?x=1"}.get(ad_id)

    def house_landing_url(self, placement: str) -> str | None:
        return {"feed": "https://operator.test/house"}.get(placement)


def claims(**overrides: object) -> TokenClaims:
    base: dict[str, object] = dict(
        impression_id="imp1", ad_id=42, campaign_id=7, price_micros=1_400_000,
        billing_type="CPC", placement="feed", issued_at=T0, expires_at=T0 + TTL_S,
        expected_micros=1_400,
    )
    base.update(overrides)
    return TokenClaims(**base)  # type: ignore[arg-type]


def token(**overrides: object) -> str:
    return sign(claims(**overrides), KEY)


def click_id(clicked_at_ms: int = T0 * 1000 + 5_000, *, key: bytes = KEY,
             invalid: bool = False, **overrides: object) -> str:
    """The click id the tracker hands a click on ``token(**overrides)``."""
    return sign_click_id(claims(**overrides), clicked_at_ms, key, invalid=invalid)


_MEASUREMENT = (EventType.RENDER, EventType.VIEWABLE)


@pytest.fixture(scope="module")
def rules() -> Tier1Rules:
    """The real tier-1 rules over the real lists (shared/data)."""
    return Tier1Rules()


class World:
    """A tracker over a real memory log and publisher; ``appended()`` reads the log."""

    def __init__(self, rules: Tier1Rules | None) -> None:
        self.clock = ManualClock(START)
        self.log = MemoryEventLog(self.clock, partitions=2)
        self.publisher = EventPublisher(self.log)
        self.tracker = Tracker(self.publisher, Landing(), self.clock, KEY, ivt=rules)
        self._reader = self.log.consumer("probe")

    def appended(self, *, measurement: bool = False) -> list[Event]:
        """Every event appended since the last call, in log order; the render and
        viewable events (measurement, stored beside every ``/i`` and ``/vi``) only with
        ``measurement``."""
        batch = self._reader.fetch(1_000, 0.0)
        self._reader.ack(batch)
        return [d.event for d in batch
                if measurement or d.event.event_type not in _MEASUREMENT]


@pytest.fixture
def world(rules: Tier1Rules) -> World:
    return World(rules)


# --- valid beacons --------------------------------------------------------------------


def test_a_valid_impression_appends_one_event_with_the_tokens_and_clients_facts(
    world: World,
) -> None:
    world.clock.advance(2.5)
    result = world.tracker.impression(token(), PERSON)
    assert result.outcome == APPENDED and result.landing_url is None
    (event,) = world.appended()
    assert result.event == event
    assert event.event_type is EventType.IMPRESSION
    assert (event.impression_id, event.campaign_id, event.ad_id, event.placement) == (
        "imp1", 7, 42, "feed")
    assert (event.price_micros, event.billing_type, event.expected_micros) == (
        1_400_000, "CPC", 1_400)
    assert event.served_at == T0
    assert event.occurred_at == T0 + 2.5  # the tracker's injected clock
    assert (event.client_ip, event.user_agent) == (HOME_IP, BROWSER)
    assert event.ivt_reason is None and event.conversion_value_micros is None
    assert event.tracked_ns is not None and event.tracked_ns > 0
    assert world.tracker.counts() == {}


def test_a_render_billed_token_stores_render_and_impression_on_i_and_viewable_alone_on_vi(
    world: World,
) -> None:
    """``billable_event = rendered``: ``/i`` stores the render event and the impression
    (the event that bills); ``/vi`` stores only the viewable event."""
    t = token(billable_event="rendered")
    shown = world.tracker.impression(t, PERSON)
    assert shown.outcome == APPENDED
    render, impression = world.appended(measurement=True)
    assert (render.event_type, impression.event_type) == (EventType.RENDER,
                                                          EventType.IMPRESSION)
    assert shown.event == impression and shown.measured == render
    assert render.msg_id == "imp1:render" and impression.msg_id == "imp1:impression"
    assert world.tracker.viewable(t, PERSON).outcome == APPENDED
    assert [e.event_type for e in world.appended(measurement=True)] == [EventType.VIEWABLE]


def test_a_viewable_billed_token_stores_the_impression_only_on_vi(world: World) -> None:
    """``billable_event = viewable``: ``/i`` stores the render event alone; ``/vi`` the
    viewable event and the impression."""
    t = token(billable_event="viewable")
    assert world.tracker.impression(t, PERSON).outcome == APPENDED
    assert [e.event_type for e in world.appended(measurement=True)] == [EventType.RENDER]
    assert world.tracker.viewable(t, PERSON).outcome == APPENDED
    assert [e.event_type for e in world.appended(measurement=True)] == [
        EventType.VIEWABLE, EventType.IMPRESSION]


def test_an_invalid_traffic_render_flags_both_events(world: World) -> None:
    """A bot's ``/i`` on a render-billed token: render and impression both carry the
    beacon's IVT reason (neither is valid, neither bills)."""
    result = world.tracker.impression(token(billable_event="rendered"),
                                      ClientFacts(HOME_IP, GOOGLEBOT))
    assert result.outcome.startswith("ivt:")
    events = world.appended(measurement=True)
    assert [e.event_type for e in events] == [EventType.RENDER, EventType.IMPRESSION]
    assert all(e.ivt_reason == "crawler_ua" for e in events)


def test_a_click_is_appended_and_redirected_to_the_ads_own_landing_url(world: World) -> None:
    world.clock.advance(5)
    result = world.tracker.click(token(), PERSON)
    assert result.outcome == APPENDED
    assert result.landing_url == "https://shop.test/p?x=1"
    (event,) = world.appended()
    assert event.event_type is EventType.CLICK and event.msg_id == "imp1:click"


def test_a_click_with_nowhere_to_land_is_counted_never_appended(world: World) -> None:
    """An unknown ad, or one back in review since its serve: the person gets the 404
    page, so the advertiser got no visit and must not pay for the click."""
    world.clock.advance(5)
    result = world.tracker.click(token(ad_id=999), PERSON)
    assert result.outcome == UNLANDED and result.landing_url is None
    assert result.event is None and result.click_id is None
    assert world.appended() == []
    assert world.tracker.counts() == {"unlanded_click": 1}


def test_a_conversion_carries_its_value(world: World) -> None:
    world.clock.advance(60)
    result = world.tracker.conversion(click_id(billing_type="CPA"), PERSON, value_micros=123)
    assert result.outcome == APPENDED
    (event,) = world.appended()
    assert event.event_type is EventType.CONVERSION
    assert event.conversion_value_micros == 123 and event.billing_type == "CPA"
    assert event.click_id == event.impression_id  # the click it converts


def test_without_client_facts_the_event_has_empty_client_fields(world: World) -> None:
    assert world.tracker.impression(token(), None).outcome == APPENDED
    (event,) = world.appended()
    assert (event.client_ip, event.user_agent, event.ivt_reason) == ("", "", None)


def test_a_long_user_agent_is_truncated_to_the_events_limit(world: World) -> None:
    ua = BROWSER + " x" * MAX_USER_AGENT_CHARS
    assert world.tracker.impression(token(), ClientFacts(HOME_IP, ua)).outcome == APPENDED
    (event,) = world.appended()
    assert event.user_agent == ua[:MAX_USER_AGENT_CHARS]


def test_the_same_beacon_twice_is_stored_once_by_the_log(world: World) -> None:
    t = token()
    assert world.tracker.impression(t, PERSON).outcome == APPENDED
    assert world.tracker.impression(t, PERSON).outcome == APPENDED  # acknowledged again
    assert len(world.appended()) == 1
    assert world.log.duplicates == 1
    assert world.log.duplicates_measured == 1  # its render event, counted apart


# --- refused tokens -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (sign(claims(), b"another key entirely"), "bad_signature"),
        ("not-a-token", "malformed"),
        ("", "malformed"),
        (None, "malformed"),
        (token()[:-2] + ("AA" if not token().endswith("AA") else "BB"), "bad_signature"),
        # expired longer ago than a conversion's grace: refused for every beacon
        (token(issued_at=T0 - CONVERSION_GRACE_S - 10, expires_at=T0 - CONVERSION_GRACE_S),
         "expired"),
    ],
    ids=["forged", "garbage", "empty", "absent", "tampered-mac", "expired"],
)
@pytest.mark.parametrize("beacon", ["impression", "click", "conversion"])
def test_refused_tokens_are_counted_and_nothing_is_appended(
    world: World, bad: str | None, reason: str, beacon: str
) -> None:
    if beacon == "conversion" and reason == "expired":
        reason = "serve_token"  # a conversion takes click ids only
    if beacon == "click" and reason == "expired":
        pytest.skip("an expired click lands (test_a_click_on_an_expired_token_lands…)")
    result = getattr(world.tracker, beacon)(bad, PERSON)
    assert result.outcome == f"invalid:{reason}"
    assert result.event is None and result.landing_url is None
    assert world.appended() == []
    assert world.tracker.counts() == {"invalid_tokens": 1, f"invalid_tokens_{reason}": 1}


def test_a_token_expires_exactly_at_its_expiry(world: World) -> None:
    world.clock.advance(TTL_S - 0.001)
    assert world.tracker.impression(token(impression_id="a"), PERSON).outcome == APPENDED
    world.clock.advance(0.001)
    assert world.tracker.impression(token(impression_id="b"), PERSON).outcome == (
        "invalid:expired")
    assert world.tracker.click(token(impression_id="c"), PERSON).outcome == EXPIRED
    assert [e.impression_id for e in world.appended()] == ["a"]


def test_counts_add_up_by_reason(world: World) -> None:
    world.tracker.impression("junk", PERSON)
    world.tracker.click("junk", PERSON)
    world.tracker.click(sign(claims(), b"wrong"), PERSON)
    assert world.tracker.counts() == {
        "invalid_tokens": 3, "invalid_tokens_malformed": 2, "invalid_tokens_bad_signature": 1}


# --- conversions: click ids only ------------------------------------------------------


def test_a_stored_click_hands_out_a_click_id_that_names_it(world: World) -> None:
    world.clock.advance(5)
    result = world.tracker.click(token(), PERSON)
    assert result.outcome == APPENDED and result.click_id is not None
    named = verify_click_id(result.click_id, [KEY], T0 + 5.0, CONVERSION_GRACE_S)
    assert named.serve == claims() and named.clicked_at_ms == (T0 + 5) * 1000
    assert result.click_id not in token()  # not the serve token, nor a part of it


def test_a_serve_token_never_attributes_a_conversion(world: World) -> None:
    """The issue's attack: whoever saw the ad has its serve token."""
    world.clock.advance(60)
    result = world.tracker.conversion(token(billing_type="CPA"), PERSON)
    assert result.outcome == "invalid:serve_token" and result.event is None
    assert world.appended() == []
    assert world.tracker.counts() == {"invalid_tokens": 1, "invalid_tokens_serve_token": 1}


def test_a_click_id_signed_with_another_key_is_forged(world: World) -> None:
    result = world.tracker.conversion(click_id(key=b"another key entirely"), PERSON)
    assert result.outcome == "invalid:bad_signature" and world.appended() == []


def test_a_flagged_clicks_id_never_attributes(world: World) -> None:
    world.clock.advance(5)
    clicked = world.tracker.click(token(), ClientFacts(HOME_IP, GOOGLEBOT))
    assert clicked.outcome == "ivt:crawler_ua" and clicked.click_id is not None
    world.appended()
    result = world.tracker.conversion(clicked.click_id, PERSON)
    assert result.outcome == "invalid:invalid_traffic" and world.appended() == []


def test_a_conversion_is_accepted_within_the_grace_after_its_click(world: World) -> None:
    cid = click_id(T0 * 1000, billing_type="CPA")
    world.clock.advance(CONVERSION_GRACE_S - 0.001)  # the serve token expired long ago
    result = world.tracker.conversion(cid, PERSON)
    assert result.outcome == APPENDED
    (event,) = world.appended()
    assert event.occurred_at == pytest.approx(T0 + CONVERSION_GRACE_S - 0.001)
    assert event.click_id == "imp1" and event.event_type is EventType.CONVERSION


def test_a_conversion_after_the_grace_is_refused_as_expired(world: World) -> None:
    cid = click_id(T0 * 1000, billing_type="CPA")
    world.clock.advance(CONVERSION_GRACE_S)
    assert world.tracker.conversion(cid, PERSON).outcome == "invalid:expired"
    assert world.appended() == []
    assert world.tracker.counts() == {"invalid_tokens": 1, "invalid_tokens_expired": 1}


def test_the_grace_is_for_conversions_only(world: World) -> None:
    world.clock.advance(TTL_S + 1)
    assert world.tracker.impression(token(), PERSON).outcome == "invalid:expired"
    assert world.appended() == []


def test_a_click_on_an_expired_token_lands_and_is_counted_not_appended(world: World) -> None:
    world.clock.advance(TTL_S + 1)  # a tab left open past the token's hour
    result = world.tracker.click(token(), PERSON)
    assert result.outcome == EXPIRED and result.event is None and result.click_id is None
    assert result.landing_url == "https://shop.test/p?x=1"
    assert world.appended() == []
    assert world.tracker.counts() == {"invalid_tokens": 1, "invalid_tokens_expired": 1}


# --- rotation -------------------------------------------------------------------------


def test_the_previous_secret_still_verifies_and_new_ids_use_the_current(
        world: World) -> None:
    new_key = b"n" * 32
    tracker = Tracker(world.publisher, Landing(), world.clock, new_key, previous_keys=[KEY])
    world.clock.advance(5)
    clicked = tracker.click(token(), PERSON)  # signed with the previous secret
    assert clicked.outcome == APPENDED and clicked.click_id is not None
    verify_click_id(clicked.click_id, [new_key], T0 + 5.0, 60)  # the current one signs
    assert tracker.conversion(click_id(), PERSON).outcome == APPENDED  # an older id
    alone = Tracker(world.publisher, Landing(), world.clock, new_key)
    assert alone.impression(token(), PERSON).outcome == "invalid:bad_signature"


# --- house ads ------------------------------------------------------------------------


def test_a_house_ads_beacons_are_counted_and_never_appended(world: World) -> None:
    house = token(campaign_id=HOUSE_ID, ad_id=HOUSE_ID, price_micros=0, billing_type="CPM",
                  expected_micros=None)
    world.clock.advance(5)
    shown = world.tracker.impression(house, PERSON)
    clicked = world.tracker.click(house, PERSON)
    assert shown.outcome == HOUSE and shown.landing_url is None and shown.event is None
    assert clicked.outcome == HOUSE
    assert clicked.landing_url == "https://operator.test/house"
    assert world.appended() == []
    assert world.tracker.counts() == {"house_render": 1, "house_click": 1}


# --- tier-1 invalid traffic -----------------------------------------------------------


def test_a_crawler_is_appended_with_its_ivt_reason(world: World) -> None:
    world.clock.advance(5)
    result = world.tracker.impression(token(), ClientFacts(HOME_IP, GOOGLEBOT))
    assert result.outcome == "ivt:crawler_ua"
    (event,) = world.appended()
    assert event.ivt_reason == "crawler_ua" and event.user_agent == GOOGLEBOT
    assert world.tracker.counts() == {}  # counted by the ledger, once, not here


def test_a_flagged_click_is_still_redirected(world: World) -> None:
    world.clock.advance(5)
    result = world.tracker.click(token(), ClientFacts(HOME_IP, GOOGLEBOT))
    assert result.outcome == "ivt:crawler_ua"
    assert result.landing_url == "https://shop.test/p?x=1"
    assert [e.ivt_reason for e in world.appended()] == ["crawler_ua"]


def test_a_click_too_soon_after_its_serve_is_impossible_timing(world: World) -> None:
    world.clock.advance(0.1)
    result = world.tracker.click(token(), PERSON)
    assert result.outcome == "ivt:impossible_timing"
    assert [e.ivt_reason for e in world.appended()] == ["impossible_timing"]


def test_a_missing_user_agent_is_flagged(world: World) -> None:
    assert world.tracker.impression(token(), ClientFacts(HOME_IP, None)).outcome == (
        "ivt:missing_ua")


def test_address_rules_are_skipped_when_the_address_is_unknown(world: World) -> None:
    """A local transport (no address): the address rules do not apply, the others do."""
    assert world.tracker.impression(token(impression_id="a"),
                                    ClientFacts(None, BROWSER)).outcome == APPENDED
    assert world.tracker.impression(token(impression_id="b"),
                                    ClientFacts(None, GOOGLEBOT)).outcome == "ivt:crawler_ua"
    assert world.tracker.impression(token(impression_id="c"),
                                    ClientFacts("not an ip", BROWSER)).outcome == "ivt:bad_ip"


def test_without_rules_nothing_is_flagged() -> None:
    world = World(None)
    assert world.tracker.impression(token(), ClientFacts(HOME_IP, GOOGLEBOT)).outcome == (
        APPENDED)
    assert [e.ivt_reason for e in world.appended()] == [None]


# --- nowhere to store the event -------------------------------------------------------


def test_a_refusing_sink_answers_unavailable_and_is_counted(world: World) -> None:
    """The log is closed and there is no spool: the publisher raises EventRefused."""
    world.log.close()
    world.clock.advance(5)
    result = world.tracker.click(token(), PERSON)
    assert result.outcome == UNAVAILABLE
    assert result.event is None
    assert result.landing_url == "https://shop.test/p?x=1"
    assert world.tracker.counts() == {"unavailable": 1}
