"""Runs every auction scenario in tests/auction/golden/*.json (add a case without code); a
case may name its ``auction_type`` (default ``second_price``)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from adfunnel.auction import Candidate, run_auction
from adfunnel.campaigns.model import AuctionType, BidType

CASES = sorted((Path(__file__).parent / "golden").glob("*.json"))


def _candidate(raw: dict) -> Candidate:
    return Candidate(
        ad_id=raw["ad_id"], campaign_id=raw["campaign_id"], advertiser_id=raw["advertiser_id"],
        bid_type=BidType(raw["bid_type"]), bid_micros=raw["bid_micros"], pctr=raw["pctr"],
        pcvr=raw.get("pcvr", 1.0), quality_micros=raw.get("quality_micros", 0.0),
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden_auction(path: Path) -> None:
    case = json.loads(path.read_text())
    # exact ties break at random: a case with ties names the decision's seed
    rng = random.Random(case["seed"]) if "seed" in case else None
    result = run_auction(
        [_candidate(c) for c in case["candidates"]], case["slots"], case["reserve_cpm_micros"],
        rng=rng, auction_type=AuctionType(case.get("auction_type", "second_price")),
    )
    wins = [
        {"slot_id": w.slot_id, "ad_id": w.candidate.ad_id, "price_micros": w.price_micros}
        for w in result.wins
    ]
    assert wins == case["expect"]["wins"]
    assert {str(r.ad_id): r.reason for r in result.rejections} == case["expect"]["rejections"]


def test_cases_exist() -> None:
    assert len(CASES) >= 4
