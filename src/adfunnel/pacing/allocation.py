"""Allocation among guaranteed lines: High Water Mark (Chen, Berkhin, Anderson, Devanur,
"Ad serving using a compact allocation plan", EC 2012, §3).

Guaranteed lines that compete for the same requests must not starve the narrow one. The
rule, from the paper:

1. **Order by contention.** Each line's eligible supply ``S_j`` is the weight of the
   request types it may serve. Lines are served in increasing ``S_j`` (least eligible
   supply first; equal supplies by line id): a narrow line has fewer places to find its
   impressions, so it claims them first.
2. **Take the same fraction everywhere.** In that order, line ``j`` with demand ``d_j``
   takes from every eligible request type ``i`` the fraction ``alpha_j`` of its supply
   ``s_i``, limited by what the lines before it left (``r_i``)::

       sum over i eligible to j of  min(r_i, alpha_j * s_i)  =  d_j

   ``alpha_j`` is the smallest such fraction in [0, 1]; 1 when even all of what is left
   does not meet ``d_j`` (the line takes all of it and falls short). Then ``r_i`` drops by
   what ``j`` took. Taking a uniform fraction (the "water level" rising evenly over its
   types) spreads a line over its audience instead of exhausting the first types it meets.

The plan is compact: one number per line (``alpha_j``) and the order. At serving time the
ad server offers each request to its eligible guaranteed lines in this order
(:mod:`adfunnel.serving.tiers`); :func:`high_water_mark` also gives each line's *serve
probability* ``p_j`` among the requests that reach it (what the lines before it left):
``p_j = taken_j / reaching_j``, which the budget service may use to seed a guaranteed
line's pacing rate before its controller has history (:func:`seed_pacing_rates`).

Units: supply and demand are in the same unit (requests or impressions over the same
span; a sample's weights are scaled so). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

#: One request type of a supply sample: the line ids eligible for it, and its weight.
SupplyNode = tuple[Collection[int], float]


@dataclass(frozen=True, slots=True)
class Allocation:
    """A compact allocation plan.

    ``order``: line ids in serving order (least eligible supply first). ``alpha``: each
    line's fraction of its eligible supply, in [0, 1]. ``allocated``: the supply each line
    is expected to take (≤ its demand). ``eligible``: each line's eligible supply
    ``S_j``. ``p``: each line's serve probability among the requests the lines before it
    left, in [0, 1]. ``taken``: per request type (in ``supply`` order, those of weight
    > 0), what each line takes of it.
    """

    order: tuple[int, ...]
    alpha: dict[int, float]
    allocated: dict[int, float]
    eligible: dict[int, float]
    p: dict[int, float]
    taken: tuple[dict[int, float], ...]


def contention_order(eligible_supply: Mapping[int, float]) -> list[int]:
    """Line ids by increasing eligible supply, equal supplies by id: HWM's serving order."""
    return sorted(eligible_supply, key=lambda j: (eligible_supply[j], j))


def high_water_mark(supply: Sequence[SupplyNode], demand: Mapping[int, float]) -> Allocation:
    """The High Water Mark plan for lines with ``demand`` (line id -> demand ≥ 0) over
    ``supply`` (request types: eligible line ids, weight ≥ 0). Lines of ``demand`` that no
    request type lists get alpha 0 (nothing eligible). Module doc for the rule."""
    nodes = [(frozenset(ids), float(w)) for ids, w in supply if w > 0]
    weights: dict[int, list[float]] = {j: [] for j in demand}
    for ids, w in nodes:
        for j in ids:
            if j in weights:
                weights[j].append(w)
    # fsum: exactly rounded, so a line's supply (and the order) never depends on the
    # order the request types come in (a running float sum does, in its last bit)
    eligible = {j: math.fsum(ws) for j, ws in weights.items()}
    order = contention_order(eligible)
    left = [w for _, w in nodes]
    alpha: dict[int, float] = {}
    allocated: dict[int, float] = {}
    p: dict[int, float] = {}
    taken: tuple[dict[int, float], ...] = tuple({} for _ in nodes)
    for j in order:
        mine = [i for i, (ids, _) in enumerate(nodes) if j in ids]
        reaching = sum(left[i] for i in mine)
        a = water_level([(left[i], nodes[i][1]) for i in mine], max(float(demand[j]), 0.0))
        took = 0.0
        for i in mine:
            t = min(left[i], a * nodes[i][1])
            left[i] = max(left[i] - t, 0.0)
            took += t
            if t > 0:
                taken[i][j] = t
        alpha[j], allocated[j] = a, took
        p[j] = min(took / reaching, 1.0) if reaching > 0 else 0.0
    return Allocation(tuple(order), alpha, allocated, eligible, p, taken)


def water_level(nodes: Iterable[tuple[float, float]], demand: float) -> float:
    """The least ``alpha`` in [0, 1] with ``sum min(left_i, alpha * s_i) = demand`` over
    ``nodes`` (``(left_i, s_i)``, 0 ≤ left_i ≤ s_i); 1 when the nodes' ``left`` sum to less.

    The sum is piecewise linear and non-decreasing in alpha with breakpoints at
    ``left_i / s_i``: walked in breakpoint order, exactly."""
    pts = sorted((lf / s, lf, s) for lf, s in nodes if s > 0)
    if demand <= 0 or not pts:
        return 0.0
    capped = 0.0  # left of the nodes whose breakpoint is below alpha (they give it all)
    slope = sum(s for _, _, s in pts)  # supply of the nodes still growing with alpha
    prev = 0.0
    for bp, lf, s in pts:
        # on [prev, bp] the sum is capped + alpha * slope
        if capped + bp * slope >= demand:
            return max(prev, min((demand - capped) / slope, 1.0))
        capped += lf
        slope -= s
        prev = bp
    return 1.0


def seed_pacing_rates(allocation: Allocation, floor: float = 0.001) -> dict[int, float]:
    """The pacing rate each guaranteed line starts from before its controller has history:
    its plan's serve probability ``p_j`` (module doc), at least ``floor`` (the
    controller's least p) for a line with demand, so it keeps learning. The budget service
    owns the rate from then on (its controller follows the line's flight plan)."""
    return {j: max(allocation.p[j], floor) if allocation.allocated[j] > 0 else floor
            for j in allocation.order}
