"""First-price bid shading: the bid that maximises (value − bid) × P(win | bid). Pure.

DESIGN.md §How ads are sold, *Automatic bidding*: on first-price placements automatic
strategies shade; manual bids are not shaded. The probability of winning at a bid is
the distribution of the *price to beat* (the highest competing bid or the floor,
which first-price exchanges report back as the minimum bid to win): P(win | b) =
P(price ≤ b), estimated per segment (placement × size × hour of day) as an empirical
distribution, backing off to coarser segments when one has few observations. The
expected surplus of a bid b is (v − b) × P(win | b); the shaded bid is its maximiser
over b ≤ v (Gligorijevic et al., "Bid shading in the brave new world of first-price
auctions", CIKM 2020; the surplus objective is the standard one of first-price
bidding, e.g. Krishna, *Auction Theory*, ch. 2).

A curve is a step function held as integer knots (price, number of observations at
or below it), so the surplus is exact integer arithmetic and its maximiser (the
highest among ties) is non-decreasing in the value (Topkis: the surplus has
increasing differences in (v, b); rounding errors could break the order). The model is fitted off
the request path and serialised to JSON, to be released and loaded like a model.
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from adfunnel.bidding.strategy import MIN_BID_MICROS

FORMAT_VERSION = 1
#: Wildcard of a coarser segment's key.
ANY = "*"
#: Segments with fewer observations defer to the next coarser one.
DEFAULT_MIN_OBSERVATIONS = 200
#: Most knots a curve keeps (quantiles of the observed prices).
DEFAULT_MAX_KNOTS = 256


@dataclass(frozen=True, slots=True)
class WinCurve:
    """P(win | bid) as a step function: ``prices`` strictly increasing (micros), ``cum[i]``
    the number of observations ≤ ``prices[i]`` (non-decreasing), ``n`` the total."""

    prices: tuple[int, ...]
    cum: tuple[int, ...]
    n: int

    @classmethod
    def from_prices(cls, prices: Iterable[int], max_knots: int = DEFAULT_MAX_KNOTS) -> WinCurve:
        """The empirical curve of observed prices to beat (micros), thinned to at most
        ``max_knots`` knots at quantiles; thinning keeps each kept knot exact, so the
        curve never overstates P(win) anywhere.

        Raises:
            ValueError: no prices.
        """
        arr = np.sort(np.asarray(list(prices), dtype=np.int64))
        if len(arr) == 0:
            raise ValueError("no prices to fit")
        uniq, counts = np.unique(arr, return_counts=True)
        cum = np.cumsum(counts)
        if len(uniq) > max_knots:
            pick = np.unique(np.linspace(0, len(uniq) - 1, max_knots).round().astype(np.int64))
            uniq, cum = uniq[pick], cum[pick]
        return cls(tuple(int(x) for x in uniq), tuple(int(x) for x in cum), len(arr))

    def p_win(self, bid_micros: int) -> float:
        """P(price to beat ≤ bid), a probability."""
        i = bisect.bisect_right(self.prices, bid_micros)
        return self.cum[i - 1] / self.n if i else 0.0


def shaded_bid(value_micros: float, curve: WinCurve) -> int:
    """The bid b ≤ ⌊value⌋ (integer micros) maximising (value − b) × P(win | b); 0 (no
    bid) when no bid has a positive expected surplus.

    Candidates are the curve's knots (between knots P(win) is flat, so a bid above a
    knot only pays more); a knot below one micro is bid as one micro. Ties go to the
    highest bid.

    Invariants (property-tested): 0 ≤ bid ≤ value; non-decreasing in the value; with
    prices uniform on [1, M] the bid is value ÷ 2 (± ½ micro).
    """
    v = int(value_micros) if value_micros >= 0 else 0
    k = bisect.bisect_right(curve.prices, v)  # knots with price ≤ v
    if k == 0 or v < MIN_BID_MICROS:
        return 0
    bids = np.maximum(np.asarray(curve.prices[:k], dtype=np.int64), MIN_BID_MICROS)
    cum = np.asarray(curve.cum[:k], dtype=np.int64)
    if v * curve.n < 2**62:  # exact in int64
        surplus = (v - bids) * cum
    else:  # exact in Python integers (values of millions of USD per impression)
        surplus = np.array([(v - int(b)) * int(c) for b, c in zip(bids, cum, strict=True)],
                           dtype=object)
    best = k - 1 - int(np.argmax(surplus[::-1]))  # the last (highest) maximiser
    return int(bids[best]) if surplus[best] > 0 else 0


def _keys(placement: str, size: str, hour: int) -> tuple[str, ...]:
    """The segment's key and its back-offs, finest first."""
    return (f"{placement}|{size}|{hour}", f"{placement}|{size}|{ANY}",
            f"{placement}|{ANY}|{ANY}", f"{ANY}|{ANY}|{ANY}")


