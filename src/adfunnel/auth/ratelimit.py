"""Per-key request limits: a token bucket for each API key.

Each key may send ``burst`` requests at once and ``rate_per_s`` a second on average;
past that its requests are refused (429 with ``Retry-After``, by
:class:`~adfunnel.auth.http.Authenticate`) until its bucket refills. Buckets live in
the process: with ``--workers N`` each worker counts on its own (a key gets up to N
times the rate). Time is the monotonic clock: a limit on request traffic, like a
deadline, is about real seconds, not the domain's (possibly manual) clock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """Token buckets by key: ``rate_per_s`` tokens a second, at most ``burst`` held.

    ``now`` (seconds, monotonic) is injectable for tests. Thread-safe.
    """

    def __init__(self, rate_per_s: float, burst: int,
                 now: Callable[[], float] = time.monotonic) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._now = now
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Spend one token of ``key``'s bucket: 0.0 when there was one (the request may
        go), else the seconds until one is there (the request is refused, nothing spent).
        """
        now = self._now()
        with self._lock:
            b = self._buckets.get(key)
            if b is None:
                b = self._buckets[key] = _Bucket(float(self.burst), now)
            b.tokens = min(float(self.burst), b.tokens + (now - b.at) * self.rate_per_s)
            b.at = now
            if b.tokens >= 1.0:
                b.tokens -= 1.0
                return 0.0
            return (1.0 - b.tokens) / self.rate_per_s


def retry_after(wait_s: float) -> int:
    """The ``Retry-After`` header's whole seconds for a wait (at least 1)."""
    return max(1, math.ceil(wait_s))
