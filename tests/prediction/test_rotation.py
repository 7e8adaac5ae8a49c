"""Rotation of a campaign's creatives until the model can tell them apart (issue 7 §5)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.prediction.smoothed import SmoothedCtr, rotation_pool

PRIOR, STRENGTH = 0.001, 1_000.0


def test_identical_creatives_all_rotate() -> None:
    assert rotation_pool([(0, 0)] * 3, PRIOR, STRENGTH) == [0, 1, 2]
    assert rotation_pool([(5_000, 7)] * 3, PRIOR, STRENGTH) == [0, 1, 2]


def test_one_lucky_click_does_not_end_the_rotation() -> None:
    """100 impressions each, one click on the first: far inside the uncertainty."""
    assert rotation_pool([(100, 1), (100, 0), (100, 0)], PRIOR, STRENGTH) == [0, 1, 2]


def test_clear_evidence_stops_rotating_the_worse_creative() -> None:
    # 2 % vs 0.1 % over 5,000 impressions each: many standard errors apart
    assert rotation_pool([(5_000, 100), (5_000, 5), (5_000, 90)], PRIOR, STRENGTH) == [0, 2]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(counts=st.lists(
    st.integers(0, 20_000).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n // 10))),
    min_size=1, max_size=6,
))
def test_the_best_creative_is_always_in_the_pool(counts: list[tuple[int, int]]) -> None:
    pool = rotation_pool(counts, PRIOR, STRENGTH)
    ctr = SmoothedCtr(PRIOR, STRENGTH)
    means = [(c + PRIOR * STRENGTH) / (n + STRENGTH) for n, c in counts]
    assert means.index(max(means)) in pool
    # duplicates of a pooled creative are pooled too
    for i, c in enumerate(counts):
        if c in [counts[j] for j in pool]:
            assert i in pool
    assert ctr.campaign_pctrs([], "p") == []


def test_campaign_pctrs_pool_the_indistinguishable_and_keep_the_rest() -> None:
    ctr = SmoothedCtr(PRIOR, STRENGTH)
    for ad, (imps, clicks) in {1: (5_000, 50), 2: (5_000, 45), 3: (5_000, 0)}.items():
        for _ in range(imps):
            ctr.observe_impression(ad, "feed")
        for _ in range(clicks):
            ctr.observe_click(ad, "feed")
    p1, p2, p3 = ctr.campaign_pctrs([1, 2, 3], "feed")
    assert p1 == p2 == (95 + PRIOR * STRENGTH) / (10_000 + STRENGTH)  # pooled
    assert p3 == ctr.pctr(3, "feed") < p1  # 5,000 impressions, no click: told apart
