"""The tracker: impression beacon, click redirect and conversion postback → the event log.

DESIGN.md §Events and billing. Each beacon does four things and never waits on the
database:

1. verify its token (constant-time MAC; expiry). A conversion carries no serve token
   but the **click id** that only the click's redirect revealed
   (:func:`~adfunnel.tracking.click_id.sign_click_id`): a serve token is refused there, so
   whoever merely saw the ad cannot bill a conversion. A click id is accepted up to
   :data:`CONVERSION_GRACE_S` after its click (the aggregator checks the campaign's
   attribution window); the id of a click flagged as invalid traffic is refused;
2. apply the tier-1 invalid-traffic rules (:mod:`adfunnel.ivt.rules`) to the sender's
   facts (:mod:`adfunnel.tracking.client`);
3. append one :class:`~adfunnel.events.model.Event` to the event log (through a
   :class:`~adfunnel.events.publisher.EventPublisher`, which spools to disk while the
   log is down);
4. answer.

**Rendered and viewable.** The page's tag fires ``/i`` when it rendered the ad
(:meth:`Tracker.impression`, a ``render`` event) and ``/vi`` when the ad met the MRC
viewable standard (:meth:`Tracker.viewable`, a ``viewable`` event). Both are
measurement, recorded once and never billed; the beacon that matches the token's
``billable_event`` (``rendered`` → ``/i``, ``viewable`` → ``/vi``; tokens from before
the claim are ``rendered``) also appends the ``impression``, the event that bills
exactly as before. Both events get the beacon's one invalid-traffic verdict.

**OpenRTB markup.** The impression beacon in an OpenRTB bid's markup is
``/i?t=…&p=${AUCTION_PRICE}``. When the endpoint bills on that beacon the token's
billable event is ``exchange_beacon``: ``/i`` then bills the clearing price ``p`` names
(:func:`~adfunnel.tracking.clearing_price.within_bid`: CPM micros rounded down, never
above the token's bid), and a missing or refused ``p`` stores nothing (outcome
``price:<reason>``, counted ``price_refused_<reason>``). Any other token ignores ``p``:
a page cannot lower the price of an ad it was served through ``ads:select`` (the
token's own price bills). The exchange's own notices are
:mod:`adfunnel.tracking.notice_desk`.

Billing happens later, in the aggregator (:mod:`adfunnel.billing.aggregator`), which
reads the log. An invalid-traffic event is appended too, carrying its reason, so IVT is
counted by reason exactly once and never billed; a flagged click is still redirected,
with a click id that looks like any other but never attributes (a bot learns nothing).
A click on an expired but authentic token (a tab left open) is redirected to the ad's
landing page and counted, never appended. Forged, malformed and expired tokens are
refused, counted here
(:attr:`Tracker.counts`, ``invalid_tokens[_<reason>]``) and never appended. A house
ad's token (campaign ``HOUSE_ID``) is counted (``house_<event>``), never appended. A
click on an ad with nowhere to land (unknown, or back in review since its serve) gets
the 404 page and is counted (``unlanded_click``), never appended: no visit, no charge.

The click redirect goes to the ad's own landing URL, looked up by the ad id inside the
signed token (:class:`LandingUrls`, a read model of creatives from the campaign side),
never to a URL taken from the request.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec
from prometheus_client import Counter

from adfunnel.campaigns.model import HOUSE_ID, MAX_ATTRIBUTION_WINDOW_S
from adfunnel.clock import Clock
from adfunnel.events.model import MAX_USER_AGENT_CHARS, Event, EventType
from adfunnel.events.publisher import EventRefused
from adfunnel.ivt.reasons import Reason
from adfunnel.ivt.rules import EventFacts, Tier1Rules
from adfunnel.tracking.clearing_price import PriceRefused, within_bid
from adfunnel.tracking.click_id import sign_click_id, verify_click_id
from adfunnel.tracking.client import ClientFacts
from adfunnel.tracking.token import InvalidToken, TokenClaims, verify
from adfunnel.tracking.token_claims import EXCHANGE_BEACON, TEST_BID

#: Tier-1 reasons about the sender's address: not applied when the address is unknown.
ADDRESS_REASONS = frozenset({Reason.BAD_IP, Reason.CRAWLER_IP, Reason.DATACENTER_IP})
#: Seconds after its click a click id still attributes a conversion at the tracker: the
#: longest attribution window a campaign may set (the aggregator applies the campaign's
#: own, from the recorded click).
CONVERSION_GRACE_S = MAX_ATTRIBUTION_WINDOW_S

BEACONS = Counter(
    "adfunnel_beacons_total", "Tracking beacons by event type and outcome", ["event", "outcome"]
)


@functools.lru_cache(maxsize=1_024)
def _beacons(event: str, outcome: str) -> Counter:
    """The labelled child of :data:`BEACONS` (``labels`` takes a lock and a lookup)."""
    return BEACONS.labels(event, outcome)

#: The measurement beacon that also stores the impression, by the token's billable event
#: (``notice``: neither; the billing notice bills).
_BILLS_ON = {"rendered": EventType.RENDER, "viewable": EventType.VIEWABLE,
             EXCHANGE_BEACON: EventType.RENDER}

#: Outcomes of :class:`BeaconResult`.
APPENDED = "appended"
HOUSE = "house"
TEST = "test"  # an OpenRTB test bid's beacon (``test = 1``): answered, never stored
EXPIRED = "expired"
#: A click on an ad with nowhere to land (unknown, or not approved now): the 404 page,
#: never stored, so never billed (no visit); counted as :data:`UNLANDED_CLICK`.
UNLANDED = "unlanded"
UNLANDED_CLICK = "unlanded_click"
UNAVAILABLE = "unavailable"
#: A beacon from a browser on an origin its placement does not allow (tracking/cors.py).
ORIGIN_REFUSED = "origin_refused"


class LandingUrls(Protocol):
    """Where a click goes: the read model of creatives the tracker needs."""

    def landing_url(self, ad_id: int) -> str | None:
        """The ad's landing URL, or None for an unknown ad or one not approved (its
        current URL is not reviewed)."""
        ...

    def house_landing_url(self, placement: str) -> str | None:
        """The landing URL of the placement's house ad, or None."""
        ...


