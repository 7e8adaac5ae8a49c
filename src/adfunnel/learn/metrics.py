"""How good a click model's probabilities are, on rows it is evaluated on.

- log loss: mean negative log-likelihood of the labels (nats);
- normalised entropy (He et al., "Practical Lessons from Predicting Clicks on Ads at
  Facebook", ADKDD 2014, §3.1): log loss ÷ the entropy of the evaluated rows' base
  rate, so 1.0 is no better than always predicting the base rate and lower is better;
- calibration ratio: Σ predicted ÷ Σ observed clicks (1.0 is calibrated; DESIGN.md
  §The funnel asks for 0.95-1.05);
- AUC: the probability that a clicked row is ranked above an unclicked one.

A figure that the rows cannot give (one class only, no clicks) is None, never 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.metrics import log_loss, roc_auc_score


def base_rate_entropy(labels: np.ndarray) -> float | None:
    """Entropy (nats) of a Bernoulli at the labels' click rate; None when the rate is 0
    or 1 (no uncertainty to normalise by)."""
    if not len(labels):
        return None
    p = float(np.mean(labels))
    if p <= 0.0 or p >= 1.0:
        return None
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def evaluate(labels: np.ndarray, predicted: np.ndarray) -> dict[str, Any]:
    """``{"rows", "log_loss", "normalized_entropy", "calibration_ratio", "auc"}`` of
    ``predicted`` click probabilities against 0/1 ``labels``.

    Raises:
        ValueError: different lengths, or probabilities outside (0, 1).
    """
    labels = np.asarray(labels)
    predicted = np.asarray(predicted, dtype=float)
    if labels.shape != predicted.shape:
        raise ValueError(f"{len(labels)} labels but {len(predicted)} predictions")
    if len(predicted) and (predicted.min() <= 0.0 or predicted.max() >= 1.0):
        raise ValueError("predicted probabilities must lie strictly between 0 and 1")
    rows = len(labels)
    loss = float(log_loss(labels, predicted, labels=[0, 1])) if rows else None
    entropy = base_rate_entropy(labels)
    clicks = int(labels.sum())
    both = 0 < clicks < rows
    return {
        "rows": rows,
        "log_loss": _round(loss),
        "normalized_entropy": _round(loss / entropy) if loss is not None and entropy else None,
        "calibration_ratio": _round(float(predicted.sum()) / clicks) if clicks else None,
        "auc": _round(float(roc_auc_score(labels, predicted))) if both else None,
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)
