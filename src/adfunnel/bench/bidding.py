"""``adfunnel bench bidding``: automatic bidding on real auctions, against linear bidding.

The iPinYou auctions of Cai et al. (WSDM 2017; :mod:`adfunnel.bench.auctions`): nine
advertisers, 100 episodes of T = 1,000 auctions each, a budget per episode of c0 × CPM ×
T ÷ 1000. The first 50 episodes tune everything (Lin's b0, our value scale and gains, the
shading curve); figures are of the last 50 only.

Strategies, replayed in the same run on the same rows:

- ``lin`` (second price): the study's linear bidding (:func:`~adfunnel.bench.auctions.lin_replay`);
- ``adfunnel`` (second price): the production code, one auction per second of simulated
  time: the bid :func:`~adfunnel.bidding.strategy.auto_bids_micros` of the impression's
  value pCTR × v (v a value per click) and the multiplier λ, the λ controller
  :func:`~adfunnel.pacing.bid_multiplier.step_arrays` stepping once per auction toward
  the plan (the budget spread evenly over the episode's auctions: the traffic-shaped
  curve of a uniform period, re-planned every step from what remains, as flight budgets
  are re-planned), and the budget gate's admit rule (committed + the most the auction can
  charge ≤ budget, so the bid is never above the remaining budget). v is ``headroom`` ×
  the feed-forward scale (the value per click whose bids, on the training episodes,
  spend the budget: the bid landscape), and λ starts
  (:func:`~adfunnel.pacing.bid_multiplier.start_multiplier`) at the feed-forward bid;
- first price (the market price is the price to beat, the winner pays its bid):
  ``value`` = the same λ-paced bid, unshaded; ``adfunnel`` = it shaded
  (:func:`~adfunnel.bidding.shading.shaded_bid` on the win curve fitted on the training
  episodes' market prices).

Every replay runs many lanes (episode × tuning candidate) at once, through the array
forms of the production functions, which equal their scalar forms bit for bit (tested).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adfunnel.bench.auctions import (
    ADVERTISERS,
    C0S,
    FOLDER,
    LIN_B0,
    Advertiser,
    Episodes,
    Outcome,
    best_lin_b0,
    lin_replay,
    load,
    spend_matching_scale,
)
from adfunnel.bidding.shading import ShadingTable, WinCurve
from adfunnel.bidding.strategy import auto_bids_micros
from adfunnel.pacing.bid_multiplier import (
    MultiplierArrays,
    MultiplierGains,
    start_multiplier,
    step_arrays,
)

TRAIN = slice(0, 50)
TEST = slice(50, 100)
#: One auction per second of simulated time.
STEP_S = 1.0

#: The tuning grid (tried on the training episodes; the best by clicks is kept):
#: ``headroom`` = v ÷ the feed-forward scale, i.e. the starting λ (bids can rise to
#: headroom × the feed-forward bid), and the controller's gains.
GRID = {
    "headroom": (1.1, 1.5, 2.0, 3.0, 5.0),
    "kp": (0.05, 0.3, 1.0),
    "volume_ref": (0.2,),
    "smoothing": (0.02, 0.1),
    "catch_up_s": (100.0, 400.0, 1000.0),
    "idle_share": (0.01, 0.05, 0.3),
}
#: Gains fixed for one episode of 1,000 s (the production defaults are for a day).
FIXED = {"leak_s": 1000.0, "integral_clamp": 0.3, "denominator_floor_share": 0.01}


@dataclass(frozen=True, slots=True)
class Setting:
    """Per lane: the value per click ``value`` (price units per click) and the gains."""

    value: np.ndarray
    lam0: np.ndarray
    gains: MultiplierGains


def _settings(scale: float, configs: list[dict[str, float]], episodes: int) -> Setting:
    """Lanes config-major, episode-minor."""
    def col(key: str) -> np.ndarray:
        return np.repeat(np.array([c[key] for c in configs]), episodes)

    value = col("headroom") * scale
    lam0 = np.array([start_multiplier(v, scale) for v in value])
    gains = MultiplierGains(**{k: col(k) for k in GRID if k != "headroom"},  # type: ignore[arg-type]
                            **FIXED)
    return Setting(value, lam0, gains)


def replay(ep: Episodes, budget: int, s: Setting, *, first_price: bool,
           table: ShadingTable | None = None) -> Outcome:
    """Our strategy over the lanes of ``s`` (lane i replays episode i mod episodes)."""
    lanes = len(s.value)
    idx = np.arange(lanes) % ep.count
    state = MultiplierArrays.start(s.lam0)
    spent = np.zeros(lanes, np.int64)
    clicks = np.zeros(lanes, np.int64)
    imps = np.zeros(lanes, np.int64)
    expected = np.zeros(lanes)
    budgets = np.full(lanes, budget, np.int64)
    for t in range(ep.length):
        price, click = ep.price[t][idx], ep.click[t][idx]
        value = ep.pctr[t][idx] * s.value  # value_per_impression_micros(pCTR, -, v, "click")
        bid = auto_bids_micros(value, state.lam)
        if table is not None:
            bid = table.lookup(bid)
        bid = np.minimum(bid, budget - spent)  # admit: committed + max charge ≤ budget
        win = (bid > 0) & (bid >= price)
        cost = np.where(win, bid if first_price else price, 0)
        spent += cost
        imps += win
        clicks += win & click
        expected += np.where(win, ep.pctr[t][idx], 0.0)
        # the plan, re-planned every step from what remains: the rest of the budget spread
        # evenly over the rest of the episode (a uniform period's curve)
        plan = (budget - spent + cost) / (ep.length - t)
        state = step_arrays(state, cost, plan, STEP_S, budget_micros=budgets,
                            charges=win.astype(np.float64), behind_micros=plan - cost,
                            gains=s.gains)
    return Outcome(clicks, imps, spent, expected)


def _configs() -> list[dict[str, float]]:
    keys = list(GRID)
    return [dict(zip(keys, vals, strict=True)) for vals in itertools.product(*GRID.values())]


def tune(ep: Episodes, budget: int, scale: float, *, first_price: bool,
         table: ShadingTable | None = None) -> dict[str, float]:
    """The grid's config with the most expected clicks (the sum of the pCTR of the
    impressions won) over ``ep``, the training episodes: the realised clicks, a few dozen
    per advertiser, would pick the luckiest config rather than the best."""
    configs = _configs()
    out = replay(ep, budget, _settings(scale, configs, ep.count), first_price=first_price,
                 table=table)
    per_config = out.expected_clicks.reshape(len(configs), ep.count).sum(axis=1)
    return configs[int(np.argmax(per_config))]


def _row(adv: str, c0: float, auction: str, strategy: str, out: Outcome, budget: int,
         extra: dict | None = None) -> dict:
    return {"advertiser": adv, "c0": c0, "auction": auction, "strategy": strategy,
            "clicks": int(out.clicks.sum()), "impressions": int(out.impressions.sum()),
            "spend": int(out.spend.sum()), "budget": budget * len(out.spend),
            "episodes": len(out.spend),
            "episodes_over_budget": int((out.spend > budget).sum()), **(extra or {})}


def bench_one(adv: Advertiser, c0: float) -> list[dict]:
    """The four rows of one advertiser at one c0 (tuned on TRAIN, measured on TEST)."""
    train, test = adv.episodes.select(TRAIN), adv.episodes.select(TEST)
    budget = adv.budget(c0)
    rows = []
    b0 = best_lin_b0(train, adv.avg_ctr, budget)
    lin = lin_replay(test, adv.avg_ctr, budget, np.array([b0]))
    rows.append(_row(adv.name, c0, "second_price", "lin", lin, budget, {"tuned": {"b0": b0}}))
    scale = spend_matching_scale(train, budget)
    table = ShadingTable.build(WinCurve.from_prices(train.price.ravel(), max_knots=512))
    for auction, strategy, shade in (("second_price", "adfunnel", None),
                                     ("first_price", "value", None),
                                     ("first_price", "adfunnel", table)):
        fp = auction == "first_price"
        cfg = tune(train, budget, scale, first_price=fp, table=shade)
        out = replay(test, budget, _settings(scale, [cfg], test.count), first_price=fp,
                     table=shade)
        rows.append(_row(adv.name, c0, auction, strategy, out, budget,
                         {"tuned": {"scale": scale, **cfg}}))
    return rows


def run_bidding_bench(data: Path | None = None, advertisers: tuple[str, ...] = ADVERTISERS,
                      c0s: tuple[float, ...] = C0S) -> dict:
    """Every advertiser × c0: rows per strategy, totals per c0, the wall time."""
    from adfunnel.data import data_dir

    folder = data if data is not None else data_dir("ipinyou") / FOLDER
    start, cpu = time.perf_counter(), time.process_time()
    rows = []
    for name in advertisers:
        adv = load(folder, name)
        for c0 in c0s:
            rows.extend(bench_one(adv, c0))
    return {"rows": rows, "totals": totals(rows), "wall_s": round(time.perf_counter() - start, 1),
            "cpu_s": round(time.process_time() - cpu, 1),
            "train_episodes": "1-50", "test_episodes": "51-100",
            "lin_b0_grid": [int(LIN_B0[0]), int(LIN_B0[-1]), 2]}


def totals(rows: list[dict]) -> list[dict]:
    """Per c0 and auction: clicks, spend, over-budget episodes per strategy, and ratios
    (ours ÷ Lin in second price, shaded ÷ value in first price)."""
    out = []
    for c0 in sorted({r["c0"] for r in rows}):
        for auction, base in (("second_price", "lin"), ("first_price", "value")):
            sel = [r for r in rows if r["c0"] == c0 and r["auction"] == auction]
            if not sel:
                continue
            t: dict = {"c0": c0, "auction": auction}
            for strat in sorted({r["strategy"] for r in sel}):
                mine = [r for r in sel if r["strategy"] == strat]
                for k in ("clicks", "impressions", "spend", "budget", "episodes_over_budget"):
                    t[f"{strat}_{k}"] = sum(r[k] for r in mine)
            if t.get(f"{base}_clicks"):
                t["clicks_ratio"] = round(t["adfunnel_clicks"] / t[f"{base}_clicks"], 3)
            out.append(t)
    return out
