"""A small multi-day harness for budget periods: the production budget service, a budget
client reporting straight into it, the memory ledger billing with the periods' limits,
the billed feed, on a manual clock. Eligible requests of one campaign follow a 24-hour
local shape (Poisson per step); an admitted request passes the pacing coin p and bills
its charge at once. Every figure it reports is counted here, from the ledger."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import numpy as np

from adfunnel.billing.ledger import LedgerWrite, MemoryLedger
from adfunnel.billing.limits import write_budgets
from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.budget.client import BudgetClient
from adfunnel.budget.feed import BilledFeeder
from adfunnel.budget.gate import Served
from adfunnel.budget.protocol import Reply, Report
from adfunnel.budget.service import BudgetService
from adfunnel.campaigns.model import Campaign
from adfunnel.campaigns.schedule import in_daypart, local_day, zone
from adfunnel.clock import ManualClock

#: Eligible requests by local hour (dense 09-22, as the issue's Tokyo example).
SHAPE = [1.0] * 9 + [10.0] * 13 + [1.0] * 2


class _Direct:
    def __init__(self, svc: BudgetService) -> None:
        self.svc = svc

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        on_reply(self.svc.handle_report(report))


@dataclass
class Run:
    """What a run billed: per local day (billed, absorbed, events) and its supply."""

    billed: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    absorbed: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    events: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    supply: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    allot: dict[date, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.billed.values())


class FlightSim:
    """One campaign served for a span of days (``step_s`` per step)."""

    def __init__(self, c: Campaign, start: datetime, *, per_hour: float, step_s: float = 10.0,
                 charge: int | None = None, seed: int = 1) -> None:
        self.clock = ManualClock(start)
        self.svc = BudgetService(self.clock, warmup_s=0.0, control_interval_s=step_s,
                                 default_shape=SHAPE)
        self.client = BudgetClient("s1", self.clock, _Direct(self.svc))
        self.ledger = MemoryLedger()
        self.feeder = BilledFeeder(self.ledger)
        self.c = c
        self.svc.upsert_campaign(c)
        self.per_hour = per_hour  # mean eligible requests per hour at weight 1
        self.step_s = step_s
        self.charge = c.max_charge_micros if charge is None else charge
        self.rng = np.random.default_rng(seed)
        self.ids = itertools.count()
        self.run = Run()
        self.hooks: dict[float, Callable[[FlightSim], None]] = {}

    def edit(self, c: Campaign) -> None:
        self.c = c
        self.svc.upsert_campaign(c)

    def until(self, end: datetime) -> Run:
        z = zone(self.c.time_zone)
        t = self.clock.now().timestamp()
        stop = end.timestamp()
        while t < stop:
            for at in [a for a in self.hooks if a <= t]:
                self.hooks.pop(at)(self)
            now = datetime.fromtimestamp(t, UTC)
            hour = now.astimezone(z).hour
            n = int(self.rng.poisson(SHAPE[hour] * self.per_hour * self.step_s / 3600.0))
            day = local_day(now, self.c.time_zone)
            serving = in_daypart(self.c.dayparts, now, self.c.time_zone)
            if serving:
                self.run.supply[day] += n
            p = self.client.pacing_rate(self.c.id)
            for _ in range(n if serving else 0):
                if self.client.admit(self.c, now, self.c.max_charge_micros) is not None:
                    continue
                if self.rng.random() >= p:
                    continue
                self._serve(now, day)
            self.client.report(t)
            for u in self.feeder.updates([self.c], now):
                self.svc.record_billed(u)
            self.svc.step()
            cd = self.svc.current(self.c.id, t)
            if cd is not None:
                self.run.allot[day] = cd.day_budget()
            t += self.step_s
            self.clock.set(datetime.fromtimestamp(t, UTC))
        return self.run

    def _serve(self, now: datetime, day: date) -> None:
        imp = f"i{next(self.ids)}"
        self.client.record_served(Served(self.c.id, day, imp, self.charge,
                                         now.timestamp() + 3600, self.charge))
        daily, life, limits = write_budgets(self.c)
        ev = LedgerEvent(imp, EventType.IMPRESSION, self.c.id, 1, "feed", "CPC", self.charge,
                         now, day, served_at=now, expected_micros=self.charge)
        rec = self.ledger.record_many([LedgerWrite(ev, daily, life, period=limits)]).recorded[0]
        self.run.billed[day] += rec.billed_micros
        self.run.absorbed[day] += rec.absorbed_micros
        self.run.events[day] += 1


def days(first: date, n: int) -> list[date]:
    return [first + timedelta(days=i) for i in range(n)]
