"""First-price bid shading in the decision (#27): an automatic campaign's bid is shaded on
a first-price placement from the segment's win curve, and not on a second-price one, nor
a manual campaign's; the shaded bid is never above the unshaded one; both deciders agree;
explain says when no release shades."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import msgspec
import pytest

from adfunnel.bidding.shading import fit
from adfunnel.budget.gate import LocalSpendGate
from adfunnel.campaigns.model import (
    Ad,
    Advertiser,
    AuctionType,
    BidStrategy,
    BidType,
    Campaign,
    ChangeRecord,
    Objective,
    Placement,
    ReviewState,
)
from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.events.compactor import records_table
from adfunnel.index import ConjunctionIndex
from adfunnel.prediction.shading_release import ShadingRelease
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.bid_shading import NO_RELEASE
from adfunnel.serving.catalog import Catalog, Snapshot
from adfunnel.serving.decider import ColumnarDecider
from adfunnel.serving.decision import Decision
from adfunnel.serving.request import SelectRequest, decode_request
from adfunnel.serving.served_record import build_record

NOW = datetime(2026, 7, 15, 14, 30, tzinfo=UTC)
VALUE = 2_000_000  # per click; at the prior's pCTR of 1 %: 20,000 micros per impression
#: prices to beat uniform on 1,000..10,000 per impression: the optimum at value 20,000
#: is 10,000 per impression, a bid of 1.00 per click
SHADED = 1_000_000


def _release() -> ShadingRelease:
    obs = [(p, "300x250", 14, 1_000 * (1 + i % 10)) for p in ("fp", "sp") for i in range(300)]
    return ShadingRelease(fit(obs))


def _decider(strategies: list[BidStrategy], release: ShadingRelease | None,
             bids: list[int] | None = None) -> ColumnarDecider:
    """One CPC campaign per strategy (advertisers apart), bidding ``bids`` (VALUE) per
    click, each with a 300x250 ad; placement ``fp`` prices first, ``sp`` second."""
    bids = bids or [VALUE] * len(strategies)
    campaigns = [Campaign(i + 1, i + 1, f"c{i}", Objective.CLICKS, BidType.CPC, b, 10**9,
                          "UTC", NOW.date(), bid_strategy=s,
                          bid_cap_micros=b if s is not BidStrategy.MANUAL else None)
                 for i, (s, b) in enumerate(zip(strategies, bids, strict=True))]
    ads = [Ad(10 + c.id, c.id, "https://x.test/", f"cr/{c.id}", "banner", 300, 250,
              ReviewState.APPROVED) for c in campaigns]
    catalog = Catalog.shaped(factory=ConjunctionIndex)
    catalog.load(Snapshot([Advertiser(c.advertiser_id, "a") for c in campaigns], campaigns, ads,
                          0, [Placement("fp", "fp", auction_type=AuctionType.FIRST_PRICE),
                              Placement("sp", "sp")]))
    decider = ColumnarDecider(catalog, LocalSpendGate(), SmoothedCtr(0.01, 100.0),
                              ManualClock(NOW), b"k" * 32)
    decider.shading = release
    return decider


def _request(placement: str, explain: bool = False) -> SelectRequest:
    return decode_request(msgspec.json.encode({
        "explain": explain, "user": {"key": "u"}, "placement": {"id": placement},
        "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}]}))


def _both(decider: ColumnarDecider, placement: str) -> tuple[Decision, Decision]:
    """The columnar decision and the reference path's (an explain request) of one slot."""
    out = [decider.decide(_request(placement, explain), "r", monotonic_ms() + 60_000)
           for explain in (False, True)]
    return out[0], out[1]


def _won(d: Decision) -> tuple[int, int, int, dict[str, int], dict[str, float]]:
    [p] = d.placed
    return p.campaign.id, p.win.candidate.bid_micros, p.win.price_micros, d.unshaded, d.beats


def test_an_automatic_bid_is_shaded_on_a_first_price_placement() -> None:
    """Red when the decider does not shade (it bids and pays 2.00), when the shaded
    per-impression bid is not divided back by the pCTR, or when the reference path does
    not shade as the columnar one does."""
    fast, ref = _both(_decider([BidStrategy.MAX_CLICKS], _release()), "fp")
    assert _won(fast) == _won(ref) == (1, SHADED, SHADED, {"s1": VALUE}, {"s1": 0.0})
    assert SHADED < VALUE
    assert ref.shading == ["s1: shading release " + _release().version + ", curve for "
                           "fp|300x250|14 of 300 prices: automatic bids shaded"]


