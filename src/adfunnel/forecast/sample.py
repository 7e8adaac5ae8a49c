"""The request sample's serving side: a bounded reservoir of ad requests per UTC hour.

The ad server hands every valid ad request to :meth:`RequestSampler.record` (O(1) under
one lock: a counter, one random draw and, for a kept request, one list slot; the
request's targeting view is built later, off the request path). Per UTC hour the sampler
keeps at most ``per_hour`` requests by Vitter's algorithm R (each request of the hour is
kept with the same probability ``kept / seen``) and counts every request ``seen``.
:meth:`drain` hands over the hours that are over (all of them with ``final``), each kept
request weighted ``seen / kept``: the weights of one hour sum to exactly the requests
this process saw in it, so counts scale back up exactly, and several ad-server processes
each write their own hours (their weights add up).

Timestamps come from the injected clock. Thread-safe.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

#: A request's targeting view: attribute -> values (placement and slot sizes included).
Attributes = Mapping[str, frozenset[str]]

#: Default most requests kept per UTC hour and ad-server process (``forecast_sample_per_hour``).
DEFAULT_PER_HOUR = 250


@dataclass(frozen=True, slots=True)
class SampledRequest:
    """One sampled request: ``at`` (aware UTC), its targeting view, and ``weight``, the
    requests it stands for (≥ 1: seen / kept of its writer's hour)."""

    at: datetime
    attributes: Attributes
    weight: float

    @property
    def placement(self) -> str:
        return next(iter(self.attributes.get("placement", frozenset(("",)))))


@dataclass(slots=True)
class _Hour:
    seen: int = 0
    kept: list[tuple[float, Any]] = field(default_factory=list)


class RequestSampler:
    """At most ``per_hour`` requests per UTC hour, with their weights (module doc).

    ``view`` turns what :meth:`record` was given into its targeting view (called by
    :meth:`drain`, off the request path); ``now`` is the clock's ``now``."""

    def __init__(self, now: Callable[[], datetime], view: Callable[[Any], Attributes],
                 per_hour: int = DEFAULT_PER_HOUR, seed: int | None = None) -> None:
        if per_hour < 1:
            raise ValueError(f"per_hour must be >= 1, got {per_hour}")
        self.now = now
        self.view = view
        self.per_hour = per_hour
        self._hours: dict[int, _Hour] = {}
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def record(self, request: Any) -> None:
        """One valid ad request, at the clock's now."""
        t = self.now().timestamp()
        h = int(t // 3600)
        with self._lock:
            hour = self._hours.get(h)
            if hour is None:
                hour = self._hours[h] = _Hour()
            hour.seen += 1
            if len(hour.kept) < self.per_hour:
                hour.kept.append((t, request))
            else:
                k = self._rng.randrange(hour.seen)
                if k < self.per_hour:
                    hour.kept[k] = (t, request)

    def drain(self, *, final: bool = False) -> list[SampledRequest]:
        """The kept requests of the hours before the clock's current hour (every hour
        with ``final``: the last flush of a stopping process), weighted; those hours are
        forgotten."""
        current = int(self.now().timestamp() // 3600)
        with self._lock:
            done = [h for h in self._hours if final or h < current]
            hours = [self._hours.pop(h) for h in done]
        out: list[SampledRequest] = []
        for hour in hours:
            if not hour.kept:
                continue
            weight = hour.seen / len(hour.kept)
            out += [SampledRequest(datetime.fromtimestamp(t, UTC), self.view(req), weight)
                    for t, req in hour.kept]
        return out

    def pending(self) -> int:
        """Requests seen in the hours not drained yet."""
        with self._lock:
            return sum(h.seen for h in self._hours.values())
