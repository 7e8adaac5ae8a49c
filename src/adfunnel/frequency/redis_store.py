"""The :class:`~adfunnel.frequency.store.FrequencyStore` on Redis (redis-py, hiredis
parser when installed).

One Redis hash per user, key ``fc:{<user key>}``: the braces make the user key the
Redis Cluster hash tag, so everything of one user is one key on one shard. Fields and
values as in ``adfunnel.frequency.windows``.

- :meth:`RedisFrequencyStore.read` is one ``HMGET`` under the read timeout (default
  5 ms, DESIGN.md §Frequency caps): a late answer raises
  :class:`~adfunnel.frequency.store.CapStoreUnavailable` and the request goes on
  without the capped candidates.
- :meth:`RedisFrequencyStore.check_and_increment` is one Lua script call
  (:data:`CHECK_AND_INCREMENT`, ``EVALSHA`` with a ``SCRIPT LOAD`` fallback by redis-py's
  ``Script``). Redis runs a script alone, so the check and the increments of every
  winner are atomic across processes and servers. Its default timeout, 50 ms, is
  longer than the read's: the script does more work and runs after the auction, when
  giving up means dropping winners already chosen, while it still stays far below a
  request's budget.

No command is retried (a retry would overrun the deadline; a retried script could
count a serve twice). A command that times out drops its connection, so a late
answer is never read by the next command. Each of the two timeouts also bounds
opening a connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from adfunnel.frequency.store import CapStoreUnavailable, has_rules
from adfunnel.frequency.windows import CapCheck, CapRule

#: Default deadline of a read, seconds.
READ_TIMEOUT_S = 0.005
#: Default deadline of a check-and-increment (and of erase / TTL calls), seconds.
WRITE_TIMEOUT_S = 0.05
#: Default key prefix; the key of a user is ``PREFIX{USER}``.
KEY_PREFIX = "fc:"

#: The check-and-increment script. KEYS[1]: the user's hash. ARGV: now_s, ttl_s, the
#: number of winners, then per winner: its number of counters C and of cooldowns D,
#: C pairs (field, limit), D pairs (field, seconds). Returns one 1/0 per winner. It
#: reads everything a winner needs before writing, so it never fails half-way; it
#: mirrors ``adfunnel.frequency.store.apply_winners`` and then raises the expiry.
CHECK_AND_INCREMENT = """
local key = KEYS[1]
local now = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local answers = {}
local planned = {}
local p = 4
for w = 1, tonumber(ARGV[3]) do
  local c = tonumber(ARGV[p])
  for i = p + 2, p + 1 + 2 * c, 2 do planned[ARGV[i]] = true end
  p = p + 2 + 2 * c + 2 * tonumber(ARGV[p + 1])
