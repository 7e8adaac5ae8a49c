"""Online recalibration of the click model: one factor per (model version, segment). Pure.

DESIGN.md §The funnel, step 5 ("calibrated"): every price and every automatic bid
multiplies pCTR, so a model that predicts 1.4 times the clicks that happen overbids by
40 %. A model calibrated on held-out rows is miscalibrated once it serves: the auction
picks the candidates it overrates (the winner's curse), and traffic drifts. The cure
is to compare, per model version and segment, the clicks the model predicted for the
impressions it won with the clicks billed for them, and to scale its pCTR:
pCTR' = min(pCTR × factor, 1 − P_MIN).

The rule (:func:`factor`), a Gamma-Poisson posterior mean: observed clicks C ~ Poisson(f ×
P), where P is the predicted clicks (Σ raw pCTR of the billed impressions) and f the
factor; the prior f ~ Gamma(shape k, rate k ÷ f₀) has mean f₀ and weighs as much as
``k`` clicks (``STRENGTH``). The posterior mean is (C + k) ÷ (P + k ÷ f₀):

- no evidence (P = C = 0) gives f₀; nor does it move before ``MIN_CLICKS`` predicted or
  observed clicks (below that one hour's luck would swing prices);
- a calibrated model (C = P) keeps f₀ = 1;
- with evidence the corrected ratio f·P ÷ C lies between 1 and the raw P ÷ C: it moves
  toward 1 and never past it (f₀ = 1);
- kept within [``LOW``, ``HIGH``] (0.25-4): a factor outside means a broken model, for
  a rollback, not a refit.

Two levels (:func:`fit`): a version's factor over all its segments is shrunk toward 1;
each segment's toward its version's, so a placement with three clicks takes its
version's factor and a large one earns its own.

The segment is the placement: the request names one, the served log records it,
reserves are set per placement, and the slot's page context drives most of the
difference between predicted and observed clicks that a model version leaves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: Prior strength, in clicks: the evidence that weighs as much as the prior factor.
STRENGTH = 10.0
#: Predicted or observed clicks a factor needs before it moves off its prior.
MIN_CLICKS = 10.0
#: Bounds of every factor (a model off by more is rolled back, not rescaled).
LOW, HIGH = 0.25, 4.0
#: Segment key of a version's own factor, over all its segments (in status and metrics).
ALL = "*"


@dataclass(frozen=True, slots=True)
class Evidence:
    """One (model version, segment) over a window: ``impressions`` billed impressions
    the model scored, ``predicted`` Σ of their raw model pCTRs (clicks), ``observed``
    billed clicks among them."""

    impressions: int
    predicted: float
    observed: int


def factor(predicted: float, observed: float, prior: float = 1.0, *,
           strength: float = STRENGTH, min_clicks: float = MIN_CLICKS,
           low: float = LOW, high: float = HIGH) -> float:
    """The factor of pCTR given ``predicted`` and ``observed`` clicks (module doc):
    (observed + k) ÷ (predicted + k ÷ prior), within [low, high]; ``prior`` while
    neither count reaches ``min_clicks``.

    Raises:
        ValueError: negative counts, a prior outside [low, high], or strength ≤ 0.
    """
    if predicted < 0 or observed < 0 or strength <= 0 or not low <= prior <= high:
        raise ValueError("counts must be >= 0, strength > 0 and low <= prior <= high")
    if max(predicted, observed) < min_clicks:
        return prior
    return min(high, max(low, (observed + strength) / (predicted + strength / prior)))


@dataclass(frozen=True)
class FactorTable:
    """The factors serving multiplies pCTR by, per model version (``versions``: its
    factor over all segments) and per (version, segment) (``segments``: only those
    with enough evidence of their own; the others take their version's)."""

    versions: Mapping[str, float] = field(default_factory=dict)
    segments: Mapping[tuple[str, str], float] = field(default_factory=dict)
    #: the evidence each factor came from, (version, segment or ALL) -> Evidence
    evidence: Mapping[tuple[str, str], Evidence] = field(default_factory=dict)

    def factor(self, version: str, segment: str) -> float:
        """The factor of ``version``'s pCTR in ``segment`` (1.0: nothing measured)."""
        found = self.segments.get((version, segment))
        return found if found is not None else self.versions.get(version, 1.0)


def fit(evidence: Mapping[tuple[str, str], Evidence], *, strength: float = STRENGTH,
        min_clicks: float = MIN_CLICKS) -> FactorTable:
    """The factors of ``evidence`` per (model version, segment): each version's over
    its segments summed, shrunk toward 1; each segment's shrunk toward its version's,
    kept only where it has ``min_clicks`` of its own."""
    totals: dict[str, list[float]] = {}
    for (version, _), e in evidence.items():
        t = totals.setdefault(version, [0, 0.0, 0])
        t[0] += e.impressions
        t[1] += e.predicted
        t[2] += e.observed
    versions = {v: factor(p, c, strength=strength, min_clicks=min_clicks)
                for v, (_, p, c) in totals.items()}
    segments = {key: factor(e.predicted, e.observed, versions[key[0]], strength=strength,
                            min_clicks=min_clicks)
                for key, e in evidence.items()
                if max(e.predicted, e.observed) >= min_clicks}
    table = {**evidence, **{(v, ALL): Evidence(int(i), p, int(c))
                            for v, (i, p, c) in totals.items()}}
    return FactorTable(versions, segments, table)
