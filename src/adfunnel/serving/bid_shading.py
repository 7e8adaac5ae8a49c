"""First-price bid shading in the decision, and the price each auction winner had to beat.

DESIGN.md §How ads are sold, *Automatic bidding* (issue #27). On a slot run of a
``first_price`` placement, the candidates of automatic campaigns
(:func:`~adfunnel.campaigns.bidding_terms.is_automatic`) bid their shaded bid
(:func:`~adfunnel.bidding.shade_arrays.shade_unit_bids`: the maximiser of
(value − b) × P(win | b) under the segment's win curve, in the bid's unit, never above
the bid they came with — after λ). Manual bids, second-price runs, and every run while
no shading release is loaded (or its curves have no segment for the run) are not
shaded; the decision's ``shading`` notes say which (explain requests answer them).

Segment of a run: (placement id, ``WxH`` of its slots, UTC hour of the decision's
clock), backed off by the model (:meth:`ShadingModel.curve_for`).

*Price to beat* (the history the curves are fitted on, :func:`run_beats`): for each
slot an auction winner fills, the total per impression (value + quality, micros) it had
to reach to keep that slot — the next ranked candidate's total (the next winner's, or
the first outranked one's), or the reserve per impression when no one ranked after it.
It is what the GSP price is computed from, known exactly because the auction is ours:
no censoring, so no loss history is needed (a first-price exchange reports it as the
minimum bid to win). The served log keeps it per winner (``beat_micros``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

import numpy as np

from adfunnel.auction.gsp import OUTRANKED, Candidate, Rejection, Win
from adfunnel.bidding.shade_arrays import shade_unit_bids
from adfunnel.bidding.shading import WinCurve
from adfunnel.campaigns.bidding_terms import is_automatic
from adfunnel.campaigns.model import AuctionType, Campaign
from adfunnel.money import MILLE
from adfunnel.prediction.shading_release import ShadingRelease
from adfunnel.serving.request import SlotIn

NO_RELEASE = "no shading release: automatic bids unshaded"


def segment(placement: str, slot: SlotIn, now: datetime) -> tuple[str, str, int]:
    """The run's segment: (placement id, ``WxH``, UTC hour of ``now``)."""
    return placement, f"{slot.width}x{slot.height}", int(now.timestamp() // 3600 % 24)


def run_curve(release: ShadingRelease | None, pricing: AuctionType, placement: str,
              slot: SlotIn, now: datetime, notes: list[str] | None) -> WinCurve | None:
    """The win curve a run shades with (None: no shading), the reason noted in ``notes``
    (when given: explain requests) for first-price runs."""
    if pricing is not AuctionType.FIRST_PRICE:
        return None
    if release is None:
        if notes is not None:
            notes.append(f"{slot.id}: {NO_RELEASE}")
        return None
    seg = segment(placement, slot, now)
    curve = release.model.curve_for(*seg)
    if notes is not None:
        where = "|".join(map(str, seg))
        notes.append(f"{slot.id}: shading release {release.version}, " + (
            f"no curve for {where}: automatic bids unshaded" if curve is None else
            f"curve for {where} of {curve.n} prices: automatic bids shaded"))
    return curve


class AutomaticBook:
    """Which campaigns bid automatically: the catalogue puts each campaign it applies;
    decisions read :meth:`mask` (a sorted id array, swapped whole on a change, so a
    reader sees the old or the new one)."""

    def __init__(self) -> None:
        self._ids: set[int] = set()
        self._array = np.empty(0, dtype=np.int64)

    def put(self, campaigns: Iterable[Campaign]) -> None:
        changed = False
        for c in campaigns:
            auto = is_automatic(c.bid_strategy)
            if auto != (c.id in self._ids):
                changed = True
                (self._ids.add if auto else self._ids.discard)(c.id)
        if changed:
            self._array = np.array(sorted(self._ids), dtype=np.int64)

    def mask(self, campaign_ids: np.ndarray) -> np.ndarray:
        """Per candidate (its campaign id): whether its campaign bids automatically."""
        return np.isin(campaign_ids, self._array)


def shade_columns(s: dict[str, np.ndarray], auto: np.ndarray, curve: WinCurve,
                  reserve_cpm_micros: int) -> dict[str, np.ndarray]:
    """The scores ``s`` with the ``auto`` candidates' bids shaded and totals to match
    (a new dict: the other columns shared, the unshaded ``s`` kept)."""
    at = np.flatnonzero(auto)
    bid = s["bid"].copy()
    bid[at] = shade_unit_bids(bid[at], s["rate"][at], s["quality"][at], curve,
                              reserve_cpm_micros / MILLE)
    total = s["total"].copy()
    total[at] = bid[at] * s["rate"][at] + s["quality"][at]
    return {**s, "bid": bid, "total": total}


def shade_pool(pool: list[Candidate], auto: set[int], curve: WinCurve,
               reserve_cpm_micros: int) -> list[Candidate]:
    """``pool`` with the candidates of ``auto`` campaigns bidding their shaded bids."""
    at = [i for i, c in enumerate(pool) if c.campaign_id in auto]
    if not at:
        return pool
    shaded = shade_unit_bids(np.array([pool[i].bid_micros for i in at], dtype=np.int64),
                             np.array([pool[i].action_rate for i in at]),
                             np.array([pool[i].quality_micros for i in at], dtype=np.float64),
                             curve, reserve_cpm_micros / MILLE)
    out = list(pool)
    for i, bid in zip(at, shaded.tolist(), strict=True):
        c = pool[i]
        out[i] = Candidate(c.ad_id, c.campaign_id, c.advertiser_id, c.bid_type, bid, c.pctr,
                           c.pcvr, c.quality_micros)
    return out


def run_beats(auction_wins: list[Win], rejections: Iterable[Rejection],
              total_of: Callable[[int], float], reserve_cpm_micros: int,
              ) -> dict[str, float]:
    """Slot id -> the total per impression each auction winner had to beat (module doc).

    ``auction_wins`` in slot order; ``rejections`` the auction's (its ``outranked`` ones
    in rank order, as :func:`~adfunnel.auction.gsp.run_auction` appends them);
    ``total_of``: a candidate's total by ad id."""
    first_out = next((r.ad_id for r in rejections if r.reason == OUTRANKED), None)
    last = total_of(first_out) if first_out is not None else reserve_cpm_micros / MILLE
    nexts = [w.candidate.total for w in auction_wins[1:]] + [last]
    return {w.slot_id: float(t) for w, t in zip(auction_wins, nexts, strict=True)}


def record_run(beats: dict[str, float], unshaded: dict[str, int], auction_wins: list[Win],
               placed: Iterable[Win], run_beat: Mapping[str, float],
               bid_of: Callable[[int], int]) -> None:
    """Keep, for the placed wins that are the auction's own (not an exploration pick),
    the price they beat, and the unshaded bid of those whose bid was shaded."""
    auction_ads = {w.slot_id: w.candidate.ad_id for w in auction_wins}
    for w in placed:
        if auction_ads.get(w.slot_id) == w.candidate.ad_id and w.slot_id in run_beat:
            beats[w.slot_id] = run_beat[w.slot_id]
        before = bid_of(w.candidate.ad_id)
        if before != w.candidate.bid_micros:
            unshaded[w.slot_id] = before


def shade_reference_run(pool: list[Candidate], auto: set[int], release: ShadingRelease | None,
                        pricing: AuctionType, placement: str, slot: SlotIn, now: datetime,
                        reserve_cpm_micros: int, notes: list[str]) -> list[Candidate]:
    """The reference path's run: ``pool`` shaded as :func:`shade_columns` shades the
    columnar path's (``auto``: the automatic campaigns' ids), its reason in ``notes``."""
    curve = run_curve(release, pricing, placement, slot, now, notes)
    return pool if curve is None else shade_pool(pool, auto, curve, reserve_cpm_micros)


def record_reference_run(beats: dict[str, float], unshaded: dict[str, int], wins: list[Win],
                         auction_slots: set[str], rejections: list[Rejection],
                         pool: list[Candidate], before: list[Candidate],
                         reserve_cpm_micros: int) -> None:
    """:func:`run_beats` and :func:`record_run` of a reference run: ``auction_slots`` the
    slots the auction filled, ``rejections`` the auction's own, ``pool`` the run's
    candidates as they bid, ``before`` as they came."""
    auction_wins = [w for w in wins if w.slot_id in auction_slots]
    if not auction_wins:
        return
    totals = {c.ad_id: c.total for c in pool}
    bids = {c.ad_id: c.bid_micros for c in before}
    record_run(beats, unshaded, auction_wins, auction_wins,
               run_beats(auction_wins, rejections, totals.__getitem__, reserve_cpm_micros),
               bids.__getitem__)
