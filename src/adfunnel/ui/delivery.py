"""A campaign's delivery status: one word a person reads first on the campaign list.

Pure: :func:`delivery_status` maps :class:`DeliveryFacts` — what the campaign record,
the budget service and the decision reasons say about the campaign's current local
day — to a :class:`DeliveryStatus`. Gathering the facts from a running server is
:mod:`adfunnel.ui.facts`' job.

The first rule that holds decides (a paused campaign is ``paused`` whatever its
spend)::

    completed             the campaign's lifetime budget is spent (status completed)
    ended                 status ended or archived, or its flight's last local day
                          has passed
    paused                status paused
    scheduled             its flight starts on a later local day
    no_approved_ads       no ad of it is approved and active: nothing can serve
    limited_by_budget     the budget service holds it back for budget today: its
                          state or pacing status is exhausted, or decisions refused it
                          for budget today (exhausted, or no budget slice granted)
    limited_by_targeting  its targeting (with dayparts) matched no ad request today
    capped                frequency caps refused at least half of the requests it matched
    limited_by_bid        it matched requests but won none, or the budget service's
                          controller is at p = 1 and it still spends below its target
                          (pacing status limited_by_bid_or_audience) — the latter
                          only for an auction line: a sponsorship is never paced (its
                          budget is a cap, not a target) and a guaranteed line is
                          served ahead of the auction, so neither is outbid
    delivering            otherwise

The rules that read "nothing today" (matched no request, won nothing) wait until the
local day is :data:`EARLY_S` old: a few minutes after midnight no campaign has matched
or won anything yet (a guaranteed line read "limited by targeting" at 00:05).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DeliveryStatus(StrEnum):
    DELIVERING = "delivering"
    LIMITED_BY_BUDGET = "limited_by_budget"
    LIMITED_BY_BID = "limited_by_bid"
    LIMITED_BY_TARGETING = "limited_by_targeting"
    CAPPED = "capped"
    PAUSED = "paused"
    ENDED = "ended"
    COMPLETED = "completed"
    SCHEDULED = "scheduled"
    NO_APPROVED_ADS = "no_approved_ads"

    @property
    def label(self) -> str:
        """The status as a person reads it (``limited by budget``)."""
        return self.value.replace("_", " ")


#: Share of a campaign's matched requests refused by its frequency caps from which it
#: is ``capped`` rather than limited by its bid.
CAPPED_SHARE = 0.5
#: Seconds into the local day before "nothing today" says anything (module docstring).
EARLY_S = 3_600.0

#: Budget service states and pacing statuses that mean "held back for budget".
_BUDGET_STATES = frozenset({"exhausted"})
#: (the service's own ``limited_by_budget`` pacing status means only "metered": slices
#: are granted one by one, as at every campaign's start, so it is not one of them)
_BUDGET_PACING = frozenset({"exhausted"})
_BID_PACING = "limited_by_bid_or_audience"


@dataclass(frozen=True, slots=True)
class DeliveryFacts:
    """What is known about one campaign on its current local day.

    ``campaign_status``: the record's status (``active``, ``paused``, ``ended``,
    ``completed``, ``archived``). ``flight_over`` / ``flight_not_started``: today
    (local) is after the flight's end / before its start. ``servable_ads``: approved and active ads.
    ``budget_state`` (``open``, ``metered``, ``exhausted``, ``stopped``) and
    ``pacing_status`` (:class:`adfunnel.budget.rows.PacingStatus` values) come from
    the budget service, None where it holds no row for the day. ``budget_refusals``:
    decisions today that refused the campaign for budget. ``matched_requests``: ad
    requests today in which it passed targeting, flight and daypart (the eligible
    traffic the pacing curves learn from; None where the server does not count it, and
    then neither targeting nor caps decide). ``capped_requests``: of those, how many
    frequency caps refused. ``served_micros``: expected spend of the serves it won
    today (the budget service's count, ahead of billing); ``billed_micros``: billed
    spend today (the ledger). ``priority``: the line's ``auction``, ``guaranteed`` or
    ``sponsorship``.
    """

    campaign_status: str
    flight_over: bool = False
    flight_not_started: bool = False
    servable_ads: int = 1
    budget_state: str | None = None
    pacing_status: str | None = None
    budget_refusals: int = 0
    matched_requests: int | None = 0
    capped_requests: int = 0
    served_micros: int = 0
    billed_micros: int = 0
    priority: str = "auction"
    #: seconds since the campaign's local midnight (its today's counts' window)
    day_elapsed_s: float = 86_400.0


def delivery_status(f: DeliveryFacts) -> DeliveryStatus:
    """The delivery status of a campaign from its facts (rules in the module docstring)."""
    for rule in _RULES:
        status = rule(f)
        if status is not None:
            return status
    return DeliveryStatus.DELIVERING


def _lifecycle(f: DeliveryFacts) -> DeliveryStatus | None:
    if f.campaign_status == "completed":
        return DeliveryStatus.COMPLETED
    if f.campaign_status in ("ended", "archived") or f.flight_over:
        return DeliveryStatus.ENDED
    if f.campaign_status == "paused":
        return DeliveryStatus.PAUSED
    if f.flight_not_started:
        return DeliveryStatus.SCHEDULED
    if f.servable_ads <= 0:
        return DeliveryStatus.NO_APPROVED_ADS
    return None


def _budget(f: DeliveryFacts) -> DeliveryStatus | None:
    held = (f.budget_state in _BUDGET_STATES or f.pacing_status in _BUDGET_PACING
            or f.budget_refusals > 0)
    return DeliveryStatus.LIMITED_BY_BUDGET if held else None


def _audience(f: DeliveryFacts) -> DeliveryStatus | None:
    if f.matched_requests is None:
        return None
    if f.matched_requests <= 0:
        return DeliveryStatus.LIMITED_BY_TARGETING if f.day_elapsed_s >= EARLY_S else None
    if f.capped_requests >= CAPPED_SHARE * f.matched_requests:
        return DeliveryStatus.CAPPED
    return None


def _bid(f: DeliveryFacts) -> DeliveryStatus | None:
    won_nothing = f.served_micros <= 0 and f.billed_micros <= 0 and f.day_elapsed_s >= EARLY_S
    if won_nothing or (f.pacing_status == _BID_PACING and f.priority == "auction"):
        return DeliveryStatus.LIMITED_BY_BID
    return None


_RULES = (_lifecycle, _budget, _audience, _bid)
