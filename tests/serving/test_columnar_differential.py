"""Differential test: the columnar decider against the per-candidate reference path.

Random catalogues (statuses, flights, dayparts in several time zones, shapes, placement
rules, reserves, second or first price, bid types, quality, multi-creative campaigns with
click counts) and random requests, decided by both paths from the same seed over
identical worlds: same winners, slots, prices and expected costs, same budget-gate side
effects (refusals, demand, wanted slices), same eligible-traffic counts, same reason
tallies. Red when the columnar fill prices every placement second price (#27).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import msgspec
import pytest

from adfunnel.auction.gsp import BELOW_RESERVE, OUTRANKED, SAME_ADVERTISER, SAME_CAMPAIGN
from adfunnel.budget.client import BudgetClient
from adfunnel.budget.gate import LocalSpendGate, Served
from adfunnel.budget.protocol import Directive, Reply, Report, SliceGrant
from adfunnel.campaigns.model import (
    Ad,
    AdStatus,
    Advertiser,
    AuctionType,
    BidStrategy,
    BidType,
    Campaign,
    CampaignStatus,
    Daypart,
    Goal,
    GoalMetric,
    HouseAd,
    Objective,
    Placement,
    Priority,
    ReviewState,
)
from adfunnel.campaigns.schedule import local_day
from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.index import ConjunctionIndex, ScanIndex
from adfunnel.pacing.traffic_log import EligibleCounter
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.catalog import Catalog, Snapshot
from adfunnel.serving.columns import MAX_DENSE_ID
from adfunnel.serving.decider import ColumnarDecider
from adfunnel.serving.decision import PRERANK_CUT, Decides, Decision
from adfunnel.serving.reference import ReferenceDecider
from adfunnel.serving.request import ExchangeSelect, SelectRequest, decode_request
from adfunnel.serving.tiers import (
    AHEAD_OF_PLAN,
    AUCTION,
    DIRECT_LINE,
    GOAL_MET,
    GUARANTEED,
    HOUSE,
    SHARE_NOT_DRAWN,
    SPONSORSHIP,
)

ZONES = ["UTC", "America/New_York", "Asia/Kolkata", "Asia/Tokyo", "Pacific/Chatham"]
SHAPES = [("banner", 300, 250), ("banner", 728, 90), ("native", 300, 250)]
INTERESTS = ["cars", "golf", "wine", "news"]
COUNTRIES = ["US", "FR", "DE"]
AUCTION_REASONS = {OUTRANKED, SAME_CAMPAIGN, SAME_ADVERTISER, PRERANK_CUT}


class _Quiet:
    """A report transport that drops reports: replies are fed by the test."""

    def send_report(self, report: Report, on_reply: object) -> None:
        return None


def _targeting(rng: random.Random) -> str | None:
    roll = rng.random()
    if roll < 0.3:
        return None
    if roll < 0.7:
        vals = rng.sample(INTERESTS, rng.randint(1, 3))
        return msgspec.json.encode({"attr": "interests", "in": vals}).decode()
    return msgspec.json.encode({"attr": "geo.country", "not_in": [rng.choice(COUNTRIES)]}).decode()


def _campaign(rng: random.Random, cid: int, advertisers: int, today: date) -> Campaign:
    bid_type = rng.choice(list(BidType))
    bid = {BidType.CPM: rng.choice([500_000, 1_000_000, 2_000_000, 2_000_000, 3_500_000]),
           BidType.CPC: rng.choice([200_000, 1_000_000, 1_000_000, 2_500_000]),
           BidType.CPA: rng.choice([5_000_000, 20_000_000])}[bid_type]
    dayparts: tuple[Daypart, ...] = ()
    if rng.random() < 0.2:
        start = rng.randint(0, 20)
        dayparts = (Daypart(tuple(sorted(rng.sample(range(7), 4))), start, start + 4),)
    start = today + timedelta(days=rng.choice([-30, -1, 0, 0, 0, 1]))
    end = rng.choice([None, None, today, today - timedelta(days=1), today + timedelta(days=5)])
    if end is not None and end < start:
        end = start
    status = rng.choices(list(CampaignStatus), [0.83, 0.07, 0.04, 0.04, 0.02])[0]
    lifetime = rng.choice([None, None, None, 3_000, 50_000_000])
    return Campaign(
        cid, rng.randint(1, advertisers), f"c{cid}", Objective.CLICKS, bid_type, bid,
        rng.choice([1_000, 5_000_000, 100_000_000]), rng.choice(ZONES), start, end,
        lifetime_budget_micros=lifetime, dayparts=dayparts, status=status,
        targeting=_targeting(rng),
    )


def _direct_lines(rng: random.Random, campaigns: list[Campaign]) -> list[Campaign]:
    """About a third of ``campaigns`` made sponsorships (share 0.3, 0.5 or 1; CPM) or
    guaranteed lines (an impressions goal at CPM or a clicks goal at CPC)."""
    out = []
    for c in campaigns:
        roll = rng.random()
        if roll < 0.15:
            c = replace(c, priority=Priority.SPONSORSHIP, bid_type=BidType.CPM,
                        goal=Goal(GoalMetric.SHARE, share=rng.choice([0.3, 0.5, 1.0])))
        elif roll < 0.35:
            clicks = rng.random() < 0.3
            c = replace(c, priority=Priority.GUARANTEED,
                        bid_type=BidType.CPC if clicks else BidType.CPM,
                        goal=Goal(GoalMetric.CLICKS if clicks else GoalMetric.IMPRESSIONS,
                                  total=10_000))
        out.append(c)
    return out


def _automatic(rng: random.Random, campaigns: list[Campaign],
               lams: dict[int, float]) -> list[Campaign]:
    """About half of the auction CPC and CPA campaigns made automatic (max_clicks,
    target_cpa; ``bid_micros`` stays their value v), each with a λ in ``lams``."""
    out = []
    for c in campaigns:
        if c.priority is Priority.AUCTION and c.bid_type is not BidType.CPM and rng.random() < 0.5:
            if c.bid_type is BidType.CPC:
                c = replace(c, bid_strategy=BidStrategy.MAX_CLICKS)
            else:
                c = replace(c, bid_strategy=BidStrategy.TARGET_CPA, target_cpa_micros=c.bid_micros)
            lams[c.id] = rng.choice([1.0, 1.7, 3.0, 40.0, 1e4])
        out.append(c)
    return out


def _ad(rng: random.Random, aid: int, campaigns: list[Campaign]) -> Ad:
    c = rng.choice(campaigns)
    fmt, w, h = rng.choice(SHAPES)
    return Ad(aid, c.id, "https://x.test/", f"cr/{aid}", fmt, w, h, ReviewState.APPROVED,
              status=AdStatus.ACTIVE if rng.random() < 0.92 else AdStatus.PAUSED,
              quality_micros=rng.choice([0, 0, 0, 100, -200, 1_500]))


def _placements(rng: random.Random, auction_type: AuctionType) -> list[Placement]:
    return [
        Placement("feed", "feed", reserve_cpm_micros=rng.choice([0, 500_000, 1_000_000]),
                  country_reserves_cpm_micros={"US": 1_500_000},
                  allowed_sizes=rng.choice([(), ("300x250",)]),
                  allowed_formats=rng.choice([(), ("banner",)]),
                  house_ad=HouseAd("house.png", "https://h.test/", "banner", 728, 90),
                  auction_type=auction_type),
    ]


def _request(rng: random.Random, seq: int) -> SelectRequest:
    slots = []
    for i in range(rng.randint(1, 3)):
        fmt, w, h = rng.choice(SHAPES)
        slot = {"id": f"s{i}", "position": rng.randint(1, 3), "width": w, "height": h,
                "format": fmt}
        if rng.random() < 0.2:
            slot["reserve_cpm_micros"] = rng.choice([0, 1_000_000, 3_000_000])
        slots.append(slot)
    body = {
        "user": {"key": f"u{seq}", "attributes": {
            "geo.country": rng.choice(COUNTRIES),
            "interests": rng.sample(INTERESTS, rng.randint(0, 3))}},
        "placement": {"id": rng.choice(["feed", "other"]),
                      "reserve_cpm_micros": rng.choice([0, 0, 800_000])},
        "slots": slots,
    }
    return decode_request(msgspec.json.encode(body))


class World:
    """One random catalogue with its gate, pCTR counts and clock, built from a seed."""

    def __init__(self, seed: int, gate_kind: str, index: str, direct: bool = False,
                 auto: bool = False) -> None:
        rng = random.Random(seed)
        # odd worlds price first (#27): both paths must pass the placement's type through
        pricing = AuctionType.FIRST_PRICE if seed % 2 else AuctionType.SECOND_PRICE
        self.now = datetime(2026, 3, 8, 6, 30, tzinfo=UTC) + timedelta(
            minutes=rng.randint(0, 60 * 24 * 6))
        today = self.now.date()
        n_adv, n_camp = rng.randint(2, 12), rng.randint(3, 40)
        campaigns = [_campaign(rng, cid, n_adv, today) for cid in range(1, n_camp + 1)]
        if direct:  # some lines sell direct (their own draws: the worlds above unchanged)
            campaigns = _direct_lines(random.Random(seed * 7 + 1), campaigns)
        #: λ of the automatic campaigns (their own draws: the worlds above unchanged)
        self.lams: dict[int, float] = {}
        if auto:
            campaigns = _automatic(random.Random(seed * 11 + 3), campaigns, self.lams)
        ads = [_ad(rng, aid, campaigns) for aid in range(1, rng.randint(5, 160))]
        self.catalog = {
            "scan": lambda: Catalog(ScanIndex()),
            "conjunction": lambda: Catalog(ConjunctionIndex()),
            "shaped": lambda: Catalog.shaped(factory=ConjunctionIndex),
        }[index]()
        self.catalog.load(Snapshot([Advertiser(i, f"a{i}") for i in range(1, n_adv + 1)],
                                   campaigns, ads, 0, _placements(rng, pricing)))
        self.ctr = SmoothedCtr(0.01, 100.0)
        for ad in rng.sample(ads, len(ads) // 3):
            for _ in range(rng.randint(1, 300)):
                self.ctr.observe_impression(ad.id, "feed")
            for _ in range(rng.randint(0, 12)):
                self.ctr.observe_click(ad.id, "feed")
        self.clock = ManualClock(self.now)
        self.gate = self._gate(rng, gate_kind, campaigns)
        self.eligible = EligibleCounter()

    def _gate(self, rng: random.Random, kind: str, campaigns: list[Campaign]) -> object:
        if kind == "local":
            gate = LocalSpendGate()
            for c in rng.sample(campaigns, len(campaigns) // 3):
                day = local_day(self.now, c.time_zone)
                gate.record_served(Served(c.id, day, f"imp{c.id}", rng.choice(
                    [10, c.daily_budget_micros // 2, c.daily_budget_micros]),
                    self.now.timestamp() + 3600))
            return gate
        client = BudgetClient("s1", self.clock, _Quiet())
        directives, grants = [], []
        for c in campaigns:
            if rng.random() < 0.1:
                continue  # never spoken about: metered to the client
            day = local_day(self.now, c.time_zone).isoformat()
            if rng.random() < 0.15:  # a stale state for another day
                day = (local_day(self.now, c.time_zone) - timedelta(days=1)).isoformat()
            state = rng.choices(["open", "metered", "exhausted", "stopped"], [6, 2, 1, 1])[0]
            directives.append(Directive(c.id, state, rng.choice([1.0, 1.0, 0.5, 0.1]), day,
                                        self.lams.get(c.id, 1.0)))
            if state == "metered" and rng.random() < 0.5:
                grants.append(SliceGrant(f"g{c.id}", c.id, day, rng.choice([10, 10**9]),
                                         self.now.timestamp() + 30))
        client.handle_reply(Reply(0, self.now.timestamp(), 0, directives, grants, "e1"))
        return client

    def decider(self, columnar: bool, decision_seed: int, keep: int,
                limit: int = 10_000) -> Decides:
        kwargs = {"pcvr": 0.05, "rng": random.Random(decision_seed), "eligible": self.eligible,
                  "retrieval_limit": limit}
        if columnar:
            return ColumnarDecider(self.catalog, self.gate, self.ctr, self.clock, b"k" * 32,
                                   prerank_keep=keep, candidate_limit=limit, **kwargs)
        return ReferenceDecider(self.catalog, self.gate, self.ctr, self.clock, b"k" * 32,
                                same_retrieval=True, **kwargs)


def _outcome(d: Decision) -> list[tuple[object, ...]]:
    return [(p.win.slot_id, p.ad.id, p.campaign.id, p.win.price_micros, p.charge_micros,
             p.served.expected_micros, p.served.day, p.win.candidate.total, p.tier)
            for p in d.placed] + [("house", h.slot_id) for h in d.house]


def _gate_effects(gate: object) -> object:
    if isinstance(gate, BudgetClient):
        return (dict(gate.refusals), set(gate._wants), gate._demand.as_dict(),
                {k: (a.demand, a.charges) for k, a in gate._acc.items()})
    return None


def _split(counts: dict[str, int]) -> tuple[dict[str, int], int]:
    """(filter and gate reasons, candidates the auction stage turned away but below_reserve)."""
    own = {r: n for r, n in counts.items() if r not in AUCTION_REASONS}
    return own, sum(n for r, n in counts.items() if r in AUCTION_REASONS)


@pytest.mark.slow
@pytest.mark.parametrize("gate_kind", ["local", "client"])
@pytest.mark.parametrize(("keep", "limit"), [(1, 10_000), (3, 10_000), (200, 10_000), (2, 7)])
def test_columnar_path_equals_reference(gate_kind: str, keep: int, limit: int) -> None:
    """Same retrieval (a limit of 7 truncates it), same seed, same world: same answers."""
    for world_seed in range(25):
        index = ("scan", "conjunction", "shaped")[world_seed % 3]
        ref_world, col_world = (World(world_seed, gate_kind, index) for _ in range(2))
        ref = ref_world.decider(columnar=False, decision_seed=world_seed, keep=keep, limit=limit)
        col = col_world.decider(columnar=True, decision_seed=world_seed, keep=keep, limit=limit)
        rng = random.Random(1000 + world_seed)
        for i in range(15):
            req = _request(rng, i)
            deadline = monotonic_ms() + 60_000
            a = ref.decide(req, f"r{i}", deadline)
            b = col.decide(req, f"r{i}", deadline)
            where = f"world {world_seed}, request {i}"
            assert _outcome(b) == _outcome(a), where
            assert b.reason_counts is not None and not b.rejections
            assert _split(b.reason_counts) == _split(a.rejection_counts()), where
            assert b.reason_counts.get(BELOW_RESERVE, 0) == a.rejection_counts().get(
                BELOW_RESERVE, 0), where
        assert _gate_effects(col_world.gate) == _gate_effects(ref_world.gate)
        assert col_world.eligible.drain() == ref_world.eligible.drain()


@pytest.mark.slow
@pytest.mark.parametrize("gate_kind", ["local", "client"])
@pytest.mark.parametrize("keep", [1, 200])
def test_columnar_path_equals_reference_with_direct_lines(gate_kind: str, keep: int) -> None:
    """Sponsorships and guaranteed lines among the campaigns: same tiers, winners, prices
    and reasons (``goal_met``, ``ahead_of_plan``, ``share_not_drawn``) on both paths."""
    tiers: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for world_seed in range(25):
        index = ("scan", "conjunction", "shaped")[world_seed % 3]
        ref_world, col_world = (World(world_seed, gate_kind, index, direct=True)
                                for _ in range(2))
        ref = ref_world.decider(columnar=False, decision_seed=world_seed, keep=keep)
        col = col_world.decider(columnar=True, decision_seed=world_seed, keep=keep)
        rng = random.Random(1000 + world_seed)
        for i in range(15):
            req = _request(rng, i)
            if i % 3 == 2:  # an exchange's request: the direct lines left out on both
                req = ExchangeSelect(**msgspec.structs.asdict(req))
            deadline = monotonic_ms() + 60_000
            a = ref.decide(req, f"r{i}", deadline)
            b = col.decide(req, f"r{i}", deadline)
            where = f"world {world_seed}, request {i}"
            assert _outcome(b) == _outcome(a), where
            assert b.reason_counts is not None
            assert _split(b.reason_counts) == _split(a.rejection_counts()), where
            if isinstance(req, ExchangeSelect):
                assert set(b.slot_tiers().values()) <= {AUCTION, HOUSE}, where
            tiers.update(b.slot_tiers().values())
            reasons.update(b.reason_counts)
            for p in b.placed:  # a direct line is charged its contract rate
                assert (p.win.price_micros == p.campaign.bid_micros) or p.tier == AUCTION
        assert _gate_effects(col_world.gate) == _gate_effects(ref_world.gate)
        assert col_world.eligible.drain() == ref_world.eligible.drain()
        assert col.supply.counts == ref.supply.counts
    # not vacuous: every tier filled slots, and every tier's reason came up
    assert min(tiers[t] for t in (SPONSORSHIP, GUARANTEED, AUCTION, HOUSE)) > 0, tiers
    need = [SHARE_NOT_DRAWN, GOAL_MET, DIRECT_LINE] + (
        [AHEAD_OF_PLAN] if gate_kind == "client" else [])
    assert all(reasons[r] > 0 for r in need), reasons


@pytest.mark.parametrize("gate_kind", ["local", "client"])
def test_automatic_campaigns_bid_value_over_lambda_on_both_paths(gate_kind: str) -> None:
    """Automatic campaigns (max_clicks, target_cpa) with λ from the budget client: both
    paths bid ⌊v ÷ λ⌋ for them (v their ``bid_micros``) and the campaign's bid for
    manual ones, with the same winners, prices and reasons. Red when the columnar path
    bids v (``_auto_bids`` returning ``bid``: the differential fails), or when both
    do (the bid check below)."""
    checked = {"auto": 0, "manual": 0}
    for world_seed in range(12):
        index = ("scan", "conjunction", "shaped")[world_seed % 3]
        ref_world, col_world = (World(world_seed, gate_kind, index, auto=True)
                                for _ in range(2))
        ref = ref_world.decider(columnar=False, decision_seed=world_seed, keep=200)
        col = col_world.decider(columnar=True, decision_seed=world_seed, keep=200)
        rng = random.Random(1000 + world_seed)
        for i in range(15):
            req = _request(rng, i)
            deadline = monotonic_ms() + 60_000
            a = ref.decide(req, f"r{i}", deadline)
            b = col.decide(req, f"r{i}", deadline)
            where = f"world {world_seed}, request {i}"
            assert _outcome(b) == _outcome(a), where
            assert _split(b.reason_counts or {}) == _split(a.rejection_counts()), where
            for p in b.placed:
                c, bid = p.campaign, p.win.candidate.bid_micros
                if c.bid_strategy is BidStrategy.MANUAL:
                    assert bid == c.bid_micros
                    checked["manual"] += 1
                else:
                    lam = col_world.lams[c.id] if gate_kind == "client" else 1.0
                    assert bid == max(1, int(c.bid_micros // lam)), where
                    checked["auto"] += 1 if lam > 1 else 0
        assert _gate_effects(col_world.gate) == _gate_effects(ref_world.gate)
    assert checked["manual"] > 0 and (checked["auto"] > 0 or gate_kind == "local"), checked


def test_explain_requests_keep_every_reason() -> None:
    world = World(3, "local", "shaped")
    col = world.decider(columnar=True, decision_seed=1, keep=200)
    rng = random.Random(5)
    seen = 0
    for i in range(20):
        req = _request(rng, i)
        req.explain = True
        d = col.decide(req, f"r{i}", monotonic_ms() + 60_000)
        assert d.reason_counts is None
        seen += len(d.rejections)
    assert seen > 0


def test_ids_beyond_the_columns_are_decided_by_the_reference_path() -> None:
    """An ad id too large for the dense columns: that request falls back, same seed."""
    big = MAX_DENSE_ID + 5
    c = Campaign(1, 1, "c", Objective.IMPRESSIONS, BidType.CPM, 2_000_000, 10**9, "UTC",
                 date(2026, 1, 1))
    worlds = []
    for _ in range(2):
        catalog = Catalog.shaped()
        catalog.load(Snapshot([Advertiser(1, "a")], [c], [
            Ad(big, 1, "https://x.test/", "cr", "banner", 300, 250, ReviewState.APPROVED),
            Ad(7, 1, "https://x.test/", "cr", "banner", 300, 250, ReviewState.APPROVED,
               quality_micros=-5)], 0))
        worlds.append(catalog)
    now = ManualClock(datetime(2026, 7, 1, tzinfo=UTC))
    ref = ReferenceDecider(worlds[0], LocalSpendGate(), SmoothedCtr(), now, b"k" * 32,
                           rng=random.Random(3))
    col = ColumnarDecider(worlds[1], LocalSpendGate(), SmoothedCtr(), now, b"k" * 32,
                          rng=random.Random(3))
    req = _request(random.Random(1), 0)
    req.slots = req.slots[:1]
    req.slots[0].width, req.slots[0].height, req.slots[0].format = 300, 250, "banner"
    a = ref.decide(req, "r", monotonic_ms() + 60_000)
    b = col.decide(req, "r", monotonic_ms() + 60_000)
    assert [p.ad.id for p in b.placed] == [big] and _outcome(b) == _outcome(a)
    assert b.reason_counts is None  # decided on the reference path
