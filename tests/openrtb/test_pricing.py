"""Bid prices and re-signed tokens (pure): at=2 bids the value, at=1 shades automatic
campaigns, floors hold, the token and the expected cost are the bid's, prices round down."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime
from decimal import Decimal

import msgspec

from adfunnel.auction.gsp import Candidate, Win
from adfunnel.bidding.shading import WinCurve
from adfunnel.budget.gate import Served
from adfunnel.campaigns.model import Ad, BidStrategy, BidType, Campaign, Objective
from adfunnel.openrtb.mapping import MappingConfig, map_request
from adfunnel.openrtb.pricing import bid_price, reprice, spec_price, value_cpm_micros
from adfunnel.openrtb.request import decode_bid_request
from adfunnel.openrtb.response import no_bid_response
from adfunnel.serving.decision import Decision, Placed
from adfunnel.tracking.token import TokenClaims, verify
from tests.openrtb.conftest import banner_request

KEY = b"k" * 32
NOW = datetime(2026, 7, 15, 12, tzinfo=UTC)
#: prices per impression (micros) automatic bids had to beat: a first-price curve
CURVE = WinCurve.from_prices([1_000, 1_500, 2_000, 2_500, 3_000, 6_000, 9_000])


def _placed(bid_type: BidType, bid: int, pctr: float = 0.001,
            strategy: BidStrategy = BidStrategy.MANUAL, slot: str = "imp-1") -> Placed:
    c = Campaign(id=7, advertiser_id=1, name="c", objective=Objective.CLICKS,
                 bid_type=bid_type, bid_micros=bid, daily_budget_micros=10**9,
                 time_zone="UTC", flight_start=date(2026, 7, 1), bid_strategy=strategy)
    ad = Ad(id=3, campaign_id=7, landing_url="https://x.test/", creative_ref="https://i.test/a.png",
            format="banner", width=300, height=250)
    cand = Candidate(3, 7, 1, bid_type, bid, pctr)
    served = Served(7, date(2026, 7, 15), "imp0001", 123, NOW.timestamp() + 3600, 456)
    claims = TokenClaims("imp0001", 3, 7, bid, bid_type.value, "p", int(NOW.timestamp()),
                         int(NOW.timestamp()) + 3600, 123, "rendered")
    return Placed(Win(slot, cand, 1), ad, c, 456, claims, served, token_key=b"old-key")


def test_second_price_bids_the_value_and_first_price_shades_automatic_bids() -> None:
    """Breaks if at=1 does not shade (tried: ``first_price`` ignored in ``bid_price``: the
    automatic bid stays 5,000,000), if manual bids are shaded (tried: the
    ``is_automatic`` test dropped: 3,000,000 shades), or if at=2 bids the shaded bid of
    our own first-price placement (tried: ``unshaded`` ignored)."""
    manual = _placed(BidType.CPM, 3_000_000)
    auto = _placed(BidType.CPC, 1_000_000, pctr=0.005, strategy=BidStrategy.MAX_CLICKS)
    curve = lambda: CURVE  # noqa: E731
    assert bid_price(manual, None, False, curve, 0) == 3_000_000
    assert bid_price(manual, None, True, curve, 0) == 3_000_000
    assert bid_price(auto, None, False, curve, 0) == 5_000_000  # 1.00 × 0.5 % × 1000
    shaded = bid_price(auto, None, True, curve, 0)
    assert 0 < shaded < 5_000_000
    assert bid_price(auto, None, True, lambda: None, 0) == 5_000_000  # no curve: unshaded
    already = _placed(BidType.CPC, 400_000, pctr=0.005, strategy=BidStrategy.MAX_CLICKS)
    assert bid_price(already, 1_000_000, False, curve, 0) == 5_000_000


def test_values_round_down_and_prices_leave_micros_rounded_down() -> None:
    """Breaks if a value or a spec price rounds up (tried: ``ROUND_CEILING`` in
    ``spec_price``: 1,234,567 micros at 1.08 became 1.143118)."""
    cand = Candidate(1, 1, 1, BidType.CPC, 333_333, 0.0012345)
    assert value_cpm_micros(cand, 333_333) == 411_499  # 411,499.59…
    assert value_cpm_micros(Candidate(1, 1, 1, BidType.CPM, 7, 0.5), 7) == 7
    assert spec_price(1_234_567) == 1.234567
    assert spec_price(1_234_567, Decimal("1.08")) == 1.143117  # 1.14311759…


def _mapped(floor: float, at: int = 2) -> object:
    body = banner_request(at=at, imp=[{"id": "imp-1", "banner": {"w": 300, "h": 250},
                                       "bidfloor": floor}])
    return map_request(decode_bid_request(msgspec.json.encode(body)), MappingConfig())


def test_the_token_and_the_committed_cost_are_the_bids() -> None:
    """Breaks if the serve keeps the internal auction's expected cost (tried: ``served``
    left unreplaced in ``bid_token``: 123 micros committed, not 2,500)."""
    decision = Decision("r", [_placed(BidType.CPM, 2_500_000)], [], 1)
    prices = reprice(decision, _mapped(0.5), key=KEY, token_ttl_s=3600, release=None,
                     now=NOW, billable_event="notice")
    assert prices == {"imp-1": 2_500_000}
    [p] = decision.placed
    claims = verify(p.token, KEY, NOW.timestamp())
    assert (claims.price_micros, claims.billing_type, claims.expected_micros,
            claims.billable_event, claims.impression_id) == (
        2_500_000, "CPM", 2_500, "notice", "imp0001")
    assert (p.served.expected_micros, p.served.max_charge_micros, p.charge_micros) == (
        2_500, 2_500, 2_500)


def test_a_bid_under_the_floor_is_no_bid() -> None:
    """Breaks if a winner under the imp's floor is bid (tried: the floor check removed:
    2.40 bid against a 2.50 floor), or if its no-bid reason is lost (tried: the
    ``BELOW_FLOOR`` reason not set: ``no_fill`` stays, nbr 0 instead of 505)."""
    decision = Decision("r", [_placed(BidType.CPM, 2_400_000)], [], 1)
    reasons = {"imp-1": "no_fill"}
    prices = reprice(decision, _mapped(2.5), key=KEY, token_ttl_s=3600, release=None,
                     now=NOW, billable_event="notice", reasons=reasons)
    assert prices == {} and decision.placed == []
    assert reasons == {"imp-1": "below_floor"}
    assert msgspec.json.decode(no_bid_response("r", reasons))["nbr"] == 505


def test_a_price_in_our_currency_is_the_exact_decimal_rounded_to_the_nearest_float() -> None:
    """The fast path (rate 1: int ÷ int) gives the float of the exact decimal, as the
    Decimal path does. Breaks if it multiplies by an inexact 1e-6 (tried: ``micros *
    1e-6``: 5 micros became 4.9999999999999996e-06)."""
    rng = random.Random(5)
    values = [0, 1, 5, 999_999, 1_000_001, 2**53 + 1, 10**15 + 3]
    values += [rng.randrange(1, 10**k) for k in range(2, 16) for _ in range(300)]
    for micros in values:
        exact = float(Decimal(micros).scaleb(-6))
        assert spec_price(micros) == exact, micros
        assert spec_price(micros, Decimal("1.000")) == exact, micros


def test_a_bid_at_the_floor_is_bid() -> None:
    """OpenRTB's ``bidfloor`` is the minimum bid: a bid equal to it may win. Breaks if the
    floor check drops it (tried: ``price <= terms.floor_micros`` in ``reprice``: no
    bid, ``below_floor``)."""
    decision = Decision("r", [_placed(BidType.CPM, 2_500_000)], [], 1)
    reasons = {"imp-1": "no_fill"}
    prices = reprice(decision, _mapped(2.5), key=KEY, token_ttl_s=3600, release=None,
                     now=NOW, billable_event="notice", reasons=reasons)
    assert prices == {"imp-1": 2_500_000}
    assert reasons == {"imp-1": "no_fill"}


def test_a_campaigns_bids_of_one_decision_fit_its_budget_together() -> None:
    """Two winners of one campaign in one decision: each bid's worst cost (2,500 micros)
    fits the 4,000 left alone, not both together, so the second is dropped
    (``budget_exhausted``). Breaks if each is judged alone (tried: ``worst`` without
    ``held.get(p.campaign.id, 0)`` in ``reprice``: both bid, 5,000 in flight)."""
    body = banner_request(imp=[{"id": f"imp-{i}", "banner": {"w": 300, "h": 250},
                                "bidfloor": 0.5} for i in (1, 2)])
    mapped = map_request(decode_bid_request(msgspec.json.encode(body)), MappingConfig())
    decision = Decision("r", [_placed(BidType.CPM, 2_500_000, slot=f"imp-{i}")
                              for i in (1, 2)], [], 1)
    asked: list[int] = []

    def room(_c: Campaign, micros: int) -> bool:
        asked.append(micros)
        return micros <= 4_000

    reasons = {"imp-1": "no_fill", "imp-2": "no_fill"}
    prices = reprice(decision, mapped, key=KEY, token_ttl_s=3600, release=None, now=NOW,
                     billable_event="notice", room=room, reasons=reasons)
    assert prices == {"imp-1": 2_500_000}
    assert asked == [2_500, 5_000]
    assert reasons == {"imp-1": "no_fill", "imp-2": "budget_exhausted"}
