"""The predict stage: the click model's pCTR for the candidates pre-rank kept.

DESIGN.md §The funnel, steps 4 and 5. Pre-rank keeps the best ``prerank_keep``
candidates by the prior's scores; the model then scores those with the request's
tokens (:func:`adfunnel.prediction.features.request_tokens`) and each candidate's own
(:func:`~adfunnel.prediction.features.candidate_tokens`), exactly as it was trained on
the served log. The stage has a share of the request's deadline (``budget_ms``): when
it cannot start with that much left, takes longer, or fails, the decision keeps the
pre-rank scores and is flagged ``fallback`` (counted in
``adfunnel_model_fallback_total`` by cause).

The model's probabilities are multiplied by the recalibration factor of its version and
the request's placement (:mod:`adfunnel.prediction.recalibration`, published by the
recalibration job): the pCTR that ranks, prices and bids is the recalibrated one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from prometheus_client import Counter

from adfunnel.clock import monotonic_ms
from adfunnel.prediction.calibration import CalibrationMonitor
from adfunnel.prediction.features import candidate_tokens, request_tokens
from adfunnel.prediction.model import P_MIN, ClickModel
from adfunnel.prediction.published import PublishedFactors

_log = logging.getLogger(__name__)

#: Key of the pCVR array in :meth:`ModelScorer.pctr_by_position`'s answer (with a
#: conversion model), next to the positions.
PCVR = -1

FALLBACKS = Counter("adfunnel_model_fallback_total",
                    "Decisions that kept the pre-rank scores instead of the model's, by cause",
                    ["cause"])


class ModelScorer:
    """Scores candidates with a :class:`ClickModel` within a time budget.

    Args:
        model: the loaded model (its ``version`` is recorded with each decision).
        budget_ms: the stage's share of the deadline, milliseconds (monotonic clock).
        monitor: told of each committed winner the model scored (None: not watched).
        cvr_model: a conversion model (``target`` conversion): the pCVR of CPA
            candidates (None: the configured constant).
        recall_sample: share of decisions (probability) that also score every
            candidate to measure the pre-rank's recall.
        factors: the recalibration factors published by the job (None: factor 1).
    """

    def __init__(self, model: ClickModel, budget_ms: float = 2.0,
                 monitor: CalibrationMonitor | None = None,
                 cvr_model: ClickModel | None = None, *,
                 recall_sample: float = 0.01,
                 factors: PublishedFactors | None = None) -> None:
        if cvr_model is not None and cvr_model.target != "conversion":
            raise ValueError("cvr_model must be a conversion model (target conversion)")
        if budget_ms <= 0:
            raise ValueError(f"budget_ms must be > 0, got {budget_ms}")
        self.model = model
        self.version = model.version
        self.budget_ms = budget_ms
        self.monitor = monitor
        self.cvr_model = cvr_model
        self.factors = factors
        #: share of decisions that also score every candidate, to measure the
        #: pre-rank's recall (a measurement; default 1 %)
        self.recall_sample = recall_sample
        self._recall = [0, 0]  # checked, kept the best
        self._lock = threading.Lock()

    def record_recall(self, kept_the_best: bool) -> None:
        """One measured decision: was the best candidate by the model's total over all
        candidates among those pre-rank kept?"""
        with self._lock:
            self._recall[0] += 1
            self._recall[1] += int(kept_the_best)

    def prerank_recall(self) -> dict[str, float | int | None]:
        """``{"checked", "recall"}``: the share of measured decisions whose best
        candidate pre-rank kept (None before any was measured)."""
        with self._lock:
            checked, hits = self._recall
        return {"checked": checked, "recall": round(hits / checked, 4) if checked else None}

    def factor(self, placement: str) -> float:
        """The recalibration factor of this model's pCTR on ``placement`` now."""
        return 1.0 if self.factors is None else self.factors.factor(self.version, placement)

    def pctr(self, request: Mapping[str, Any], candidates: Sequence[tuple[int, int, int, str]],
             deadline_at_ms: float, *, measuring: bool = False,
             factor: float | None = None) -> tuple[np.ndarray | None, str | None]:
        """Calibrated pCTR per candidate (ad id, campaign id, advertiser id, bid type) at
        ``request["position"]``, or (None, cause) when the decision must fall back (see
        :meth:`pctr_by_position`)."""
        found, cause = self.pctr_by_position(request, [request["position"]], candidates,
                                             deadline_at_ms, measuring=measuring,
                                             factor=factor)
        return (None, cause) if found is None else (found[request["position"]], None)

    def pctr_by_position(self, request: Mapping[str, Any], positions: Sequence[int],
                         candidates: Sequence[tuple[int, int, int, str]],
                         deadline_at_ms: float, *, measuring: bool = False,
                         factor: float | None = None
                         ) -> tuple[dict[int, np.ndarray] | None, str | None]:
        """Calibrated pCTR per candidate (ad id, campaign id, advertiser id, bid type) at
        each slot position of ``positions``: the candidates' own tokens are summed once,
        the request's (which name the position) once per position. Or (None, cause) when
        the decision must fall back: ``no_time`` (less than the budget left), ``late``
        (the stage overran its budget), ``error``. With a conversion model the answer
        also holds each candidate's pCVR under the key :data:`PCVR`.

        ``request``: ``placement``, ``exchange``, ``domain``, ``hour`` (UTC) and
        ``attributes``, as the served log records them. ``measuring``: a measurement,
        not the decision's scoring (no fallback counted, no time budget). ``factor``:
        the recalibration factor the pCTRs are multiplied by (None: :meth:`factor` of
        the placement now), the product kept inside [P_MIN, 1 − P_MIN].
        """
        start = monotonic_ms()
        if start + self.budget_ms > deadline_at_ms:
            return (None, "no_time") if measuring else self._fallback("no_time")
        try:
            placement, model = request["placement"], self.model
            f = self.factor(placement) if factor is None else factor
            rows = [candidate_tokens(placement, ad, camp, adv, bid_type)
                    for ad, camp, adv, bid_type in candidates]
            own = model.logits_serving(rows)
            out = {}
            for k in positions:
                shared = request_tokens(placement, k, request["exchange"], request["domain"],
                                        request["hour"], request["attributes"])
                p = model.calibrate(own + model.shared_logit(shared))
                out[k] = p if f == 1.0 else np.clip(p * f, P_MIN, 1 - P_MIN)
            cvr = self.cvr_model
            if cvr is not None and not measuring:  # pCVR of a click: one position suffices
                shared = request_tokens(placement, positions[0], request["exchange"],
                                        request["domain"], request["hour"],
                                        request["attributes"])
                out[PCVR] = cvr.predict_serving(rows, shared)
        except Exception:  # a model bug must not fail the request: the prior decides
            _log.exception("the click model failed; the pre-rank scores decide")
            return (None, "error") if measuring else self._fallback("error")
        if not measuring and monotonic_ms() - start > self.budget_ms:
            return self._fallback("late")
        return out, None

    @staticmethod
    def _fallback(cause: str) -> tuple[None, str]:
        FALLBACKS.labels(cause).inc()
        return None, cause
