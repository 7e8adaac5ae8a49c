"""Differential test with first-price shading (#27): the worlds of
``test_columnar_differential`` with half the auction campaigns bidding automatically
(CPC: max_clicks, CPA: max_conversions) and a shading release over their placement:
the columnar decider and the reference path shade alike — same winners, bids, prices,
unshaded bids and prices to beat."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import date

import pytest

from adfunnel.bidding.shading import fit
from adfunnel.campaigns.model import BidStrategy, BidType, Campaign, Priority
from adfunnel.clock import monotonic_ms
from adfunnel.prediction.shading_release import ShadingRelease
from adfunnel.serving.decision import Decision
from tests.serving import test_columnar_differential as diff

AUTO = {BidType.CPC: BidStrategy.MAX_CLICKS, BidType.CPA: BidStrategy.MAX_CONVERSIONS}


def _automatic(rng: random.Random, cid: int, advertisers: int, today: date) -> Campaign:
    c = _plain(rng, cid, advertisers, today)
    if cid % 2 == 0 and c.bid_type in AUTO and c.priority is Priority.AUCTION:
        return replace(c, bid_strategy=AUTO[c.bid_type], bid_cap_micros=c.bid_micros)
    return c


_plain = diff._campaign


def _release(seed: int) -> ShadingRelease:
    """Prices to beat log-uniform on 200..20,000 micros per impression, over the worlds'
    sizes and every hour (some segments thin: they back off)."""
    rng = random.Random(seed)
    obs = [("feed", rng.choice(["300x250", "728x90"]), rng.randrange(24),
            int(200 * 100 ** rng.random())) for _ in range(3_000)]
    return ShadingRelease(fit(obs, min_observations=60))


def _outcome(d: Decision) -> tuple[object, ...]:
    bids = [p.win.candidate.bid_micros for p in d.placed]
    return diff._outcome(d), bids, d.unshaded, d.beats


@pytest.mark.slow
@pytest.mark.parametrize("keep", [1, 200])
def test_both_paths_shade_alike(monkeypatch: pytest.MonkeyPatch, keep: int) -> None:
    """Red when the columnar path ranks shaded candidates by their unshaded totals, or
    takes the last winner's price to beat from the reserve instead of the first
    outranked candidate (as the reference path does)."""
    monkeypatch.setattr(diff, "_campaign", _automatic)
    shaded = 0
    for world_seed in range(1, 30, 2):  # odd worlds price first
        index = ("scan", "conjunction", "shaped")[world_seed % 3]
        ref_world, col_world = (diff.World(world_seed, "local", index) for _ in range(2))
        ref = ref_world.decider(columnar=False, decision_seed=world_seed, keep=keep)
        col = col_world.decider(columnar=True, decision_seed=world_seed, keep=keep)
        ref.shading = col.shading = _release(world_seed)  # type: ignore[attr-defined]
        rng = random.Random(1000 + world_seed)
        for i in range(15):
            req = diff._request(rng, i)
            deadline = monotonic_ms() + 60_000
            a = ref.decide(req, f"r{i}", deadline)
            b = col.decide(req, f"r{i}", deadline)
            assert _outcome(b) == _outcome(a), f"world {world_seed}, request {i}"
            shaded += len(a.unshaded)
            assert all(p.win.candidate.bid_micros <= p.campaign.bid_micros for p in a.placed)
    assert shaded > 10, shaded
