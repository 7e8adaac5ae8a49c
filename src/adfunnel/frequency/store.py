"""Where users' cap records live: the :class:`FrequencyStore` interface and an in-memory
store.

One record set (a hash of integer fields, ``adfunnel.frequency.windows``) per user key,
with one expiry for the whole set. Every implementation passes
tests/contract/test_frequency_store_contract.py; ``adfunnel.frequency.redis_store``
holds the Redis one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from adfunnel.clock import Clock
from adfunnel.frequency.windows import CapCheck, CapRule, counter_prefix, rule_holds


class CapStoreUnavailable(Exception):
    """The cap store failed or did not answer in time (or is closed).

    Callers exclude every candidate with caps for that request (DESIGN.md §Frequency
    caps: a cap is never silently ignored). After a failed
    :meth:`FrequencyStore.check_and_increment` the counters may or may not have been
    written: the winners it covered must be treated as refused.
    """


class FrequencyStore(Protocol):
    """Per-user cap records: counters, last-serve seconds, one expiry per user.

    ``user_key`` is any string that identifies a user (a cookie or device id); fields
    and their values are described in ``adfunnel.frequency.windows``. Thread-safe.
    """

    def read(self, user_key: str, fields: Sequence[str]) -> dict[str, int]:
        """The values of ``fields`` the user has, in one round trip.

        Returns:
            field → int for each field present; an absent field has no record (count
            0, no earlier serve). No fields: ``{}`` without any I/O.

        Raises:
            CapStoreUnavailable: failure or timeout.
        """
        ...

    def check_and_increment(
        self,
        user_key: str,
        winners: Sequence[Sequence[CapRule]],
        now_s: int,
        ttl_s: int,
    ) -> list[bool]:
        """Check and count the winners of one request, atomically over the whole call.

        For each winner in order: when every :class:`CapCheck` count is below its
        limit and every :class:`Cooldown` has passed (``now_s - last >= seconds``),
        add 1 to each counter, set each last-serve field to ``now_s`` and answer True;
        otherwise change nothing for it and answer False. A later winner sees the
        writes of an earlier one (two winners under one advertiser cap). A counter's
        new bucket drops the older buckets of the same cap. Then the user's expiry is
        raised to ``ttl_s`` seconds from now when it is sooner (never shortened).

        Args:
            winners: each winner's rules (``CapPlan.rules``); a winner without rules
                is always True. No rules at all: all True without any I/O.
            now_s: Unix seconds of the serve (``windows.unix_s`` of the clock).
            ttl_s: seconds, >= 1 when there are rules: the largest ``CapPlan.ttl_s``
                of the winners.

        Returns:
            one bool per winner, in order.

        Raises:
            CapStoreUnavailable: failure or timeout (the writes may have happened).
            ValueError: ``ttl_s`` < 1 while some winner has rules.
        """
        ...

    def release(self, user_key: str, winners: Sequence[Sequence[CapRule]], now_s: int) -> None:
        """Undo what :meth:`check_and_increment` counted for ``winners`` at ``now_s``,
        atomically: the serves they stood for were never sent (the answer was late).

        Each counter loses 1 (the field is dropped at 0; a window that has rolled over
        since holds nothing to undo). Each cooldown stamp still at ``now_s`` moves back
        to ``now_s - seconds``: for every instant from ``now_s`` on it allows exactly what
        the stamp before the serve allowed (that stamp let a serve through at ``now_s``),
        so no later serve is refused for the unsent one. A stamp moved by a later serve
        is left alone. The expiry is not changed.

        Args:
            winners: the rules of the winners that were counted (``CapPlan.rules``).
            now_s: the ``now_s`` they were counted with.

        Raises:
            CapStoreUnavailable: failure or timeout (the user then sees fewer ads,
                never more).
        """
        ...

    def erase(self, user_key: str) -> None:
        """Delete every cap record of the user (a no-op when there is none).

        Raises:
            CapStoreUnavailable: failure or timeout.
        """
        ...

    def ttl_s(self, user_key: str) -> int | None:
        """Whole seconds (rounded) until the user's records expire; None when there are
        none.

        Raises:
            CapStoreUnavailable: failure or timeout.
        """
        ...

    def close(self) -> None:
        """Release connections; every later call raises :class:`CapStoreUnavailable`."""
        ...


def has_rules(winners: Sequence[Sequence[CapRule]], ttl_s: int) -> bool:
    """Whether a :meth:`FrequencyStore.check_and_increment` call has anything to do.

    Raises:
        ValueError: ``ttl_s`` < 1 while some winner has rules.
    """
    if not any(winners):
        return False
    if ttl_s < 1:
        raise ValueError(f"ttl_s must be >= 1 second, not {ttl_s}")
    return True


def apply_winners(
    values: MutableMapping[str, int], winners: Sequence[Sequence[CapRule]], now_s: int
) -> list[bool]:
    """The check-and-increment of :meth:`FrequencyStore.check_and_increment` on one
    user's ``values`` (mutated in place), without expiry; the in-memory reference that
    the Redis script mirrors."""
    answers: list[bool] = []
    # an advertiser's cap carried by campaigns of two zones has one bucket per zone in
    # the plan (two local days or hours under one prefix): neither is an older bucket
    planned = {r.field for rules in winners for r in rules if isinstance(r, CapCheck)}
    for rules in winners:
        ok = all(rule_holds(rule, values, now_s) for rule in rules)
        if ok:
            for rule in rules:
                if not isinstance(rule, CapCheck):
                    values[rule.field] = now_s
                elif rule.field in values:
                    values[rule.field] += 1
                else:  # a new bucket: the cap's older buckets (none planned now) are over
                    prefix = counter_prefix(rule.field)
                    for old in [f for f in values if f.startswith(prefix)
                                and f not in planned]:
                        del values[old]
                    values[rule.field] = 1
        answers.append(ok)
    return answers


def release_winners(
    values: MutableMapping[str, int], winners: Sequence[Sequence[CapRule]], now_s: int
) -> None:
    """:meth:`FrequencyStore.release` on one user's ``values`` (mutated in place): the
    in-memory reference that the Redis script mirrors."""
    for rules in winners:
        for rule in rules:
            held = values.get(rule.field)
            if held is None:
                continue
            if isinstance(rule, CapCheck):
                if held > 1:
                    values[rule.field] = held - 1
                else:
                    del values[rule.field]
            elif held == now_s:
                values[rule.field] = now_s - rule.seconds


#: Number of users at which the first sweep of expired records runs.
_FIRST_SWEEP = 1024


@dataclass
class _Records:
    values: dict[str, int] = field(default_factory=dict)
    expires_at: float = 0.0  # Unix seconds of the injected clock


class MemoryFrequencyStore:
    """A :class:`FrequencyStore` in this process's memory (tests, single-process serving).

    Thread-safe (one lock). Expiry follows the injected ``clock``: a user's records
    vanish once ``clock.now()`` reaches their expiry (expired users are also swept
    whenever the number of users has doubled). ``now_s`` of
    :meth:`check_and_increment` serves the cooldowns only.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._users: dict[str, _Records] = {}
        self._closed = False
        self._sweep_at = _FIRST_SWEEP

    def read(self, user_key: str, fields: Sequence[str]) -> dict[str, int]:
        if not fields:
            return {}
        with self._lock:
            records = self._live(user_key)
            if records is None:
                return {}
            return {f: records.values[f] for f in fields if f in records.values}

    def check_and_increment(
        self,
        user_key: str,
        winners: Sequence[Sequence[CapRule]],
        now_s: int,
        ttl_s: int,
    ) -> list[bool]:
        if not has_rules(winners, ttl_s):
            return [True] * len(winners)
        with self._lock:
            records = self._live(user_key) or _Records()
            answers = apply_winners(records.values, winners, now_s)
            if records.values:
                records.expires_at = max(records.expires_at, self._now() + ttl_s)
                self._users[user_key] = records
                if len(self._users) >= self._sweep_at:
                    self._sweep()
            return answers

    def release(self, user_key: str, winners: Sequence[Sequence[CapRule]], now_s: int) -> None:
        if not any(winners):
            return
        with self._lock:
            records = self._live(user_key)
            if records is not None:
                release_winners(records.values, winners, now_s)

    def erase(self, user_key: str) -> None:
        with self._lock:
            self._open()
            self._users.pop(user_key, None)

    def ttl_s(self, user_key: str) -> int | None:
        with self._lock:
            records = self._live(user_key)
            if records is None:
                return None
            return math.floor(records.expires_at - self._now() + 0.5)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._users.clear()

    def _live(self, user_key: str) -> _Records | None:
        """The user's unexpired records (expired ones are dropped); lock held."""
        self._open()
        records = self._users.get(user_key)
        if records is not None and records.expires_at <= self._now():
            del self._users[user_key]
            return None
        return records

    def _sweep(self) -> None:
        """Drop every expired user; runs when the map has doubled since the last sweep,
        so its cost per write stays constant. Lock held."""
        now = self._now()
        self._users = {k: r for k, r in self._users.items() if r.expires_at > now}
        self._sweep_at = max(_FIRST_SWEEP, 2 * len(self._users))

    def _open(self) -> None:
        if self._closed:
            raise CapStoreUnavailable("the frequency store is closed")

    def _now(self) -> float:
        return self._clock.now().timestamp()
