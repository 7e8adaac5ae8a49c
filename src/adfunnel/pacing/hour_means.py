"""Traffic shapes as means per lived hour: the rule that turns a campaign's eligible
requests by hour into its 24-hour curve shape. Pure.

DESIGN.md §Pacing (target curves from the last 7 days of eligible traffic).

Summing a window's requests by hour of day is a fair shape only when every hour of day
was lived the same number of times. A campaign younger than the window was not: at 14:00
on its second day its hours 00-13 were lived twice and 14-23 once, so a summed shape
weighs its mornings double, and a flight plan made from it gave the rest of that day too
little (day 2 of a guaranteed line under-delivered by 17 % in the flight simulation). So
each hour of day is the **mean** of the hours of that hour of day the campaign has lived
(from its first logged hour to the start of the current, unfinished hour, which is left
out); an hour of day not lived yet takes the placement average's weight, scaled to the
campaign's level on the hours it has lived. A lived hour without requests is a real zero.
"""

from __future__ import annotations

import numpy as np

HOURS = 24
HOUR_S = 3600


def lived_hours(first_s: np.ndarray, end_s: float) -> np.ndarray:
    """How many times each UTC hour of day was lived from ``first_s`` (per campaign, Unix
    s of its first logged hour start) up to ``end_s`` (the current hour's start,
    exclusive): k × 24 ints, column h for UTC hour of day h."""
    first_h = (np.asarray(first_s, dtype=np.int64) // HOUR_S)
    total = np.maximum(0, int(end_s) // HOUR_S - first_h)  # hours lived per campaign
    d = (np.arange(HOURS)[None, :] - (first_h % HOURS)[:, None]) % HOURS
    return np.maximum(0, -(-(total[:, None] - d) // HOURS))  # ceil((total - d) / 24)


def mean_shapes(sums: np.ndarray, lived: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shapes (k × 24, each summing to 1) and their average (24) from request ``sums``
    and ``lived`` counts per local hour of day (both k × 24; every row a campaign with
    enough history to be trusted).

    Each hour is ``sums / lived``; hours not lived yet take the average's weight scaled
    to the row's level on its lived hours. The average is the mean of the rows that
    lived every hour (of all rows, each over its lived hours, when none did; flat
    without rows or without any weight)."""
    k = len(sums)
    flat = np.full(HOURS, 1.0 / HOURS)
    if k == 0:
        return np.zeros((0, HOURS)), flat
    seen = lived > 0
    rate = np.where(seen, sums / np.maximum(lived, 1), 0.0)
    level = rate.sum(axis=1)
    norm = np.where(level[:, None] > 0, rate / np.maximum(level, 1e-300)[:, None], 0.0)
    whole = seen.all(axis=1) & (level > 0)
    if whole.any():
        average = norm[whole].mean(axis=0)
    else:
        got = seen & (level[:, None] > 0)
        n = got.sum(axis=0)
        average = np.where(n > 0, norm.sum(axis=0) / np.maximum(n, 1), 0.0)
        average = np.where(n > 0, average, average[n > 0].mean() if (n > 0).any() else 0)
    average = average / average.sum() if average.sum() > 0 else flat
    seen_avg = (average[None, :] * seen).sum(axis=1)
    fill = np.where(seen_avg[:, None] > 0, average[None, :] / np.maximum(seen_avg, 1e-300)[:, None],
                    average[None, :])
    out = np.where(seen, norm, fill)
    out = np.where(level[:, None] > 0, out, average[None, :])
    return out / out.sum(axis=1, keepdims=True), average