@pytest.mark.parametrize(("strategies", "placement"), [
    ([BidStrategy.MAX_CLICKS], "sp"), ([BidStrategy.MANUAL], "fp")])
def test_second_price_and_manual_bids_are_not_shaded(strategies: list[BidStrategy],
                                                     placement: str) -> None:
    """Red when shading ignores the placement's auction type (the second-price run is
    shaded) or the campaign's strategy (the manual bid is shaded)."""
    fast, ref = _both(_decider(strategies, _release()), placement)
    price = VALUE if placement == "fp" else 0  # second price, alone: the reserve, 0
    assert _won(fast) == _won(ref) == (1, VALUE, price, {}, {"s1": 0.0})


def test_the_winner_beats_the_runner_up_and_each_pays_at_most_its_bid() -> None:
    """An automatic and a manual campaign on a first-price placement: the automatic bid
    (shaded to 1.00) loses to the manual 2.00, whose price to beat is the shaded total,
    10,000 per impression. Red when the beat is the winner's own total, or the shaded
    candidate's total is not recomputed (it ties at 20,000)."""
    fast, ref = _both(_decider([BidStrategy.MAX_CLICKS, BidStrategy.MANUAL], _release()), "fp")
    assert _won(fast) == _won(ref) == (2, VALUE, VALUE, {}, {"s1": 10_000.0})


def test_the_shaded_total_ranks_the_candidate() -> None:
    """Automatic 2.00 (shaded to 1.00: 10,000 per impression), manual 1.50 and 1.20: the
    1.50 wins and beat the 1.20's 12,000. Red when the columnar path ranks the shaded
    candidate by its unshaded total (its decisive prefix stops at the 1.50 and the
    shaded 10,000 becomes the price to beat)."""
    decider = _decider([BidStrategy.MAX_CLICKS, BidStrategy.MANUAL, BidStrategy.MANUAL],
                       _release(), [VALUE, 1_500_000, 1_200_000])
    fast, ref = _both(decider, "fp")
    assert _won(fast) == _won(ref) == (2, 1_500_000, 1_500_000, {}, {"s1": 12_000.0})


def test_no_release_no_shading_and_explain_says_so() -> None:
    """Red when a missing release is not named in the explain notes, or bids are shaded
    without one."""
    fast, ref = _both(_decider([BidStrategy.MAX_CLICKS], None), "fp")
    assert _won(fast) == _won(ref) == (1, VALUE, VALUE, {}, {"s1": 0.0})
    assert ref.shading == [f"s1: {NO_RELEASE}"]


def test_the_served_log_keeps_the_unshaded_bid_and_the_price_beaten() -> None:
    """Red when the served record, or its Parquet schema, drops ``unshaded_bid_micros``
    or ``beat_micros``."""
    fast, _ = _both(_decider([BidStrategy.MAX_CLICKS], _release()), "fp")
    record = build_record(fast, _request("fp"), NOW.timestamp(), b"salt")
    [w] = records_table([record]).to_pylist()[0]["winners"]
    assert (w["bid_micros"], w["price_micros"], w["unshaded_bid_micros"], w["beat_micros"]) == (
        SHADED, SHADED, VALUE, 0.0)


def test_a_campaign_switched_to_manual_is_no_longer_shaded() -> None:
    """Red when the catalogue's book of automatic campaigns is not updated on a change
    (the columnar path keeps shading a campaign now bidding manually)."""
    decider = _decider([BidStrategy.MAX_CLICKS], _release())
    held = decider.catalog.campaigns[1]
    manual = replace(held, version=2, bid_strategy=BidStrategy.MANUAL, bid_cap_micros=None)
    assert decider.catalog.apply_local(ChangeRecord(5, "campaign", 1, 2, manual, NOW))
    fast, ref = _both(decider, "fp")
    assert _won(fast) == _won(ref) == (1, VALUE, VALUE, {}, {"s1": 0.0})
