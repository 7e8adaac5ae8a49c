"""A budget cut reaches the ad server's budget client before the budget service's next
reply: the campaign, open under the old budget, is no longer admitted freely (it asks
the service again, and the reply under the new budget stops it).

The tester's case: campaign 1 (CPM, accelerated, 6,000 µ an impression) cut from
100,000 to 20,000 µ while ~50 requests a second arrived; open until the next reply
(about a second), it served 5,200 µ past its budget (absorbed overspend, 26 %)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, date, datetime

import numpy as np

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.gate import ADMIT, ASK, BUDGET_EXHAUSTED, NO_SLICE, Served, budget_lowered
from adfunnel.budget.protocol import BilledUpdate, Reply, Report
from adfunnel.budget.service import BudgetService
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import BidType, Campaign, ChangeRecord, Objective, PacingMode
from adfunnel.clock import ManualClock
from adfunnel.serving.catalog import Catalog

NOW = datetime(2026, 10, 20, 14, 0, tzinfo=UTC)
DAY = NOW.date()
CHARGE = 6_000
CAMP = Campaign(1, 1, "c", Objective.IMPRESSIONS, BidType.CPM, 6_000_000, 10_000_000, "UTC",
                date(2026, 1, 1), pacing_mode=PacingMode.ACCELERATED)
CUT = replace(CAMP, daily_budget_micros=20_000, version=2)


class _Direct:
    """In-memory transport straight into one service instance."""

    def __init__(self, svc: BudgetService) -> None:
        self.svc = svc

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        on_reply(self.svc.handle_report(report))


def _bulk(client: BudgetClient, c: Campaign) -> int:
    codes = client.bulk_admit(np.array([c.id]), np.array([DAY.toordinal()]),
                              np.array([CHARGE]), np.array([[c.daily_budget_micros, -1]]),
                              NOW.timestamp())
    return int(codes[0])


def _service(clock: ManualClock, camp: Campaign) -> BudgetService:
    svc = BudgetService(clock, warmup_s=0.0)
    svc.upsert_campaign(camp)
    svc.record_billed(BilledUpdate(camp.id, DAY.isoformat(), 0, 0.0))
    return svc


def _open() -> tuple[BudgetClient, BudgetService]:
    """The campaign open at the client under a 10,000,000 µ budget, 24,000 µ served."""
    clock = ManualClock(NOW)
    svc = _service(clock, CAMP)
    client = BudgetClient("ads-1", clock, _Direct(svc))
    client.report()
    for i in range(4):
        client.record_served(Served(CAMP.id, DAY, f"i{i}", CHARGE, NOW.timestamp() + 3600,
                                    CHARGE))
    client.report()
    clock.advance(10)
    svc.step()  # a spend rate measured: 24,000 of 10,000,000 µ committed, open
    client.report()
    assert client.state(CAMP.id, DAY) is BudgetState.OPEN
    return client, svc


def _open_then_cut() -> BudgetClient:
    """:func:`_open`, then cut to 20,000 µ at the service (its change-log reader): the
    ad server has not had a reply since."""
    client, svc = _open()
    svc.upsert_campaign(CUT)
    return client


def test_a_budget_cut_stops_free_spending_before_the_next_reply() -> None:
    """Breaks if the client keeps an open state learned under the old budget once the
    ad server has the new one (tried: no ``campaign_changed``: admit answered None and
    bulk_admit ADMIT under the cut budget until the next reply)."""
    client = _open_then_cut()
    now = client.clock.now()
    client.campaign_changed(CAMP, CUT)  # the ad server's catalogue has the cut
    assert client.admit(CUT, now, CHARGE) == NO_SLICE  # asks: no free spend
    assert _bulk(client, CUT) == ASK
    assert not client.fits(CUT, now, CHARGE)
    client.report()  # the reply under the new budget: 24,000 committed of 20,000
    assert client.admit(CUT, now, CHARGE) == BUDGET_EXHAUSTED
    assert sum(s.amount for s in client.held_slices()) == 0


def _metered_with_a_slice() -> tuple[BudgetClient, BudgetService, Campaign]:
    """The campaign with a 100,000 µ budget (ten charges: metered), holding a slice."""
    clock = ManualClock(NOW)
    small = replace(CAMP, daily_budget_micros=100_000)
    svc = _service(clock, small)
    client = BudgetClient("ads-1", clock, _Direct(svc))
    client.report()
    clock.advance(1)
    assert client.admit(small, clock.now(), CHARGE) == NO_SLICE  # metered: it asks
    client.report()
    return client, svc, small


def test_a_budget_cut_releases_slices_sized_under_the_old_budget() -> None:
    """Breaks if a metered campaign keeps spending a slice granted under the old budget
    (tried: ``campaign_changed`` dropping the open state only: the slice held room
    for serves past the new budget until it ran out or expired, 30 s)."""
    client, svc, small = _metered_with_a_slice()
    clock = client.clock
    held = sum(s.amount for s in client.held_slices())
    assert held >= CHARGE
    cut = replace(small, daily_budget_micros=CHARGE // 2, version=2)  # below a charge
    svc.upsert_campaign(cut)
    client.campaign_changed(small, cut)
    assert client.held_slices() == []
    assert client.admit(cut, clock.now(), CHARGE) == NO_SLICE
    client.report()
    assert client.admit(cut, clock.now(), CHARGE) == BUDGET_EXHAUSTED
    assert svc.campaign_day(CAMP.id, DAY).outstanding(clock.now().timestamp()) == 0


def test_a_reply_made_before_the_service_read_the_cut_is_not_taken() -> None:
    """The ad server applies the cut first; the service, which polls the change log,
    answers under the old budget (open, a slice sized for it). Breaks if the client
    takes that answer (tried: no campaign version in directives and grants: the reply
    reopened the campaign, ADMIT under the cut budget until the service's next poll).
    Once the service has the cut, its answer of the cut's version is taken."""
    client, svc = _open()
    now = client.clock.now()
    client.campaign_changed(CAMP, CUT)  # the ad server has the cut; the service not yet
    assert client.admit(CUT, now, CHARGE) == NO_SLICE  # it asks
    client.report()  # answered under version 1: open, and maybe a slice
    assert client.state(CAMP.id, DAY) is not BudgetState.OPEN
    assert _bulk(client, CUT) == ASK and client.admit(CUT, now, CHARGE) == NO_SLICE
    assert sum(s.amount for s in client.held_slices()) == 0
    assert client.stats["directives_before_cut"] >= 1
    client.report()  # still before the service's poll: still not taken
    assert _bulk(client, CUT) == ASK
    svc.upsert_campaign(CUT)  # the service's change-log reader
    client.report()  # asked again (wants): the answer of version 2 stops it
    assert client.admit(CUT, now, CHARGE) == BUDGET_EXHAUSTED
    assert _bulk(client, CUT) != ADMIT


def test_a_slice_granted_before_the_service_read_the_cut_is_returned_unused() -> None:
    """A metered campaign cut below one charge; the service grants a slice under the
    old budget before it reads the cut. Breaks if the client holds that slice (tried:
    grants without the campaign version: room for a serve past the new budget)."""
    client, svc, small = _metered_with_a_slice()
    clock = client.clock
    assert sum(s.amount for s in client.held_slices()) >= CHARGE
    cut = replace(small, daily_budget_micros=CHARGE // 2, version=2)
    client.campaign_changed(small, cut)  # the service has not read it
    assert client.admit(cut, clock.now(), CHARGE) == NO_SLICE
    client.report()  # a new slice under the old budget: returned
    assert client.held_slices() == [] and client.stats["slices_before_cut"] >= 1
    assert client.admit(cut, clock.now(), CHARGE) == NO_SLICE
    svc.upsert_campaign(cut)
    client.report()
    client.report()  # the returned slices' use (0) reaches the service, then its answer
    assert client.admit(cut, clock.now(), CHARGE) == BUDGET_EXHAUSTED
    assert svc.campaign_day(CAMP.id, DAY).outstanding(clock.now().timestamp()) == 0


def test_a_raise_keeps_the_open_state() -> None:
    """A raise cannot make an open campaign less open: no ask, no pause in delivery."""
    client = _open_then_cut()
    raised = replace(CAMP, daily_budget_micros=20_000_000, version=2)
    client.campaign_changed(CAMP, raised)
    assert _bulk(client, raised) == ADMIT
    assert client.admit(raised, client.clock.now(), CHARGE) is None


def test_budget_lowered() -> None:
    assert budget_lowered(CAMP, CUT)
    assert not budget_lowered(None, CAMP)  # new: the client knows nothing of it yet
    assert not budget_lowered(CAMP, replace(CAMP, bid_micros=1, version=2))
    assert not budget_lowered(CAMP, replace(CAMP, daily_budget_micros=20_000_000))
    assert budget_lowered(CAMP, replace(CAMP, lifetime_budget_micros=10**9))
    assert budget_lowered(replace(CAMP, lifetime_budget_micros=10**9),
                          replace(CAMP, lifetime_budget_micros=10**8))
    assert not budget_lowered(replace(CAMP, lifetime_budget_micros=10**8),
                              replace(CAMP, lifetime_budget_micros=None))


def test_the_catalogue_tells_its_campaign_listeners() -> None:
    """The ad server's catalogue passes every applied campaign record, with the one it
    held, to its listeners (``build_runtime`` adds the spend gate's ``campaign_changed``)."""
    catalog = Catalog.shaped()
    seen: list[tuple[Campaign | None, Campaign]] = []
    catalog.campaign_listeners.append(lambda old, new: seen.append((old, new)))
    catalog.apply(ChangeRecord(1, "campaign", 1, 1, CAMP, NOW))
    catalog.apply(ChangeRecord(2, "campaign", 1, 2, CUT, NOW))
    catalog.apply(ChangeRecord(3, "campaign", 1, 1, CAMP, NOW))  # older: not applied nor told
    assert seen == [(None, CAMP), (CAMP, CUT)]
