"""The billed-spend feed: ledger totals → ``BilledUpdate`` s for the budget service.

One feeder for production (``adfunnel.budget.process``) and the day simulation
(``adfunnel.sim.day``): both read a ledger through
:class:`~adfunnel.budget.billed.BilledTotals`.

Billing windows (DESIGN.md §Events and billing): the expected cost of a serve stays in
the service's committed spend until its billable event is billed or can no longer
bill. An impression bills within the token's life, a click too (it needs the same
token), a conversion within the attribution window. So each update's watermark
``complete_before`` is ``now − window`` for the campaign's billing type: every serve
before it either billed or never will, and its estimate is replaced by the ledger. A
serve after the watermark whose billable event is in the ledger is settled: its own
expected cost (carried by the token into the ledger row) comes out of the in-flight
estimate (``settled_after_micros``, by serve time), so a billed click is not also
counted as expected, and the estimate of a serve still waiting for its event stays.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, timedelta

import numpy as np

from adfunnel.budget.billed import BilledTotals
from adfunnel.budget.columns import BID_TYPES, OwnedCampaigns
from adfunnel.budget.protocol import BilledColumns, BilledUpdate
from adfunnel.campaigns.model import BidType, BudgetPeriod, Campaign
from adfunnel.campaigns.schedule import local_day

#: Default token life (seconds): the impression and click billing window.
TOKEN_TTL_S = 3600.0
#: Conversion attribution window (seconds), DESIGN.md §Events and billing.
CONVERSION_WINDOW_S = 7 * 86_400.0


def billing_window_s(campaign: Campaign, token_ttl_s: float = TOKEN_TTL_S,
                     conversion_window_s: float = CONVERSION_WINDOW_S,
                     click_window_s: float | None = None) -> float:
    """Seconds after a serve during which its billable event may still bill: the
    token's life for an impression, the click window (at most the token's life) for a
    click, the attribution window for a conversion."""
    if campaign.bid_type is BidType.CPA:
        return conversion_window_s
    if campaign.bid_type is BidType.CPC and click_window_s is not None:
        return min(click_window_s, token_ttl_s)
    return token_ttl_s


class BilledFeeder:
    """Builds the billed updates of a set of campaigns from a ledger.

    Args:
        ledger: the billing ledger (any implementation: its billed totals).
        token_ttl_s: the tracking token's life in seconds (the impression/click window).
        conversion_window_s: the conversion attribution window in seconds.
        click_window_s: seconds after a serve in which its click can bill, where the
            deployment knows it is shorter than the token's life (None: the token's
            life; a click needs a valid token).
    """

    def __init__(self, ledger: BilledTotals, *, token_ttl_s: float = TOKEN_TTL_S,
                 conversion_window_s: float = CONVERSION_WINDOW_S,
                 click_window_s: float | None = None) -> None:
        self.ledger = ledger
        self.token_ttl_s = token_ttl_s
        self.conversion_window_s = conversion_window_s
        self.click_window_s = click_window_s

    def updates(self, campaigns: Iterable[Campaign], now: datetime) -> list[BilledUpdate]:
        """One update per campaign for its current local day (cumulative, idempotent);
        under a lifetime budget it carries what the campaign billed on earlier days."""
        camps = list(campaigns)
        billed: dict[date, dict[int, int]] = {}
        after: dict[tuple[date, float], dict[int, int]] = {}
        # a flight's spend before today is its lifetime's (adfunnel.budget.periods)
        lifetime = (self.ledger.lifetime_billed(camps[0].id if len(camps) == 1 else None)
                    if any(c.lifetime_budget_micros is not None
                           or c.budget_period is not BudgetPeriod.DAY for c in camps) else {})
        out = []
        for c in camps:
            day = local_day(now, c.time_zone)
            window = billing_window_s(c, self.token_ttl_s, self.conversion_window_s,
                                      self.click_window_s)
            watermark = now - timedelta(seconds=window)
            if day not in billed:
                billed[day] = self.ledger.billed_on(day)
            if (day, window) not in after:
                after[(day, window)] = self.ledger.settled_since(day, watermark)
            today = billed[day].get(c.id, 0)
            out.append(BilledUpdate(c.id, day.isoformat(), today, watermark.timestamp(),
                                    after[(day, window)].get(c.id, 0),
                                    lifetime_billed_before_micros=max(
                                        0, lifetime.get(c.id, 0) - today)))
        return out

    def window_s(self, bid_type: BidType) -> float:
        """The billing window (seconds) of a campaign of ``bid_type`` here."""
        if bid_type is BidType.CPA:
            return self.conversion_window_s
        if bid_type is BidType.CPC and self.click_window_s is not None:
            return min(self.click_window_s, self.token_ttl_s)
        return self.token_ttl_s

    def columns(self, owned: OwnedCampaigns, now: datetime) -> BilledColumns:
        """:meth:`updates` of every campaign of ``owned`` at once, as columns: per local
        day one ``billed_on`` and per (day, window) one ``settled_since`` query, and
        ``lifetime_billed`` once when any campaign has a lifetime budget."""
        n = len(owned)
        zones, inv = np.unique(owned.tz, return_inverse=True)
        days = np.array([local_day(now, owned.zones[int(z)]).toordinal() for z in zones],
                        dtype=np.int64)[inv] if n else np.zeros(0, dtype=np.int64)
        by_code = [self.window_s(b) for b in BID_TYPES]
        marks = np.array([(now - timedelta(seconds=w)).timestamp() for w in by_code])
        windows = np.array(by_code)[owned.bid]
        billed = np.zeros(n, dtype=np.int64)
        settled = np.zeros(n, dtype=np.int64)
        for d in np.unique(days).tolist():
            on_day = days == d
            day = date.fromordinal(d)
            _scatter(owned, self.ledger.billed_on(day), billed, on_day)
            for w in np.unique(windows[on_day]).tolist():
                since = now - timedelta(seconds=w)
                _scatter(owned, self.ledger.settled_since(day, since), settled,
                         on_day & (windows == w))
        lifetime = np.zeros(n, dtype=np.int64)
        if owned.lifetime.any():
            _scatter(owned, self.ledger.lifetime_billed(None), lifetime, np.ones(n, dtype=bool))
        return BilledColumns(owned.ids, days, billed, marks[owned.bid], settled,
                             np.maximum(0, lifetime - billed))


def _scatter(owned: OwnedCampaigns, values: dict[int, int], out: np.ndarray,
             mask: np.ndarray) -> None:
    """``out[i] = values[ids[i]]`` where ``mask[i]`` and the id is in ``values``."""
    if not values:
        return
    keys = np.fromiter(values.keys(), dtype=np.int64, count=len(values))
    vals = np.fromiter(values.values(), dtype=np.int64, count=len(values))
    pos = owned.positions(keys)
    ok = pos >= 0
    ok[ok] = mask[pos[ok]]
    out[pos[ok]] = vals[ok]
