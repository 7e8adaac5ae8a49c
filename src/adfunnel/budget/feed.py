"""The billed-spend feed: ledger totals → ``BilledUpdate`` s for the budget service.

One feeder for production (``adfunnel.budget.process``) and the day simulation
(``adfunnel.sim.day``): both read a :class:`~adfunnel.billing.ledger.Ledger`.

Billing windows (DESIGN.md §Events and billing): the expected cost of a serve stays in
the service's committed spend until its billable event is billed or can no longer
bill. An impression bills within the token's life, a click too (it needs the same
token), a conversion within the attribution window. So each update's watermark
``complete_before`` is ``now − window`` for the campaign's billing type: every serve
before it either billed or never will, and its estimate is replaced by the ledger. The
billed spend of serves after the watermark (``billed_after_micros``, by serve time)
is netted against their estimates, so a billed click is not also counted as expected.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, timedelta

from adfunnel.billing.ledger import Ledger
from adfunnel.budget.protocol import BilledUpdate
from adfunnel.campaigns.model import BidType, Campaign
from adfunnel.campaigns.schedule import local_day

#: Default token life (seconds): the impression and click billing window.
TOKEN_TTL_S = 3600.0
#: Conversion attribution window (seconds), DESIGN.md §Events and billing.
CONVERSION_WINDOW_S = 7 * 86_400.0


def billing_window_s(campaign: Campaign, token_ttl_s: float = TOKEN_TTL_S,
                     conversion_window_s: float = CONVERSION_WINDOW_S) -> float:
    """Seconds after a serve during which its billable event may still bill."""
    if campaign.bid_type is BidType.CPA:
        return conversion_window_s
    return token_ttl_s


class BilledFeeder:
    """Builds the billed updates of a set of campaigns from a ledger.

    Args:
        ledger: the billing ledger (any implementation).
        token_ttl_s: the tracking token's life in seconds (the impression/click window).
        conversion_window_s: the conversion attribution window in seconds.
    """

    def __init__(self, ledger: Ledger, *, token_ttl_s: float = TOKEN_TTL_S,
                 conversion_window_s: float = CONVERSION_WINDOW_S) -> None:
        self.ledger = ledger
        self.token_ttl_s = token_ttl_s
        self.conversion_window_s = conversion_window_s

    def updates(self, campaigns: Iterable[Campaign], now: datetime) -> list[BilledUpdate]:
        """One update per campaign for its current local day (cumulative, idempotent);
        under a lifetime budget it carries what the campaign billed on earlier days."""
        camps = list(campaigns)
        billed: dict[date, dict[int, int]] = {}
        after: dict[tuple[date, float], dict[int, int]] = {}
        lifetime = (self.ledger.lifetime_billed(camps[0].id if len(camps) == 1 else None)
                    if any(c.lifetime_budget_micros is not None for c in camps) else {})
        out = []
        for c in camps:
            day = local_day(now, c.time_zone)
            window = billing_window_s(c, self.token_ttl_s, self.conversion_window_s)
            watermark = now - timedelta(seconds=window)
            if day not in billed:
                billed[day] = self.ledger.billed_on(day)
            if (day, window) not in after:
                after[(day, window)] = self.ledger.billed_since(day, watermark)
            today = billed[day].get(c.id, 0)
            out.append(BilledUpdate(c.id, day.isoformat(), today, watermark.timestamp(),
                                    after[(day, window)].get(c.id, 0),
                                    lifetime_billed_before_micros=max(
                                        0, lifetime.get(c.id, 0) - today)))
        return out
