"""Off-policy evaluation: a target policy's click rate, estimated from logged decisions.

Logged data are rows (item, position, click, propensity): the item shown at a slot
position, whether it was clicked, and the probability the logging policy had of
showing it there (the served log keeps it per slot; the Open Bandit Dataset per row).
A target policy is context-free: for each position a distribution over items
(``POLICY.csv``: ``item_id,position,probability``, summing to 1 per position).

With w = π(item | position) ÷ propensity for each row:

- IPS (Horvitz & Thompson 1952): mean(w·click);
- SNIPS, self-normalised (Swaminathan & Joachims, NeurIPS 2015): Σ w·click ÷ Σ w;
- DR, doubly robust (Dudík, Langford & Li, ICML 2011): mean(Σₐ π(a | k)·q̂(k, a) +
  w·(click − q̂(k, item))), q̂ the smoothed click rate per (position, item), cross-fitted
  over 5 folds so a row's own click never enters its own q̂.

Each comes with a 95 % percentile bootstrap interval over the rows (1,000 resamples,
seeded). ``logged_value`` is the logged rows' own click rate.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMATS = ("served-log", "obd")
BOOTSTRAP = 1_000
FOLDS = 5
#: Pseudo-rows of the overall click rate in each (position, item) cell of q̂.
PRIOR_ROWS = 20.0


class OpeError(ValueError):
    """Logged data or a policy that cannot be used (``where: problem``)."""


@dataclass(frozen=True)
class Logged:
    """Logged decisions, aligned arrays: item ids, positions, clicks (0/1), propensities."""

    items: np.ndarray
    positions: np.ndarray
    clicks: np.ndarray
    propensities: np.ndarray

    def __len__(self) -> int:
        return len(self.items)


Policy = Mapping[int, Mapping[int, float]]  # position -> item -> probability


def load_obd(path: Path) -> Logged:
    """Open Bandit Dataset rows (``item_id``, ``position``, ``click``,
    ``propensity_score`` columns).

    Raises:
        OpeError: a missing column, a bad value, or no rows.
    """
    items, positions, clicks, props = [], [], [], []
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        need = {"item_id", "position", "click", "propensity_score"}
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            raise OpeError(f"{path}: expected the columns {', '.join(sorted(need))}")
        for n, row in enumerate(reader, 2):
            try:
                items.append(int(row["item_id"]))
                positions.append(int(row["position"]))
                clicks.append(int(row["click"]))
                props.append(float(row["propensity_score"]))
            except ValueError as exc:
                raise OpeError(f"{path}:{n}: {exc}") from None
    return _logged(path, items, positions, clicks, props)


def load_served(directory: Path, database_url: str) -> tuple[Logged, int]:
    """Rendered winners of the served log with their logged propensity, clicked or not
    by the ledger at ``database_url``; and how many rendered winners had no propensity
    (decisions made without exploration configured), which are left out.

    Raises:
        OpeError: no row with a propensity.
    """
    from adfunnel.db import make_engine
    from adfunnel.learn.query import billed_events, join_served_with_billed

    engine = make_engine(database_url)
    try:
        rows = join_served_with_billed(directory, billed_events(engine)).to_pylist()
    finally:
        engine.dispose()
    shown = [r for r in rows if r.get("impressed")]
    kept = [r for r in shown if r.get("propensity")]
    logged = _logged(directory, [int(r["ad_id"]) for r in kept],
                     [int(r["position"]) for r in kept],
                     [1 if r.get("clicked") else 0 for r in kept],
                     [float(r["propensity"]) for r in kept])
    return logged, len(shown) - len(kept)


def load_policy(path: Path) -> dict[int, dict[int, float]]:
    """A target policy from ``item_id,position,probability`` rows.

    Raises:
        OpeError: a missing column, a bad or negative probability, or a position whose
            probabilities do not sum to 1.
    """
    policy: dict[int, dict[int, float]] = {}
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        need = {"item_id", "position", "probability"}
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            raise OpeError(f"{path}: expected the columns item_id,position,probability")
        for n, row in enumerate(reader, 2):
            try:
                item, position = int(row["item_id"]), int(row["position"])
                p = float(row["probability"])
            except ValueError as exc:
                raise OpeError(f"{path}:{n}: {exc}") from None
            if not 0.0 <= p <= 1.0:
                raise OpeError(f"{path}:{n}: probability must be in [0, 1], got {p}")
            policy.setdefault(position, {})[item] = p
    for position, dist in sorted(policy.items()):
        total = sum(dist.values())
        if abs(total - 1.0) > 1e-6:
            raise OpeError(f"{path}: position {position}: probabilities sum to {total:.6f}, "
                           "not 1")
    if not policy:
        raise OpeError(f"{path}: no rows")
    return policy


def estimate(logged: Logged, policy: Policy, *, boot: int = BOOTSTRAP,
             seed: int = 7) -> dict[str, Any]:
    """``{"logged_value", "rows", "estimators": {"ips", "snips", "dr"}}``, each
    estimator ``{"value", "ci_low", "ci_high"}`` (see the module doc).

    Raises:
        OpeError: a logged position the policy does not cover.
    """
    missing = sorted(set(np.unique(logged.positions).tolist()) - set(policy))
    if missing:
        raise OpeError(f"the policy has no distribution for position(s) {missing}")
    target = np.array([policy[int(k)].get(int(a), 0.0)
                       for a, k in zip(logged.items, logged.positions, strict=True)])
    w = target / logged.propensities
    r = logged.clicks.astype(float)
    dr = _dr_terms(logged, policy, w, seed)
    rng = np.random.default_rng(seed)
    samples = rng.integers(0, len(logged), size=(boot, len(logged)))
    wr, ws = (w * r)[samples], w[samples]
    snips_boot = np.divide(wr.sum(axis=1), ws.sum(axis=1),
                           out=np.zeros(boot), where=ws.sum(axis=1) > 0)
    return {
        "rows": len(logged),
        "logged_value": round(float(r.mean()), 6),
        "estimators": {
            "ips": _interval(float((w * r).mean()), wr.mean(axis=1)),
            "snips": _interval(float((w * r).sum() / w.sum()) if w.sum() > 0 else 0.0,
                               snips_boot),
            "dr": _interval(float(dr.mean()), dr[samples].mean(axis=1)),
        },
    }


def _dr_terms(logged: Logged, policy: Policy, w: np.ndarray, seed: int) -> np.ndarray:
    """Each row's doubly robust term, q̂ cross-fitted over :data:`FOLDS` folds."""
    n = len(logged)
    fold = np.random.default_rng(seed + 1).integers(0, FOLDS, size=n)
    r = logged.clicks.astype(float)
    out = np.empty(n)
    for f in range(FOLDS):
        train, rows = fold != f, np.flatnonzero(fold == f)
        prior = float(r[train].mean()) if train.any() else 0.0
        cells: dict[tuple[int, int], list[float]] = {}
        for k, a, click in zip(logged.positions[train].tolist(), logged.items[train].tolist(),
                               r[train].tolist(), strict=True):
            cell = cells.setdefault((k, a), [0.0, 0.0])
            cell[0] += click
            cell[1] += 1.0

        def q(k: int, a: int, cells: dict[tuple[int, int], list[float]] = cells,
              prior: float = prior) -> float:
            clicks, count = cells.get((k, a), (0.0, 0.0))
            return (clicks + prior * PRIOR_ROWS) / (count + PRIOR_ROWS)

        expected = {k: sum(p * q(k, a) for a, p in policy[k].items()) for k in policy}
        for i in rows.tolist():
            k, a = int(logged.positions[i]), int(logged.items[i])
            out[i] = expected[k] + w[i] * (r[i] - q(k, a))
    return out


def _interval(value: float, boot: np.ndarray) -> dict[str, float]:
    low, high = np.percentile(boot, [2.5, 97.5])
    return {"value": round(value, 6), "ci_low": round(float(low), 6),
            "ci_high": round(float(high), 6)}


def _logged(where: object, items: list[int], positions: list[int], clicks: list[int],
            props: list[float]) -> Logged:
    if not items:
        raise OpeError(f"{where}: no logged rows with a propensity")
    logged = Logged(np.asarray(items), np.asarray(positions), np.asarray(clicks),
                    np.asarray(props, dtype=float))
    if (logged.propensities <= 0).any() or (logged.propensities > 1).any():
        raise OpeError(f"{where}: propensities must lie in (0, 1]")
    if not set(np.unique(logged.clicks).tolist()) <= {0, 1}:
        raise OpeError(f"{where}: clicks must be 0 or 1")
    return logged
