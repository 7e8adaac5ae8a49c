"""Step 4 of the columnar decision, pre-rank: per candidate the smoothed pCTR (with
creative rotation), action rate, value and total as vectorised expressions, and the
click model's pCTR for the best of them at each slot run's position (the predict stage).
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from adfunnel.auction.draws import RECALL, unit
from adfunnel.bidding.strategy import auto_bids_micros
from adfunnel.budget.gate import SpendGate, bid_multipliers
from adfunnel.money import MILLE
from adfunnel.prediction.scorer import PCVR, ModelScorer
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.columns import BID_TYPES, ColumnsView
from adfunnel.serving.decision import Decision, slot_runs
from adfunnel.serving.kernels import candidate_fields, totals
from adfunnel.serving.request import SelectRequest

#: Key prefix of the model's pCTR column at one slot position, in a decision's scores.
AT_POSITION = "pctr@"


class PrerankStage:
    """Pre-rank and predict of :class:`~adfunnel.serving.decider.ColumnarDecider` (a part
    of it: the decider holds the prior, the default pCVR and the cut)."""

    ctr: SmoothedCtr
    gate: SpendGate
    pcvr: float
    prerank_keep: int

    def _scores(self, ids: np.ndarray, camp: np.ndarray, view: ColumnsView,
                placement: str) -> dict[str, np.ndarray]:
        """Per candidate: pCTR (with creative rotation), action rate, value and total."""
        pctr, seen = self.ctr.pctr_array(ids, placement)
        shape, quality, bid_type, bid, advertiser = candidate_fields(ids, camp, view.ads,
                                                                     view.campaigns)
        bid = self._auto_bids(camp, bid, view)
        if seen.any():
            self._rotate(ids, camp, shape, pctr, seen, placement)
        rate, total = totals(bid_type, bid, quality, pctr, self.pcvr)
        return {"pctr": pctr, "rate": rate, "total": total, "shape": shape,
                "bid": bid, "bid_type": bid_type, "quality": quality, "advertiser": advertiser,
                "pcvr": np.full(len(ids), self.pcvr)}

    def _auto_bids(self, camp: np.ndarray, bid: np.ndarray, view: ColumnsView) -> np.ndarray:
        """The bid the auction sees per candidate: ⌊v ÷ λ⌋ for automatic campaigns
        (``bid`` holds v, λ from the spend gate: :func:`~adfunnel.bidding.strategy.
        auto_bids_micros`), the campaign's bid for manual ones. Every total, rate,
        price and reserve check follows from it."""
        auto = view.c_auto[camp]
        if not auto.any():
            return bid
        out = bid.copy()
        out[auto] = auto_bids_micros(bid[auto], bid_multipliers(self.gate, camp[auto]))
        return out

    def _predict(self, scorer: ModelScorer, req: SelectRequest, ids: np.ndarray,
                 camp: np.ndarray, s: dict[str, np.ndarray], now: datetime,
                 deadline_at_ms: float, decision: Decision, seed: int) -> None:
        """Step 5: the model's pCTR for the ``prerank_keep`` best by the prior's scores
        (ties at the cut kept), at each slot run's position (the candidates' own tokens
        summed once), recalibrated by the factor of the model's version and the
        placement; each run ranks and prices on its position's (``_at_position``),
        the others keep the prior's. On a fallback the prior's scores stand and the
        decision says so."""
        decision.model_version = scorer.version
        total = s["total"]
        top = np.arange(len(ids))
        if len(ids) > self.prerank_keep:
            part = np.argpartition(-total, self.prerank_keep - 1)[: self.prerank_keep]
            top = np.flatnonzero(total >= total[part].min())
        bid_type = s["bid_type"][top]
        candidates = list(zip(ids[top].tolist(), camp[top].tolist(),
                              s["advertiser"][top].tolist(),
                              [BID_TYPES[b].value for b in bid_type.tolist()], strict=True))
        p = req.placement
        positions = sorted({run[0].position for run in slot_runs(req.slots)})
        request = {"placement": p.id, "position": positions[0],
                   "exchange": p.exchange, "domain": p.domain, "hour": now.astimezone(UTC).hour,
                   "attributes": req.user.attributes}
        factor = scorer.factor(p.id)  # read once: one decision, one published table
        found, _cause = scorer.pctr_by_position(request, positions, candidates, deadline_at_ms,
                                                factor=factor)
        if found is None:
            decision.fallback = True
            return
        decision.calibration_factor = factor
        decision.model_scored = ids[top][scorer.model.knows(ids[top])]
        if len(top) < len(ids) and unit(seed, 0, RECALL) < scorer.recall_sample:
            self._check_recall(scorer, request, ids, camp, s, top, found[positions[0]],
                               deadline_at_ms, factor)
        pcvr = found.pop(PCVR, None)
        if pcvr is not None:  # CPA candidates the conversion model knows: its pCVR
            cpa = s["bid_type"][top] == 2
            if scorer.cvr_model is not None:
                cpa &= scorer.cvr_model.knows(ids[top])
            s["pcvr"][top[cpa]] = pcvr[cpa]
        for k, pctr in found.items():  # whole columns: the capped path filters them
            column = s["pctr"].copy()
            column[top] = serving_pctr(scorer, ids[top], pctr, s["pctr"][top])
            s[f"{AT_POSITION}{k}"] = column
        at_position(s, positions[0])

    def _check_recall(self, scorer: ModelScorer, request: dict[str, object], ids: np.ndarray,
                      camp: np.ndarray, s: dict[str, np.ndarray], top: np.ndarray,
                      top_pctr: np.ndarray, deadline_at_ms: float, factor: float) -> None:
        """Pre-rank recall, on a sample of decisions: would the best candidate by the
        total serving ranks on, over every candidate, have been among those pre-rank
        kept? The others are scored too (a measurement: skipped without the time for
        it). Both sides take the pCTR serving uses (:func:`serving_pctr`): the model's
        for ads it was trained on, the prior's for the others."""
        rest = np.setdiff1d(np.arange(len(ids)), top, assume_unique=True)
        candidates = list(zip(ids[rest].tolist(), camp[rest].tolist(),
                              s["advertiser"][rest].tolist(),
                              [BID_TYPES[b].value for b in s["bid_type"][rest].tolist()],
                              strict=True))
        rest_pctr, _ = scorer.pctr(request, candidates, deadline_at_ms, measuring=True,
                                   factor=factor)
        if rest_pctr is None:
            return
        kept = serving_pctr(scorer, ids[top], top_pctr, s["pctr"][top])
        others = serving_pctr(scorer, ids[rest], rest_pctr, s["pctr"][rest])
        best_kept = float(totals_at(s, top, kept)[1].max())
        best_rest = float(totals_at(s, rest, others)[1].max())
        scorer.record_recall(best_kept >= best_rest)

    def _rotate(self, ids: np.ndarray, camp: np.ndarray, shape: np.ndarray,
                pctr: np.ndarray, seen: np.ndarray, placement: str) -> None:
        """:func:`~adfunnel.serving.reference_auction.rotate_creatives` on the arrays: a
        campaign's creatives of one shape, where one has counts, get the rotation pool's
        pCTRs."""
        key = camp * (int(shape.max()) + 1) + shape
        _, group, size = np.unique(key, return_inverse=True, return_counts=True)
        for g in np.unique(group[(size[group] > 1) & seen]):
            members = np.flatnonzero(group == g)
            pctr[members] = self.ctr.campaign_pctrs(ids[members].tolist(), placement)


def serving_pctr(scorer: ModelScorer, ids: np.ndarray, model_pctr: np.ndarray,
                 prior_pctr: np.ndarray) -> np.ndarray:
    """The pCTR serving ranks and prices on, per candidate: the model's for the ads it
    was trained on, the prior's (``prior_pctr``) for the others — a model says nothing
    of an ad it never saw."""
    return np.where(scorer.model.knows(ids), model_pctr, prior_pctr)


def at_position(s: dict[str, np.ndarray], position: int) -> None:
    """Make the model's pCTR at ``position`` (where it scored) the one ranked and
    priced on, with the rates and totals that follow from it."""
    column = s.get(f"{AT_POSITION}{position}")
    if column is None:
        return
    s["pctr"] = column
    s["rate"], s["total"] = totals_at(s, np.arange(len(column)), column)

def totals_at(s: dict[str, np.ndarray], at: np.ndarray, pctr: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """(action rate, value + quality) of the candidates ``at`` with ``pctr``."""
    bid_type = s["bid_type"][at]
    rate = np.where(bid_type == 0, 1.0 / MILLE,
                    np.where(bid_type == 1, pctr, pctr * s["pcvr"][at]))
    return rate, s["bid"][at] * rate + s["quality"][at]
