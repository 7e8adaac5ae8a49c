"""OpenRTB notices over HTTP, through the tracker's routes, a real memory event log and
publisher, into a real aggregator, MemoryLedger and LocalSpendGate: the billing notice
bills the clearing price once, never above the bid; the loss notice releases the bid's
reservation once; the win notice is recorded; ``/i`` with ``p`` bills ``p``."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.testclient import TestClient

from adfunnel.billing.aggregator import Aggregator
from adfunnel.billing.ledger import MemoryLedger
from adfunnel.budget.gate import LocalSpendGate, Served
from adfunnel.campaigns.model import HOUSE_ID, BidType, Campaign, Objective
from adfunnel.clock import ManualClock
from adfunnel.events.log import DEFAULT_DEDUPE_WINDOW_S
from adfunnel.events.memory_log import MemoryEventLog
from adfunnel.events.model import Event, EventType
from adfunnel.events.publisher import EventPublisher
from adfunnel.tracking.beacons import Tracker
from adfunnel.tracking.http import TrackingEndpoints
from adfunnel.tracking.notices import NoticeUrls, notice_mac, notice_urls
from adfunnel.tracking.token import TokenClaims, sign

KEY = b"k" * 32
START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)
T0 = int(START.timestamp())
DAY = date(2026, 7, 15)
HOUR = timedelta(hours=1)
BID = 2_000_000  # our bid: $2.00 CPM
EXPECTED = 1_800  # the bid's cost per impression the budget counted in flight


class Landing:
    def landing_url(self, ad_id: int) -> str | None:
        return None

    def house_landing_url(self, placement: str) -> str | None:
        return None


def token(imp: str = "imp1", *, key: bytes = KEY, **overrides: object) -> str:
    base: dict[str, object] = dict(
        impression_id=imp, ad_id=42, campaign_id=7, price_micros=BID, billing_type="CPM",
        placement="rtb", issued_at=T0, expires_at=T0 + 3_600, expected_micros=EXPECTED,
        billable_event="notice")
    base.update(overrides)
    return sign(TokenClaims(**base), key)  # type: ignore[arg-type]


def bid_urls(t: str) -> NoticeUrls:
    """The bid response's URLs of token ``t``: the notices with the exchange's proof."""
    return notice_urls(t, "", KEY)


def proof(t: str) -> str:
    return f"&n={notice_mac(t, KEY)}"


def path(url: str, **macros: str) -> str:
    """A notice URL with the exchange's substitutions (``AUCTION_PRICE=...``)."""
    for name, value in macros.items():
        url = url.replace("${" + name + "}", value)
    return url


class World:
    """Tracker routes, event log, aggregator, ledger and gate around one CPM campaign."""

    def __init__(self, key: bytes = KEY, previous: tuple[bytes, ...] = ()) -> None:
        self.clock = ManualClock(START)
        self.log = MemoryEventLog(self.clock, partitions=2)
        self.tracker = Tracker(EventPublisher(self.log), Landing(), self.clock, key,
                               previous_keys=previous)
        app = Starlette(routes=TrackingEndpoints(self.tracker).routes())
        self.http = TestClient(app)
        self.ledger = MemoryLedger()
        self.gate = LocalSpendGate()
        cpm = Campaign(id=7, advertiser_id=1, name="c7", objective=Objective.IMPRESSIONS,
                       bid_type=BidType.CPM, bid_micros=BID, daily_budget_micros=10**12,
                       time_zone="UTC", flight_start=date(2026, 7, 1))
        self.agg = Aggregator(self.log.consumer("ledger"), self.ledger, {7: cpm}.get,
                              self.gate)
        self._probe = self.log.consumer("probe")

    def bid(self, imp: str = "imp1") -> None:
        """What the endpoint does when it bids: the expected cost held in flight."""
        self.gate.record_served(Served(7, DAY, imp, EXPECTED, T0 + 3_600, EXPECTED))

    def get(self, url: str) -> tuple[int, dict]:
        r = self.http.get(url)
        return r.status_code, (r.json() if r.content else {})

    def appended(self) -> list[Event]:
        batch = self._probe.fetch(1_000, 0.0)
        self._probe.ack(batch)
        return [d.event for d in batch]

    def billed(self) -> int:
        self.agg.pump()
        return self.ledger.billed_on(DAY).get(7, 0)

    def in_flight(self) -> int:
        self.agg.pump()
        return self.gate.committed(7, DAY) - self.ledger.billed_on(DAY).get(7, 0)


