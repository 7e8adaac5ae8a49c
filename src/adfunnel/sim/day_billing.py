"""The day simulation's billing: events into the production
:class:`~adfunnel.billing.ledger.MemoryLedger`, billed spend fed back to the shards through
production's :class:`~adfunnel.budget.feed.BilledFeeder`, and the simulation's own record of
what it sent and what was billed (by local day, on each campaign's :class:`Track`),
including the committed-spend shortfall the report judges.
"""

from __future__ import annotations

from datetime import UTC, datetime

from adfunnel.billing.batch import LedgerWrite
from adfunnel.billing.ledger import MemoryLedger
from adfunnel.billing.model import EventType, LedgerEvent, Outcome, Recorded
from adfunnel.budget.day_rows import CampaignDay
from adfunnel.budget.feed import TOKEN_TTL_S, BilledFeeder
from adfunnel.campaigns.model import BidType
from adfunnel.campaigns.schedule import local_day
from adfunnel.sim.day_track import Track
from adfunnel.sim.day_world import DayWorld
from adfunnel.sim.scenarios import Scenario


class DayBilling(DayWorld):
    """The simulated window with its ledger and billed feed."""

    def __init__(self, sc: Scenario, seed: int, short: bool) -> None:
        super().__init__(sc, seed, short)
        self.ledger = MemoryLedger()
        self.last_feed = self.now
        if sc.click_delay_range_s is not None:
            for tr in self.tracks.values():
                if tr.sc.bid_type is BidType.CPC:
                    tr.pending = {}
        # the scenario's billing rules: clicks come within its click window, conversions
        # within its conversion window (both shorter than a real deployment's)
        late = sc.click_delay_range_s
        self.feeder = BilledFeeder(self.ledger, token_ttl_s=TOKEN_TTL_S,
                                   conversion_window_s=sc.conversion_window_s,
                                   click_window_s=late[1] if late else sc.click_window_s)

    def _on_step(self, cd: CampaignDay, now: float) -> None:
        """A shard's control step: in late-click scenarios measure the committed spend
        first, then note the step."""
        tr = self.tracks[cd.campaign.id]
        if tr.pending is not None:
            self._check_committed(tr, cd, now)
        super()._on_step(cd, now)

    def bill(self, tr: Track, imp: str, et: EventType, charge: int, occurred: float,
             served_at: float | None = None, expected: int | None = None) -> None:
        """One event into the ledger, as the tracker writes it: ``expected`` is the
        serve's expected cost that the event settles (the token carries it). A click
        held for its impression is noted when the impression's write releases it."""
        at = datetime.fromtimestamp(occurred, tz=UTC)
        day = local_day(at, tr.campaign.time_zone)
        served = None if served_at is None else datetime.fromtimestamp(served_at, tz=UTC)
        ev = LedgerEvent(imp, et, tr.campaign.id, tr.campaign.id, "feed", tr.sc.bid_type.value,
                         charge, at, day, served_at=served, expected_micros=expected)
        plan = self.ledger.record_many([LedgerWrite(ev, tr.campaign.daily_budget_micros)])
        for event, rec in [(ev, plan.recorded[0]), *plan.released]:
            self._note_billed(tr, event, rec)

    def _note_billed(self, tr: Track, ev: LedgerEvent, rec: Recorded) -> None:
        """The simulation's own ledger: an event the ledger billed (now, or released
        from held), with the charge the simulation sent, whatever the budget cap did."""
        if rec.outcome is not Outcome.BILLED:
            return
        tr.charged[ev.day] += ev.charge_micros
        tr.billed[ev.day] += rec.billed_micros
        if tr.pending is not None and ev.expected_micros:
            tr.settled_at[ev.impression_id] = self.now  # its billable event is in now
        if rec.billed_micros:
            tr.spend_events.append((ev.occurred_at.timestamp(), rec.billed_micros))

    def _check_committed(self, tr: Track, cd: CampaignDay, now: float) -> None:
        """How far the service's committed spend is below billed + the expected cost of
        every serve still able to bill (reported to it, its event not yet in the ledger
        at the last feed): a measure the service does not set.

        Both terms come from the simulation's own record, never from production's rules
        or figures: billed is what the events it sent had billed by the last feed (its
        own tally of the ledger's answers, not the service's ``billed``), and a serve can
        bill until the latest click delay the simulation itself draws
        (``click_delay_range_s``), not until production's billing window."""
        assert tr.pending is not None and self.sc.click_delay_range_s is not None
        window_start = now - self.sc.click_delay_range_s[1]
        reported = now - 2.0 * self.sc.report_interval_s - self.sc.message_delay_s[1]
        assert tr.pending is not None
        outstanding = 0
        for imp, (t, expected) in list(tr.pending.items()):
            settled = tr.settled_at.get(imp)
            if t < window_start or (settled is not None and settled <= self.last_feed):
                del tr.pending[imp]
                tr.settled_at.pop(imp, None)
            elif t <= reported and local_day(datetime.fromtimestamp(t, tz=UTC),
                                             tr.campaign.time_zone) == cd.day:
                outstanding += expected
        shortfall = tr.billed_at_feed.get(cd.day, 0) + outstanding - cd.committed(now)
        tr.committed_shortfall = max(tr.committed_shortfall, shortfall)

    def feed(self) -> None:
        """Billed spend to every shard through production's feeder, from the ledger."""
        self.last_feed = self.now
        for tr in self.tracks.values():  # what the feed is about to tell the shards
            tr.billed_at_feed = dict(tr.billed)
        now = datetime.fromtimestamp(self.now, tz=UTC)
        for shard, svc in enumerate(self.services):
            camps = [tr.campaign for tr in self.tracks.values()
                     if tr.campaign.id % self.sc.shards == shard]
            for u in self.feeder.updates(camps, now):
                svc.record_billed(u)

    def seed_short(self) -> None:
        """Short form: start mid-day as if the day so far went to plan (the service
        rebuilds from the ledger): bill each campaign its target spend up to now."""
        t = self.now
        for tr in self.tracks.values():
            svc = self.service_for(tr.campaign.id)
            cd = svc.current(tr.campaign.id, t)
            if cd is None:
                continue
            amount = int(cd.plan.target_micros(t - cd.start_s))
            if amount > 0:
                # spend of the day so far: its serves are past their billing window
                self.bill(tr, f"prior-{tr.campaign.id}", EventType.IMPRESSION, amount, t - 1.0,
                          t - TOKEN_TTL_S - 1.0, 0)
        self.feed()
