"""The impression beacon and the click redirect: token → ledger → spend and pCTR.

A beacon is billable when its token verifies (constant-time MAC, not expired) and
it is the first of its (impression id, event type); a click bills only when its
impression was billed. Forged, malformed and expired tokens are refused and
counted, never billed. The click redirect goes to the ad's own landing URL, looked
up by the ad id inside the signed token, never to a URL taken from the request.
A house ad's token (campaign ``HOUSE_ID``, price 0) is counted and never billed; its
click goes to the placement's house-ad URL.

Invalid traffic, tier 1 (:mod:`adfunnel.ivt.rules`): with ``ivt`` rules and the sender's
facts (:mod:`adfunnel.tracking.client`), a beacon from a crawler user agent, a missing
user agent, a crawler's or a datacenter's address, or a click faster than a person
can click is never billed, never counted in budgets or the click model: it is counted
per event type and reason (ledger counters ``ivt_<event>`` and
``ivt_<event>_<reason>``). A click is still redirected (a bot learns nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import Counter

from adfunnel.billing.ledger import Ledger
from adfunnel.billing.model import EventType, LedgerEvent, Outcome, Recorded
from adfunnel.budget.gate import SpendGate
from adfunnel.campaigns.model import HOUSE_ID, BidType, CampaignStatus
from adfunnel.campaigns.schedule import local_day
from adfunnel.clock import Clock
from adfunnel.ivt.reasons import Reason
from adfunnel.ivt.rules import EventFacts, Tier1Rules
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.catalog import Catalog
from adfunnel.tracking.client import ClientFacts
from adfunnel.tracking.token import InvalidToken, TokenClaims, verify

#: Tier-1 reasons about the sender's address: not applied when the address is unknown.
ADDRESS_REASONS = frozenset({Reason.BAD_IP, Reason.CRAWLER_IP, Reason.DATACENTER_IP})

BEACONS = Counter(
    "adfunnel_beacons_total", "Tracking beacons by event type and outcome", ["event", "outcome"]
)


@dataclass(frozen=True, slots=True)
class BeaconResult:
    """``outcome`` is a ledger outcome or ``invalid:<reason>``; ``landing_url`` for clicks."""

    outcome: str
    recorded: Recorded | None = None
    landing_url: str | None = None


class Tracker:
    """Turns beacons into ledger rows, billed spend and pCTR observations."""

    def __init__(
        self,
        ledger: Ledger,
        catalog: Catalog,
        gate: SpendGate,
        ctr: SmoothedCtr,
        clock: Clock,
        token_key: bytes,
        *,
        on_lifetime_spent: Callable[[int], None] | None = None,
        ivt: Tier1Rules | None = None,
    ) -> None:
        self.ledger = ledger
        self.catalog = catalog
        self.gate = gate
        self.ctr = ctr
        self.clock = clock
        self.token_key = token_key
        #: called with the campaign id when billing leaves its lifetime budget at 0
        #: (the app marks the campaign ``completed``)
        self.on_lifetime_spent = on_lifetime_spent
        self.ivt = ivt  # tier-1 invalid-traffic rules (None: none applied)

    def impression(self, token: str | None, client: ClientFacts | None = None) -> BeaconResult:
        """An impression beacon; ``client``: its sender, for the IVT rules."""
        return self._handle(token, EventType.IMPRESSION, client)

    def click(self, token: str | None, client: ClientFacts | None = None) -> BeaconResult:
        """A click; ``client``: its sender, for the IVT rules."""
        return self._handle(token, EventType.CLICK, client)

    def _handle(self, token: str | None, event_type: EventType,
                client: ClientFacts | None = None) -> BeaconResult:
        now = self.clock.now()
        try:
            if not token:
                raise InvalidToken("malformed")
            claims = verify(token, self.token_key, now.timestamp())
        except InvalidToken as exc:
            self.ledger.count("invalid_tokens")
            self.ledger.count(f"invalid_tokens_{exc.reason}")
            BEACONS.labels(event_type.value, f"invalid_{exc.reason}").inc()
            return BeaconResult(f"invalid:{exc.reason}")
        if claims.campaign_id == HOUSE_ID:
            return self._house(claims, event_type)
        reason = self._invalid(claims, event_type, client, now)
        if reason is not None:
            self.ledger.count(f"ivt_{event_type.value}")
            self.ledger.count(f"ivt_{event_type.value}_{reason}")
            BEACONS.labels(event_type.value, f"ivt_{reason}").inc()
            ad = self.catalog.ads.get(claims.ad_id)
            landing = ad.landing_url if ad is not None and event_type is EventType.CLICK else None
            return BeaconResult(f"ivt:{reason}", None, landing)
        recorded = self._record(claims, event_type, now)
        BEACONS.labels(event_type.value, recorded.outcome.value).inc()
        ad = self.catalog.ads.get(claims.ad_id)
        landing = ad.landing_url if ad is not None and event_type is EventType.CLICK else None
        return BeaconResult(recorded.outcome.value, recorded, landing)

    def _invalid(self, claims: TokenClaims, event_type: EventType, client: ClientFacts | None,
                 now: datetime) -> str | None:
        """The tier-1 reason when the beacon is invalid traffic, else None. Without the
        sender's address (a local transport) the address rules are skipped."""
        if self.ivt is None or client is None:
            return None
        facts = EventFacts(event_type.value, client.ip or "", client.user_agent,
                           served_at_ms=claims.issued_at * 1000,
                           event_at_ms=int(now.timestamp() * 1000),
                           impression_id=claims.impression_id, placement=claims.placement)
        verdict = self.ivt.check(facts)
        if verdict.valid or (client.ip is None and verdict.reason in ADDRESS_REASONS):
            return None
        return str(verdict.reason)

    def _house(self, claims: TokenClaims, event_type: EventType) -> BeaconResult:
        """A house ad's beacon: counted (``house_impression``/``house_click``), never billed,
        never seen by budgets or the click model; a click goes to the house ad's URL."""
        self.ledger.count(f"house_{event_type.value}")
        BEACONS.labels(event_type.value, "house").inc()
        placement = self.catalog.placements.get(claims.placement)
        house = placement.house_ad if placement is not None else None
        landing = house.landing_url if house and event_type is EventType.CLICK else None
        return BeaconResult(Outcome.NOT_BILLABLE.value, Recorded(Outcome.NOT_BILLABLE), landing)

    def _record(self, claims: TokenClaims, event_type: EventType, now: datetime) -> Recorded:
        campaign = self.catalog.campaigns.get(claims.campaign_id)
        if campaign is None:
            self.ledger.count("unknown_campaign")
            return Recorded(Outcome.NOT_BILLABLE)
        # CPM bills the impression, CPC the click; CPA bills conversions (not tracked yet)
        bills_on = EventType.IMPRESSION if claims.billing_type == BidType.CPM.value else (
            EventType.CLICK if claims.billing_type == BidType.CPC.value else None)
        billable = event_type is bills_on
        day = local_day(now, campaign.time_zone)
        event = LedgerEvent(
            impression_id=claims.impression_id,
            event_type=event_type,
            campaign_id=claims.campaign_id,
            ad_id=claims.ad_id,
            placement=claims.placement,
            billing_type=claims.billing_type,
            charge_micros=claims.price_micros if billable else 0,
            occurred_at=now,
            day=day,
            served_at=datetime.fromtimestamp(claims.issued_at, tz=UTC),
            # the billable event settles its serve's in-flight estimate; others nothing
            expected_micros=claims.expected_micros if billable else 0,
            # a CPM price is per thousand impressions: the ledger bills it exactly
            charge_per_mille=claims.billing_type == BidType.CPM.value,
        )
        recorded = self.ledger.record(
            event, campaign.daily_budget_micros, campaign.lifetime_budget_micros
        )
        if (recorded.lifetime_remaining_micros == 0 and self.on_lifetime_spent is not None
                and campaign.status is not CampaignStatus.COMPLETED):
            self.on_lifetime_spent(campaign.id)
        if recorded.outcome is Outcome.BILLED:
            if event_type is EventType.IMPRESSION:
                self.ctr.observe_impression(claims.ad_id, claims.placement)
            else:
                self.ctr.observe_click(claims.ad_id, claims.placement)
            self.gate.record_billed(
                claims.campaign_id, day, recorded.billed_micros, claims.impression_id, billable
            )
        return recorded
