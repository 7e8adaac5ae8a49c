"""Serving-time inference of the click model: ``candidates`` rows per call.

Trains a model on the dataset (as ``adfunnel model train`` does), then times, on the
same rows in the same run:

- ``serving``: :meth:`ClickModel.predict_serving`, what the request path calls (cached
  token columns, numpy);
- ``library``: scikit-learn itself — ``FeatureHasher.transform`` and the fitted
  ``CalibratedClassifierCV.predict_proba`` the model was exported from — the baseline.

Figures: p50/p99 µs per call of each, ``speedup_p99`` = library p99 ÷ serving p99, the
largest difference between the two paths' probabilities, and whether serving meets the
target (DESIGN.md §The funnel: ≤ 1 ms p99 for 200 candidates).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from adfunnel.learn import datasets
from adfunnel.learn.train import train
from adfunnel.prediction.model import P_MIN, hasher

TARGET_P99_US = 1_000.0


def run_model_bench(dataset: str, path: Path, *, candidates: int = 200, calls: int = 1_000,
                    seed: int = 7) -> dict[str, Any]:
    """Time ``calls`` inferences of ``candidates`` rows each (see the module doc).

    Raises:
        DatasetError, ModelError: the dataset cannot train a model.
    """
    examples = datasets.load(dataset, path)
    trained = train(examples, dataset, seed=seed)
    model = trained.model
    rng = np.random.default_rng(seed)
    batches = [[examples.tokens[i] for i in rng.integers(0, len(examples), candidates)]
               for _ in range(calls)]
    h = hasher(model.hash_bits)

    def library(rows: list[list[str]]) -> np.ndarray:
        return np.clip(trained.library.predict_proba(h.transform(rows))[:, 1],
                       P_MIN, 1 - P_MIN)

    model.predict_serving(batches[0])  # warm: the token cache fills as traffic repeats
    serving_us = _time(model.predict_serving, batches)
    library_us = _time(library, batches)
    gap = max(float(np.abs(model.predict_serving(b) - library(b)).max()) for b in batches[:50])
    s50, s99 = np.percentile(serving_us, [50, 99])
    l50, l99 = np.percentile(library_us, [50, 99])
    return {
        "dataset": dataset, "candidates": candidates, "calls": calls,
        "tokens_per_row": round(float(np.mean([len(t) for t in examples.tokens])), 1),
        "serving_p50_us": round(float(s50), 1), "serving_p99_us": round(float(s99), 1),
        "library_p50_us": round(float(l50), 1), "library_p99_us": round(float(l99), 1),
        "speedup_p99": round(float(l99 / s99), 2),
        "max_abs_difference": gap,
        "target_p99_us": TARGET_P99_US,
        "meets_target": bool(s99 <= TARGET_P99_US),
        "model_version": model.version,
    }


def _time(fn: Any, batches: list[list[list[str]]]) -> np.ndarray:
    out = np.empty(len(batches))
    for k, rows in enumerate(batches):
        t = time.perf_counter()
        fn(rows)
        out[k] = (time.perf_counter() - t) * 1e6
    return out
