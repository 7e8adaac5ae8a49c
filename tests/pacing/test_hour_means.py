"""Shapes as means per lived hour (``adfunnel.pacing.hour_means``): a campaign younger
than the window must not weigh the hours it lived twice double."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.pacing.hour_means import lived_hours, mean_shapes
from adfunnel.pacing.traffic_log import local_shape, shapes

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)


@given(st.integers(0, 10_000), st.integers(0, 400))
def test_lived_hours_count_every_hour_once(first_h: int, span: int) -> None:
    got = lived_hours(np.array([first_h * 3600]), (first_h + span) * 3600)[0]
    assert got.sum() == span
    assert got.max() - got.min() <= 1
    # the hours of day that come first from the first hour are the ones lived more
    order = [(first_h + i) % 24 for i in range(24)]
    assert all(got[a] >= got[b] for a, b in pairwise(order))


def test_a_young_campaign_with_even_traffic_has_an_even_shape() -> None:
    # 100 requests every hour for a day and a half: hours 00-11 lived twice
    counts = {T0 + timedelta(hours=h): 100 for h in range(36)}
    shape = local_shape(counts, "UTC", T0 + timedelta(hours=36, minutes=20))
    assert shape == pytest.approx([1 / 24] * 24)
    # the sum of the window (the rule before) would weigh the mornings double
    summed = np.zeros(24)
    for at, n in counts.items():
        summed[at.hour] += n
    assert summed[5] / summed[15] == 2.0


def test_the_unfinished_hour_is_left_out() -> None:
    counts = {T0 + timedelta(hours=h): 100 for h in range(24)} | {T0 + timedelta(days=1): 7}
    assert local_shape(counts, "UTC", T0 + timedelta(days=1, minutes=5)) == pytest.approx(
        [1 / 24] * 24)


def test_unlived_hours_take_the_average_scaled_to_the_campaign() -> None:
    old = {T0 - timedelta(days=6) + timedelta(hours=h): (300 if 9 <= (h % 24) < 21 else 100)
           for h in range(7 * 24)}
    # the young one lived 00-05 only, at twice the old one's level
    young = {T0 + timedelta(days=1, hours=h): 200 for h in range(6)}
    now = T0 + timedelta(days=1, hours=6)
    got = shapes({1: old, 2: young}, {1: "UTC", 2: "UTC"}, now)
    assert got[2] == pytest.approx(got[1])


def test_a_lived_hour_without_requests_is_a_real_zero() -> None:
    counts = {T0 + timedelta(hours=h): 100 for h in range(48) if h % 24 != 3}
    shape = local_shape(counts, "UTC", T0 + timedelta(days=2))
    assert shape[3] == 0.0 and shape[4] == pytest.approx(1 / 23)


def test_mean_shapes_without_rows_is_flat() -> None:
    shaped, average = mean_shapes(np.zeros((0, 24)), np.zeros((0, 24), dtype=np.int64))
    assert shaped.shape == (0, 24) and average == pytest.approx([1 / 24] * 24)
