"""Messages between ad servers, the billing aggregator and the budget & pacing service.

DESIGN.md §Money and budgets: each ad server reports, once a second, the expected
spend it recorded per campaign since its last report, idempotent by sequence number;
the reply carries pacing probabilities, budget states and slices. Billing sends billed
spend per campaign and day at least every 10 s.

Directives are sent as changes (catalogue scale: a shard may hold 10⁶ campaigns). The
service numbers every change of a campaign-day's published (state, p) with a
version; a reply carries its ``version`` and a server names the highest version it has
applied in its next report (``Report.directives_version``). The reply then carries
only the current campaign-days changed since that version, plus those of every
campaign the report wants a slice for or reports spend on. Everything (every
campaign-day of the shard on its local day) goes on first contact
(``directives_version`` -1), when the report names another epoch (a restarted or new
instance: every server is told every state again) and when the server's version is no
longer in the service's change log (it was silent for a minute). A campaign-day a
server has no directive for is metered to it: it asks (``wants``), and the reply
then carries its state. A server applies a reply older than one it has applied
(lower ``version``, same epoch; replies may arrive out of order) only for
campaign-days it knows nothing of.

Plain msgspec structs, so the same values travel in memory (embedded mode, the day
simulation) and as JSON (``adfunnel.budget.http``). Money is integer micros; times
are Unix seconds (float); days are ISO ``YYYY-MM-DD`` local dates of the campaign.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np


class CampaignSpend(msgspec.Struct, frozen=True):
    """One campaign-day's spend recorded by one server in one report period.

    ``open_micros``: expected cost served while the campaign was open.
    ``sliced_micros``: expected cost served from slices (metered).
    ``demand_micros``: worst-case charges of every admit attempt (served or refused for
    want of a slice): the server's demand, which sizes its slices.
    ``charges``: number of serves.
    """

    campaign_id: int
    day: str
    open_micros: int = 0
    sliced_micros: int = 0
    demand_micros: int = 0
    charges: int = 0


class SliceUse(msgspec.Struct, frozen=True):
    """A slice the server will not use any more (expired or released): what it took
    from it (``used_micros``) and when it was last used."""

    slice_id: str
    used_micros: int
    closed_at: float


class ReportEntry(msgspec.Struct, frozen=True):
    """One second's report; ``seq`` increases by one per entry for a (server, shard).

    ``resent``: spend already acknowledged by an earlier service instance, sent again to
    a new one (restart, standby takeover) so it counts as in flight until billing covers
    it; it does not count as this period's spend rate.
    """

    seq: int
    period_end: float
    spend: list[CampaignSpend] = []
    closed_slices: list[SliceUse] = []
    resent: bool = False


class Report(msgspec.Struct, frozen=True):
    """What a server sends to one shard: every entry not yet acknowledged (oldest first),
    and the campaigns it wants a slice for."""

    server_id: str
    shard: int
    sent_at: float
    entries: list[ReportEntry] = []
    wants: list[int] = []
    #: the service instance this server has synchronised with (``Reply.epoch``): a
    #: server that reports a new epoch has re-sent its in-flight spend to it
    epoch: str = ""
    #: the highest ``Reply.version`` of that epoch whose directives this server has
    #: applied; -1: none (the reply carries every directive)
    directives_version: int = -1


class Directive(msgspec.Struct, frozen=True):
    """Budget state (``adfunnel.budget.slices.BudgetState`` value) and participation
    probability of one campaign on its local ``day`` (ISO date): budget state is kept
    per campaign and local day, so yesterday's "exhausted" never stops today.

    ``lam``: the bid multiplier λ ≥ 1 of an automatic campaign (bid = pCTR × v ÷ λ,
    :mod:`adfunnel.budget.multipliers`); 1 for every other. Its default keeps the
    messages of servers and services from before λ decoding (a missing ``lam`` is 1).
    A change of λ alone is published when it moved by more than 1 %
    (``LAM_PUBLISH_SHARE``).

    ``campaign_version``: the version of the campaign record the service held when it
    sent this (-1: unknown, a service from before it was sent). An ad server that has
    applied a budget cut of a later version takes nothing from it: the state was
    decided under the old budget (:meth:`adfunnel.budget.client.BudgetClient.campaign_changed`)."""

    campaign_id: int
    state: str
    p: float
    day: str = ""
    lam: float = 1.0
    campaign_version: int = -1


class SliceGrant(msgspec.Struct, frozen=True):
    """A lease of ``amount_micros`` for one server and campaign-day, valid until
    ``expires_at`` (service time). A serve needs room for its worst-case charge and
    takes its expected cost from the slice, or its worst-case charge when
    ``worst_case`` (the last few charges of a budget). ``campaign_version``: as
    :class:`Directive`'s (a slice sized under a budget since cut is released unused)."""

    slice_id: str
    campaign_id: int
    day: str
    amount_micros: int
    expires_at: float
    worst_case: bool = False
    campaign_version: int = -1


class Reply(msgspec.Struct, frozen=True):
    """The service's answer to a report: every entry with ``seq <= acked_through`` is
    applied (or was already), directives (the changes since the report's
    ``directives_version``, see the module docstring), new slices."""

    shard: int
    at: float
    acked_through: int
    directives: list[Directive] = []
    grants: list[SliceGrant] = []
    #: this service instance (random per start): a change tells servers to re-send
    epoch: str = ""
    #: the service's directive version when this reply was made (a server sends it
    #: back as ``Report.directives_version``); -1: an answer outside the report
    #: sequence (one campaign's ask, in process) that moves no version
    version: int = 0


class BilledUpdate(msgspec.Struct, frozen=True):
    """Billed spend of one campaign-day from the ledger.

    ``billed_micros``: cumulative billed on the day (monotone; replaces estimates).
    ``complete_before``: serve time (Unix s) before which every serve of the campaign
    has billed its event or can no longer (now − its billing window,
    ``adfunnel.budget.feed``); their estimates are replaced by ``billed_micros``.
    ``settled_after_micros``: the expected cost of the serves at or after
    ``complete_before`` whose billable event is already in the ledger (each its own
    estimate, carried by the token). The service takes it out of its in-flight
    estimate, so a billed click is not also counted as expected, while a serve still
    waiting for its click stays counted. 0 = none known (estimates stay in full).
    ``lifetime_billed_before_micros``: billed on the campaign's earlier days (ledger
    lifetime total − ``billed_micros``); under a lifetime budget the day's budget is
    min(daily, lifetime − this) (``adfunnel.budget.gate.effective_daily_budget``).
    """

    campaign_id: int
    day: str
    billed_micros: int
    complete_before: float
    settled_after_micros: int = 0
    lifetime_billed_before_micros: int = 0


@dataclass(frozen=True, slots=True)
class BilledColumns:
    """:class:`BilledUpdate` s of many campaign-days as numpy columns of one length (the
    billed feed in bulk, in process only: start-up and every few seconds). ``days``
    are local dates as ordinals (``date.toordinal``); money int64 micros; times Unix s."""

    campaign_ids: np.ndarray
    days: np.ndarray
    billed_micros: np.ndarray
    complete_before: np.ndarray
    settled_after_micros: np.ndarray
    lifetime_billed_before_micros: np.ndarray

    def __len__(self) -> int:
        return len(self.campaign_ids)
