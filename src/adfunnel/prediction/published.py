"""The recalibration factors serving uses now: published by the job, read per decision.

The recalibration job (:mod:`adfunnel.learn.recalibration_job`) fits a
:class:`~adfunnel.prediction.recalibration.FactorTable` on a schedule and publishes it
here; the scorer (:mod:`adfunnel.prediction.scorer`) reads the current table once per
decision. A table is immutable and replaced whole (one reference assignment), so a
decision never mixes two tables and the request path takes no lock.

Shown in ``/v1/serving/stats`` (:meth:`PublishedFactors.status`) and ``/metrics``:
``adfunnel_model_recalibration_factor{version, segment}`` — the version's factor under
segment ``*``, and each segment with a factor of its own (at most ``MAX_SERIES`` per
version, those with the most evidence, so that thousands of placements do not become
thousands of series).
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

from prometheus_client import Gauge

from adfunnel.prediction.recalibration import ALL, FactorTable

FACTOR = Gauge("adfunnel_model_recalibration_factor",
               "The factor serving multiplies the click model's pCTR by, per model version "
               "and segment (placement; * = the version's own)", ["version", "segment"])
#: Most per-segment series per version in /metrics (the status lists every one).
MAX_SERIES = 20


class PublishedFactors:
    """The current :class:`FactorTable` (empty until the first run: every factor 1)."""

    def __init__(self) -> None:
        self.table = FactorTable()
        self.published_at: datetime | None = None
        self.window: tuple[datetime, datetime] | None = None
        self._series: set[tuple[str, str]] = set()

    def factor(self, version: str, segment: str) -> float:
        """The factor of ``version``'s pCTR in ``segment`` now."""
        return self.table.factor(version, segment)

    def publish(self, table: FactorTable, at: datetime,
                window: tuple[datetime, datetime]) -> None:
        """Serve with ``table`` from now on; ``at`` (the injected clock) and the window
        of decisions it was fitted on are shown in :meth:`status`."""
        self.table, self.published_at, self.window = table, at, window
        self._export(table)

    def status(self) -> dict[str, Any]:
        """``published_at``, ``window`` (from, until) and per version: ``factor``, the
        evidence (billed impressions, predicted and observed clicks, the raw ratio
        predicted ÷ observed) and ``segments`` with a factor of their own."""
        t = self.table
        versions = {}
        for v, f in sorted(t.versions.items()):
            own = {s: {"factor": round(x, 4), **_figures(t.evidence.get((v, s)))}
                   for (vv, s), x in sorted(t.segments.items()) if vv == v}
            versions[v] = {"factor": round(f, 4), **_figures(t.evidence.get((v, ALL))),
                           "segments": own}
        return {"published_at": None if self.published_at is None
                else self.published_at.isoformat(),
                "window": None if self.window is None
                else [w.isoformat() for w in self.window],
                "versions": versions}

    def _export(self, t: FactorTable) -> None:
        series = {(v, ALL): f for v, f in t.versions.items()}
        for v in t.versions:
            own = sorted(((s, f) for (vv, s), f in t.segments.items() if vv == v),
                         key=lambda sf: -_clicks(t, v, sf[0]))[:MAX_SERIES]
            series.update(((v, s), f) for s, f in own)
        for key in self._series - series.keys():  # segments that lost their own factor
            with contextlib.suppress(KeyError):  # (another process's runtime in tests)
                FACTOR.remove(*key)
        for (v, s), f in series.items():
            FACTOR.labels(v, s).set(f)
        self._series = set(series)


def _clicks(t: FactorTable, version: str, segment: str) -> int:
    found = t.evidence.get((version, segment))
    return 0 if found is None else found.observed


def _figures(e: Any) -> dict[str, Any]:
    if e is None:
        return {"impressions": 0, "predicted_clicks": 0.0, "observed_clicks": 0,
                "raw_ratio": None}
    return {"impressions": e.impressions, "predicted_clicks": round(e.predicted, 3),
            "observed_clicks": e.observed,
            "raw_ratio": round(e.predicted / e.observed, 4) if e.observed else None}
