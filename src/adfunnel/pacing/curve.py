"""Target curves: the cumulative share of a daily budget to have spent by each minute.

DESIGN.md §Money and budgets, *Pacing*: the curve is shaped like the traffic the
campaign could reach (its logged eligible requests over the last 7 days, or the
placement average for a new campaign) and reaches 1.0 at 23:30 local time. A budget
edit rescales the rest of the curve from the spend committed at the edit.

Shapes: hourly weights are 24 non-negative numbers indexed by *local wall-clock*
hour; a day's curve has one point per elapsed minute boundary (``minutes + 1``
points for a 1380-, 1440- or 1500-minute local day). Everything here is pure.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from adfunnel.campaigns.schedule import day_bounds, zone

#: Minutes before local midnight at which the curve reaches 1.0 (23:30 local).
END_MARGIN_MINUTES = 30


def hourly_to_minutely(hourly: Sequence[float]) -> list[float]:
    """1440 per-minute weights (same total as ``hourly``) for a 24-value hourly shape.

    Weights are linearly interpolated between hour mid-points (wrapping at midnight),
    then rescaled so each hour keeps its total, so a step-shaped log becomes smooth.

    Raises:
        ValueError: not 24 values, a negative value or an all-zero shape.
    """
    if len(hourly) != 24:
        raise ValueError(f"hourly shape needs 24 values, got {len(hourly)}")
    if any((not math.isfinite(v)) or v < 0 for v in hourly):
        raise ValueError("hourly weights must be finite and >= 0")
    if sum(hourly) <= 0:
        raise ValueError("hourly shape is all zero")
    per_min = [v / 60.0 for v in hourly]
    out: list[float] = []
    for m in range(1440):
        x = (m + 0.5) / 60.0 - 0.5  # position in hours relative to hour mid-points
        h0 = math.floor(x)
        f = x - h0
        a = per_min[h0 % 24]
        b = per_min[(h0 + 1) % 24]
        out.append(a * (1 - f) + b * f)
    # keep each hour's own total (interpolation moves mass between hours)
    for h in range(24):
        seg = out[h * 60 : (h + 1) * 60]
        s = sum(seg)
        want = hourly[h]
        if s > 0:
            k = want / s
            out[h * 60 : (h + 1) * 60] = [v * k for v in seg]
    return out


def day_minute_weights(minutely: Sequence[float], day: date, tz: str) -> list[float]:
    """Per-elapsed-minute weights for local ``day`` in ``tz`` (23, 24 or 25 hours).

    Each elapsed minute takes the weight of its local wall-clock minute, so the
    repeated hour of a 25-hour day counts twice and the skipped hour of a 23-hour
    day not at all (traffic follows the wall clock).
    """
    if len(minutely) != 1440:
        raise ValueError("minutely shape needs 1440 values")
    start, end = day_bounds(day, tz)
    n = int((end - start).total_seconds() // 60)
    z = zone(tz)
    out: list[float] = []
    for m in range(n):
        local = (start + timedelta(minutes=m)).astimezone(z)
        out.append(minutely[local.hour * 60 + local.minute])
    return out


@dataclass(frozen=True, slots=True)
class TargetCurve:
    """Cumulative share of the budget by elapsed second of a local day.

    ``points[i]`` is the share due after ``i`` elapsed minutes; non-decreasing, starts
    at 0.0 and is 1.0 from ``end_minute`` (23:30 local) on.
    """

    points: tuple[float, ...]
    end_minute: int

    @property
    def length_s(self) -> float:
        return (len(self.points) - 1) * 60.0

    def share_at(self, elapsed_s: float) -> float:
        """Cumulative share in [0, 1] after ``elapsed_s`` seconds (linear within a minute)."""
        if elapsed_s <= 0:
            return 0.0
        x = elapsed_s / 60.0
        i = int(x)
        if i >= len(self.points) - 1:
            return self.points[-1]
        f = x - i
        return self.points[i] * (1 - f) + self.points[i + 1] * f

    def elapsed_at_share(self, share: float) -> float:
        """First elapsed second at which the curve reaches ``share`` (inverse of share_at)."""
        if share <= 0:
            return 0.0
        i = bisect_right(self.points, share - 1e-15)
        if i <= 0:
            return 0.0
        if i >= len(self.points):
            return self.end_minute * 60.0
        a, b = self.points[i - 1], self.points[i]
        f = 0.0 if b <= a else (share - a) / (b - a)
        return (i - 1 + f) * 60.0

    def peak_share_per_s(self) -> float:
        """Largest per-second share over any minute (the curve's peak rate)."""
        best = 0.0
        for a, b in zip(self.points, self.points[1:], strict=False):
            best = max(best, b - a)
        return best / 60.0


def build_curve(minute_weights: Sequence[float]) -> TargetCurve:
    """Target curve from per-elapsed-minute traffic weights of one local day.

    The share accrues in proportion to the weights up to ``len - 30`` minutes
    (23:30 local) and stays at 1.0 after. An all-zero shape (no logged traffic) gives
    a straight line.

    Raises:
        ValueError: fewer than 60 minutes or a negative/non-finite weight.
    """
    n = len(minute_weights)
    if n < 60:
        raise ValueError("a day has at least 60 minutes")
    if any((not math.isfinite(w)) or w < 0 for w in minute_weights):
        raise ValueError("weights must be finite and >= 0")
    end = n - END_MARGIN_MINUTES
    active = list(minute_weights[:end])
    total = sum(active)
    if total <= 0:
        active = [1.0] * end
        total = float(end)
    pts = [0.0]
    acc = 0.0
    for w in active:
        acc += w
        pts.append(min(1.0, acc / total))
    pts[-1] = 1.0
    pts.extend([1.0] * (n - end))
    return TargetCurve(tuple(pts), end)


def curve_for_day(hourly: Sequence[float], day: date, tz: str) -> TargetCurve:
    """The target curve of local ``day`` in ``tz`` for a 24-value hourly traffic shape."""
    return build_curve(day_minute_weights(hourly_to_minutely(hourly), day, tz))


@dataclass(frozen=True, slots=True)
class TargetPlan:
    """Target cumulative spend (micros) over a day: a curve scaled to a budget.

    Before any edit ``anchor_s = 0`` and ``anchor_spend = 0`` so the target is
    ``budget × share(t)``. A budget edit at ``anchor_s`` with committed spend
    ``anchor_spend`` spreads what remains of the new budget over the rest of the curve
    (DESIGN.md §Money and budgets: "budget edits rescale the rest of the curve")::

        target(t) = S + (B − S) × (c(t) − c(a)) / (1 − c(a))     for t ≥ a
    """

    curve: TargetCurve
    budget_micros: int
    anchor_s: float = 0.0
    anchor_spend_micros: int = 0

    def target_micros(self, elapsed_s: float) -> float:
        """Target cumulative spend in micros (float, for control only) at ``elapsed_s``."""
        b, s = self.budget_micros, self.anchor_spend_micros
        if s >= b:
            return float(s)
        if elapsed_s <= self.anchor_s:
            if self.anchor_s == 0.0:
                return 0.0
            # before the edit the old plan applied; report the anchor linearly
            ca = max(self.curve.share_at(self.anchor_s), 1e-12)
            return s * self.curve.share_at(elapsed_s) / ca
        ca = self.curve.share_at(self.anchor_s)
        if ca >= 1.0:
            return float(b)
        c = self.curve.share_at(elapsed_s)
        return s + (b - s) * (c - ca) / (1.0 - ca)

    def target_share(self, elapsed_s: float) -> float:
        """Target cumulative spend as a share of the current budget."""
        return self.target_micros(elapsed_s) / self.budget_micros if self.budget_micros else 0.0

    def rescaled(self, new_budget_micros: int, at_s: float, spent_micros: int) -> TargetPlan:
        """The plan after a budget edit to ``new_budget_micros`` at ``at_s`` with ``spent_micros``
        committed (spend above the new budget leaves nothing to plan)."""
        return TargetPlan(self.curve, new_budget_micros, at_s, spent_micros)