class EventSink(Protocol):
    """Where the tracker appends (an :class:`~adfunnel.events.publisher.EventPublisher`)."""

    def append(self, event: Event) -> None:
        """Store ``event`` durably (log or spool) before returning.

        Raises:
            EventRefused: neither the log nor the spool could take it.
        """
        ...

    async def append_async(self, event: Event) -> None:
        """Store ``event`` durably (log or spool) from a coroutine, then return.

        Raises:
            EventRefused: neither the log nor the spool could take it.
        """
        ...


@dataclass(frozen=True, slots=True)
class BeaconResult:
    """What the tracker did with one beacon.

    ``outcome``: ``appended`` (a valid event in the log), ``ivt:<reason>`` (appended as
    invalid traffic), ``house``, ``unlanded`` (a click on an ad not approved now:
    the 404 page, never appended), ``expired`` (a click on an expired but authentic
    token: redirected, never appended), ``invalid:<reason>`` (a refused token: answer
    400) or ``unavailable`` (nothing could store it: answer 503, the client retries).
    ``landing_url``: where a click goes (None for other events or an unknown ad).
    ``event``: the event stored (for ``/i`` and ``/vi``: the impression when this
    beacon bills it, else the render or viewable event); ``measured``: the render or
    viewable event stored beside a billed impression, else None.
    """

    outcome: str
    landing_url: str | None = None
    event: Event | None = None
    #: a stored click's click id (the redirect hands it to the landing page), else None
    click_id: str | None = None
    #: the token's placement, when the beacon was refused for its ``Origin``
    placement: str | None = None
    measured: Event | None = None

    @property
    def events(self) -> tuple[Event, ...]:
        """Every event this beacon stores, the measurement one first."""
        if self.event is None:
            return ()
        return (self.event,) if self.measured is None else (self.measured, self.event)


