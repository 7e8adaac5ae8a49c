"""The deadline miss rate is (late + shed) / requests over the most recent window."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adfunnel.serving.decision_log import DecisionLog
from adfunnel.serving.funnel import Decision


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
