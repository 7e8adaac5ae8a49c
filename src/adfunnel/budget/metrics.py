"""The per-campaign budget series of Prometheus, read from a budget service at scrape time.

``adfunnel_pacing_p``, ``adfunnel_bid_multiplier`` (λ of automatic bidding, 1 for
manual bids), ``adfunnel_overdelivery_pct``, ``adfunnel_budget_state``,
``adfunnel_daily_spend_micros`` and ``adfunnel_daily_budget_micros``, per campaign:
:class:`CampaignSeries`, from the budget service's state at scrape
(:class:`~adfunnel.budget.snapshot.BudgetSnapshot`); the process-wide series are in
:mod:`adfunnel.observability.metrics`.

Per-campaign series are bounded: the ``top`` campaigns by today's billed spend keep
their own ``campaign`` label, every other campaign is folded into ``campaign="other"``
(spend, budget and state counts summed; overdelivery % of the folded totals; pacing p
and λ their mean), so a million campaigns are still a few hundred series. Overdelivery counts
committed spend (billed + the expected cost of serves not yet billed): what is past the
budget becomes absorbed overspend when it bills.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from adfunnel.budget.snapshot import STATE_NAMES, BudgetSnapshot

OTHER = "other"
#: Campaigns with their own per-campaign series unless a setting says otherwise.
METRICS_TOP_CAMPAIGNS = 20


#: Reads a budget service's state at a scrape (``BudgetServiceProcess.snapshot``).
SnapshotSource = Callable[[], BudgetSnapshot]


class CampaignSeries(Collector):
    """The per-campaign budget series, read from a budget service's
    ``snapshot()`` at each scrape (nothing is kept between scrapes, so a campaign
    that stops leaves no stale series). One instance is registered per process
    (:data:`CAMPAIGNS`); the budget service it reads is set with :meth:`follow`."""

    def __init__(self) -> None:
        self._source: SnapshotSource | None = None
        self.top = METRICS_TOP_CAMPAIGNS

    def follow(self, source: SnapshotSource | None, top: int = METRICS_TOP_CAMPAIGNS) -> None:
        """Read ``source()`` from now on (None: export no campaign series); the ``top``
        campaigns by today's billed spend get their own label."""
        self._source = source
        self.top = top

    def forget(self, source: SnapshotSource) -> None:
        """Stop reading ``source`` (a runtime closing) unless another replaced it."""
        if self._source == source:
            self._source = None

    def describe(self) -> Iterable[Any]:
        return self._families()

    def collect(self) -> Iterator[Any]:
        source = self._source
        yield from self._families(source() if source is not None else None)

    def _families(self, cols: BudgetSnapshot | None = None) -> list[GaugeMetricFamily]:
        fams = {
            "p": GaugeMetricFamily("adfunnel_pacing_p", "Pacing rate p of the campaign's "
                                   "current day (other: mean of the folded campaigns)",
                                   labels=["campaign"]),
            "lam": GaugeMetricFamily("adfunnel_bid_multiplier", "Bid multiplier λ of "
                                     "the campaign's current day: an automatic campaign "
                                     "bids pCTR × value ÷ λ (1: manual; other: mean of "
                                     "the folded campaigns)", labels=["campaign"]),
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
        if cols is not None and len(cols):
            # the top by spend, ties to the lower id (lexsort: the last key is the first)
            top = np.lexsort((cols.campaign_id, -cols.billed_micros))[: max(0, self.top)]
            for i in top.tolist():
                _add(fams, str(int(cols.campaign_id[i])), cols, np.array([i]))
            if len(cols) > len(top):
                rest = np.ones(len(cols), dtype=bool)
                rest[top] = False
                _add(fams, OTHER, cols, rest)
        return list(fams.values())


def _add(fams: dict[str, GaugeMetricFamily], label: str, cols: BudgetSnapshot,
         which: np.ndarray) -> None:
    """One series per family for the campaigns ``which`` selects (indexes or a mask),
    folded under ``label``: spend, budgets and state counts summed, overdelivery % of
    the folded totals, p their mean."""
    budget_each = cols.budget_micros[which]
    billed, budget = int(cols.billed_micros[which].sum()), int(budget_each.sum())
    over = int(np.maximum(0, cols.committed_micros[which] - budget_each).sum())
    counts = np.bincount(cols.state[which], minlength=len(STATE_NAMES))
    fams["p"].add_metric([label], float(cols.p[which].mean()))
    fams["lam"].add_metric([label], float(cols.multipliers()[which].mean()))
    fams["over"].add_metric([label], 100.0 * over / budget if budget else 0.0)
    fams["spend"].add_metric([label], billed)
    fams["budget"].add_metric([label], budget)
    # every state exported, so that a dashboard's query never meets a missing series
    for state, n in zip(STATE_NAMES, counts.tolist(), strict=True):
        fams["state"].add_metric([label, state], n)


CAMPAIGNS = CampaignSeries()
REGISTRY.register(CAMPAIGNS)
