"""Prometheus metrics with the design's names (issue 12 §4), under the ``adfunnel_``
namespace: the process-wide series.

Where each series comes from:

- ``adfunnel_decisions_total{outcome}``, ``adfunnel_deadline_miss_rate``: the select
  handler (``serving/http.py``); outcomes filled, no_fill, shed, late, not_ready; the
  miss rate is (late + shed) over the last 1,000 ad requests;
- ``adfunnel_fill_rate``: ad requests answered with an ad / ad requests answered since
  the process started (:func:`watch_fill`, read at scrape);
- ``adfunnel_absorbed_overspend_micros_total``, ``adfunnel_billed_micros_total``: the
  aggregator, per newly billed ledger row;
- ``adfunnel_change_feed_lag_seconds``: how far behind the change log the catalogue may
  be (:func:`watch_change_feed`, read at scrape).

The per-campaign budget series (``adfunnel_pacing_p`` and friends) live with the budget
room: :mod:`adfunnel.budget.metrics`.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge

ABSORBED_OVERSPEND = Counter(
    "adfunnel_absorbed_overspend_micros", "Micros made due past a campaign's budget and "
    "never billed (absorbed overspend), by the aggregator of this process")
BILLED = Counter("adfunnel_billed_micros", "Micros billed into the ledger by the aggregator "
                 "of this process")
FILL_RATE = Gauge("adfunnel_fill_rate", "fill rate: ad requests answered with an ad / ad "
                  "requests, since this process started (0 before the first)")
#: OpenRTB notices by notice and outcome: the tracker's notice desk counts each notice it
#: answers (``appended``, ``recorded``, ``refused_<reason>``, …); the aggregator counts a
#: billing notice's impression by what the ledger did with it (``billed``: inserted,
#: ``duplicate``: a replay it already holds, …)
RTB_NOTICES = Counter("adfunnel_rtb_notices", "OpenRTB notices by notice and outcome",
                      ["notice", "outcome"])
CHANGE_FEED_LAG = Gauge(
    "adfunnel_change_feed_lag_seconds", "How far the catalogue may be behind the change "
    "log: the larger of the last record's commit-to-apply lag and the time since the feed "
    "last reached the head")


def watch_fill(rate: Callable[[], float]) -> None:
    """``adfunnel_fill_rate`` reads ``rate()`` at each scrape (the latest caller wins:
    one serving plane per process)."""
    FILL_RATE.set_function(rate)


def watch_change_feed(lag_s: Callable[[], float]) -> None:
    """``adfunnel_change_feed_lag_seconds`` reads ``lag_s()`` at each scrape."""
    CHANGE_FEED_LAG.set_function(lag_s)
