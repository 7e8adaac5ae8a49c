"""Prometheus metrics with the design's names (issue 12 §4), under the ``adfunnel_``
namespace, and the per-campaign budget series read at scrape time.

Where each series comes from:

- ``adfunnel_decisions_total{outcome}``, ``adfunnel_deadline_miss_rate``: the select
  handler (``serving/http.py``); outcomes filled, no_fill, shed, late, not_ready; the
  miss rate is (late + shed) over the last 1,000 ad requests;
- ``adfunnel_fill_rate``: ad requests answered with an ad / ad requests answered since
  the process started (:func:`watch_fill`, read at scrape);
- ``adfunnel_absorbed_overspend_micros_total``, ``adfunnel_billed_micros_total``: the
  aggregator, per newly billed ledger row;
- ``adfunnel_change_feed_lag_seconds``: how far behind the change log the catalogue may
  be (:func:`watch_change_feed`, read at scrape);
- per campaign, ``adfunnel_pacing_p``, ``adfunnel_overdelivery_pct``,
  ``adfunnel_budget_state``, ``adfunnel_daily_spend_micros`` and
  ``adfunnel_daily_budget_micros``: :class:`CampaignSeries`, from the budget service's
  state at scrape.

Per-campaign series are bounded: the ``top`` campaigns by today's billed spend keep
their own ``campaign`` label, every other campaign is folded into ``campaign="other"``
(spend, budget and state counts summed; overdelivery % of the folded totals; pacing p
their mean), so a million campaigns are still a few hundred series. Overdelivery counts
committed spend (billed + the expected cost of serves not yet billed): what is past the
budget becomes absorbed overspend when it bills.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

ABSORBED_OVERSPEND = Counter(
    "adfunnel_absorbed_overspend_micros", "Micros made due past a campaign's budget and "
    "never billed (absorbed overspend), by the aggregator of this process")
BILLED = Counter("adfunnel_billed_micros", "Micros billed into the ledger by the aggregator "
                 "of this process")
FILL_RATE = Gauge("adfunnel_fill_rate", "fill rate: ad requests answered with an ad / ad "
                  "requests, since this process started (0 before the first)")
CHANGE_FEED_LAG = Gauge(
    "adfunnel_change_feed_lag_seconds", "How far the catalogue may be behind the change "
    "log: the larger of the last record's commit-to-apply lag and the time since the feed "
    "last reached the head")

#: Budget states of a campaign-day (``budget/slices.py`` BudgetState), every one exported
#: so that a dashboard's query never meets a missing series.
BUDGET_STATES = ("open", "metered", "exhausted", "stopped")
OTHER = "other"
#: Campaigns with their own per-campaign series unless a setting says otherwise.
METRICS_TOP_CAMPAIGNS = 20


def watch_fill(rate: Callable[[], float]) -> None:
    """``adfunnel_fill_rate`` reads ``rate()`` at each scrape (the latest caller wins:
    one serving plane per process)."""
    FILL_RATE.set_function(rate)


def watch_change_feed(lag_s: Callable[[], float]) -> None:
    """``adfunnel_change_feed_lag_seconds`` reads ``lag_s()`` at each scrape."""
    CHANGE_FEED_LAG.set_function(lag_s)


#: One campaign's budget state, as ``BudgetServiceProcess.status()`` lists it:
#: ``campaign_id``, ``state``, ``p``, ``budget_micros``, ``billed_micros``,
#: ``committed_micros``.
Status = dict[str, Any]


class CampaignSeries(Collector):
    """The per-campaign budget series, read from a budget service's ``status()`` at each
    scrape (nothing is kept between scrapes, so a campaign that stops leaves no stale
    series). One instance is registered per process (:data:`CAMPAIGNS`); the budget
    service it reads is set with :meth:`follow`."""

    def __init__(self) -> None:
        self._status: Callable[[], list[Status]] | None = None
        self.top = METRICS_TOP_CAMPAIGNS

    def follow(self, status: Callable[[], list[Status]] | None,
               top: int = METRICS_TOP_CAMPAIGNS) -> None:
        """Read ``status()`` from now on (None: export no campaign series); the ``top``
        campaigns by today's billed spend get their own label."""
        self._status = status
        self.top = top

    def forget(self, status: Callable[[], list[Status]]) -> None:
        """Stop reading ``status`` (a runtime closing) unless another replaced it."""
        if self._status == status:
            self._status = None

    def describe(self) -> Iterable[Any]:
        return self._families()

    def collect(self) -> Iterator[Any]:
        status = self._status
        yield from self._families(status() if status is not None else [])

    def _families(self, rows: list[Status] | None = None) -> list[GaugeMetricFamily]:
        fams = {
            "p": GaugeMetricFamily("adfunnel_pacing_p", "Pacing rate p of the campaign's "
                                   "current day (other: mean of the folded campaigns)",
                                   labels=["campaign"]),
            "over": GaugeMetricFamily("adfunnel_overdelivery_pct", "overdelivery %: "
                                      "committed spend (billed + served, not yet billed) "
                                      "past the daily budget / daily budget × 100",
                                      labels=["campaign"]),
            "state": GaugeMetricFamily("adfunnel_budget_state", "1 for the campaign's "
                                       "budget state (other: campaigns in each state)",
                                       labels=["campaign", "state"]),
            "spend": GaugeMetricFamily("adfunnel_daily_spend_micros", "Billed today, "
                                       "micros (the campaign's local day)",
                                       labels=["campaign"]),
            "budget": GaugeMetricFamily("adfunnel_daily_budget_micros", "Daily budget, "
                                        "micros", labels=["campaign"]),
        }
        if rows:
            # the top by spend (ties: the lower id) in one pass, not a sort of them all
            top = heapq.nsmallest(self.top, rows,
                                  key=lambda r: (-int(r["billed_micros"]), r["campaign_id"]))
            for row in top:
                _add(fams, str(row["campaign_id"]), [row])
            if len(rows) > len(top):
                chosen = {id(r) for r in top}
                _add(fams, OTHER, [r for r in rows if id(r) not in chosen])
        return list(fams.values())


def _add(fams: dict[str, GaugeMetricFamily], label: str, rows: list[Status]) -> None:
    """One series per family for ``rows`` folded under ``label`` (one pass over them)."""
    billed = budget = over = 0
    p_sum = 0.0
    states = dict.fromkeys(BUDGET_STATES, 0)
    for r in rows:
        b, d = int(r["billed_micros"]), int(r["budget_micros"])
        billed += b
        budget += d
        over += max(0, int(r["committed_micros"]) - d)
        p_sum += float(r["p"])
        states[str(r["state"])] = states.get(str(r["state"]), 0) + 1
    fams["p"].add_metric([label], p_sum / len(rows))
    fams["over"].add_metric([label], 100.0 * over / budget if budget else 0.0)
    fams["spend"].add_metric([label], billed)
    fams["budget"].add_metric([label], budget)
    for state, n in states.items():
        fams["state"].add_metric([label, state], n)


CAMPAIGNS = CampaignSeries()
REGISTRY.register(CAMPAIGNS)
