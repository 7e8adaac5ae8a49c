"""The click model as serving uses it: hashed features, a logit, a Platt curve, an artifact.

DESIGN.md §The funnel, step 5. Rows are ``field=value`` tokens
(:mod:`adfunnel.prediction.features`), hashed into ``2**hash_bits`` columns by
scikit-learn's ``FeatureHasher`` (MurmurHash3, no alternating sign). The weights, bias
and Platt scaling are fitted by :mod:`adfunnel.learn.train`.

Serving does not call scikit-learn per candidate: :meth:`ClickModel.predict` is numpy —
the weights of a row's hashed columns summed, the bias added (the logit ``z``), then
the Platt curve 1 / (1 + exp(a·z + b)) — and a test holds it equal to the library's own
``predict_proba``.

An artifact is a directory: ``model.json`` (format, version, dataset, hash bits, bias,
Platt's ``a`` and ``b``, the held-out figures) and ``weights.npy`` (float64). The
version is a content hash, so the same training gives the same version.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction import FeatureHasher
from sklearn.utils import murmurhash3_32

FORMAT = 2
#: Calibrated probabilities are kept inside [P_MIN, 1 − P_MIN]: a pCTR of 0 would
#: divide a GSP price by zero, and a log loss of a certain miss is infinite.
P_MIN = 1e-6


class ModelError(ValueError):
    """An artifact that cannot be read, or training data that cannot train a model."""


@dataclass(frozen=True)
class ClickModel:
    """A trained, calibrated click model (see the module doc).

    ``weights``: float64, shape (2**hash_bits,); ``bias``: the intercept (logit);
    ``platt_a``, ``platt_b``: the calibration, p = 1 / (1 + exp(a·z + b)) of the logit z.
    """

    dataset: str
    hash_bits: int
    weights: np.ndarray
    bias: float
    platt_a: float
    platt_b: float
    metrics: dict[str, Any] = field(default_factory=dict)
    #: the ad ids it was trained on (served-log data); an ad outside them keeps the
    #: smoothed per-ad rate as its pCTR. None: not tracked, every ad is scored.
    seen_ads: frozenset[int] | None = None
    #: what it predicts: ``click`` (pCTR of an impression) or ``conversion`` (pCVR of a
    #: click)
    target: str = "click"
    #: token -> hashed column, filled as serving meets tokens (they repeat: ads,
    #: placements, attributes), so a request hashes only what it has not seen
    _columns: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def version(self) -> str:
        """A content hash of the weights, bias and calibration (16 hex characters)."""
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.weights, dtype=np.float64).tobytes())
        h.update(repr((self.dataset, self.hash_bits, float(self.bias), float(self.platt_a),
                       float(self.platt_b))).encode())
        if self.seen_ads is not None:
            h.update(repr(sorted(self.seen_ads)).encode())
        if self.target != "click":  # (click models keep the versions they had)
            h.update(self.target.encode())
        return h.hexdigest()[:16]

    def knows(self, ad_ids: np.ndarray) -> np.ndarray:
        """Per ad id (int64[n]): whether the model was trained on it (all True when it
        does not track its ads)."""
        if self.seen_ads is None:
            return np.ones(len(ad_ids), dtype=bool)
        return np.isin(ad_ids, self._seen_array, assume_unique=False)

    @functools.cached_property
    def _seen_array(self) -> np.ndarray:
        """``seen_ads`` as a sorted array, built once (the request path asks per decision)."""
        return np.array(sorted(self.seen_ads or ()), dtype=np.int64)

    def hash(self, tokens: list[list[str]]) -> sp.csr_matrix:
        """Rows of tokens as a sparse matrix of hashed columns (counts)."""
        return hasher(self.hash_bits).transform(tokens).tocsr()

    def logits(self, x: sp.csr_matrix) -> np.ndarray:
        """The logistic regression's logits of hashed rows ``x`` (numpy: per row, the
        sum of its columns' weights times their counts, plus the bias)."""
        per_entry = self.weights[x.indices] * x.data
        rows = np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
        return np.bincount(rows, weights=per_entry, minlength=x.shape[0]) + self.bias

    def raw(self, x: sp.csr_matrix) -> np.ndarray:
        """Uncalibrated click probabilities of hashed rows ``x``."""
        return _sigmoid(self.logits(x))

    def calibrate(self, logits: np.ndarray) -> np.ndarray:
        """Calibrated probabilities of logits: the Platt curve, kept inside
        [P_MIN, 1 − P_MIN]."""
        return np.clip(_sigmoid(-(self.platt_a * logits + self.platt_b)), P_MIN, 1 - P_MIN)

    def predict(self, tokens: list[list[str]]) -> np.ndarray:
        """Calibrated click probabilities (pCTR) of rows of tokens."""
        return self.calibrate(self.logits(self.hash(tokens)))

    def predict_serving(self, tokens: list[list[str]],
                        shared: list[str] | None = None) -> np.ndarray:
        """:meth:`predict` on the request path: the same probabilities (a test holds
        them equal), each token's column from a cache (the hash is MurmurHash3, as the
        library's hasher computes it), rows summed by ``np.bincount``. ``shared``:
        tokens every row also has (the request's), summed once."""
        return self.calibrate(self.logits_serving(tokens, shared))

    def logits_serving(self, tokens: list[list[str]],
                       shared: list[str] | None = None) -> np.ndarray:
        """The logits :meth:`predict_serving` calibrates (bias and ``shared`` included)."""
        flat: list[int] = []
        for row in tokens:
            flat += self._columns_of(row)
        lengths = np.fromiter(map(len, tokens), dtype=np.intp, count=len(tokens))
        rows = np.repeat(np.arange(len(tokens)), lengths)
        sums = np.bincount(rows, weights=self.weights[np.asarray(flat, dtype=np.intp)],
                           minlength=len(tokens))
        return sums + self.bias + (self.shared_logit(shared) if shared else 0.0)

    def shared_logit(self, tokens: list[str]) -> float:
        """The weights of ``tokens`` summed: what they add to every row's logit."""
        return float(self.weights[np.asarray(self._columns_of(tokens), dtype=np.intp)].sum())

    def _columns_of(self, row: list[str]) -> list[int]:
        cols = list(map(self._columns.get, row))
        if None in cols:  # tokens not met before: hash once, remember
            for i, token in enumerate(row):
                if cols[i] is None:
                    cols[i] = self._columns[token] = column_of(token, self.hash_bits)
        return cols  # type: ignore[return-value]

    def save(self, directory: Path) -> None:
        """Write the artifact (``model.json`` last, so a reader never finds it half
        written).

        Raises:
            OSError: the directory cannot be written.
        """
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / "weights.npy", self.weights)
        meta = {
            "format": FORMAT, "version": self.version, "dataset": self.dataset,
            "hash_bits": self.hash_bits, "bias": float(self.bias),
            "calibration": {"method": "platt", "a": float(self.platt_a),
                            "b": float(self.platt_b)},
            "seen_ads": None if self.seen_ads is None else sorted(self.seen_ads),
            "target": self.target,
            "metrics": self.metrics,
        }
        tmp = directory / "model.json.tmp"
        tmp.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, directory / "model.json")

    @classmethod
    def load(cls, directory: Path) -> ClickModel:
        """Read an artifact written by :meth:`save`.

        Raises:
            ModelError: missing or unreadable files, another format, or a version that
                does not match the content.
        """
        try:
            meta = json.loads((directory / "model.json").read_text(encoding="utf-8"))
            weights = np.load(directory / "weights.npy")
        except (OSError, ValueError) as exc:
            raise ModelError(f"{directory}: not a model artifact ({exc})") from None
        if meta.get("format") != FORMAT:
            raise ModelError(f"{directory}: format {meta.get('format')!r}, expected {FORMAT}")
        model = cls(meta["dataset"], int(meta["hash_bits"]), weights, float(meta["bias"]),
                    float(meta["calibration"]["a"]), float(meta["calibration"]["b"]),
                    meta.get("metrics", {}),
                    None if meta.get("seen_ads") is None else frozenset(meta["seen_ads"]),
                    meta.get("target", "click"))
        if model.version != meta.get("version"):
            raise ModelError(f"{directory}: content does not match version "
                             f"{meta.get('version')!r}")
        return model


def hasher(hash_bits: int) -> FeatureHasher:
    """The feature hasher of a model with ``2**hash_bits`` columns."""
    return FeatureHasher(n_features=2**hash_bits, input_type="string", alternate_sign=False)


def column_of(token: str, hash_bits: int) -> int:
    """The column ``FeatureHasher`` gives ``token``: |MurmurHash3_32(token, seed 0)| mod
    2**hash_bits."""
    return abs(murmurhash3_32(token, seed=0)) % (1 << hash_bits)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))
