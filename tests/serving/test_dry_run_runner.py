"""The decide-commit-log runner with a dry run (an OpenRTB ``test = 1`` request) that is
shed or found late: like a decided one, it counts no placement traffic."""

from __future__ import annotations

import asyncio
from typing import Any

from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.serving.commit import LATE, SHED, DecisionRunner
from adfunnel.serving.deadline import SHED_QUEUE, Outcome
from adfunnel.serving.decision import Decision
from adfunnel.serving.decision_log import DecisionLog
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
