"""Benchmark of the whole in-process decision: the columnar path against the
per-candidate reference path, on one catalogue and the same requests, in the same run.

``run_decide_bench(ads, workload, queries, seed)`` builds a catalogue of ``ads`` ads
(one campaign per ``ADS_PER_CAMPAIGN`` ads, sharing its targeting as an ad group does;
targeting from :mod:`adfunnel.bench.index`'s workloads: ``real`` = iPinYou
attribute distributions, requests = the log's rows), loads it into a
:class:`~adfunnel.serving.catalog.Catalog` with the conjunction index, freezes it out of
the collector's reach (as the server does), and decides ``queries`` requests with the
local spend gate, committing each answer::

    {"ads", "campaigns", "workload", "source", "queries", "candidate_limit", "first_limit",
     "p50_us", "p99_us", "stage_us": {stage: p50}, "stage_p99_us", "candidates_mean",
     "decisions_per_s", "fill_rate",
     "reference": {"queries", "p50_us", "p99_us", "decisions_per_s"},
     "speedup_p50", "agreement", "build_s", "load_avg_1m"}

- ``p50_us``/``p99_us``: wall-clock µs of ``decide`` (retrieval included);
  ``decisions_per_s``: queries ÷ the thread's CPU seconds over them (one core).
- ``stage_us``: p50 of each stage (:data:`adfunnel.serving.decider.STAGES`);
  ``stage_p99_us`` their p99.
- ``candidates_mean``: ads retrieved per request — the first ``first_limit``, or up to
  ``candidate_limit`` when too few of those could serve: only ads of the slots' shapes
  (the catalogue's index is partitioned by shape).
- ``reference``: the per-candidate path
  (:class:`~adfunnel.serving.reference.ReferenceDecider`) on the same retrieval, on the
  first ``reference_queries`` requests (it is slow at scale), with its own gate from the
  same seed; ``agreement`` is the share of those decisions whose winners and prices
  equal the columnar path's (both paths draw the same seeds, so it must be 1.0).
"""

from __future__ import annotations

import gc
import os
import random
import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np

from adfunnel.bench.index import WORKLOADS, _go, _paper, _real
from adfunnel.budget.gate import LocalSpendGate
from adfunnel.campaigns.model import (
    Ad,
    Advertiser,
    BidType,
    Campaign,
    CampaignStatus,
    Daypart,
    Objective,
    Placement,
)
from adfunnel.clock import FixedClock, monotonic_ms
from adfunnel.prediction.model import ClickModel
from adfunnel.prediction.scorer import ModelScorer
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.catalog import Catalog, Snapshot
from adfunnel.serving.decider import CANDIDATE_LIMIT, STAGES, ColumnarDecider
from adfunnel.serving.decision import Decides, Decision
from adfunnel.serving.reference import ReferenceDecider
from adfunnel.serving.request import SelectRequest, SlotIn
from adfunnel.targeting.attributes import ATTRIBUTES
from adfunnel.targeting.expr import All, Any_, Expr, In, Not, NotIn

ADS_PER_CAMPAIGN = 10
#: Requests the reference path decides (at most): it costs tens of ms each at scale.
REFERENCE_QUERIES = 200
NOW = datetime(2026, 6, 10, 14, 30, tzinfo=UTC)  # a Wednesday afternoon
_SIZES = [(300, 250), (728, 90), (160, 600), (1000, 90), (250, 250), (336, 280), (950, 90)]
_ZONES = ["Asia/Shanghai", "Asia/Shanghai", "Asia/Shanghai", "UTC", "Asia/Tokyo"]
_DERIVED = {"slot_size", "exchange", "domain", "placement"}


def _raw(expr: Expr) -> dict[str, Any]:
    """The JSON form of an expression (``adfunnel.targeting.expr``)."""
    if isinstance(expr, In):
        return {"attr": expr.attr, "in": sorted(expr.values)}
    if isinstance(expr, NotIn):
        return {"attr": expr.attr, "not_in": sorted(expr.values)}
    if isinstance(expr, All):
        return {"all": [_raw(e) for e in expr.children]}
    if isinstance(expr, Any_):
        return {"any": [_raw(e) for e in expr.children]}
    if isinstance(expr, Not):
        return {"not": _raw(expr.child)}
    raise TypeError(f"not an expression: {expr!r}")


def _workload(workload: str, rng: random.Random, n_templates: int,
              queries: int) -> tuple[list[Expr], list[dict[str, frozenset[str]]], str]:
    if workload == "go":
        exprs, reqs = _go(rng, n_templates, queries)
        return exprs, reqs, "generated"
    if workload == "paper":
        exprs, reqs = _paper(rng, n_templates, queries)
        return exprs, reqs, "generated"
    return _real(rng, n_templates, queries, None)


