"""The availability forecast over a request sample (issue #26). Pure: no I/O, no clock.

Given the sampled requests of the history (:mod:`adfunnel.forecast.sample`), a candidate
line (targeting, placements folded into it, flight) and the sponsorship and guaranteed
lines already booked, :func:`forecast` answers:

- ``matching``: the requests over the candidate's flight (from ``now`` on) that its
  targeting accepts — each sampled request evaluated with the conjunction index
  (:class:`~adfunnel.index.ConjunctionIndex`, the ad server's own), weighted by the
  requests it stands for, projected by hour of week (:mod:`adfunnel.forecast.project`);
- ``available``: what of that the booked lines leave, by simulating their allocation on
  the projected sample with the server's own rule (DESIGN.md §How ads are sold):
  sponsorships take their share first (in campaign id order, as
  :func:`~adfunnel.serving.tiers.fill_direct` does for one slot); then guaranteed lines
  in High Water Mark order (:func:`~adfunnel.pacing.allocation.high_water_mark`), each
  demanding what remains of its goal (``remaining``, impressions) spread over its
  remaining flight in proportion to its matching supply, so the part of it that falls in
  the candidate's flight is ``remaining × supply in the overlap / supply of its remaining
  flight``;
- ``takes``: per booked line, what it takes of the candidate's matching requests.

Invariants (property tests): ``0 ≤ available ≤ matching``; ``available`` does not grow
when a booked goal grows; scaling every sample weight by ``k`` scales ``matching``,
``available`` and ``takes`` by ``k``.

Units: requests (one impression per request and line: a line fills one slot of a page).

Limits: a booked line's dayparts, frequency caps, creative sizes and budget are not
simulated (only its targeting, flight and goal or share); the history is the sample's,
so traffic growth, seasons and holidays are not foreseen.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from itertools import pairwise

import numpy as np

from adfunnel.forecast.project import lived, request_slots, row_factors, span_hours, weekly
from adfunnel.forecast.sample import SampledRequest
from adfunnel.index import ConjunctionIndex
from adfunnel.pacing.allocation import high_water_mark
from adfunnel.targeting.expr import Expr, In, Not, NotIn

#: Index id of the candidate (booked lines go by campaign id, which is ≥ 1).
CANDIDATE = 0
SPONSORSHIP = "sponsorship"
GUARANTEED = "guaranteed"


@dataclass(frozen=True, slots=True)
class BookedLine:
    """A booked sponsorship or guaranteed line: its targeting (placement rules folded
    in), its flight ``[start, end)`` (aware instants), and ``remaining`` impressions of
    its goal (guaranteed) or its ``share`` of the matching requests (sponsorship)."""

    campaign_id: int
    name: str
    priority: str
    expr: Expr
    start: datetime
    end: datetime
    remaining: float = 0.0
    share: float = 0.0


@dataclass(frozen=True, slots=True)
class Basis:
    """What a forecast stands on: the history ``[history_from, history_to)`` (UTC hour
    starts) and its days, the sampled requests in it, the requests they stand for, and
    whether slots were hours of week (else hours of day)."""

    history_from: datetime
    history_to: datetime
    history_days: float
    sampled_requests: int
    requests: float
    by_week: bool

    @property
    def sample_rate(self) -> float:
        """Sampled requests per request of the history (0 without any)."""
        return self.sampled_requests / self.requests if self.requests > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Forecast:
    """``matching`` and ``available`` requests over the flight, ``takes`` per booked line
    id (only lines that take some; sponsorships and guaranteed lines), and the basis."""

    matching: float
    available: float
    takes: dict[int, float]
    basis: Basis


def forecast(rows: Sequence[SampledRequest], expr: Expr, start: datetime, end: datetime,
             booked: Sequence[BookedLine], z: tzinfo, now: datetime,
             history_from: datetime, history_to: datetime) -> Forecast:
    """The forecast of a candidate of targeting ``expr`` over ``[start, end)`` (from
    ``now`` on) in zone ``z``, with the ``booked`` lines, from the sampled ``rows`` of the
    history ``[history_from, history_to)`` (rows outside it are ignored). Module doc."""
    rows = [r for r in rows if history_from <= r.at < history_to]
    by_week = weekly(history_from, history_to)
    lived_hours = lived(history_from, history_to, z, by_week)
    basis = Basis(history_from, history_to, float(lived_hours.sum()) / 24, len(rows),
                  float(sum(r.weight for r in rows)), by_week)
    start = max(start, now)
    if not rows or start >= end:
        return Forecast(0.0, 0.0, {}, basis)
    lines = {b.campaign_id: b for b in booked if b.start < end and b.end > start}
    # sampled requests alike for the forecast (one slot, the same lines matching) are
    # summed: a request's projection depends on its slot and weight only (linear)
    groups: dict[tuple[int, frozenset[int]], float] = defaultdict(float)
    row_slots = request_slots([r.at for r in rows], z, by_week).tolist()
    for r, slot, ids in zip(rows, row_slots, _matches(rows, expr, list(lines.values())),
                            strict=True):
        groups[(slot, ids)] += r.weight
    slots = np.array([k[0] for k in groups], dtype=np.int64)
    weights = np.array(list(groups.values()))
    eligible = [k[1] for k in groups]

    def projected(a: datetime, b: datetime) -> np.ndarray:
        return weights * row_factors(slots, lived_hours, span_hours(a, b, z, by_week))

    # the candidate's flight, cut where the set of booked lines in flight changes
    cuts = sorted({start, end, *(t for b in lines.values() for t in (b.start, b.end)
                                 if start < t < end)})
    nodes: dict[tuple[int, frozenset[int], bool], float] = defaultdict(float)
    in_flight: dict[int, float] = defaultdict(float)  # line -> its supply in the flight
    for seg, (a, b) in enumerate(pairwise(cuts)):
        live = {j for j, ln in lines.items() if ln.start <= a and ln.end >= b}
        pw = projected(a, b).tolist()
        for i, ids in enumerate(eligible):
            if pw[i] <= 0:
                continue
            mine = ids & live
            nodes[(seg, mine, CANDIDATE in ids)] += pw[i]
            for j in mine:
                in_flight[j] += pw[i]
    demand = {}
    for j, ln in lines.items():
        if ln.priority != GUARANTEED:
            continue
        own = [i for i, ids in enumerate(eligible) if j in ids]
        whole = float(projected(max(ln.start, now), ln.end)[own].sum()) if own else 0.0
        demand[j] = ln.remaining * in_flight[j] / whole if whole > 0 else 0.0
    return _allocate(nodes, lines, demand, basis)


def _matches(rows: Sequence[SampledRequest], expr: Expr, lines: Sequence[BookedLine]
             ) -> list[frozenset[int]]:
    """Per row, the ids (``CANDIDATE`` and booked campaign ids) whose targeting it
    satisfies: one conjunction-index query per distinct view of the values the
    expressions name (a value no expression names changes no match: for ``in`` and
    ``not_in`` alike it counts as absent)."""
    index = ConjunctionIndex(background_merge=False)
    index.build([(CANDIDATE, expr, 0.0), *((ln.campaign_id, ln.expr, 0.0) for ln in lines)])
    named: dict[str, set[str]] = defaultdict(set)
    for e in (expr, *(ln.expr for ln in lines)):
        _named_values(e, named)
    attrs = sorted(named)
    limit = len(lines) + 1
    seen: dict[tuple[frozenset[str], ...], frozenset[int]] = {}
    out = []
    empty: frozenset[str] = frozenset()
    for r in rows:
        got_attrs = r.attributes
        key = tuple(got_attrs.get(a, empty) & named[a] for a in attrs)
        got = seen.get(key)
        if got is None:
            view = {a: v for a, v in zip(attrs, key, strict=True) if v}
            got = seen[key] = frozenset(index.query(view, limit).ad_ids)
        out.append(got)
    return out


def _named_values(expr: Expr, out: dict[str, set[str]]) -> None:
    """Add to ``out`` every attribute's values that ``expr`` names."""
    if isinstance(expr, In | NotIn):
        out[expr.attr] |= expr.values
    elif isinstance(expr, Not):
        _named_values(expr.child, out)
    else:
        for c in expr.children:
            _named_values(c, out)


