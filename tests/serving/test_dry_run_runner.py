"""The decide-commit-log runner with a dry run (an OpenRTB ``test = 1`` request) that is
shed or found late: like a decided one, it counts no placement traffic; and the dry
run's budget answer, which asks the budget service for nothing."""

from __future__ import annotations

import asyncio
from datetime import date, datetime
from typing import Any

from adfunnel.budget.gate import BUDGET_EXHAUSTED
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.serving.commit import LATE, SHED, DecisionRunner
from adfunnel.serving.deadline import SHED_QUEUE, Outcome
from adfunnel.serving.decision import Decision
from adfunnel.serving.decision_log import DecisionLog
from adfunnel.serving.dry_run import dry_admit
from adfunnel.serving.placement_traffic import PlacementCounter
from adfunnel.serving.request import PlacementIn, SelectRequest, SlotIn, UserIn
from tests.serving.conftest import START


class _Queue:
    """A queue that answers ``outcome`` and notes whether it was asked for a dry run."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.decider = self
        self.dry: list[bool] = []

    async def decide(self, req: SelectRequest, request_id: str, deadline_ms: float,
                     dry_run: bool = False) -> Outcome:
        self.dry.append(dry_run)
        return self.outcome

    def abandon(self, decision: Decision) -> None:
        pass


REQ = SelectRequest(user=UserIn(), placement=PlacementIn(id="feed"),
                    slots=[SlotIn(id="s1", position=1, width=300, height=250)])


def _run(outcome: Outcome, dry_run: bool, deadline_ms: float) -> tuple[str, dict[Any, Any],
                                                                       list[bool]]:
    queue = _Queue(outcome)
    placements = PlacementCounter(ManualClock(START))
    runner = DecisionRunner(queue, DecisionLog(), placements=placements)  # type: ignore[arg-type]
    done = asyncio.run(runner.run(REQ, "r1", deadline_ms, dry_run=dry_run))
    return done.outcome, placements.drain(), queue.dry


def test_a_shed_or_late_dry_run_counts_no_placement_traffic() -> None:
    """Breaks if the runner counts a dry run's placement traffic when it is shed or late
    (tried: ``placements = self.placements`` for dry runs too: one request counted), or
    if it does not ask the queue for a dry run (tried: ``dry_run`` not passed on)."""
    shed = Outcome(None, SHED_QUEUE)
    late = Outcome(Decision("r1", [], [], 1))
    past = monotonic_ms() - 1  # the deadline passed before the commit
    for outcome, want in ((shed, SHED), (late, LATE)):
        assert _run(outcome, True, past) == (want, {}, [True])
        got, counted, asked = _run(outcome, False, past)  # live: counted
        assert (got, asked) == (want, [False]) and len(counted) == 1


class _Client:
    """A budget client's ``state`` and ``fits`` (no slice held: nothing fits but OPEN)."""

    def __init__(self, state: BudgetState) -> None:
        self._state = state
        self.asked = 0

    def state(self, campaign_id: int, day: date, now: float | None = None) -> BudgetState:
        return self._state

    def fits(self, campaign: Campaign, now: datetime, charge_micros: int) -> bool:
        return self._state is BudgetState.OPEN

    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        self.asked += 1  # a live admit: demand noted, a slice asked for
        return None


class _Embedded:
    def __init__(self, client: _Client) -> None:
        self.client = client

    def fits(self, campaign: Campaign, now: datetime, charge_micros: int) -> bool:
        return self.client.fits(campaign, now, charge_micros)

    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        return self.client.admit(campaign, now, max_charge_micros)


CAMPAIGN = Campaign(id=7, advertiser_id=1, name="c", objective=Objective.IMPRESSIONS,
                    bid_type=BidType.CPM, bid_micros=1_000_000, daily_budget_micros=10**9,
                    time_zone="UTC", flight_start=date(2026, 7, 1))


def test_a_dry_admit_asks_nothing_and_supposes_a_metered_slice_granted() -> None:
    """Breaks if a metered campaign is refused (tried: the ``state`` reading removed:
    ``budget_exhausted`` for the fleet's client and the embedded one), or if a stopped
    one is let in (tried: ``return None`` at the end), or if it asks the gate's
    ``admit`` (tried: ``fits`` replaced by ``gate.admit(...) is None``: asked 1)."""
    for state, want in ((BudgetState.OPEN, None), (BudgetState.METERED, None),
                        (BudgetState.STOPPED, BUDGET_EXHAUSTED)):
        fleet = _Client(state)
        embedded = _Embedded(_Client(state))
        for gate in (fleet, embedded):
            assert dry_admit(gate, CAMPAIGN, START, 1_000) == want, (state, gate)
        assert fleet.asked == embedded.client.asked == 0
