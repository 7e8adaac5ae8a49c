"""Training the click model: fit, calibrate, measure on a held-out slice, refuse a worse one.

DESIGN.md §The funnel, step 5. Rows are ``field=value`` tokens
(:mod:`adfunnel.learn.datasets`), hashed as the served model hashes them
(:func:`adfunnel.prediction.model.hasher`). scikit-learn's ``CalibratedClassifierCV``
(``method="sigmoid"``, 5 folds, ``ensemble=False``) fits a ``LogisticRegression`` (L2,
liblinear) on every training row and a Platt scaling (Platt 1999; Niculescu-Mizil &
Caruana, ICML 2005) on the folds' out-of-fold scores, so the calibration never sees a
score of a row the weights were fitted on. Rows are split by a seeded permutation: 80 %
training, 20 % held out for the figures (:mod:`adfunnel.learn.metrics`). (Isotonic
steps fitted on a separate 20 % slice were tried first: on these samples they cost 2-6
points of normalised entropy.) The result is a
:class:`~adfunnel.prediction.model.ClickModel`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.linear_model import LogisticRegression

from adfunnel.learn.datasets import Examples
from adfunnel.learn.metrics import evaluate
from adfunnel.prediction.model import ClickModel, ModelError, hasher

DEFAULT_HASH_BITS = 18
DEFAULT_C = 0.1
CALIBRATION_FOLDS = 5
#: The token naming a row's ad (:func:`adfunnel.prediction.features.candidate_tokens`).
AD_TOKEN = "ad_id="
#: Share of the rows for training (the calibration's folds included); the rest is held
#: out for the figures.
TRAIN_SHARE = 0.8


class ModelRefused(ModelError):
    """A new model that is worse than the current one on the same held-out slice."""


@dataclass(frozen=True)
class Trained:
    """A model, the held-out rows its figures were measured on, and the fitted library
    estimator it was exported from (for contract tests and the benchmark's baseline)."""

    model: ClickModel
    held_out: Examples
    library: CalibratedClassifierCV


def split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices for training and held out (80/20, seeded)."""
    order = np.random.default_rng(seed).permutation(n)
    cut = int(n * TRAIN_SHARE)
    return order[:cut], order[cut:]


def train(examples: Examples, dataset: str, *, hash_bits: int = DEFAULT_HASH_BITS,
          c: float = DEFAULT_C, seed: int = 7, target: str = "click") -> Trained:
    """Fit, calibrate and measure a model on ``examples`` (``target``: what their labels
    are, ``click`` or ``conversion``).

    Raises:
        ModelError: a slice without both clicked and unclicked rows, or too few rows of
            either for the calibration's folds.
    """
    fit_rows, test_rows = split(len(examples), seed)
    fit, test = examples.take(fit_rows), examples.take(test_rows)
    for name, part in (("training", fit), ("held-out", test)):
        if len(np.unique(part.labels)) < 2:
            raise ModelError(f"the {name} slice ({len(part)} rows) needs both clicked and "
                             "unclicked rows")
    if min(np.bincount(fit.labels, minlength=2)) < CALIBRATION_FOLDS:
        raise ModelError(f"the training slice needs at least {CALIBRATION_FOLDS} clicked "
                         f"and {CALIBRATION_FOLDS} unclicked rows")
    lr = LogisticRegression(C=c, solver="liblinear", max_iter=1_000)
    library = CalibratedClassifierCV(lr, method="sigmoid", cv=CALIBRATION_FOLDS,
                                     ensemble=False)
    library.fit(hasher(hash_bits).transform(fit.tokens), fit.labels)
    fitted = library.calibrated_classifiers_[0]
    platt = fitted.calibrators[0]
    model = ClickModel(dataset, hash_bits, fitted.estimator.coef_.ravel().astype(np.float64),
                       float(fitted.estimator.intercept_[0]), float(platt.a_),
                       float(platt.b_))
    figures = evaluate(test.labels, model.predict(test.tokens))
    figures["slices"] = {"training": len(fit), "held_out": len(test)}
    seen = frozenset(int(t[len(AD_TOKEN):]) for row in fit.tokens for t in row
                     if t.startswith(AD_TOKEN) and t[len(AD_TOKEN):].isdigit())
    return Trained(dataclasses.replace(model, metrics=figures, seen_ads=seen, target=target),
                   test, library)


def check_not_worse(new: Trained, current: ClickModel) -> None:
    """Refuse ``new`` when its normalised entropy on its held-out slice is worse than
    ``current``'s on the same rows (DESIGN.md §The funnel: models roll forward only).

    Raises:
        ModelRefused: with both figures and the current version.
    """
    mine = new.model.metrics.get("normalized_entropy")
    theirs = evaluate(new.held_out.labels,
                      current.predict(new.held_out.tokens))["normalized_entropy"]
    if mine is not None and theirs is not None and mine > theirs:
        raise ModelRefused(
            f"refused: normalised entropy {mine:.6f} on the held-out slice "
            f"({len(new.held_out)} rows) is worse than the current model's {theirs:.6f} "
            f"(version {current.version}) on the same rows")
