"""The budget & pacing service: committed spend, budget states, slices and pacing.

One instance is one shard (campaigns with ``campaign_id % shards == shard``); the
embedded default runs one in-process. DESIGN.md §Money and budgets:

- committed spend = billed (ledger, replaces estimates as the watermark moves)
  + expected cost served and not yet billed + slices outstanding; a serve whose event
  billed leaves the in-flight estimate by its own expected cost
  (``BilledUpdate.settled_after_micros``), never below 0;
- open / metered / exhausted by ``adfunnel.budget.slices``;
- every ``control_interval_s`` the PI controller (``adfunnel.pacing.controller``)
  sets p per campaign against its target plan (``adfunnel.pacing.curve``).

Reports are idempotent by ``(server_id, seq)``: a duplicate entry is acknowledged and
ignored, an out-of-order one is applied once; a re-sent message gets the reply it had.
Time comes from the injected clock only. Not thread-safe by itself: the HTTP layer
serialises calls with a lock.

Cold start, restart and takeover (DESIGN.md: "a restarted or new budget shard grants
nothing for a campaign-day before it has read that day's billed spend"): an instance
has a random ``epoch``. It grants no slice for a campaign-day, and holds it metered,
until (1) billed spend of that day has been read from the ledger (a ``BilledUpdate``)
and (2) it is warm: every server that reported to it in the last ``SERVER_STALE_S``
has reported once more naming this epoch — by then it has re-sent the spend the
previous instance acknowledged (``ReportEntry.resent``) and dropped that instance's
slices — and ``warmup_s`` has passed since start (servers report once a second, so
each live server has been heard), or every one of ``expected_servers`` has synced.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from enum import StrEnum

from adfunnel.budget.gate import effective_daily_budget
from adfunnel.budget.protocol import (
    BilledUpdate,
    CampaignSpend,
    Directive,
    Reply,
    Report,
    SliceGrant,
    SliceUse,
)
from adfunnel.budget.slices import (
    SLICE_TTL_S,
    BudgetState,
    budget_state,
    grantable,
    open_threshold,
    slice_size,
    worst_case_regime,
)
from adfunnel.campaigns.model import BidType, Campaign, CampaignStatus, PacingMode
from adfunnel.campaigns.schedule import day_bounds, local_day
from adfunnel.clock import Clock
from adfunnel.money import impression_charge_bound
from adfunnel.pacing import controller
from adfunnel.pacing.curve import TargetCurve, TargetPlan, curve_for_day

#: Seen sequence numbers kept per (server, shard); older ones count as seen.
SEQ_WINDOW = 4096
#: Charges ahead of its curve a campaign must be before its p may be lowered.
HOLD_BAND_CHARGES = 3
#: Seconds after start before a fleet shard may grant (three report periods).
WARMUP_S = 3.0
#: A server silent this long no longer holds a new instance's warm-up back (seconds).
SERVER_STALE_S = 10.0


class PacingStatus(StrEnum):
    PACING = "pacing"
    LIMITED_BY_BUDGET = "limited_by_budget"
    LIMITED_BY_BID_OR_AUDIENCE = "limited_by_bid_or_audience"
    EXHAUSTED = "exhausted"
    STOPPED = "stopped"
    #: a (re)started instance that has not yet read the day's billed spend or heard
    #: every server: metered, no grants
    COLD = "cold"


def charge_micros(campaign: Campaign) -> int:
    """The largest single charge of a campaign, micros: one impression of a CPM bid,
    one click (CPC) or conversion (CPA) at the bid."""
    if campaign.bid_type is BidType.CPM:
        return max(1, impression_charge_bound(campaign.bid_micros))
    return max(1, campaign.bid_micros)


def day_budget(cd: CampaignDay) -> int:
    """The campaign-day's budget, micros: min(daily, lifetime − billed on earlier days)."""
    c = cd.campaign
    return effective_daily_budget(c.daily_budget_micros, c.lifetime_budget_micros,
                                  cd.lifetime_billed_before)