@pytest.fixture
def world() -> World:
    return World()


def counted(notice: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("adfunnel_rtb_notices_total",
                                     {"notice": notice, "outcome": outcome}) or 0.0


def test_the_billing_notice_bills_the_clearing_price_once(world: World) -> None:
    """Breaks if the notice bills the token's bid instead of ``p`` (2,000 micros), if the
    event drops the token's expected cost (settled: the billed 1,234 instead of 1,800),
    or if a replay bills again (the planner's duplicate check off: the second delivery,
    forced past the log's dedupe window, bills 1,234 more)."""
    world.bid()
    assert world.in_flight() == EXPECTED
    url = path(bid_urls(token()).burl, AUCTION_PRICE="1.2345678")
    assert world.get(url) == (204, {})
    (event,) = world.appended()
    assert (event.event_type, event.price_micros, event.notice_micros) == (
        EventType.IMPRESSION, 1_234_567, 1_234_567)
    assert event.expected_micros == EXPECTED and event.client_ip == ""
    assert world.billed() == 1_234  # per mille, the fraction carried by the ledger
    assert world.in_flight() == 0
    assert world.ledger.settled_since(DAY, START) == {7: EXPECTED}  # the budget service's
    assert world.get(url) == (204, {})  # the exchange retries: the log drops it
    world.clock.advance(DEFAULT_DEDUPE_WINDOW_S + 1)
    world.log.publish_many([event])  # and past the log's dedupe window, the ledger does
    assert world.billed() == 1_234
    assert world.ledger.counters()["duplicates_rejected"] == 1


def test_a_replayed_billing_notice_is_counted_duplicate_not_billed(world: World) -> None:
    """``adfunnel_rtb_notices_total{notice="bill"}``: the desk counts each notice it hands
    to the log (``appended``), the aggregator what the ledger did with it: ``billed`` once,
    a replay past the log's dedupe window ``duplicate``.

    Breaks if the desk counts an appended notice as billed (tried: ``APPENDED`` back to
    ``"billed"``: appended +0, billed +3), if the aggregator counts no billing notice
    (tried: the ``event.billing_notice`` tally in ``Aggregator._after`` removed:
    duplicate +0), if it counts every one as billed (tried: the tally keyed ``"billed"``
    whatever the ledger's outcome: billed +2, duplicate +0), or if the event loses its
    mark (tried: ``billing_notice`` not passed to the event: the mark False)."""
    world.bid()
    before = {o: counted("bill", o) for o in ("appended", "billed", "duplicate")}
    url = path(bid_urls(token()).burl, AUCTION_PRICE="1.5")
    assert world.get(url) == (204, {})
    (event,) = world.appended()
    assert event.billing_notice
    assert world.billed() == 1_500
    assert world.get(url) == (204, {})  # a replay within the window: the log drops it
    world.clock.advance(DEFAULT_DEDUPE_WINDOW_S + 1)
    # past the window (and the token's expiry, so over HTTP it would be refused), the
    # same event delivered again: the ledger's duplicate
    world.log.publish_many([event])
    assert world.billed() == 1_500
    after = {o: counted("bill", o) - before[o] for o in before}
    assert after == {"appended": 2, "billed": 1, "duplicate": 1}
    assert world.tracker.counts()["notice_bill_appended"] == 2
    assert "notice_bill_billed" not in world.tracker.counts()


def test_a_price_above_the_bid_is_refused_and_counted(world: World) -> None:
    """Breaks if the desk parses ``p`` with ``cpm_micros`` instead of ``within_bid``
    (the exchange bills 2.000001 > our 2.00)."""
    before = counted("bill", "refused_above_bid")
    status, body = world.get(path(bid_urls(token()).burl, AUCTION_PRICE="2.000001"))
    assert status == 400 and body["error"] == "invalid_price"
    assert body["fields"][0]["field"] == "p" and "above_bid" in body["fields"][0]["problem"]
    assert counted("bill", "refused_above_bid") == before + 1
    assert world.tracker.counts()["notice_bill_refused_above_bid"] == 1
    assert world.appended() == [] and world.billed() == 0
    assert world.get(path(bid_urls(token()).burl, AUCTION_PRICE="2")) == (204, {})


def test_an_unsubstituted_macro_is_refused_naming_p(world: World) -> None:
    """Breaks if the ``${`` check of ``cpm_micros`` is dropped (refused as not a number,
    not as ``unsubstituted``)."""
    status, body = world.get(bid_urls(token()).burl)  # the exchange substituted nothing
    assert status == 400 and body["fields"][0]["field"] == "p"
    assert "unsubstituted" in body["fields"][0]["problem"]
    status, body = world.get(f"/rtb/bill?t={token()}{proof(token())}")
    assert status == 400 and body["fields"] == [
        {"field": "p", "problem": body["fields"][0]["problem"]}]
    assert world.appended() == []


@pytest.mark.parametrize("notice", ["burl", "nurl", "lurl"])
def test_forged_and_expired_tokens_are_refused_and_counted(world: World, notice: str) -> None:
    """Breaks if the desk verifies with a wrong key list (the forged key accepted as a
    previous one) or at time 0 (the expired token accepted)."""
    forged = getattr(bid_urls(token(key=b"x" * 32)), notice)
    status, body = world.get(path(forged, AUCTION_PRICE="1", AUCTION_LOSS="102",
                                  AUCTION_MIN_TO_WIN="3"))
    assert status == 400 and body["fields"] == [
        {"field": "t", "problem": "bad_signature: invalid token: bad_signature"}]
    world.clock.advance(3_600)
    status, body = world.get(path(getattr(bid_urls(token()), notice), AUCTION_PRICE="1",
                                  AUCTION_LOSS="102", AUCTION_MIN_TO_WIN="3"))
    assert status == 400 and body["fields"][0]["field"] == "t"
    assert "expired" in body["fields"][0]["problem"]
    assert world.get("/rtb/bill?p=1")[0] == 400  # no token at all
    counts = world.tracker.counts()
    assert counts["invalid_tokens_bad_signature"] == 1
    assert counts["invalid_tokens_expired"] == 1
    assert world.appended() == []


def test_a_loss_releases_the_reservation_once(world: World) -> None:
    """Breaks if ``ledger_event`` settles only billable events (the loss row settles 0) or
    drops the notice's price and reason (the win-price history),
    if the aggregator does not release a new loss in the gate, or if the planner's
    duplicate check is off (the replayed loss settles 1,800 again)."""
    world.bid()
    lurl = path(bid_urls(token()).lurl, AUCTION_LOSS="102", AUCTION_MIN_TO_WIN="2.5")
    assert world.get(lurl) == (204, {})
    (event,) = world.appended()
    assert (event.event_type, event.loss_reason, event.notice_micros) == (
        EventType.LOSS, 102, 2_500_000)
    assert world.in_flight() == 0 and world.billed() == 0
    assert world.ledger.settled_since(DAY, START) == {7: EXPECTED}
    (stored,) = [e for e, _, _ in world.ledger.rows_between(START, START + HOUR)[0]]
    assert (stored.notice_micros, stored.loss_reason) == (2_500_000, 102)  # the history
    world.clock.advance(DEFAULT_DEDUPE_WINDOW_S + 1)
    world.log.publish_many([event])  # replayed past the log's dedupe: nothing again
    assert world.in_flight() == 0
    assert world.ledger.settled_since(DAY, START) == {7: EXPECTED}


def test_a_loss_after_the_bill_releases_nothing_twice(world: World) -> None:
    """Breaks if the planner's loss row keeps its expected cost although the billed
    impression settled it (settled 3,600: out of the budget's flight twice)."""
    world.bid()
    assert world.get(path(bid_urls(token()).burl, AUCTION_PRICE="1.5"))[0] == 204
    assert world.billed() == 1_500
    lurl = path(bid_urls(token()).lurl, AUCTION_LOSS="102", AUCTION_MIN_TO_WIN="")
    assert world.get(lurl) == (204, {})
    assert world.in_flight() == 0 and world.billed() == 1_500
    assert world.ledger.settled_since(DAY, START) == {7: EXPECTED}


def test_loss_notices_with_unknown_or_bad_fields(world: World) -> None:
    """Unsubstituted ``r`` and ``m`` are unknown, not refused; a malformed one is refused
    naming it; ``r = 0`` (Bid Won) is no loss. Breaks if ``r = 0`` is accepted, or if an
    unsubstituted ``m`` is parsed (refused as ``unsubstituted``)."""
    assert world.get(bid_urls(token("a")).lurl) == (204, {})
    (event,) = world.appended()
    assert (event.loss_reason, event.notice_micros) == (None, None)
    for query, field in (("r=abc", "r"), ("r=0", "r"), ("r=-3", "r"), ("m=-1", "m"),
                         ("m=abc", "m")):
        status, body = world.get(f"/rtb/loss?t={token('b')}{proof(token('b'))}&{query}")
        assert status == 400 and body["fields"][0]["field"] == field, query
    assert world.appended() == []


def test_the_win_notice_records_the_clearing_price_and_bills_nothing(world: World) -> None:
    """Breaks if the win notice appends an impression (nurl would bill)."""
    world.bid()
    assert world.get(path(bid_urls(token()).nurl, AUCTION_PRICE="1.75")) == (204, {})
    (event,) = world.appended()
    assert (event.event_type, event.notice_micros, event.price_micros) == (
        EventType.WIN, 1_750_000, BID)
    assert world.billed() == 0 and world.in_flight() == EXPECTED
    assert world.agg.outcomes["measured"] == 1


def test_a_bid_billed_on_render_bills_p_on_i_and_nothing_on_the_notice(world: World) -> None:
    """``billable_event = exchange_beacon``: the markup's ``/i?p=`` bills ``p``, the billing
    notice is counted and bills nothing. Breaks if ``/i`` bills the token's bid (``p``
    ignored), or if the notice ignores the token's billable event (it appends an
    impression: two would race)."""
    t = token(billable_event="exchange_beacon")
    urls = bid_urls(t)
    assert world.get(path(urls.burl, AUCTION_PRICE="1.1")) == (204, {})
    assert world.tracker.counts()["notice_bill_recorded"] == 1
    assert world.appended() == []
    assert world.get(path(urls.impression, AUCTION_PRICE="1.2345678"))[0] == 204
    kinds = {e.event_type: e for e in world.appended()}
    assert set(kinds) == {EventType.RENDER, EventType.IMPRESSION}
    assert kinds[EventType.IMPRESSION].price_micros == 1_234_567
    assert world.billed() == 1_234


def test_the_markup_beacon_after_a_loss_notice_bills_nothing(world: World) -> None:
    """``exchange_beacon``: once the exchange said the bid lost, a page firing the lost
    markup's ``/i`` bills nothing (held ``impressions_after_loss``), and the loss settled
    the reservation once. Breaks if the planner bills an impression whose loss row is
    there (tried: the ``billing_notice`` check removed: billed 1,200)."""
    world.bid()
    t = token(billable_event="exchange_beacon")
    urls = bid_urls(t)
    assert world.get(path(urls.lurl, AUCTION_LOSS="102", AUCTION_MIN_TO_WIN="2.5"))[0] == 204
    assert world.billed() == 0
    assert world.get(path(urls.impression, AUCTION_PRICE="1.2"))[0] == 204
    assert world.billed() == 0 and world.in_flight() == 0
    assert world.ledger.settled_since(DAY, START) == {7: EXPECTED}
    assert world.agg.outcomes["not_billable"] == 1


def test_a_billing_notice_after_a_loss_notice_still_bills(world: World) -> None:
    """The exchange bills us: its billing notice bills even after its own loss notice
    (settling nothing twice). Breaks if the after-loss rule also holds billing notices."""
    world.bid()
    urls = bid_urls(token())
    assert world.get(path(urls.lurl, AUCTION_LOSS="102", AUCTION_MIN_TO_WIN=""))[0] == 204
    assert world.get(path(urls.burl, AUCTION_PRICE="1.5"))[0] == 204
    assert world.billed() == 1_500 and world.in_flight() == 0
    assert world.ledger.settled_since(DAY, START) == {7: EXPECTED}


def test_i_with_a_bad_p_is_refused_naming_p_and_stores_nothing(world: World) -> None:
    """Breaks if ``/i`` ignores ``p`` (stores the beacon at the token's price)."""
    urls = bid_urls(token(billable_event="exchange_beacon"))
    for price in ("2.5", "${AUCTION_PRICE}"):
        status, body = world.get(urls.impression.replace("${AUCTION_PRICE}", price))
        assert status == 400 and body["error"] == "invalid_price"
        assert body["fields"][0]["field"] == "p"
    assert world.appended() == []


def test_a_page_cannot_lower_the_price_of_an_ordinary_serve_with_p(world: World) -> None:
    """A token billed on render that is not an exchange bid (``rendered``: an
    ``ads:select`` serve) bills its own price whatever ``p`` says, and a missing ``p`` on
    an exchange bid's beacon stores nothing (its bid is no clearing price). Breaks if
    ``/i`` honours ``p`` for any token billed on render (the page bills 0), or bills the
    bid when an ``exchange_beacon`` token comes without ``p``."""
    t = token(billable_event="rendered")
    assert world.get(f"/i?t={t}&p=0")[0] == 204
    assert world.billed() == BID // 1000
    exchange = token(billable_event="exchange_beacon")
    status, body = world.get(f"/i?t={exchange}")
    assert status == 400 and body["fields"][0]["field"] == "p"
    assert world.billed() == BID // 1000


def test_i_of_a_notice_billed_bid_records_the_render_only(world: World) -> None:
    """Breaks if ``/i`` bills a bid whose billing notice bills it (the beacon's
    ``bills`` true for ``notice`` tokens: billed twice)."""
    urls = bid_urls(token())
    assert world.get(path(urls.impression, AUCTION_PRICE="1.5"))[0] == 204
    assert [e.event_type for e in world.appended()] == [EventType.RENDER]
    assert world.billed() == 0


def test_the_hot_i_handler_bills_p_as_the_routed_one(world: World) -> None:
    """The bare ASGI ``/i`` (what ``serve`` answers a feed's beacons with) reads ``p`` too.
    Breaks if ``_pixel_asgi`` passes no price (the impression bills the bid, 2,000)."""
    endpoints = TrackingEndpoints(world.tracker)

    async def hot(scope: dict, receive: object, send: object) -> None:
        await endpoints.impression_asgi(scope, receive, send)

    url = path(bid_urls(token(billable_event="exchange_beacon")).impression,
               AUCTION_PRICE="1.2345678")
    assert TestClient(hot).get(url).status_code == 204
    assert world.billed() == 1_234


def test_a_house_ads_notice_is_counted_and_never_appended(world: World) -> None:
    """Breaks if the desk skips the house check (a house ad's impression would be
    appended and bill the operator's own campaign id)."""
    url = path(bid_urls(token(campaign_id=HOUSE_ID)).burl, AUCTION_PRICE="1")
    assert world.get(url) == (204, {})
    assert world.appended() == []
    assert world.tracker.counts()["notice_bill_house"] == 1


def test_an_impression_a_beacon_bills_is_not_counted_a_billing_notice(world: World) -> None:
    """``adfunnel_rtb_notices_total{notice="bill"}`` counts billing notices only: an
    impression billed by the markup's ``/i`` (``exchange_beacon``) or by an ordinary
    serve's beacon (``rendered``) bills without counting one. Breaks if the aggregator
    tallies every impression (tried: ``if True:`` for ``if event.billing_notice:`` in
    ``Aggregator._after``: billed +2)."""
    before = counted("bill", "billed")
    exchange = bid_urls(token("imp-b", billable_event="exchange_beacon")).impression
    assert world.get(path(exchange, AUCTION_PRICE="1.5"))[0] == 204
    assert world.get(f"/i?t={token('imp-r', billable_event='rendered')}")[0] == 204
    assert world.billed() == 1_500 + BID // 1000
    assert counted("bill", "billed") == before


@pytest.mark.parametrize("billable_event", ["viewable", "rendered"])
def test_an_ads_select_serves_token_is_no_bid_to_notify(world: World, billable_event: str) -> None:
    """A serve token of ``ads:select`` (billed on ``/vi`` or ``/i``; every page that shows
    the ad sees it) is no OpenRTB bid: its notices are refused naming ``t``, nothing is
    appended, and its reservation stays in flight. Breaks if the desk takes any valid
    token (tried: the ``RTB_BIDS`` check removed from ``_verify``: the page's loss
    notice releases the serve's 1,800 in flight and writes a loss row with its own ``m``,
    which the shading fit reads as the serve's price to beat)."""
    world.bid()
    urls = bid_urls(token(billable_event=billable_event))
    for url in (path(urls.lurl, AUCTION_LOSS="102", AUCTION_MIN_TO_WIN="999999"),
                path(urls.nurl, AUCTION_PRICE="0.001"), path(urls.burl, AUCTION_PRICE="1")):
        status, body = world.get(url)
        assert status == 400 and body["fields"][0]["field"] == "t", url
    assert world.appended() == []
    assert world.in_flight() == EXPECTED and world.billed() == 0
    assert world.tracker.counts()["notice_loss_refused_not_a_bid"] == 1


@pytest.mark.parametrize("notice", ["burl", "nurl", "lurl"])
def test_a_notice_without_the_exchanges_proof_is_refused_naming_n(world: World,
                                                                  notice: str) -> None:
    """The markup's token alone (what a page sees), or with the proof of another bid, or
    a proof signed with another key, settles nothing: 400 naming ``n``, nothing
    appended, the reservation kept. Breaks if the desk skips the proof (tried: the
    ``notice_mac_ok`` check removed: the page's p=0 bill is appended)."""
    world.bid()
    t = token()
    url = path(getattr(bid_urls(t), notice), AUCTION_PRICE="0", AUCTION_LOSS="102",
               AUCTION_MIN_TO_WIN="3")
    bare = url.replace(proof(t), "")
    other = url.replace(proof(t), proof(token("imp2")))
    foreign = url.replace(proof(t), f"&n={notice_mac(t, b'x' * 32)}")
    for bad in (bare, other, foreign, bare + "&n=", bare + "&n=%00"):
        assert bad != url
        status, body = world.get(bad)
        assert status == 400 and body["fields"][0]["field"] == "n", bad
        assert body["error"] == "invalid_token"
    assert world.appended() == []
    assert world.in_flight() == EXPECTED and world.billed() == 0
    assert world.tracker.counts()["invalid_notice_proofs"] == 5


@pytest.mark.parametrize("notice", ["burl", "nurl", "lurl"])
def test_a_bids_proof_still_verifies_after_the_token_secret_is_rotated(notice: str) -> None:
    """A bid answered before a rotation (token and ``n`` under the old secret, now one
    of the previous keys) is still settled by its exchange's notice. Breaks if the desk
    checks ``n`` under the current secret only (tried: the previous keys left out of
    ``notice_mac_ok``: 400 naming ``n`` for every bid in flight at the rotation)."""
    world = World(key=b"r" * 32, previous=(KEY,))
    world.bid()
    url = path(getattr(bid_urls(token()), notice), AUCTION_PRICE="1.5", AUCTION_LOSS="102",
               AUCTION_MIN_TO_WIN="3")
    assert world.get(url) == (204, {})
    assert len(world.appended()) == 1