class Tracker:
    """Verifies beacons and appends them to the event log; thread-safe.

    Args:
        sink: where events go (the event log, with its spool).
        landing: the creatives read model, for click redirects.
        clock: the injected clock: event times and token expiry.
        token_key: the token secret (non-empty bytes): verifies tokens and click ids,
            signs click ids.
        ivt: tier-1 invalid-traffic rules (None: none applied).
        previous_keys: earlier token secrets (rotation): what they signed still verifies.
        origins: a placement's ``allowed_origins`` (None: beacons are not checked for
            their ``Origin``, as a tracker without the placements' read model).
    """

    def __init__(self, sink: EventSink, landing: LandingUrls, clock: Clock, token_key: bytes,
                 *, ivt: Tier1Rules | None = None,
                 previous_keys: Sequence[bytes] = (),
                 origins: Callable[[str], Collection[str]] | None = None) -> None:
        self.origins = origins
        self.sink = sink
        self.landing = landing
        self.clock = clock
        self.token_key = token_key
        self.previous_keys = tuple(previous_keys)
        self._keys = (token_key, *self.previous_keys)
        self.ivt = ivt
        self._lock = threading.Lock()
        self._counts: Tally[str] = Tally()

    def impression(self, token: str | None, client: ClientFacts | None = None) -> BeaconResult:
        """The ad was rendered (``/i``): a ``render`` event, and the ``impression`` when
        the token bills on render; ``client``: its sender, for the IVT rules."""
        return self._handle(token, EventType.RENDER, client)

    def viewable(self, token: str | None, client: ClientFacts | None = None) -> BeaconResult:
        """The ad was viewable (``/vi``): a ``viewable`` event, and the ``impression``
        when the token bills on viewable; ``client``: its sender, for the IVT rules."""
        return self._handle(token, EventType.VIEWABLE, client)

    def click(self, token: str | None, client: ClientFacts | None = None) -> BeaconResult:
        """A click; ``client``: its sender, for the IVT rules."""
        return self._handle(token, EventType.CLICK, client)

    def conversion(self, click_id: str | None, client: ClientFacts | None = None,
                   value_micros: int | None = None) -> BeaconResult:
        """A conversion for the click whose click id (never its serve token) is
        ``click_id``; ``value_micros``: the conversion's reported value (integer micros),
        if any. ``client`` None (a server-to-server postback) skips the tier-1 rules."""
        return self._handle(click_id, EventType.CONVERSION, client, value_micros)

    def click_claims(self, click_id: str) -> TokenClaims:
        """The serve claims a click id names, verified as :meth:`conversion` verifies it
        (nothing counted, nothing appended): for a caller that must check whose click it
        is first (the authenticated postback).

        Raises:
            InvalidToken: as :func:`~adfunnel.tracking.click_id.verify_click_id`.
        """
        now_s = self.clock.now().timestamp()
        return verify_click_id(click_id, self._keys, now_s, CONVERSION_GRACE_S).serve

    def counts(self) -> dict[str, int]:
        """What this tracker refused or did not append, by name (``invalid_tokens``,
        ``invalid_tokens_<reason>``, ``house_<event>``, ``unlanded_click``,
        ``unavailable``)."""
        with self._lock:
            return dict(self._counts)

    def count(self, *names: str) -> None:
        """Add one to each of the counts ``names`` (:meth:`counts`)."""
        self._count(*names)

    def _count(self, *names: str) -> None:
        with self._lock:
            for name in names:
                self._counts[name] += 1

    async def beacon(self, event_type: EventType, token: str | None,
                     client: ClientFacts | None = None, value_micros: int | None = None,
                     origin: str | None = None, price: str | None = None) -> BeaconResult:
        """Any beacon, for an asyncio server: the same as :meth:`impression` (``render``),
        :meth:`viewable`, :meth:`click` and :meth:`conversion`, waiting for the store
        without holding a thread (many beacons share one round trip to the log).
        ``origin``: a browser's cross-origin ``Origin``
        (:func:`~adfunnel.tracking.cors.cross_origin`): refused (:data:`ORIGIN_REFUSED`,
        nothing stored) unless the token's placement allows it. ``price``: the ``p`` of
        an OpenRTB markup's ``/i`` (the clearing price, decimal CPM), or None."""
        result = self._prepare(token, event_type, client, value_micros, origin, price)
        if result.event is None:
            return result
        try:
            if result.measured is None:
                await self.sink.append_async(result.event)
            else:  # both stored before the answer (a retry is deduplicated by msg id)
                await asyncio.gather(*(self.sink.append_async(e) for e in result.events))
        except EventRefused:
            return self._unavailable(result)
        return self._appended(result)

    def _handle(self, token: str | None, event_type: EventType, client: ClientFacts | None,
                value_micros: int | None = None) -> BeaconResult:
        result = self._prepare(token, event_type, client, value_micros)
        if result.event is None:
            return result
        try:
            for event in result.events:
                self.sink.append(event)
        except EventRefused:
            return self._unavailable(result)
        return self._appended(result)

    def _prepare(self, token: str | None, event_type: EventType, client: ClientFacts | None,
                 value_micros: int | None, origin: str | None = None,
                 price: str | None = None) -> BeaconResult:
        """Verify and judge a beacon: a final result (refused token, house ad, expired
        click), or the event to store (``event`` set, ``outcome`` what it will be once
        stored). A conversion's ``token`` is a click id (:func:`verify_click_id`). A
        ``render`` or ``viewable`` beacon whose token bills on it stores the impression
        as ``event`` and itself as ``measured``."""
        now_s = self.clock.now().timestamp()
        try:
            if not token:
                raise InvalidToken("malformed")
            if event_type is EventType.CONVERSION:
                claims = verify_click_id(token, self._keys, now_s, CONVERSION_GRACE_S).serve
            else:
                claims = verify(token, self.token_key, now_s, self.previous_keys)
        except InvalidToken as exc:
            self._count("invalid_tokens", f"invalid_tokens_{exc.reason}")
            _beacons(event_type.value, f"invalid_{exc.reason}").inc()
            if exc.claims is not None and event_type is EventType.CLICK:
                # a late click (a tab left open) still lands, never billed (counted above)
                return BeaconResult(EXPIRED, self._landing(exc.claims, event_type))
            return BeaconResult(f"invalid:{exc.reason}")
        if (origin is not None and self.origins is not None
                and origin not in self.origins(claims.placement)):
            self._count(ORIGIN_REFUSED)
            _beacons(event_type.value, ORIGIN_REFUSED).inc()
            return BeaconResult(ORIGIN_REFUSED, placement=claims.placement)
        landing = self._landing(claims, event_type)
        if claims.campaign_id == HOUSE_ID:
            self._count(f"house_{event_type.value}")
            _beacons(event_type.value, HOUSE).inc()
            return BeaconResult(HOUSE, landing)
        if event_type is EventType.CLICK and landing is None:
            self._count(UNLANDED_CLICK)
            _beacons(event_type.value, UNLANDED).inc()
            return BeaconResult(UNLANDED)
        if claims.billable_event == TEST_BID:  # an OpenRTB test bid: answered, not stored
            self._count(f"test_{event_type.value}")
            _beacons(event_type.value, TEST).inc()
            return BeaconResult(TEST, landing)
        bills = _BILLS_ON.get(claims.billable_event) is event_type
        clearing = bills and claims.billable_event == EXCHANGE_BEACON
        price_micros = claims.price_micros
        if clearing:  # an OpenRTB markup's beacon: bill the clearing price it carries
            try:
                price_micros = within_bid(price, claims.price_micros)
            except PriceRefused as exc:
                self._count(f"price_refused_{exc.reason}")
                _beacons(event_type.value, f"price_{exc.reason}").inc()
                return BeaconResult(f"price:{exc.reason}")
        reason = self._invalid(claims, event_type, client, now_s)
        event = Event(
            event_type=event_type, impression_id=claims.impression_id,
            campaign_id=claims.campaign_id, ad_id=claims.ad_id, placement=claims.placement,
            price_micros=price_micros, billing_type=claims.billing_type,
            served_at=claims.issued_at, expected_micros=claims.expected_micros,
            occurred_at=now_s, client_ip=(client.ip or "") if client else "",
            user_agent=(client.user_agent or "")[:MAX_USER_AGENT_CHARS] if client else "",
            conversion_value_micros=value_micros, ivt_reason=reason,
            # a conversion names its click: the impression the click id was issued for
            click_id=claims.impression_id if event_type is EventType.CONVERSION else None,
            tracked_ns=time.time_ns(),
            notice_micros=price_micros if clearing else None,
        )
        click_id = None
        if event_type is EventType.CLICK:  # what only the click reveals (README, /v)
            click_id = sign_click_id(claims, round(now_s * 1000), self.token_key,
                                     invalid=reason is not None)
        outcome = APPENDED if reason is None else f"ivt:{reason}"
        if bills:
            impression = msgspec.structs.replace(event, event_type=EventType.IMPRESSION)
            return BeaconResult(outcome, landing, impression, measured=event)
        return BeaconResult(outcome, landing, event, click_id)

    def _appended(self, result: BeaconResult) -> BeaconResult:
        assert result.event is not None
        reason = result.event.ivt_reason
        for event in result.events:
            _beacons(event.event_type.value,
                     APPENDED if reason is None else f"ivt_{reason}").inc()
        return result

    def _unavailable(self, result: BeaconResult) -> BeaconResult:
        assert result.event is not None
        self._count(UNAVAILABLE)
        _beacons(result.event.event_type.value, UNAVAILABLE).inc()
        return BeaconResult(UNAVAILABLE, result.landing_url)

    def _landing(self, claims: TokenClaims, event_type: EventType) -> str | None:
        if event_type is not EventType.CLICK:
            return None
        if claims.campaign_id == HOUSE_ID:
            return self.landing.house_landing_url(claims.placement)
        return self.landing.landing_url(claims.ad_id)

    def _invalid(self, claims: TokenClaims, event_type: EventType, client: ClientFacts | None,
                 now_s: float) -> str | None:
        """The tier-1 reason when the beacon is invalid traffic, else None. Without the
        sender's address (a local transport) the address rules are skipped."""
        if self.ivt is None or client is None:
            return None
        facts = EventFacts(event_type.value, client.ip or "", client.user_agent,
                           served_at_ms=claims.issued_at * 1000, event_at_ms=int(now_s * 1000),
                           impression_id=claims.impression_id, placement=claims.placement)
        verdict = self.ivt.check(facts)
        if verdict.valid or (client.ip is None and verdict.reason in ADDRESS_REASONS):
            return None
        return str(verdict.reason)