end
local at = 4
for w = 1, tonumber(ARGV[3]) do
  local counters = tonumber(ARGV[at])
  local cooldowns = tonumber(ARGV[at + 1])
  local first = at + 2
  local split = first + 2 * counters
  local after = split + 2 * cooldowns
  local ok = 1
  for i = first, split - 1, 2 do
    local count = tonumber(redis.call('HGET', key, ARGV[i]) or '0')
    if count >= tonumber(ARGV[i + 1]) then ok = 0 break end
  end
  if ok == 1 then
    for i = split, after - 1, 2 do
      local last = redis.call('HGET', key, ARGV[i])
      if last and now - tonumber(last) < tonumber(ARGV[i + 1]) then ok = 0 break end
    end
  end
  if ok == 1 then
    for i = first, split - 1, 2 do
      local field = ARGV[i]
      if redis.call('HINCRBY', key, field, 1) == 1 then
        -- a new bucket: drop the older buckets of the same cap (none planned now: an
        -- advertiser's cap in two zones has a bucket of each in the plan)
        local prefix = string.match(field, '^(.*:)')
        for _, other in ipairs(redis.call('HKEYS', key)) do
          if not planned[other] and string.sub(other, 1, #prefix) == prefix then
            redis.call('HDEL', key, other)
          end
        end
      end
    end
    for i = split, after - 1, 2 do
      redis.call('HSET', key, ARGV[i], ARGV[1])
    end
  end
  answers[w] = ok
  at = after
end
if redis.call('EXISTS', key) == 1 and redis.call('TTL', key) < ttl then
  redis.call('EXPIRE', key, ttl)
end
return answers
"""

#: The release script (:meth:`RedisFrequencyStore.release`). KEYS[1]: the user's hash.
#: ARGV: now_s, then pairs (field, seconds) where seconds is 0 for a counter. It mirrors
#: ``adfunnel.frequency.store.release_winners``.
RELEASE = """
local key = KEYS[1]
local now = tonumber(ARGV[1])
for i = 2, #ARGV - 1, 2 do
  local field = ARGV[i]
  local seconds = tonumber(ARGV[i + 1])
  local held = redis.call('HGET', key, field)
  if held then
    if seconds == 0 then
      if tonumber(held) > 1 then
        redis.call('HINCRBY', key, field, -1)
      else
        redis.call('HDEL', key, field)
      end
    elseif tonumber(held) == now then
      redis.call('HSET', key, field, now - seconds)
    end
  end
end
return 0
"""


class RedisFrequencyStore:
    """Users' cap records in Redis hashes (see the module docstring).

    Args:
        url: ``redis://[[user]:[password]@]host:port/db``, ``rediss://…`` or
            ``unix://…``.
        read_timeout_s: deadline of :meth:`read`, seconds (connect and answer each).
        write_timeout_s: deadline of the other calls, seconds.
        key_prefix: prefix of every key (``fc:``); the user key follows in braces.

    Thread-safe: each of the two connection pools (reads, writes) hands one
    connection to each concurrent caller. Nothing connects before the first call.
    """

    def __init__(
        self,
        url: str,
        *,
        read_timeout_s: float = READ_TIMEOUT_S,
        write_timeout_s: float = WRITE_TIMEOUT_S,
        key_prefix: str = KEY_PREFIX,
    ) -> None:
        self._prefix = key_prefix
        self._reader = _client(url, read_timeout_s)
        self._writer = _client(url, write_timeout_s)
        self._script = self._writer.register_script(CHECK_AND_INCREMENT)
        self._release = self._writer.register_script(RELEASE)
        self._closed = False

    def key(self, user_key: str) -> str:
        """The Redis key of ``user_key``'s hash: ``fc:{user key}``."""
        return f"{self._prefix}{{{user_key}}}"

    def read(self, user_key: str, fields: Sequence[str]) -> dict[str, int]:
        """See :meth:`FrequencyStore.read`; one ``HMGET`` under the read timeout."""
        if not fields:
            return {}
        self._open()
        try:
            values = self._reader.hmget(self.key(user_key), list(fields))
        except (redis.RedisError, OSError) as exc:
            raise CapStoreUnavailable(f"frequency read failed: {exc}") from exc
        return {f: int(v) for f, v in zip(fields, values, strict=True) if v is not None}

    def check_and_increment(
        self,
        user_key: str,
        winners: Sequence[Sequence[CapRule]],
        now_s: int,
        ttl_s: int,
    ) -> list[bool]:
        """See :meth:`FrequencyStore.check_and_increment`; one script call under the
        write timeout."""
        if not has_rules(winners, ttl_s):
            return [True] * len(winners)
        self._open()
        args: list[Any] = [int(now_s), int(ttl_s), len(winners)]
        for rules in winners:
            counters = [r for r in rules if isinstance(r, CapCheck)]
            cooldowns = [r for r in rules if not isinstance(r, CapCheck)]
            args += [len(counters), len(cooldowns)]
            for c in counters:
                args += [c.field, c.limit]
            for d in cooldowns:
                args += [d.field, d.seconds]
        try:
            answers = self._script(keys=[self.key(user_key)], args=args)
        except (redis.RedisError, OSError) as exc:
            raise CapStoreUnavailable(f"frequency check-and-increment failed: {exc}") from exc
        return [bool(a) for a in answers]

    def release(self, user_key: str, winners: Sequence[Sequence[CapRule]], now_s: int) -> None:
        """See :meth:`FrequencyStore.release`; one script call under the write timeout."""
        if not any(winners):
            return
        self._open()
        args: list[Any] = [int(now_s)]
        for rules in winners:
            for r in rules:
                args += [r.field, 0 if isinstance(r, CapCheck) else r.seconds]
        try:
            self._release(keys=[self.key(user_key)], args=args)
        except (redis.RedisError, OSError) as exc:
            raise CapStoreUnavailable(f"frequency release failed: {exc}") from exc

    def erase(self, user_key: str) -> None:
        """See :meth:`FrequencyStore.erase`; one ``DEL`` under the write timeout."""
        self._open()
        try:
            self._writer.delete(self.key(user_key))
        except (redis.RedisError, OSError) as exc:
            raise CapStoreUnavailable(f"frequency erase failed: {exc}") from exc

    def ttl_s(self, user_key: str) -> int | None:
        """See :meth:`FrequencyStore.ttl_s`; one ``TTL`` under the write timeout (a key
        without expiry, which this store never leaves, also answers None)."""
        self._open()
        try:
            ttl = int(self._writer.ttl(self.key(user_key)))
        except (redis.RedisError, OSError) as exc:
            raise CapStoreUnavailable(f"frequency TTL failed: {exc}") from exc
        return ttl if ttl >= 0 else None

    def close(self) -> None:
        """Close both connection pools; later calls raise CapStoreUnavailable."""
        self._closed = True
        self._reader.close()
        self._writer.close()

    def _open(self) -> None:
        if self._closed:
            raise CapStoreUnavailable("the frequency store is closed")


def _client(url: str, timeout_s: float) -> redis.Redis:
    """A client whose every connect and command gives up after ``timeout_s``, unretried."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )
