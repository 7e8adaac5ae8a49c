"""The recalibration rule: a Gamma-Poisson factor per (model version, placement), bounded,
1 without evidence or for a calibrated model, and with evidence a move of the ratio
toward 1 that never overshoots; segments shrink toward their version's factor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.prediction.recalibration import (
    HIGH,
    LOW,
    MIN_CLICKS,
    STRENGTH,
    Evidence,
    factor,
    fit,
)

counts = st.floats(0, 1e6, allow_nan=False)
clicks = st.integers(0, 1_000_000)
priors = st.floats(LOW, HIGH)


@given(counts, clicks, priors)
def test_every_factor_is_bounded(predicted: float, observed: int, prior: float) -> None:
    """Red when the clamp to [LOW, HIGH] is dropped (0 clicks on 10⁶ predicted → ~1e-5)."""
    assert LOW <= factor(predicted, observed, prior) <= HIGH


@given(st.floats(0, MIN_CLICKS, exclude_max=True), st.integers(0, int(MIN_CLICKS) - 1),
       priors)
def test_without_enough_evidence_the_prior_stands(predicted: float, observed: int,
                                                  prior: float) -> None:
    """Red when the MIN_CLICKS gate is removed (9 predicted, 0 observed would move)."""
    assert factor(predicted, observed, prior) == prior
    assert factor(0.0, 0, prior) == prior


@given(st.integers(0, 1_000_000))
def test_a_calibrated_model_keeps_factor_one(n: int) -> None:
    """Red when the prior's pseudo-clicks are added to one side only ((C + k) ÷ P)."""
    assert factor(float(n), n) == pytest.approx(1.0)


@given(st.floats(MIN_CLICKS, 1e5), st.integers(0, 100_000))
def test_with_evidence_the_ratio_moves_toward_one_without_overshooting(
        predicted: float, observed: int) -> None:
    """Red when the factor is inverted (P ÷ C instead of C ÷ P moves the ratio away) or
    not shrunk (with C = 0 it would fall to LOW and the corrected ratio to 0)."""
    f = factor(predicted, observed)
    if observed == 0:  # every prediction a miss: the factor falls, the ratio stays > 0
        assert f < 1.0
        return
    raw = predicted / observed
    corrected = f * raw
    assert min(raw, 1.0) - 1e-9 <= corrected <= max(raw, 1.0) + 1e-9
    if abs(raw - 1.0) > 1e-6 and LOW < f < HIGH:
        assert abs(corrected - 1.0) < abs(raw - 1.0)


def test_the_posterior_mean_and_its_prior_strength() -> None:
    """Red when STRENGTH stops counting as clicks ((C + k) ÷ (P + k ÷ f₀))."""
    assert factor(144.0, 100) == pytest.approx((100 + STRENGTH) / (144 + STRENGTH))
    assert factor(144.0, 100, 0.5) == pytest.approx((100 + STRENGTH) / (144 + 2 * STRENGTH))


@given(st.dictionaries(st.sampled_from(["p1", "p2", "p3", "p4"]),
                       st.tuples(st.floats(0, 500), st.integers(0, 500)), min_size=1))
def test_segments_shrink_toward_their_versions_factor(segs: dict[str, tuple[float, int]]
                                                      ) -> None:
    """Red when a segment shrinks toward 1 instead of its version's factor, or when a
    segment with too little evidence gets a factor of its own."""
    ev = {("v", s): Evidence(100, p, c) for s, (p, c) in segs.items()}
    table = fit(ev)
    pred, obs = sum(p for p, _ in segs.values()), sum(c for _, c in segs.values())
    version = factor(pred, obs)
    assert table.versions["v"] == pytest.approx(version)
    for s, (p, c) in segs.items():
        expected = factor(p, c, version)
        assert table.factor("v", s) == pytest.approx(expected)
        assert (("v", s) in table.segments) == (max(p, c) >= MIN_CLICKS)
    assert table.factor("v", "never-seen") == pytest.approx(version)
    assert table.factor("other-version", "p1") == 1.0


def test_a_version_overpredicting_by_144_percent_is_scaled_down() -> None:
    """The replay's last day, in figures: 1.44 × the clicks predicted."""
    table = fit({("v", "a"): Evidence(1_000, 43.2, 30), ("v", "b"): Evidence(10, 0.5, 0)})
    assert table.factor("v", "b") == table.versions["v"] < 1.0
    assert 1.0 <= 43.2 * table.factor("v", "a") / 30 < 1.44
