"""An exchange's OpenRTB notices → the event log: the billing notice bills, the win and
loss notices are measured.

OpenRTB 2.6 §3.2.19 (``nurl``, ``burl``, ``lurl``), §4.4 (macros), §5.25 (loss reason
codes); the URL shapes are :mod:`adfunnel.tracking.notices`; DESIGN.md §How ads are
sold, *Programmatic*. Each notice carries the bid's signed serve token (``t``), verified
as a beacon's is (forged, malformed and expired tokens refused and counted
``invalid_tokens[_<reason>]``, nothing appended), and answers without waiting on the
database.

**Which notice bills.** The token's ``billable_event`` says it, per the endpoint's
configuration when it bid:

- ``notice`` (the default): the **billing notice** ``/rtb/bill?t=&p=`` bills. It appends
  ONE ``impression`` event priced at the clearing price ``p`` (CPM micros, rounded down:
  :mod:`adfunnel.tracking.clearing_price`), carrying the token's expected cost, so the
  ledger bills it per mille with its carried fraction, as any CPM impression, and
  settles the bid's in-flight reservation. The impression beacon ``/i`` in the markup
  records the render only.
- ``exchange_beacon``: the markup's ``/i?t=&p=`` bills the clearing price
  (:class:`~adfunnel.tracking.beacons.Tracker`); a billing notice is checked, counted
  (outcome ``recorded``) and bills nothing.

Per OpenRTB, ``burl`` is the billing signal and ``nurl`` informational for a bidder: the
**win notice** ``/rtb/win?t=&p=`` is not needed for billing. It appends a ``win`` event
(measurement, no money) with the clearing price in ``notice_micros``: the win-price
history. An exchange that sends ``nurl`` and no ``burl`` bills us nothing (billing on
``nurl`` would bill an ad that may never have been shown).

The **loss notice** ``/rtb/loss?t=&r=&m=`` appends a ``loss`` event (measurement, no
money) with the loss reason ``r`` (``loss_reason``; absent or unsubstituted: unknown)
and the minimum bid to win ``m`` (``notice_micros``; absent or unsubstituted: None),
carrying the token's expected cost: the ledger's loss row settles the bid's in-flight
reservation once, and never after its impression settled it (nor the impression after
the loss: :mod:`adfunnel.billing.batch`). ``r = 0`` ("Bid Won") is refused: a loss
notice says the bid lost.

**Money rules.** A price above the token's bid is refused and counted (``above_bid``):
an exchange never clears above the bid. Each notice appends at most one event, whose
message id (``<impression id>:<type>``) the log deduplicates and whose ledger row is
unique per (impression id, event type): a replayed billing notice bills nothing again,
a replayed loss releases nothing again.

**Who may call.** The routes are open: the exchange calls them, without our API keys. A
notice is worthless without a valid token and the exchange's proof ``n`` (a MAC of the
token only the bid response's notice URLs carry, never the markup:
:mod:`adfunnel.tracking.notices`), so the page, which sees the markup's token, can
neither bill a bid (at 0, before the exchange's notice) nor release it nor write its win
price. A token is signed by us for ONE bid: one impression id, its campaign, ad and bid
(``price_micros``, the ceiling of any price), and an expiry. So whoever holds the notice
URLs (the exchange) can bill at most our bid, once, before it expires; a loss can
release the reservation of that one bid only. In ``exchange_beacon`` mode the markup's
beacon bills by design: there the page is trusted with the clearing price the exchange
wrote into ``adm`` (README), but not after the exchange's loss notice (the ledger holds
such an impression for good: :data:`adfunnel.billing.batch_model.AFTER_LOSS`). The
token of an ``ads:select`` serve (billed on ``/vi`` or ``/i``, seen by every page that
shows it) is no bid: its notices are refused
(``not_a_bid``, naming ``t``), so a page can neither release its reservation nor write a
win or loss row the shading fit would read as an exchange's price. Notices come from the
exchange's servers, not from a person: the tier-1 invalid-traffic rules (about browsers
and their addresses) are not applied, and the event's address is left empty so tier-2's
per-address windows do not lump an exchange's notices together.

Counted: Prometheus ``adfunnel_rtb_notices_total{notice, outcome}`` and the tracker's
counts (``notice_<notice>_<outcome>``), outcome ``appended`` (a billing notice's
impression handed to the log), ``recorded``, ``refused_<reason>``, ``unavailable``,
``house``, ``test``. Whether a billing notice billed is the ledger's to say, so the
aggregator that records its impression (``Event.billing_notice``) counts it in the same
Prometheus series, ``notice="bill"``, by the ledger's outcome: ``billed`` (inserted),
``duplicate`` (a replay: the ledger holds that impression already), ``invalid``, …. A
replay within the log's dedupe window is dropped by the log (its ``duplicates``) and
reaches no aggregator: ``billed`` counts billing notices that billed, each once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from prometheus_client import Counter

from adfunnel.campaigns.model import HOUSE_ID
from adfunnel.events.model import Event, EventType
from adfunnel.events.publisher import EventRefused
from adfunnel.observability.metrics import RTB_NOTICES
from adfunnel.tracking.beacons import Tracker
from adfunnel.tracking.clearing_price import (
    MAX_CPM_MICROS,
    PriceRefused,
    cpm_micros,
    is_unsubstituted,
    within_bid,
)
from adfunnel.tracking.notices import NOTICE_PROOF, notice_mac_ok
from adfunnel.tracking.token import InvalidToken, TokenClaims, verify
from adfunnel.tracking.token_claims import EXCHANGE_BEACON, TEST_BID

NOTICES = RTB_NOTICES

WIN, BILL, LOSS = "win", "bill", "loss"
#: Outcomes of :class:`NoticeResult`.
APPENDED = "appended"  # a billing notice's impression handed to the log (bills once)
RECORDED = "recorded"
UNAVAILABLE = "unavailable"
HOUSE = "house"
TEST = "test"  # a test request's bid (``test = 1``): answered, nothing stored
#: The billable events of an OpenRTB bid's token: only such a token has notices (an
#: ``ads:select`` serve's, ``viewable`` or ``rendered``, is seen by every page showing it).
RTB_BIDS = frozenset({"notice", EXCHANGE_BEACON})
#: Largest loss reason code accepted (OpenRTB: 0-10, 100-104, 200-211, 1000+ exchange's).
MAX_LOSS_REASON = 2**31 - 1


@functools.lru_cache(maxsize=256)
def _notices(notice: str, outcome: str) -> Counter:
    """The labelled child of :data:`NOTICES`."""
    return NOTICES.labels(notice, outcome)


@dataclass(frozen=True, slots=True)
class NoticeResult:
    """What the desk did with one notice.

    ``outcome``: ``appended`` (a billing notice's impression appended: the ledger bills
    it unless it holds it already), ``recorded`` (a win or loss
    appended, or a billing notice that does not bill), ``house``, ``unavailable``
    (nothing could store it: answer 503) or ``refused``. A refused notice names the
    query parameter at fault (``field``: ``t``, ``p``, ``r`` or ``m``), its ``reason``
    and a ``problem`` sentence. ``event``: the event appended, if any.
    """

    outcome: str
    event: Event | None = None
    field: str | None = None
    reason: str | None = None
    problem: str | None = None

    @property
    def refused(self) -> bool:
        return self.outcome == "refused"


class NoticeDesk:
    """Verifies OpenRTB notices and appends their events through ``tracker``'s sink, on
    its clock and keys, counting in its counts."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    async def bill(self, token: str | None, price: str | None,
                   proof: str | None) -> NoticeResult:
        """The billing notice (``/rtb/bill``): ``price`` is the clearing price text,
        ``proof`` the URL's ``n`` (:func:`~adfunnel.tracking.notices.notice_mac`)."""
        claims = self._verify(BILL, token, proof)
        if isinstance(claims, NoticeResult):
            return claims
        try:
            micros = within_bid(price, claims.price_micros)
        except PriceRefused as exc:
            return self._refuse(BILL, "p", exc.reason, exc.problem)
        if claims.billable_event != "notice":  # the markup's beacon bills this bid
            return self._done(BILL, NoticeResult(RECORDED))
        event = self._event(EventType.IMPRESSION, claims, price_micros=micros,
                            notice_micros=micros, billing_notice=True)
        return await self._append(BILL, APPENDED, event)

    async def win(self, token: str | None, price: str | None,
                  proof: str | None) -> NoticeResult:
        """The win notice (``/rtb/win``): records the clearing price, bills nothing."""
        claims = self._verify(WIN, token, proof)
        if isinstance(claims, NoticeResult):
            return claims
        try:
            micros = within_bid(price, claims.price_micros)
        except PriceRefused as exc:
            return self._refuse(WIN, "p", exc.reason, exc.problem)
        event = self._event(EventType.WIN, claims, notice_micros=micros)
        return await self._append(WIN, RECORDED, event)

    async def loss(self, token: str | None, reason: str | None,
                   min_to_win: str | None, proof: str | None) -> NoticeResult:
        """The loss notice (``/rtb/loss``): ``reason`` the loss reason code text,
        ``min_to_win`` the minimum bid to win (decimal CPM); releases the bid's
        reservation (through the ledger), bills nothing."""
        claims = self._verify(LOSS, token, proof)
        if isinstance(claims, NoticeResult):
            return claims
        code: int | None = None
        if reason and not is_unsubstituted(reason):
            text = reason.strip()
            if not (text.isascii() and text.isdigit()) or int(text) > MAX_LOSS_REASON:
                return self._refuse(LOSS, "r", "not_a_code",
                                    "an OpenRTB loss reason code: an integer >= 1")
            code = int(text)
            if code == 0:
                return self._refuse(LOSS, "r", "won", "0 is 'Bid Won', not a loss")
        floor: int | None = None
        if min_to_win and not is_unsubstituted(min_to_win):
            try:
                floor = cpm_micros(min_to_win)
            except PriceRefused as exc:
                return self._refuse(LOSS, "m", exc.reason, exc.problem)
        event = self._event(EventType.LOSS, claims, notice_micros=floor, loss_reason=code)
        return await self._append(LOSS, RECORDED, event)

    def _verify(self, notice: str, token: str | None,
                proof: str | None) -> TokenClaims | NoticeResult:
        """The token's claims, or the answer without them: a forged, malformed or
        expired token refused; a notice without the exchange's proof ``n`` refused
        (``no_notice_proof``, naming ``n``: the page's view of the token, module
        docstring); a house ad's (counted, never appended)."""
        tracker = self.tracker
        try:
            if not token:
                raise InvalidToken("malformed")
            claims = verify(token, tracker.token_key, tracker.clock.now().timestamp(),
                            tracker.previous_keys)
        except InvalidToken as exc:
            tracker.count("invalid_tokens", f"invalid_tokens_{exc.reason}")
            return self._refuse(notice, "t", exc.reason, f"invalid token: {exc.reason}")
        if not notice_mac_ok(token, proof, (tracker.token_key, *tracker.previous_keys)):
            tracker.count("invalid_notice_proofs")
            return self._refuse(notice, NOTICE_PROOF, "no_notice_proof",
                                "not the notice URL of our bid response: n is missing or "
                                "wrong (the markup's token alone settles nothing)")
        if claims.campaign_id == HOUSE_ID:  # a house ad never bids: nothing to record
            return self._done(notice, NoticeResult(HOUSE))
        if claims.billable_event == TEST_BID:  # a test request's bid: nothing bills
            return self._done(notice, NoticeResult(TEST))
        if claims.billable_event not in RTB_BIDS:  # a page's serve: no exchange decided it
            return self._refuse(notice, "t", "not_a_bid",
                                "not an OpenRTB bid's token: an ads:select serve has no notices")
        return claims

    def _event(self, event_type: EventType, claims: TokenClaims, *,
               price_micros: int | None = None, notice_micros: int | None = None,
               loss_reason: int | None = None, billing_notice: bool = False) -> Event:
        """The event of a notice about ``claims``' bid; ``price_micros`` (the billed
        price, CPM micros) is the token's bid unless given. No client address: an
        exchange's server sent it (module docstring)."""
        assert notice_micros is None or notice_micros <= MAX_CPM_MICROS
        return Event(
            event_type=event_type, impression_id=claims.impression_id,
            campaign_id=claims.campaign_id, ad_id=claims.ad_id, placement=claims.placement,
            price_micros=claims.price_micros if price_micros is None else price_micros,
            billing_type=claims.billing_type, served_at=claims.issued_at,
            expected_micros=claims.expected_micros,
            occurred_at=self.tracker.clock.now().timestamp(), client_ip="", user_agent="",
            notice_micros=notice_micros, loss_reason=loss_reason,
            billing_notice=billing_notice,
        )

    async def _append(self, notice: str, outcome: str, event: Event) -> NoticeResult:
        try:
            await self.tracker.sink.append_async(event)
        except EventRefused:
            return self._done(notice, NoticeResult(UNAVAILABLE))
        return self._done(notice, NoticeResult(outcome, event))

    def _refuse(self, notice: str, field: str, reason: str, problem: str) -> NoticeResult:
        return self._done(notice, NoticeResult("refused", field=field, reason=reason,
                                               problem=problem))

    def _done(self, notice: str, result: NoticeResult) -> NoticeResult:
        """Count ``result`` (Prometheus and the tracker's counts) and return it."""
        outcome = (f"refused_{result.reason}" if result.refused else result.outcome)
        _notices(notice, outcome).inc()
        self.tracker.count(f"notice_{notice}_{outcome}")
        return result
