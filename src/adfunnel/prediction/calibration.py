"""Is the click model still calibrated? Predicted against observed clicks, per model.

DESIGN.md §The funnel, step 5: every price divides by pCTR, so a model that predicts
10 % more clicks than happen under-charges by 10 %. For each model version the monitor
keeps the most recent ``window`` billed impressions it scored: the sum of their pCTRs
(predicted clicks) and how many of them have a billed click (observed clicks). Their
ratio is the calibration ratio (1.0 is calibrated). Outside ``[low, high]`` (0.95-1.05)
the model's status is ``out_of_range``, shown in ``/v1/serving/stats`` and as
``adfunnel_model_calibrated{version}`` = 0 in ``/metrics``; with no observed click yet
the ratio is unmeasured (None, status ``unmeasured``), never 0.

Fed from two sides: :meth:`served` when a decision the model scored is committed (the
impression id and the winner's pCTR), :meth:`billed` when the aggregator bills an
impression or a click (invalid traffic never reaches it), with the ledger row's plain
values (impression id, event type) so the monitor knows nothing of billing. Impressions
never rendered are forgotten after ``pending`` newer serves. Counts are this process's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Gauge

#: The billed event types the monitor counts (the ledger's ``event_type`` values).
IMPRESSION = "impression"
CLICK = "click"

RATIO = Gauge("adfunnel_model_calibration_ratio",
              "Predicted / observed clicks over the model's recent billed impressions",
              ["version"])
CALIBRATED = Gauge("adfunnel_model_calibrated",
                   "1 while the model's calibration ratio is within bounds (or unmeasured)",
                   ["version"])


@dataclass
class _Window:
    """One model's recent billed impressions: (impression id, pCTR) oldest first."""

    impressions: deque[tuple[str, float]] = field(default_factory=deque)
    index: set[str] = field(default_factory=set)
    clicked: set[str] = field(default_factory=set)
    predicted: float = 0.0


class CalibrationMonitor:
    """Predicted ÷ observed clicks per model version over recent billed impressions;
    thread-safe (serves and bills come from different threads)."""

    def __init__(self, window: int = 10_000, *, low: float = 0.95, high: float = 1.05,
                 pending: int = 200_000) -> None:
        if window < 1 or pending < 1 or not 0 < low <= 1 <= high:
            raise ValueError("window and pending must be >= 1 and low <= 1 <= high")
        self.window, self.low, self.high, self.pending = window, low, high, pending
        self._lock = threading.Lock()
        self._served: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._windows: dict[str, _Window] = {}

    def served(self, impression_id: str, version: str, pctr: float) -> None:
        """A committed winner the model scored (``pctr``, probability)."""
        with self._lock:
            self._served[impression_id] = (version, pctr)
            while len(self._served) > self.pending:
                self._served.popitem(last=False)

    def billed(self, impression_id: str, event_type: str) -> None:
        """A newly billed ledger row (its impression id and event type): an impression
        enters its model's window, a click marks its impression clicked."""
        with self._lock:
            if event_type == IMPRESSION:
                self._impression(impression_id)
            elif event_type == CLICK:
                for version, w in self._windows.items():
                    if impression_id in w.index and impression_id not in w.clicked:
                        w.clicked.add(impression_id)
                        self._publish(version, w)
                        break

    def reversed(self, impression_id: str, event_type: str) -> None:
        """Take back what :meth:`billed` added for a ledger row (tier 2 reversed it as
        invalid traffic): a click unmarks its impression, an impression leaves its
        window with its predicted click."""
        with self._lock:
            for version, w in self._windows.items():
                if impression_id not in w.index:
                    continue
                if event_type == CLICK:
                    w.clicked.discard(impression_id)
                else:
                    self._drop(w, impression_id)
                self._publish(version, w)
                break

    @staticmethod
    def _drop(w: _Window, impression_id: str) -> None:
        for item in w.impressions:
            if item[0] == impression_id:
                w.impressions.remove(item)
                w.predicted -= item[1]
                break
        w.index.discard(impression_id)
        w.clicked.discard(impression_id)

    def status(self) -> dict[str, dict[str, Any]]:
        """Per model version: ``impressions``, ``predicted_clicks``, ``observed_clicks``,
        ``calibration_ratio`` (None: no click observed yet) and ``status`` (``ok``,
        ``out_of_range``, ``unmeasured``)."""
        with self._lock:
            return {v: self._figures(w) for v, w in self._windows.items()}

    def _impression(self, impression_id: str) -> None:
        found = self._served.pop(impression_id, None)
        if found is None:
            return  # not scored by a model (or forgotten)
        version, pctr = found
        w = self._windows.setdefault(version, _Window())
        w.impressions.append((impression_id, pctr))
        w.index.add(impression_id)
        w.predicted += pctr
        while len(w.impressions) > self.window:
            old, p = w.impressions.popleft()
            w.index.discard(old)
            w.clicked.discard(old)
            w.predicted -= p
        self._publish(version, w)

    def _figures(self, w: _Window) -> dict[str, Any]:
        clicks = len(w.clicked)
        ratio = w.predicted / clicks if clicks else None
        state = ("unmeasured" if ratio is None
                 else "ok" if self.low <= ratio <= self.high else "out_of_range")
        return {"impressions": len(w.impressions), "predicted_clicks": round(w.predicted, 3),
                "observed_clicks": clicks,
                "calibration_ratio": None if ratio is None else round(ratio, 4),
                "status": state}

    def _publish(self, version: str, w: _Window) -> None:
        figures = self._figures(w)
        if figures["calibration_ratio"] is not None:
            RATIO.labels(version).set(figures["calibration_ratio"])
        CALIBRATED.labels(version).set(0 if figures["status"] == "out_of_range" else 1)