@dataclass(frozen=True, slots=True)
class ShadingModel:
    """Win curves by segment key ``placement|size|hour`` (``*`` for any), with back-off."""

    curves: dict[str, WinCurve]
    min_observations: int = DEFAULT_MIN_OBSERVATIONS

    def curve_for(self, placement: str, size: str, hour: int) -> WinCurve | None:
        """The finest curve of the segment with at least ``min_observations``, else the
        coarsest one there is; None when the model has none."""
        found = None
        for key in _keys(placement, size, hour):
            curve = self.curves.get(key)
            if curve is not None:
                if curve.n >= self.min_observations:
                    return curve
                found = curve
        return found

    def to_json(self) -> str:
        """The model as JSON (release format ``FORMAT_VERSION``)."""
        return json.dumps({
            "version": FORMAT_VERSION, "min_observations": self.min_observations,
            "curves": {k: {"prices": list(c.prices), "cum": list(c.cum), "n": c.n}
                       for k, c in sorted(self.curves.items())}})

    @classmethod
    def from_json(cls, text: str) -> ShadingModel:
        """A model from :meth:`to_json`'s text.

        Raises:
            ValueError: another format version, or a curve that is not a valid step
                function (prices not increasing, counts decreasing or above n).
        """
        doc = json.loads(text)
        if doc.get("version") != FORMAT_VERSION:
            raise ValueError(f"unknown shading model version {doc.get('version')!r}")
        curves = {}
        for key, c in doc["curves"].items():
            curve = WinCurve(tuple(int(x) for x in c["prices"]), tuple(int(x) for x in c["cum"]),
                             int(c["n"]))
            _check(key, curve)
            curves[key] = curve
        return cls(curves, int(doc["min_observations"]))


def _check(key: str, c: WinCurve) -> None:
    ok = (len(c.prices) == len(c.cum) > 0 and c.n >= c.cum[-1]
          and all(a < b for a, b in zip(c.prices, c.prices[1:], strict=False))
          and all(0 <= a <= b for a, b in zip(c.cum, c.cum[1:], strict=False))
          and c.cum[0] >= 0)
    if not ok:
        raise ValueError(f"invalid win curve for segment {key!r}")


def fit(observations: Iterable[tuple[str, str, int, int]], *,
        min_observations: int = DEFAULT_MIN_OBSERVATIONS,
        max_knots: int = DEFAULT_MAX_KNOTS) -> ShadingModel:
    """Fit the model from observations ``(placement, size, hour, price_to_beat_micros)``:
    one curve per segment and per coarser back-off key. Off the request path."""
    by_key: dict[str, list[int]] = defaultdict(list)
    for placement, size, hour, price in observations:
        for key in _keys(placement, size, hour):
            by_key[key].append(int(price))
    return ShadingModel({k: WinCurve.from_prices(v, max_knots) for k, v in by_key.items()},
                        min_observations)


@dataclass(frozen=True, slots=True)
class ShadingTable:
    """:func:`shaded_bid` of one curve for every integer value up to where it reaches the
    curve's top knot (a bid it keeps for every higher value: it is non-decreasing in the
    value and never above the top knot), for many lookups at once. Equal to
    :func:`shaded_bid` on integer values (tested)."""

    curve: WinCurve
    bids: np.ndarray  # bids[v] = shaded_bid(v, curve), int64
    saturated: bool  # True: bids[-1] is the top knot, the bid of every higher value

    @classmethod
    def build(cls, curve: WinCurve, max_value: int = 1 << 20) -> ShadingTable:
        """The table up to the value whose shaded bid is the top knot, at most ``max_value``."""
        top = max(MIN_BID_MICROS, curve.prices[-1])
        out = []
        v = 0
        while v <= max_value:
            out.append(shaded_bid(v, curve))
            if out[-1] == top:
                return cls(curve, np.asarray(out, dtype=np.int64), True)
            v += 1
        return cls(curve, np.asarray(out, dtype=np.int64), False)

    def lookup(self, values_micros: np.ndarray) -> np.ndarray:
        """Shaded bids of integer values (int64 array)."""
        v = np.maximum(0, np.asarray(values_micros, dtype=np.int64))
        last = len(self.bids) - 1
        out = self.bids[np.minimum(v, last)]
        if not self.saturated and (v > last).any():  # beyond the table: compute them
            for i in np.flatnonzero(v > last):
                out[i] = shaded_bid(int(v[i]), self.curve)
        return out
