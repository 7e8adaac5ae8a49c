"""``adfunnel replay --learn``: the main job trains a click model and serves with it.

The iPinYou sample has five real clicks, too few to learn from, so with ``--learn`` the
replay clicks by an attribute click model of its own (stated here and in README): a
rendered ad is clicked with probability min(0.5, ``BASE_CTR`` × exp(Σ effects)), one
effect per attribute value of the log row the model can see — the region, the ad
exchange, the browser, the operating system, each user tag, the hour — drawn once
from N(0, ``SIGMA``²) by a seeded hash of (attribute, value). Clicks depend on the
row, never on any model's prediction.

The replay serves the days before the last one, compacts their served log, trains a
model on it joined with the ledger (:mod:`adfunnel.learn.train`), registers it through
``POST /v1/admin/models`` and serves the last day with it. :func:`last_day_figures`
then measures the model on the last day's rendered winners it decided, next to the
smoothed per-ad rate (the server's prior, updated by the days before) on the same rows.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import chi2

from adfunnel.sim.ipinyou import LogRow, split_useragent

BASE_CTR = 0.02
SIGMA = 0.8
MAX_CTR = 0.5


class AttributeClicks:
    """The ``--learn`` click model (module doc): P(click | rendered) for a log row."""

    def __init__(self, seed: int, base: float = BASE_CTR, sigma: float = SIGMA) -> None:
        self.seed, self.base, self.sigma = seed, base, sigma
        self._effects: dict[tuple[str, str], float] = {}

    def rate(self, row: LogRow) -> float:
        _, os_name, browser = split_useragent(row.useragent)
        values = [("region", row.region), ("exchange", row.exchange), ("browser", browser),
                  ("os", os_name), ("hour", str(row.timestamp.hour))]
        values += [("tag", t) for t in row.usertags]
        total = sum(self._effect(name, value) for name, value in values)
        return min(MAX_CTR, self.base * math.exp(total))

    def _effect(self, name: str, value: str) -> float:
        key = (name, value)
        found = self._effects.get(key)
        if found is None:
            digest = hashlib.sha256(f"{self.seed}|{name}|{value}".encode()).digest()
            found = random.Random(int.from_bytes(digest[:8], "big")).gauss(0.0, self.sigma)
            self._effects[key] = found
        return found


def split_last_day(rows: list[LogRow]) -> tuple[list[LogRow], list[LogRow]]:
    """(rows before the last local day of the log, rows of that day).

    Raises:
        ValueError: the rows span fewer than two days.
    """
    last = rows[-1].timestamp.date()
    before = [r for r in rows if r.timestamp.date() < last]
    if not before:
        raise ValueError("--learn needs rows from at least two days (the last is served "
                         "with the model trained on the others)")
    return before, [r for r in rows if r.timestamp.date() == last]


def train_and_register(http: Any, served_dir: Path, database_url: str, out: Path,
                       until: datetime) -> dict[str, Any]:
    """Compact the served log's hours before ``until``, train on it joined with the
    ledger, write the artifact to ``out`` and register it; the registration's answer.

    Raises:
        DatasetError, ModelError: too few rows or clicks to train.
        RuntimeError: the server refused the registration.
    """
    from adfunnel.events.compactor import compact
    from adfunnel.learn import datasets
    from adfunnel.learn.train import train

    time.sleep(1.0)  # the server's served-log writer appends off the request path
    compact(served_dir, until, grace_s=0.0)
    examples = datasets.load("served-log", served_dir, database_url=database_url)
    trained = train(examples, "served-log")
    trained.model.save(out)
    r = http.post("/v1/admin/models", json={"path": str(out)})
    if r.status_code != 201:
        raise RuntimeError(f"model registration refused: {r.status_code} {r.text[:300]}")
    return {"trained_rows": len(examples), "trained_clicks": int(examples.labels.sum()),
            **r.json()}


def last_day_figures(served_dir: Path, database_url: str, version: str, day_start: datetime,
                     prior: float, strength: float) -> dict[str, Any]:
    """The model's figures on the last day's rendered winners it decided, and the
    smoothed per-ad rate's on the same rows (counts of the billed impressions and clicks
    before ``day_start``, the server's prior and strength).

    Raises:
        sqlalchemy.exc.SQLAlchemyError, duckdb.Error: the reads failed.
    """
    from adfunnel.db import make_engine
    from adfunnel.events.compactor import compact
    from adfunnel.learn.metrics import evaluate
    from adfunnel.learn.query import billed_events, join_served_with_billed

    compact(served_dir, day_start + timedelta(days=30), grace_s=0.0)
    engine = make_engine(database_url)
    try:
        billed = billed_events(engine)
        rows = join_served_with_billed(served_dir, billed).to_pylist()
    finally:
        engine.dispose()
    t0 = day_start.timestamp()
    counts: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        if r["time"] < t0 and r.get("impressed"):
            c = counts[(r["ad_id"], r["placement"])]
            c[0] += 1
            c[1] += int(bool(r.get("clicked")))
    last = [r for r in rows if r["time"] >= t0 and r.get("impressed")
            and r.get("model_version") == version]
    if not last:
        return {"rows": 0, "model": None, "baseline": None}
    labels = np.array([int(bool(r.get("clicked"))) for r in last])
    predicted = np.clip(np.array([float(r["pctr"]) for r in last]), 1e-6, 1 - 1e-6)
    smoothed = np.array([(counts[(r["ad_id"], r["placement"])][1] + prior * strength)
                         / (counts[(r["ad_id"], r["placement"])][0] + strength) for r in last])
    return {"rows": len(last), "model": evaluate(labels, predicted),
            "raw": calibration_of(last),
            "by_day": calibration_by_day([r for r in rows if r.get("impressed")]),
            "baseline": evaluate(labels, np.clip(smoothed, 1e-6, 1 - 1e-6))}


def calibration_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Of rendered winners (joined rows): ``rows``, ``clicks``, ``calibration_ratio``
    (Σ pCTR serving used ÷ clicks), ``raw_calibration_ratio`` (Σ of the model's own pCTR
    before recalibration, the used one where the model gave none ÷ clicks) and
    ``factor`` (Σ used ÷ Σ raw); ratios None without a click. ``calibration_ratio_95``:
    the used ratio's 95 % interval from the clicks' count alone (exact Poisson,
    Garwood 1936; the pCTR sum taken as known): with a day's few dozen clicks the ratio
    is that uncertain. ``recalibrated``: the same of the rows served with a factor other
    than 1 (None: none was)."""
    used = sum(float(r["pctr"]) for r in rows)
    raw = sum(float(r["pctr"] if r.get("model_pctr") is None else r["model_pctr"])
              for r in rows)
    clicks = sum(bool(r.get("clicked")) for r in rows)
    moved = [r for r in rows if r.get("model_pctr") is not None
             and abs(float(r["pctr"]) - float(r["model_pctr"])) > 1e-12]
    return {"rows": len(rows), "clicks": clicks,
            "calibration_ratio": round(used / clicks, 4) if clicks else None,
            "calibration_ratio_95": ratio_interval(used, clicks),
            "raw_calibration_ratio": round(raw / clicks, 4) if clicks else None,
            "factor": round(used / raw, 4) if raw else None,
            "recalibrated": calibration_of(moved) if moved and len(moved) < len(rows)
            else None}


def ratio_interval(predicted: float, clicks: int) -> list[float] | None:
    """The 95 % interval of ``predicted ÷ clicks`` when the click count is Poisson: the
    exact (Garwood) interval of its mean, [χ²(0.025; 2k) / 2, χ²(0.975; 2k + 2) / 2],
    turned over. None without a click (the ratio is unmeasured)."""
    if clicks <= 0:
        return None
    low = chi2.ppf(0.025, 2 * clicks) / 2
    high = chi2.ppf(0.975, 2 * clicks + 2) / 2
    return [round(predicted / high, 4), round(predicted / low, 4)]


def calibration_by_day(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`calibration_of` per UTC day of the decisions (``YYYY-MM-DD``)."""
    days: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        days[datetime.fromtimestamp(r["time"], UTC).date().isoformat()].append(r)
    return {day: calibration_of(found) for day, found in sorted(days.items())}
