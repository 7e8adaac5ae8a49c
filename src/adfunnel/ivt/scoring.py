"""Tier-2 invalid-traffic scoring: sliding windows over many events, asynchronous.

The aggregator feeds every event it records to :meth:`Tier2Scorer.observe` and gets
back the events to reverse while they are still ``pending`` (DESIGN: a billable event
is held pending for a window, 10 min by default, then final). Pure and clock-free:
the scorer reads only the events' own times, so the same sequence of events always
gives the same reversals, and memory is bounded by time (windows are evicted as event
time advances past them).

Signals, each with its reason code and thresholds (a
:class:`~adfunnel.settings.ivt.Tier2Config`, whose defaults are the constants of
:mod:`adfunnel.settings.ivt` named here):

- ``click_rate``: clicks per viewer (client IP, user agent, user key) over the
  EthicalAds limits :data:`CLICK_RATE_LIMITS`. Every click counts toward the windows,
  flagged or not, and only clicks beyond a limit are reversed (the ones within it stay
  billed).
- ``impression_rate``: impressions per viewer (client IP, user agent, user key) per
  minute over :data:`IMPRESSION_RATE_LIMIT`; impressions beyond it are reversed. Not
  per address alone: people behind one shared address (carrier NAT, an office, a proxy)
  differ by browser and user key, and must not share one budget of impressions.
- ``ctr_outlier``: an IP's click-through rate on one placement over
  :data:`CTR_OUTLIER_MAX_PERCENT` across at least :data:`CTR_OUTLIER_MIN_IMPRESSIONS`
  impressions in :data:`CTR_WINDOW_MS`; clicks made while it holds are reversed.
- ``timing``: a click less than :data:`~adfunnel.settings.ivt.MIN_CLICK_DELAY_MS` after
  its own impression (tier 2 knows the impression's time, the tracker does not), or
  the last :data:`TIMING_REGULAR_CLICKS` click delays of a viewer all within
  :data:`TIMING_REGULAR_SPREAD_MS` of each other (a script's fixed delay). A click
  seen before its impression is judged when the impression arrives.

One reversal at most per event, the first reason in this order: a tier-1 reason
(when the scorer is given :class:`~adfunnel.ivt.rules.Tier1Rules`, e.g. lists newer
than the tracker's), ``timing``, ``click_rate``, ``ctr_outlier``; impressions only
``impression_rate``.

Feed each event once: the aggregator should pass only events the ledger recorded as
new. As a safety net a repeat of an (impression id, event type) seen within
:data:`PAIRING_MEMORY_MS` is ignored. Events without an impression id are scored
but neither deduplicated nor paired.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from adfunnel.ivt.lists import parse_ip
from adfunnel.ivt.reasons import Reason
from adfunnel.ivt.rules import CLICK, IMPRESSION, EventFacts, Tier1Rules
from adfunnel.ivt.windows import BucketCounts, RecentTimes
from adfunnel.settings.ivt import Tier2Config

#: Who a rate rule counts: (client IP as canonical bytes or text, user agent, user key).
Viewer = tuple[bytes | str, str | None, str | None]


@dataclass(frozen=True, slots=True)
class Reversal:
    """An event tier 2 (or tier 1 rerun) found invalid: reverse it while pending.

    ``at_ms`` is the reversed event's own time; ``detail`` says what tripped, for logs
    and the explain view (e.g. ``"4 clicks in (t-600000ms, t] > 3"``).
    """

    impression_id: str
    event_type: str
    reason: Reason
    at_ms: int
    detail: str = ""


@dataclass(slots=True)
class _PendingClick:
    at_ms: int
    user: Viewer
    reversed: bool


@dataclass(slots=True)
class _Delays:
    newest_ms: int
    delays: deque[int] = field(default_factory=deque)


class Tier2Scorer:
    """Sliding-window scoring of impressions and clicks (see the module docstring).

    Not thread-safe: one scorer per consumer (partition the events so that one IP's
    events reach one scorer). Memory is bounded by time: per key only what its longest
    window needs, keys dropped once idle for that window (see :meth:`memory`).

    Args:
        config: thresholds.
        tier1: when given, each event is first checked with these rules too.
    """

    def __init__(self, config: Tier2Config | None = None, tier1: Tier1Rules | None = None
                 ) -> None:
        self.config = config = config if config is not None else Tier2Config()
        self.tier1 = tier1
        horizon = max(limit.window_ms for limit in config.click_limits)
        cap = max(limit.limit for limit in config.click_limits) + 1
        self._click_horizon_ms = horizon
        self._clicks: RecentTimes[Viewer] = RecentTimes(horizon, cap)
        self._impressions: RecentTimes[Viewer] = RecentTimes(
            config.impression_limit.window_ms, config.impression_limit.limit + 1)
        self._ctr: BucketCounts[tuple[bytes | str, str]] = BucketCounts(
            config.ctr_window_ms, config.ctr_bucket_ms)
        self._delays: OrderedDict[Viewer, _Delays] = OrderedDict()
        #: impression id -> its time; clicks seen (id -> time); clicks awaiting impression
        self._impression_at: OrderedDict[str, int] = OrderedDict()
        self._click_seen: OrderedDict[str, int] = OrderedDict()
        self._unpaired: OrderedDict[str, _PendingClick] = OrderedDict()
        self.watermark_ms: int | None = None

    # --- public -----------------------------------------------------------------

    def observe(self, event: EventFacts) -> list[Reversal]:
        """Score one event at its own time ``event.event_at_ms``.

        Returns the reversals it causes: of this event, and for an impression possibly
        of its click seen earlier (judged on timing now). Empty for a valid event, a
        repeat, or an event type other than impression and click (tier 1 only).
        Raises nothing for any field values (an unparseable IP keys by its text).
        """
        at = event.event_at_ms
        self.advance(at)
        kind, iid = event.event_type, event.impression_id
        if kind == IMPRESSION:
            if iid and iid in self._impression_at:
                return []
            return self._impression(event, at)
        if kind == CLICK:
            if iid and iid in self._click_seen:
                return []
            return self._click(event, at)
        verdict = self._tier1(event)
        return [] if verdict is None else [verdict]

    def score(self, events: Iterable[EventFacts]) -> list[Reversal]:
        """:meth:`observe` each event in order; all their reversals, in order."""
        out: list[Reversal] = []
        for event in events:
            out.extend(self.observe(event))
        return out

    def advance(self, now_ms: int) -> None:
        """Move the watermark (the latest event time seen) to ``now_ms`` if later, and
        evict what no window can see any more. The aggregator may call it on idle
        polls with the log's time, so memory shrinks without traffic."""
        if self.watermark_ms is not None and now_ms <= self.watermark_ms:
            return
        self.watermark_ms = now_ms
        self._clicks.evict(now_ms)
        self._impressions.evict(now_ms)
        self._ctr.evict(now_ms)
        cutoff = now_ms - self._click_horizon_ms
        while self._delays:
            key = next(iter(self._delays))
            if self._delays[key].newest_ms > cutoff:
                break
            del self._delays[key]
        pair_cutoff = now_ms - self.config.pairing_memory_ms
        for memory in (self._impression_at, self._click_seen):
            while memory:
                key = next(iter(memory))
                if memory[key] > pair_cutoff:
                    break
                del memory[key]
        while self._unpaired:
            key = next(iter(self._unpaired))
            if self._unpaired[key].at_ms > pair_cutoff:
                break
            del self._unpaired[key]

    def memory(self) -> dict[str, int]:
        """Entries held per structure (keys and times), to watch that memory stays
        bounded: ``click_keys``, ``click_times``, ``impression_ips`` (viewers),
        ``impression_times``, ``ctr_keys``, ``ctr_buckets``, ``delay_keys``,
        ``pairing`` (impressions, seen clicks and unpaired clicks remembered)."""
        return {
            "click_keys": len(self._clicks),
            "click_times": self._clicks.entries(),
            "impression_ips": len(self._impressions),
            "impression_times": self._impressions.entries(),
            "ctr_keys": len(self._ctr),
            "ctr_buckets": self._ctr.entries(),
            "delay_keys": len(self._delays),
            "pairing": len(self._impression_at) + len(self._click_seen) + len(self._unpaired),
        }

    # --- impressions and clicks ---------------------------------------------------

    def _impression(self, event: EventFacts, at: int) -> list[Reversal]:
        config = self.config
        iid = event.impression_id
        if iid:
            self._impression_at[iid] = at
        ip = _ip_key(event.client_ip)
        viewer = (ip, event.user_agent, event.user_key)
        self._impressions.add(viewer, at)
        self._ctr.add((ip, event.placement), at, impressions=1)
        out: list[Reversal] = []
        first = self._tier1(event)
        if first is None:
            limit = config.impression_limit
            n = self._impressions.count(viewer, at, limit.window_ms)
            if n > limit.limit:
                first = Reversal(iid, IMPRESSION, Reason.IMPRESSION_RATE, at,
                                 f"{n} impressions in (t-{limit.window_ms}ms, t] > {limit.limit}")
        if first is not None:
            out.append(first)
        pending = self._unpaired.pop(iid, None) if iid else None
        if pending is not None:
            detail = self._timing(pending.user, pending.at_ms, pending.at_ms - at)
            if detail is not None and not pending.reversed:
                out.append(Reversal(iid, CLICK, Reason.TIMING, pending.at_ms, detail))
        return out

    def _click(self, event: EventFacts, at: int) -> list[Reversal]:
        config = self.config
        iid = event.impression_id
        if iid:
            self._click_seen[iid] = at
        ip = _ip_key(event.client_ip)
        user = (ip, event.user_agent, event.user_key)
        self._clicks.add(user, at)
        self._ctr.add((ip, event.placement), at, clicks=1)

        first = self._tier1(event)
        impression_at = event.impression_at_ms
        if impression_at is None and iid:
            impression_at = self._impression_at.get(iid)
        timing = None
        if impression_at is not None:
            timing = self._timing(user, at, at - impression_at)
        if first is None and timing is not None:
            first = Reversal(iid, CLICK, Reason.TIMING, at, timing)
        if first is None:
            for limit in config.click_limits:
                n = self._clicks.count(user, at, limit.window_ms)
                if n > limit.limit:
                    first = Reversal(iid, CLICK, Reason.CLICK_RATE, at,
                                     f"{n} clicks in (t-{limit.window_ms}ms, t] > {limit.limit}")
                    break
        if first is None:
            impressions, clicks = self._ctr.totals((ip, event.placement), at)
            if (impressions >= config.ctr_min_impressions
                    and clicks * 100 > impressions * config.ctr_max_percent):
                first = Reversal(iid, CLICK, Reason.CTR_OUTLIER, at,
                                 f"{clicks} clicks / {impressions} impressions on "
                                 f"{event.placement!r} > {config.ctr_max_percent}%")
        if impression_at is None and iid:
            self._unpaired[iid] = _PendingClick(at, user, first is not None)
        return [] if first is None else [first]

    def _timing(self, user: Viewer, at: int, delay_ms: int
                ) -> str | None:
        """Record a click's delay after its impression; what makes it robotic, or None."""
        config = self.config
        entry = self._delays.get(user)
        if entry is None:
            entry = self._delays[user] = _Delays(at, deque(maxlen=config.regular_clicks))
        else:
            self._delays.move_to_end(user)
            entry.newest_ms = max(entry.newest_ms, at)
        delays = entry.delays
        delays.append(delay_ms)
        if delay_ms < config.min_click_delay_ms:
            return f"click {delay_ms}ms after its impression < {config.min_click_delay_ms}ms"
        if len(delays) == config.regular_clicks:
            spread = max(delays) - min(delays)
            if spread <= config.regular_spread_ms:
                return (f"last {len(delays)} click delays within {spread}ms "
                        f"<= {config.regular_spread_ms}ms")
        return None

    def _tier1(self, event: EventFacts) -> Reversal | None:
        if self.tier1 is None:
            return None
        verdict = self.tier1.check(event)
        if verdict.valid or verdict.reason is None:
            return None
        return Reversal(event.impression_id, str(event.event_type), verdict.reason,
                        event.event_at_ms, "tier 1")


def _ip_key(ip: str) -> bytes | str:
    """The address's canonical bytes (both spellings of an IPv4 key alike), else its text."""
    try:
        return parse_ip(ip)
    except ValueError:
        return ip