def hold_band(spent_since_plan_micros: int, charge: int, budget_micros: int) -> float:
    """How far ahead of its curve a campaign must be before its p may be lowered: the
    noise of its billed spend (3 σ, σ ≈ √(spend × charge) for spend made of charges up
    to ``charge``), at least ``HOLD_BAND_CHARGES`` charges, at most 1 % of the budget."""
    sigma3 = 3.0 * math.sqrt(max(0, spent_since_plan_micros) * max(1, charge))
    return max(HOLD_BAND_CHARGES * charge, min(sigma3, 0.01 * budget_micros))


@dataclass(slots=True)
class _Slice:
    server_id: str
    amount: int
    expires_at: float
    used: int | None = None  # set when the server closes it
    closed_at: float = 0.0
    provisional: bool = False  # expired here before the server closed it: worst case


@dataclass(slots=True)
class CampaignDay:
    """Everything the service holds for one campaign on one local day (rebuildable from
    the ledger and the next reports)."""

    campaign: Campaign
    day: date
    start_s: float
    end_s: float
    plan: TargetPlan
    ctl: controller.ControllerState
    billed: int = 0
    settled_after: int = 0  # expected cost of serves after the watermark already billed
    lifetime_billed_before: int = 0  # billed on earlier days (lifetime budgets)
    watermark: float = 0.0
    buckets: deque[tuple[float, int]] = field(default_factory=deque)
    bucket_sum: int = 0
    slices: dict[str, _Slice] = field(default_factory=dict)
    step_spend: int = 0
    step_charges: int = 0
    served_total: int = 0
    rate_ewma: float = 0.0
    peak_rate: float = 0.0
    server_rates: dict[str, float] = field(default_factory=dict)
    last_step_s: float = 0.0
    state: BudgetState = BudgetState.OPEN
    status: PacingStatus = PacingStatus.PACING
    p_by_minute: dict[int, float] = field(default_factory=dict)
    exhausted_at: float | None = None
    plan_peak_rate: float = 0.0
    last_committed: int = -1
    rate_measured: bool = False  # a control step has seen this day's serves

    # -- spend accounting -------------------------------------------------------------
    def in_flight(self) -> int:
        """Expected open spend not yet covered by billing + closed/expired slices' use
        (worst case for expired ones) not yet covered, less the expected cost of those
        serves whose event already billed, micros (≥ 0)."""
        total = self.bucket_sum
        for s in self.slices.values():
            if s.used is not None:
                total += s.used
        return max(0, total - self.settled_after)

    def spent(self) -> int:
        """Billed + in flight, leases excluded: the spend the controller follows."""
        return self.billed + self.in_flight()

    def outstanding(self, now: float) -> int:
        """Amount of live (open, unexpired) slices, micros."""
        return sum(s.amount for s in self.slices.values() if s.used is None and s.expires_at > now)

    def committed(self, now: float) -> int:
        return self.billed + self.in_flight() + self.outstanding(now)