def _allocate(nodes: dict[tuple[int, frozenset[int], bool], float],
              lines: dict[int, BookedLine], demand: dict[int, float], basis: Basis
              ) -> Forecast:
    """Sponsorships' shares, then High Water Mark over what they leave (module doc)."""
    keys = list(nodes)
    left = [nodes[k] for k in keys]
    takes: dict[int, float] = defaultdict(float)
    for n, (_, ids, cand) in enumerate(keys):
        for j in sorted(j for j in ids if lines[j].priority == SPONSORSHIP):
            took = left[n] * min(max(lines[j].share, 0.0), 1.0)
            left[n] -= took
            if cand:
                takes[j] += took
    supply = [(frozenset(j for j in ids if j in demand), left[n])
              for n, (_, ids, _) in enumerate(keys)]
    live = [n for n, (_, w) in enumerate(supply) if w > 0]
    plan = high_water_mark([supply[n] for n in live], demand)
    for at, n in enumerate(live):
        for j, took in plan.taken[at].items():
            left[n] = max(left[n] - took, 0.0)
            if keys[n][2]:
                takes[j] += took
    matching = sum(nodes[k] for k in keys if k[2])
    available = sum(left[n] for n, k in enumerate(keys) if k[2])
    return Forecast(matching, min(available, matching),
                    {j: t for j, t in takes.items() if t > 0}, basis)
