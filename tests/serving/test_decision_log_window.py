"""The deadline miss rate is (late + shed) / requests over the most recent window."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adfunnel.auction.gsp import Rejection
from adfunnel.serving.decision import Decision
from adfunnel.serving.decision_log import DecisionLog


@given(st.lists(st.sampled_from(["sent", "late", "shed"]), max_size=300),
       st.integers(min_value=1, max_value=50))
def test_miss_rate_is_the_share_missed_in_the_window(outcomes: list[str], window: int) -> None:
    log = DecisionLog(capacity=10, window=window)
    for i, o in enumerate(outcomes):
        if o == "sent":
            log.append(Decision(f"r{i}", [], [], 0))
        elif o == "late":
            log.count_late()
        else:
            log.count_shed()
    recent = outcomes[-window:]
    expected = sum(o != "sent" for o in recent) / len(recent) if recent else 0.0
    assert log.miss_rate() == expected
    assert (log.decisions, log.late, log.shed) == (
        len(outcomes), outcomes.count("late"), outcomes.count("shed"))


@given(st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=60),
       st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=100))
def test_memory_is_bounded_by_decisions_and_rejections(
        sizes: list[int], capacity: int, max_rejections: int) -> None:
    log = DecisionLog(capacity=capacity, max_rejections=max_rejections)
    for i, n in enumerate(sizes):
        log.append(Decision(f"r{i}", [], [Rejection(j, 1, "outranked") for j in range(n)], 0))
    held = [d for i in range(len(sizes)) if (d := log.get(f"r{i}")) is not None]
    assert 1 <= len(held) <= capacity
    assert held[-1].request_id == f"r{len(sizes) - 1}"  # the newest is always held
    total = sum(len(d.rejections) for d in held)
    assert total <= max_rejections or len(held) == 1
    assert log.get(f"r{len(sizes) - 1 - len(held)}") is None  # the oldest left first
