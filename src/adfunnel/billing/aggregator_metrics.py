"""What an aggregator counts: its own stats since it started, its Prometheus metrics
(events by type and outcome, money billed and absorbed, beacon-to-commit lag), the lag
samples of a batch and their percentiles (wall-clock milliseconds), and which deliveries
it sees for the first time."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from prometheus_client import Counter, Histogram

from adfunnel.billing.model import Recorded
from adfunnel.events.log import Delivery
from adfunnel.observability.metrics import ABSORBED_OVERSPEND, BILLED, RTB_NOTICES

#: Most lag samples kept for the p50/p99 figures.
LAG_SAMPLES = 100_000

AGGREGATED = Counter("adfunnel_aggregated_events_total",
                     "Events the aggregator recorded, by event type and outcome",
                     ["event", "outcome"])
LAG = Histogram("adfunnel_event_lag_seconds", "Beacon to ledger commit, wall-clock seconds",
                buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60))


@dataclass
class AggregatorStats:
    """What an aggregator did since it started (this process only)."""

    events: int = 0
    batches: int = 0
    billed: int = 0
    duplicates: int = 0
    not_billable: int = 0
    held: int = 0  # waiting for their prerequisite (a click before its impression)
    invalid: int = 0
    measured: int = 0  # new render and viewable rows (never billed)
    unknown_campaign: int = 0  # rejected: still unknown after the retry window
    unknown_retried: int = 0  # attempts at an event whose campaign was not known yet
    store_refused: int = 0  # rejected: the ledger refused it alone (billing.store_refusals)
    reversed: int = 0


def lags_ms(batch: Iterable[Delivery], done_ns: int) -> list[float]:
    """Beacon-to-commit lags (ms) of the first deliveries of ``batch`` committed at
    ``done_ns`` (Unix ns), each also observed by :data:`LAG` (seconds)."""
    out = []
    for d in batch:
        sent = d.event.tracked_ns
        if sent is not None and d.attempt == 1:
            lag = (done_ns - sent) / 1e6
            out.append(lag)
            LAG.observe(lag / 1000)
    return out


def lag_percentiles(lags: np.ndarray) -> dict[str, float | None]:
    """``p50`` and ``p99`` of lag samples (ms, rounded to µs); None where there are none."""
    if not len(lags):
        return {"p50": None, "p99": None}
    p50, p99 = np.percentile(lags, [50, 99])
    return {"p50": round(float(p50), 3), "p99": round(float(p99), 3)}


class NewDeliveries:
    """Tells the deliveries an aggregator had not handled before: a partition's
    deliveries come in sequence order, so a redelivery is at or below the partition's
    highest handled sequence (one that waited for its campaign was never counted)."""

    def __init__(self) -> None:
        self._high: dict[int, int] = {}  # partition -> highest sequence handled

    def count(self, batch: Sequence[Delivery], retried: set[int]) -> int:
        """How many of ``batch`` are new; ``retried``: the sequences that waited."""
        high = self._high
        new = 0
        for d in batch:
            if d.seq > high.get(d.partition, 0):
                high[d.partition] = d.seq
                new += 1
            elif d.seq in retried:
                new += 1
        return new


@dataclass
class BatchMetrics:
    """One batch's money (micros) and outcomes, added to the Prometheus metrics once per
    batch rather than once per event."""

    billed_micros: int = 0
    absorbed_micros: int = 0
    #: (event type, outcome) -> events
    outcomes: Tally[tuple[str, str]] = field(default_factory=Tally)
    #: the ledger's outcome -> OpenRTB billing notices' impressions recorded with it
    billing_notices: Tally[str] = field(default_factory=Tally)

    def add_money(self, recorded: Recorded) -> None:
        self.billed_micros += recorded.billed_micros
        self.absorbed_micros += recorded.absorbed_micros

    def flush_money(self) -> None:
        """Add the batch's billed and absorbed micros to their metrics."""
        if self.billed_micros:
            BILLED.inc(self.billed_micros)
        if self.absorbed_micros:
            ABSORBED_OVERSPEND.inc(self.absorbed_micros)
        self.billed_micros = self.absorbed_micros = 0

    def flush_outcomes(self) -> None:
        """Add the batch's events by type and outcome to :data:`AGGREGATED`, and its
        billing notices' by the ledger's outcome to ``adfunnel_rtb_notices_total``
        (``notice="bill"``: ``billed`` only where the ledger inserted the row)."""
        for (event_type, outcome), n in self.outcomes.items():
            AGGREGATED.labels(event_type, outcome).inc(n)
        self.outcomes.clear()
        for outcome, n in self.billing_notices.items():
            RTB_NOTICES.labels("bill", outcome).inc(n)
        self.billing_notices.clear()