class BudgetService:
    """One shard of the budget & pacing service.

    Args:
        clock: injected domain clock (UTC).
        shard, shards: this shard's number and the shard count (routing by campaign id).
        traffic_shape: campaign id -> 24 hourly weights of its eligible requests over the
            last 7 days (local wall-clock hours); missing -> ``default_shape``.
        default_shape: the placement average for new campaigns.
        control_interval_s: seconds between controller steps.
        gains: controller tuning.
        warmup_s: seconds after start before grants (see module docstring).
        expected_servers: the servers that report here, when known (the embedded
            default: its one in-process server); warm once each has synced.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        shard: int = 0,
        shards: int = 1,
        default_shape: Sequence[float] | None = None,
        control_interval_s: float = 10.0,
        gains: controller.Gains = controller.DEFAULT_GAINS,
        warmup_s: float = WARMUP_S,
        expected_servers: set[str] | None = None,
    ) -> None:
        self.clock = clock
        self.epoch = uuid.uuid4().hex[:16]
        self.started_at = clock.now().timestamp()
        self.warmup_s = warmup_s
        self.expected_servers = set(expected_servers) if expected_servers else None
        self._heard: dict[str, float] = {}  # server id -> last report (domain s)
        self._synced: set[str] = set()  # servers that reported naming this epoch
        self._warm = False
        self._billed_read: set[tuple[int, date]] = set()
        self.shard = shard
        self.shards = shards
        self.control_interval_s = control_interval_s
        self.gains = gains
        self._default_shape = tuple(default_shape) if default_shape else (1.0,) * 24
        self._shapes: dict[int, tuple[float, ...]] = {}
        self._campaigns: dict[int, Campaign] = {}
        self._created_at: dict[int, float] = {}
        self._days: dict[tuple[int, date], CampaignDay] = {}
        self._current: dict[int, CampaignDay] = {}
        self._yesterday_p: dict[tuple[int, date], dict[int, float]] = {}
        self._seen: dict[str, tuple[int, set[int]]] = {}
        self._last_reply: dict[str, tuple[tuple[int, ...], Reply]] = {}
        self._slice_ids = itertools.count(1)
        self.unknown_campaign_reports = 0
        #: control steps run, and the lowest p an evenly paced campaign-day was given
        self.steps = 0
        self.p_min: float | None = None
        #: (campaign id, unix s, p, state) after each control step; for reports and plots.
        self.on_step: Callable[[CampaignDay, float], None] | None = None

    # -- campaign records ---------------------------------------------------------------
    def owns(self, campaign_id: int) -> bool:
        return campaign_id % self.shards == self.shard

    def upsert_campaign(self, campaign: Campaign, *, created_at: float | None = None) -> None:
        """Apply a campaign record from the change log (newer versions only). A budget
        edit rescales the rest of today's curve from the spend committed now.

        ``created_at`` (Unix s) marks a campaign created now: on the local day it was
        created, its curve starts at that moment, so the whole daily budget is spread
        over the rest of the day instead of being "behind" the part of the curve that
        passed before it existed.
        """
        old = self._campaigns.get(campaign.id)
        if old is not None and old.version > campaign.version:
            return
        if created_at is not None:
            self._created_at[campaign.id] = created_at
        self._campaigns[campaign.id] = campaign
        now = self._now()
        for (cid, _day), cd in self._days.items():
            if cid != campaign.id:
                continue
            if campaign.daily_budget_micros != cd.campaign.daily_budget_micros:
                spent = cd.committed(now)
                cd.plan = cd.plan.rescaled(campaign.daily_budget_micros, now - cd.start_s, spent)
                cd.plan_peak_rate = (campaign.daily_budget_micros
                                     * cd.plan.curve.peak_share_per_s())
                cd.ctl = controller.ControllerState(cd.ctl.p, 0.0)
                cd.last_committed = cd.spent()
            cd.campaign = campaign
            self._refresh_state(cd, now)

    def set_traffic_shape(self, campaign_id: int, hourly: Sequence[float]) -> None:
        """Hourly eligible-request shape (24 local hours, last 7 days) for future curves."""
        if len(hourly) != 24:
            raise ValueError("hourly shape needs 24 values")
        self._shapes[campaign_id] = tuple(float(v) for v in hourly)

    def seed_yesterday(self, campaign_id: int, day: date, p_by_minute: dict[int, float]) -> None:
        """p by elapsed minute of ``day``'s previous day (restart recovery, simulations)."""
        self._yesterday_p[(campaign_id, day)] = dict(p_by_minute)

    # -- state per campaign-day ---------------------------------------------------------
    def campaign_day(self, campaign_id: int, day: date) -> CampaignDay | None:
        return self._days.get((campaign_id, day))

    def _get_day(self, campaign_id: int, day: date) -> CampaignDay | None:
        key = (campaign_id, day)
        cd = self._days.get(key)
        if cd is not None:
            return cd
        c = self._campaigns.get(campaign_id)
        if c is None:
            return None
        start, end = day_bounds(day, c.time_zone)
        curve = curve_for_day(self._shapes.get(campaign_id, self._default_shape), day, c.time_zone)
        now = self._now()
        start_s, end_s = start.timestamp(), end.timestamp()
        elapsed_min = max(0, int((now - start_s) // 60))
        p0 = 1.0
        prev = self._yesterday_p.get(key)
        if prev is None:
            y = self._days.get((campaign_id, date.fromordinal(day.toordinal() - 1)))
            prev = y.p_by_minute if y is not None else None
        if prev:
            # first p of the day: yesterday's p at the same point of the curve
            k = min(prev, key=lambda m: abs(m - elapsed_min))
            p0 = prev[k]
        cd = CampaignDay(
            campaign=c, day=day, start_s=start_s, end_s=end_s,
            plan=self._first_plan(curve, c, start_s, end_s),
            ctl=controller.ControllerState(p0, 0.0), last_step_s=max(now, start_s),
        )
        cd.plan_peak_rate = c.daily_budget_micros * curve.peak_share_per_s()
        self._days[key] = cd
        self._refresh_state(cd, now)
        return cd

    def _first_plan(self, curve: TargetCurve, c: Campaign, start_s: float,
                    end_s: float) -> TargetPlan:
        created = self._created_at.get(c.id)
        if created is not None and start_s < created < end_s:
            return TargetPlan(curve, c.daily_budget_micros, anchor_s=created - start_s)
        return TargetPlan(curve, c.daily_budget_micros)

    # -- cold start ---------------------------------------------------------------------
    def warm(self, now: float | None = None) -> bool:
        """True once every live server has synced with this instance (module docstring)."""
        if self._warm:
            return True
        now = self._now() if now is None else now
        if self.expected_servers is not None:
            ok = self.expected_servers <= self._synced
        else:
            live = {s for s, t in self._heard.items() if now - t <= SERVER_STALE_S}
            ok = now - self.started_at >= self.warmup_s and live <= self._synced
        self._warm = ok
        return ok

    def can_grant(self, cd: CampaignDay, now: float) -> bool:
        """Grants need the day's billed spend read and a warm instance."""
        return (cd.campaign.id, cd.day) in self._billed_read and self.warm(now)

    def _refresh_state(self, cd: CampaignDay, now: float) -> None:
        c = cd.campaign
        charge = charge_micros(c)
        budget = day_budget(cd)
        flying = c.flight_start <= cd.day and (c.flight_end is None or cd.day <= c.flight_end)
        if c.status is not CampaignStatus.ACTIVE or not flying or budget <= 0:
            cd.state = BudgetState.STOPPED
            cd.status = PacingStatus.STOPPED
            return
        if not self.can_grant(cd, now):
            cd.state = BudgetState.METERED
            cd.status = PacingStatus.COLD
            return
        in_fl = cd.in_flight()
        committed = cd.billed + in_fl + cd.outstanding(now)
        # Until a control step has measured the day's spend rate, the rate is unknown and
        # the campaign stays metered: a burst before the first step (a new campaign, a
        # server fleet starting up) is bounded by the slices granted, never overspent.
        peak = max(cd.peak_rate, cd.plan_peak_rate)
        thr = open_threshold(peak, charge) if cd.rate_measured else budget
        state = budget_state(budget - committed, grantable(budget, cd.billed, in_fl), thr, charge)
        if state is BudgetState.EXHAUSTED and cd.exhausted_at is None:
            cd.exhausted_at = now
        elif state is not BudgetState.EXHAUSTED:
            cd.exhausted_at = None
        cd.state = state
        if state is BudgetState.EXHAUSTED:
            cd.status = PacingStatus.EXHAUSTED
        elif state is BudgetState.METERED:
            cd.status = PacingStatus.LIMITED_BY_BUDGET
        elif cd.ctl.p >= 1.0 and cd.ctl.integral > 0.002:
            cd.status = PacingStatus.LIMITED_BY_BID_OR_AUDIENCE
        else:
            cd.status = PacingStatus.PACING

    def current(self, campaign_id: int, now: float) -> CampaignDay | None:
        """The campaign's state on its local day at ``now`` (created on first use)."""
        hit = self._current.get(campaign_id)
        if hit is not None and hit.start_s <= now < hit.end_s:
            return hit
        c = self._campaigns.get(campaign_id)
        if c is None:
            return None
        cd = self._get_day(campaign_id, local_day(datetime.fromtimestamp(now, tz=UTC),
                                                  c.time_zone))
        if cd is not None:
            self._current[campaign_id] = cd
        return cd

    def _p(self, cd: CampaignDay) -> float:
        if cd.state is BudgetState.STOPPED:
            return 0.0
        if cd.campaign.pacing_mode is PacingMode.ACCELERATED:
            return 1.0
        return cd.ctl.p

    # -- reports ------------------------------------------------------------------------
    def handle_report(self, report: Report) -> Reply:
        """Apply a server's report; return directives and any new slices.

        Entries already applied (duplicates) are skipped; a message identical to the last
        one from that server (same sequence numbers) gets the same reply, so a retry never
        doubles spend nor grants.
        """
        now = self._now()
        self._heard[report.server_id] = now
        if report.epoch == self.epoch:
            self._synced.add(report.server_id)
        seqs = tuple(e.seq for e in report.entries)
        top = max(seqs, default=-1)
        cached = self._last_reply.get(report.server_id)
        if cached is not None and seqs and cached[0] == seqs:
            return cached[1]
        max_seq, seen = self._seen.get(report.server_id, (-1, set()))
        for entry in report.entries:
            if entry.seq in seen or entry.seq <= max_seq - SEQ_WINDOW:
                continue
            seen.add(entry.seq)
            if entry.seq > max_seq:
                max_seq = entry.seq
            for sp in entry.spend:
                cd = self._apply_spend(report.server_id, sp, entry.period_end, entry.resent)
                if cd is not None:
                    self._refresh_state(cd, now)
            for use in entry.closed_slices:
                self._close_slice(use)
        if len(seen) > 2 * SEQ_WINDOW:
            seen = {s for s in seen if s > max_seq - SEQ_WINDOW}
        self._seen[report.server_id] = (max_seq, seen)

        grants: list[SliceGrant] = []
        for cid in report.wants:
            g = self._grant(report.server_id, cid, now)
            if g is not None:
                grants.append(g)
        reply = Reply(shard=self.shard, at=now, acked_through=max(top, max_seq if top >= 0 else -1),
                      directives=self.directives(now), grants=grants, epoch=self.epoch)
        if seqs:
            self._last_reply[report.server_id] = (seqs, reply)
        return reply

    def _apply_spend(self, server_id: str, sp: CampaignSpend, t: float,
                     resent: bool = False) -> CampaignDay | None:
        cd = self._get_day(sp.campaign_id, date.fromisoformat(sp.day))
        if cd is None:
            self.unknown_campaign_reports += 1
            return None
        if sp.open_micros and not (cd.watermark and t < cd.watermark):
            cd.buckets.append((t, sp.open_micros))
            cd.bucket_sum += sp.open_micros
        if resent:  # in flight, but not this period's spend rate
            return cd
        cd.step_spend += sp.open_micros + sp.sliced_micros
        cd.step_charges += sp.charges
        cd.served_total += sp.open_micros + sp.sliced_micros
        r = cd.server_rates.get(server_id, float(sp.demand_micros))
        cd.server_rates[server_id] = 0.7 * r + 0.3 * sp.demand_micros
        return cd

    def _close_slice(self, use: SliceUse) -> None:
        for cd in self._days.values():
            s = cd.slices.get(use.slice_id)
            if s is not None:
                if s.used is None or s.provisional:
                    # a late close replaces the worst case assumed at expiry
                    s.used = min(s.amount, use.used_micros)
                    s.closed_at = use.closed_at
                    s.provisional = False
                return

    def _grant(self, server_id: str, campaign_id: int, now: float) -> SliceGrant | None:
        c = self._campaigns.get(campaign_id)
        if c is None or not self.owns(campaign_id):
            return None
        cd = self.current(campaign_id, now)
        if cd is None:
            return None
        self._expire(cd, now)
        self._refresh_state(cd, now)
        if cd.state is not BudgetState.METERED or not self.can_grant(cd, now):
            return None
        charge = charge_micros(c)
        g = grantable(day_budget(cd), cd.billed, cd.in_flight())
        size = slice_size(cd.server_rates.get(server_id, 0.0), charge, g, cd.outstanding(now))
        if size <= 0:
            return None
        sid = f"{self.shard}-{next(self._slice_ids)}"
        cd.slices[sid] = _Slice(server_id, size, now + SLICE_TTL_S)
        self._refresh_state(cd, now)
        return SliceGrant(sid, campaign_id, cd.day.isoformat(), size, now + SLICE_TTL_S,
                          worst_case_regime(g, charge))

    def _expire(self, cd: CampaignDay, now: float) -> None:
        """Slices past their expiry without a close count as fully spent (a crashed server
        may have used them) until billing's watermark passes their expiry."""
        for s in cd.slices.values():
            if s.used is None and s.expires_at <= now:
                s.used = s.amount
                s.closed_at = s.expires_at
                s.provisional = True
        w = cd.watermark
        if w:
            done = [k for k, s in cd.slices.items() if s.used is not None and s.closed_at < w]
            for k in done:
                del cd.slices[k]

    # -- billing ------------------------------------------------------------------------
    def record_billed(self, update: BilledUpdate) -> None:
        """Billed spend from the ledger: replaces the estimates served before its watermark.
        Idempotent (cumulative values, monotone watermark)."""
        cd = self._get_day(update.campaign_id, date.fromisoformat(update.day))
        if cd is None:
            return
        self._billed_read.add((cd.campaign.id, cd.day))
        cd.billed = max(cd.billed, update.billed_micros)
        cd.lifetime_billed_before = max(cd.lifetime_billed_before,
                                        update.lifetime_billed_before_micros)
        if update.complete_before >= cd.watermark:
            cd.settled_after = max(0, update.settled_after_micros)
        if update.complete_before > cd.watermark:
            cd.watermark = update.complete_before
            b = cd.buckets
            while b and b[0][0] < cd.watermark:
                cd.bucket_sum -= b.popleft()[1]
        now = self._now()
        self._expire(cd, now)
        self._refresh_state(cd, now)

    # -- control loop -------------------------------------------------------------------
    def step(self) -> None:
        """One control step for every campaign on its current local day."""
        now = self._now()
        self.steps += 1
        for cid in self._campaigns:
            if not self.owns(cid):
                continue
            cd = self.current(cid, now)
            if cd is None:
                continue
            self._step_one(cd, now)
        # forget days that ended more than two days ago
        for key in [k for k, cd in self._days.items() if cd.end_s < now - 2 * 86400]:
            del self._days[key]
            self._billed_read.discard(key)

    def _step_one(self, cd: CampaignDay, now: float) -> None:
        dt = now - cd.last_step_s
        if dt <= 0:
            return
        self._expire(cd, now)
        rate = cd.step_spend / dt
        cd.rate_ewma = rate if cd.rate_ewma == 0 else 0.5 * cd.rate_ewma + 0.5 * rate
        cd.peak_rate = max(cd.peak_rate, cd.rate_ewma)
        budget = cd.plan.budget_micros
        if budget > 0 and cd.campaign.pacing_mode is PacingMode.EVEN:
            e0, e1 = cd.last_step_s - cd.start_s, now - cd.start_s
            target = cd.plan.target_micros(e1) - cd.plan.target_micros(e0)
            # the controller follows spend (billed + in flight), not leases: a slice
            # granted is a reservation, its use arrives with the server's report
            spent = cd.spent()
            delta = None if cd.last_committed < 0 else spent - cd.last_committed
            cd.last_committed = spent
            charge = charge_micros(cd.campaign)
            cd.ctl, _ = controller.step(
                cd.ctl, cd.step_spend, target, dt, budget_micros=budget,
                charges=cd.step_charges, committed_delta_micros=delta,
                behind_micros=cd.plan.target_micros(e1) - spent,
                hold_band_micros=hold_band(spent - cd.plan.anchor_spend_micros, charge, budget),
                charge_micros=charge, gains=self.gains,
            )
        if cd.step_charges > 0:
            cd.rate_measured = True
        cd.step_spend = 0
        cd.step_charges = 0
        cd.last_step_s = now
        cd.p_by_minute[int((now - cd.start_s) // 60)] = cd.ctl.p
        if cd.campaign.pacing_mode is PacingMode.EVEN and cd.state is not BudgetState.STOPPED:
            self.p_min = cd.ctl.p if self.p_min is None else min(self.p_min, cd.ctl.p)
        self._refresh_state(cd, now)
        if self.on_step is not None:
            self.on_step(cd, now)

    def directives(self, now: float | None = None) -> list[Directive]:
        """Current state and p of every campaign of this shard on its local day."""
        now = self._now() if now is None else now
        out = []
        for cid in self._campaigns:
            if not self.owns(cid):
                continue
            cd = self.current(cid, now)
            if cd is None:
                continue
            if cd.status is PacingStatus.COLD:
                self._refresh_state(cd, now)  # warm now, or the day's billed spend read
            out.append(Directive(cid, cd.state.value, self._p(cd), cd.day.isoformat()))
        return out

    def _now(self) -> float:
        return self.clock.now().timestamp()