def build_catalog(ads: int, workload: str, seed: int,
                  queries: int) -> tuple[Catalog, list[SelectRequest], str]:
    """A loaded catalogue of ``ads`` ads and ``queries`` requests (module docstring)."""
    import json

    rng = random.Random(seed)
    n_campaigns = max(1, ads // ADS_PER_CAMPAIGN)
    exprs, reqs, source = _workload(workload, rng, min(n_campaigns, 200_000), queries)
    dumped = [json.dumps(_raw(e)) for e in exprs]
    gen = np.random.default_rng(seed)
    n_adv = max(1, n_campaigns // 10)
    advertisers = [Advertiser(i, f"a{i}") for i in range(1, n_adv + 1)]
    campaigns = [_campaign(rng, gen, cid, n_adv, dumped) for cid in range(1, n_campaigns + 1)]
    sizes = gen.integers(0, len(_SIZES), size=ads)
    quality = gen.choice([0, 0, 0, 50, -50, 200], size=ads)
    ad_list = [
        Ad(aid, (aid - 1) // ADS_PER_CAMPAIGN + 1, "https://x.test/", f"cr/{aid}", "banner",
           *_SIZES[int(sizes[aid - 1])], quality_micros=int(quality[aid - 1]))
        for aid in range(1, ads + 1)
    ]
    catalog = Catalog.shaped()
    catalog.load(Snapshot(advertisers, campaigns, ad_list, 0,
                          [Placement("feed", "feed", reserve_cpm_micros=200_000)]))
    return catalog, [_request(r, i) for i, r in enumerate(reqs)], source


def _campaign(rng: random.Random, gen: np.random.Generator, cid: int, n_adv: int,
              targeting: list[str]) -> Campaign:
    roll = rng.random()
    bid_type = BidType.CPM if roll < 0.7 else BidType.CPC if roll < 0.95 else BidType.CPA
    scale = {BidType.CPM: 1_500_000, BidType.CPC: 600_000, BidType.CPA: 20_000_000}[bid_type]
    bid = max(1, int(scale * float(gen.lognormal(0.0, 0.6))))
    dayparts = (Daypart((0, 1, 2, 3, 4), 8, 20),) if rng.random() < 0.1 else ()
    status = CampaignStatus.ACTIVE if rng.random() < 0.95 else CampaignStatus.PAUSED
    return Campaign(cid, rng.randint(1, n_adv), f"c{cid}", Objective.CLICKS, bid_type, bid,
                    rng.choice([5_000_000, 50_000_000, 500_000_000]), rng.choice(_ZONES),
                    date(2026, 1, 1), dayparts=dayparts, status=status,
                    targeting=rng.choice(targeting))


def _request(attrs: dict[str, frozenset[str]], i: int) -> SelectRequest:
    from adfunnel.serving.request import PlacementIn, UserIn

    user = {a: sorted(v) for a, v in attrs.items() if a in ATTRIBUTES and a not in _DERIVED}
    slots = []
    for pos, size in enumerate(sorted(attrs.get("slot_size", frozenset({"300x250"}))), 1):
        w, _, h = size.partition("x")
        if w.isdigit() and h.isdigit() and pos <= 3:
            slots.append(SlotIn(f"s{pos}", pos, int(w), int(h)))
    exchange = next(iter(attrs.get("exchange", ())), None)
    domain = next(iter(attrs.get("domain", ())), None)
    return SelectRequest(UserIn(f"u{i}", user), PlacementIn("feed", exchange, domain),
                         slots or [SlotIn("s1", 1, 300, 250)])


def _decider(cls: type[ColumnarDecider | ReferenceDecider], catalog: Catalog,
             seed: int) -> Decides:
    ctr = SmoothedCtr(0.001, 1_000.0)
    # the reference retrieves as the columnar path does: the same candidates
    extra = {} if cls is ColumnarDecider else {"same_retrieval": True,
                                                "retrieval_limit": CANDIDATE_LIMIT}
    return cls(catalog, LocalSpendGate(), ctr, FixedClock(NOW), b"k" * 32, pcvr=0.01,
               rng=random.Random(seed), **extra)


def _run(decider: Decides, reqs: list[SelectRequest]) -> tuple[np.ndarray, float, list[Decision]]:
    """Wall µs per decision, CPU seconds in all, and the decisions (each committed)."""
    wall, out = [], []
    cpu0 = time.thread_time()
    for i, req in enumerate(reqs):
        t0 = time.perf_counter()
        d = decider.decide(req, f"r{i}", monotonic_ms() + 60_000)
        wall.append(time.perf_counter() - t0)
        decider.commit(d)
        out.append(d)
    return np.array(wall) * 1e6, time.thread_time() - cpu0, out


def _wins(d: Decision) -> list[tuple[str, int, int]]:
    return [(p.win.slot_id, p.ad.id, p.win.price_micros) for p in d.placed]


def run_decide_bench(ads: int, workload: str = "real", queries: int = 1_000, seed: int = 1,
                     reference_queries: int = REFERENCE_QUERIES,
                     model: Path | None = None) -> dict[str, Any]:
    """Build, decide, measure (module docstring). ``model``: a click model artifact the
    predict stage scores the pre-rank's survivors with (None: no predict stage; its
    stage figure is then null, and ``agreement`` compares with the reference path,
    which has no model).

    Raises:
        ValueError: unknown ``workload``, ``ads`` < 1 or ``queries`` < 1.
    """
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")
    if ads < 1 or queries < 1:
        raise ValueError("ads and queries must be at least 1")
    t0 = time.perf_counter()
    catalog, reqs, source = build_catalog(ads, workload, seed, queries)
    build_s = time.perf_counter() - t0
    gc.collect()
    gc.freeze()  # the long-lived catalogue, out of the collector's reach (as `serve` does)
    fast = _decider(ColumnarDecider, catalog, seed)
    assert isinstance(fast, ColumnarDecider)
    _run(fast, reqs[: min(20, len(reqs))])  # warm-up (caches, first allocations)
    fast = _decider(ColumnarDecider, catalog, seed)
    assert isinstance(fast, ColumnarDecider)
    scorer = None
    if model is not None:
        scorer = ModelScorer(ClickModel.load(model), budget_ms=1_000.0)
        fast.scorer = scorer
        _run(fast, reqs[: min(20, len(reqs))])  # warm the model's token cache too
    fast.timings = []
    lat, cpu, decisions = _run(fast, reqs)
    n_ref = min(reference_queries, len(reqs))
    ref_lat, ref_cpu, ref_decisions = _run(_decider(ReferenceDecider, catalog, seed), reqs[:n_ref])
    agree = sum(_wins(a) == _wins(b) for a, b in zip(decisions, ref_decisions, strict=False))
    stage: dict[str, float | None] = {
        s: round(float(np.percentile([t.get(s, 0.0) for t in fast.timings], 50)), 1)
        for s in STAGES}
    stage99: dict[str, float | None] = {
        s: round(float(np.percentile([t.get(s, 0.0) for t in fast.timings], 99)), 1)
        for s in STAGES}
    if scorer is None:  # no predict stage ran: not measured
        stage["predict"] = stage99["predict"] = None
    retrieved = [t["candidates"] for t in fast.timings]
    p50 = float(np.percentile(lat, 50))
    ref_p50 = float(np.percentile(ref_lat, 50))
    return {
        "ads": ads, "campaigns": len(catalog.campaigns), "workload": workload, "source": source,
        "queries": len(reqs), "candidate_limit": fast.candidate_limit,
        "first_limit": fast.first_limit,
        "p50_us": round(p50, 1), "p99_us": round(float(np.percentile(lat, 99)), 1),
        "stage_us": stage, "stage_p99_us": stage99,
        "candidates_mean": round(float(np.mean(retrieved)), 1),
        "decisions_per_s": round(len(reqs) / cpu, 1) if cpu > 0 else None,
        "fill_rate": round(sum(bool(d.placed) for d in decisions) / len(decisions), 3),
        "reference": {
            "queries": n_ref, "p50_us": round(ref_p50, 1),
            "p99_us": round(float(np.percentile(ref_lat, 99)), 1),
            "decisions_per_s": round(n_ref / ref_cpu, 1) if ref_cpu > 0 else None,
        },
        "speedup_p50": round(ref_p50 / p50, 1) if p50 > 0 else None,
        # with a model the two paths rank by different pCTRs: no agreement to measure
        "agreement": round(agree / n_ref, 4) if n_ref and scorer is None else None,
        "model_version": scorer.version if scorer is not None else None,
        "fallback_share": (round(sum(d.fallback for d in decisions) / len(decisions), 4)
                           if scorer is not None else None),
        "build_s": round(build_s, 1), "load_avg_1m": round(os.getloadavg()[0], 2),
    }

