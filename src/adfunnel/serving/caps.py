"""Frequency caps at serve time (DESIGN.md §Frequency caps).

A decision meets caps twice:

1. **Screen**, before the auction: one read of the user's cap records for every
   candidate with caps (one round trip). A candidate whose cap is reached drops out
   (``capped``, the cap named in the rejection's detail); when the read fails or is late
   every candidate with caps drops out (``cap_unavailable``, counted in
   ``adfunnel_cap_unavailable_total``); a request without a user key is never served
   a capped ad (``no_user_key``). A cap is never silently ignored: a process that is one
   of several serving processes without a shared store refuses every candidate with
   caps (``cap_unavailable``, :mod:`adfunnel.frequency.scope`).
2. **Count**, after the auction: the winners' counters are checked and incremented in
   one atomic store call, so parallel requests for one user on many processes never
   pass a cap. A winner refused there loses its slot; the decider runs the auction
   again without it (the slot is refilled or left empty).

Semantics:

- A campaign's caps are its ad-level and campaign-level caps, and every
  advertiser-level cap that any campaign of its advertiser declares: an advertiser cap
  counts and limits the advertiser's impressions across all of its campaigns. Windows
  are calendar windows in the declaring campaign's time zone
  (:mod:`adfunnel.frequency.windows`); all caps hold at once (AND).
- Caps count serves, when the decision is made (the count must be atomic with the
  check, so it cannot wait for the answer): an ad served and never rendered still
  counts. A decision whose answer turns out late after its count gives its counts
  back (:meth:`CapGate.release`, DESIGN.md §The funnel: only answers sent in time
  commit caps), and so does a winner dropped from an answer that is sent (an OpenRTB
  bid under its floor, say: its own counts only, :meth:`CapCounts.split`); where the
  store fails then, they stay counted (users see fewer ads, never more).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from prometheus_client import Counter

from adfunnel.campaigns.model import Campaign, CapLevel, FrequencyCap
from adfunnel.frequency.store import CapStoreUnavailable, FrequencyStore
from adfunnel.frequency.windows import (
    CapCheck,
    CapPlan,
    CapRule,
    CapStatus,
    evaluate,
    fields_to_read,
    plan_caps,
    unix_s,
)

# Reason codes of the cap steps.
CAPPED = "capped"
CAP_UNAVAILABLE = "cap_unavailable"
NO_USER_KEY = "no_user_key"

CAP_UNAVAILABLE_TOTAL = Counter(
    "adfunnel_cap_unavailable_total",
    "Decisions whose cap records could not be read (screen) or counted (count) in time, "
    "or whose capped candidates had no shared cap store (no_shared_store)",
    ["step"],
)

_EMPTY = np.zeros(0, dtype=np.int64)
#: Most cap plans kept between decisions (the cache starts over when full).
PLANS_HELD = 65_536


class CapBook:
    """Which campaigns have caps, and their caps: the catalogue's side (no I/O).

    ``put`` is called with every campaign the catalogue takes; readers use
    :meth:`capped`, :meth:`capped_mask` and :meth:`plan` without a lock (the arrays and
    dicts are replaced, never changed in place, by writers).
    """

    def __init__(self) -> None:
        # campaign -> its ad-level and campaign-level caps (campaigns with some only)
        self._own: dict[int, tuple[FrequencyCap, ...]] = {}
        # advertiser -> declaring campaign -> (its advertiser-level caps, its time zone)
        self._adv: dict[int, dict[int, tuple[tuple[FrequencyCap, ...], str]]] = {}
        self._declares: dict[int, int] = {}  # campaign -> advertiser it declares caps for
        # advertiser -> its distinct (caps, time zone) declarations: what plan() reads, so
        # a decision's cost does not grow with the campaigns that declare the same caps
        self._adv_distinct: dict[int, tuple[tuple[tuple[FrequencyCap, ...], str], ...]] = {}
        self.own_ids = _EMPTY  # sorted campaign ids in _own
        self.adv_ids = _EMPTY  # sorted advertiser ids in _adv
        self._lock = threading.Lock()
        # plans by (ad, campaign, campaign version, book generation, UTC minute): every
        # window bucket is constant within a minute (zone offsets are whole quarter
        # hours), so a decision rebuilds a candidate's fields once a minute at most
        self._plans: dict[tuple[int, int, int, int, int], CapPlan] = {}
        self._generation = 0

    def put(self, campaigns: Iterable[Campaign]) -> None:
        """Take the caps of ``campaigns`` (new or changed)."""
        with self._lock:
            own, adv = dict(self._own), {a: dict(d) for a, d in self._adv.items()}
            touched: set[int] = set()
            for c in campaigns:
                mine = tuple(k for k in c.frequency_caps if k.level is not CapLevel.ADVERTISER)
                theirs = tuple(k for k in c.frequency_caps if k.level is CapLevel.ADVERTISER)
                if mine:
                    own[c.id] = mine
                else:
                    own.pop(c.id, None)
                was = self._declares.pop(c.id, None)
                if was is not None:
                    touched.add(was)
                    adv[was].pop(c.id, None)
                    if not adv[was]:
                        del adv[was]
                if theirs:
                    touched.add(c.advertiser_id)
                    adv.setdefault(c.advertiser_id, {})[c.id] = (theirs, c.time_zone)
                    self._declares[c.id] = c.advertiser_id
            distinct = dict(self._adv_distinct)
            for a in touched:
                if a in adv:
                    distinct[a] = tuple(dict.fromkeys(adv[a].values()))
                else:
                    distinct.pop(a, None)
            self._own, self._adv, self._adv_distinct = own, adv, distinct
            self._generation += 1
            self.own_ids = np.array(sorted(own), dtype=np.int64)
            self.adv_ids = np.array(sorted(adv), dtype=np.int64)

    def any(self) -> bool:
        """True when some campaign has caps."""
        return bool(len(self.own_ids) or len(self.adv_ids))

    def capped(self, c: Campaign) -> bool:
        return c.id in self._own or c.advertiser_id in self._adv

    def capped_mask(self, campaign_ids: np.ndarray, advertiser_ids: np.ndarray) -> np.ndarray:
        """bool[n]: which of the candidates (their campaign and advertiser ids) have caps."""
        own, adv = self.own_ids, self.adv_ids
        out = np.zeros(len(campaign_ids), dtype=bool)
        if len(own):
            out |= np.isin(campaign_ids, own)
        if len(adv):
            out |= np.isin(advertiser_ids, adv)
        return out

    def plan(self, ad_id: int, c: Campaign, at: datetime) -> CapPlan:
        """Every cap of ad ``ad_id`` of campaign ``c`` at instant ``at``, resolved to its
        field (two caps on one field keep the stricter)."""
        key = (ad_id, c.id, c.version, self._generation, int(at.timestamp() // 60))
        held = self._plans.get(key)
        if held is None:
            if len(self._plans) >= PLANS_HELD:
                self._plans = {}
            held = self._plans[key] = self._plan_now(ad_id, c, at)
        return held

    def _plan_now(self, ad_id: int, c: Campaign, at: datetime) -> CapPlan:
        plans = [plan_caps(self._own.get(c.id, ()), ad_id=ad_id, campaign_id=c.id,
                           advertiser_id=c.advertiser_id, time_zone=c.time_zone, at=at)]
        for caps, zone in self._adv_distinct.get(c.advertiser_id, ()):
            plans.append(plan_caps(caps, ad_id=ad_id, campaign_id=c.id,
                                   advertiser_id=c.advertiser_id, time_zone=zone, at=at))
        if len(plans) == 1:
            return plans[0]
        rules: dict[str, CapRule] = {}
        for p in plans:
            for r in p.rules:
                held = rules.get(r.field)
                if held is None or _stricter(r, held):
                    rules[r.field] = r
        return CapPlan(tuple(rules.values()), max(p.ttl_s for p in plans))


def _stricter(a: CapRule, b: CapRule) -> bool:
    if isinstance(a, CapCheck) and isinstance(b, CapCheck):
        return a.limit < b.limit
    if not isinstance(a, CapCheck) and not isinstance(b, CapCheck):
        return a.seconds > b.seconds
    return False


@dataclass(slots=True)
class Screen:
    """What the screen says of each candidate it was given (same order).

    ``reasons[i]``: None (may serve) or a reason code; ``details[i]``: the cap that
    bound (``campaign 12: 3 per day``) where ``capped``; ``plans``: by ad id, the caps
    of the candidates that may serve (the count step's input).
    """

    reasons: list[str | None]
    details: list[str | None]
    plans: dict[int, CapPlan] = field(default_factory=dict)


@dataclass(slots=True)
class CapCounts:
    """What one decision counted in the cap store: given back if its answer is not sent.

    Attributes:
        user_key: the user the serves were counted for.
        plans: the counted winners' cap plans, in the order counted.
        at: the instant they were counted at (the decision's ``now``).
        ads: the counted winners' ad ids, parallel to ``plans`` (a winner dropped from
            the answer gives back its own counts only: :meth:`split`).
    """

    user_key: str
    plans: list[CapPlan]
    at: datetime
    ads: list[int] = field(default_factory=list)

    def split(self, ad_ids: Collection[int]) -> tuple[CapCounts, CapCounts]:
        """(the counts of the winners ``ad_ids``, the others' counts)."""
        given = CapCounts(self.user_key, [], self.at, [])
        kept = CapCounts(self.user_key, [], self.at, [])
        for ad_id, plan in zip(self.ads, self.plans, strict=True):
            into = given if ad_id in ad_ids else kept
            into.ads.append(ad_id)
            into.plans.append(plan)
        return given, kept


def add_counts(held: CapCounts | None, user_key: str, at: datetime,
               counted: list[tuple[int, CapPlan]]) -> CapCounts | None:
    """``held`` (a decision's cap counts so far, or None) with ``counted`` ((ad id, its
    cap plan) of each winner counted) counted too."""
    if not counted:
        return held
    if held is None:
        held = CapCounts(user_key, [], at, [])
    held.ads.extend(a for a, _ in counted)
    held.plans.extend(p for _, p in counted)
    return held


class CapGate:
    """The decision's side of frequency caps over a :class:`FrequencyStore`."""

    def __init__(self, store: FrequencyStore, book: CapBook, *,
                 refused: str | None = None) -> None:
        """``refused``: when set, no capped candidate may serve in this process (several
        serving processes without a shared store, :mod:`adfunnel.frequency.scope`): each
        drops out as ``cap_unavailable`` with ``refused`` as its detail, and the store
        is never read."""
        self.store = store
        self.book = book
        self.refused = refused

    def screen(self, user_key: str | None, candidates: Sequence[tuple[int, Campaign]],
               at: datetime) -> Screen:
        """Screen ``candidates`` ((ad id, campaign) pairs, each with caps) for the user
        at instant ``at`` with one read of the store (see the module docstring)."""
        n = len(candidates)
        if not n:
            return Screen([], [])
        if self.refused is not None:
            CAP_UNAVAILABLE_TOTAL.labels("no_shared_store").inc()
            return Screen([CAP_UNAVAILABLE] * n, [self.refused] * n)
        if not user_key:
            return Screen([NO_USER_KEY] * n, [None] * n)
        plans = [self.book.plan(ad_id, c, at) for ad_id, c in candidates]
        try:
            values: dict[str, int] | None = self.store.read(user_key, fields_to_read(plans))
        except CapStoreUnavailable:
            CAP_UNAVAILABLE_TOTAL.labels("screen").inc()
            values = None
        now_s = unix_s(at)
        out = Screen([], [])
        for (ad_id, _), plan in zip(candidates, plans, strict=True):
            verdict = evaluate(plan, values, now_s)
            if verdict.status is CapStatus.ALLOWED:
                out.reasons.append(None)
                out.details.append(None)
                out.plans[ad_id] = plan
            elif verdict.status is CapStatus.CAPPED:
                out.reasons.append(CAPPED)
                out.details.append(verdict.rule.describe() if verdict.rule else None)
            else:
                out.reasons.append(CAP_UNAVAILABLE)
                out.details.append(None)
        return out

    def count(self, user_key: str, plans: Sequence[CapPlan],
              at: datetime) -> list[str | None]:
        """Check and increment the winners' caps (``plans``, in slot order) in one atomic
        store call: None where the winner may serve, else ``capped`` (a parallel serve
        took the last one) or ``cap_unavailable`` (the store failed: every winner is
        refused, as its counts may have been written — fewer ads, never more)."""
        if not plans:
            return []
        try:
            ok = self.store.check_and_increment(
                user_key, [p.rules for p in plans], unix_s(at), max(p.ttl_s for p in plans))
        except CapStoreUnavailable:
            CAP_UNAVAILABLE_TOTAL.labels("count").inc()
            return [CAP_UNAVAILABLE] * len(plans)
        return [None if x else CAPPED for x in ok]

    def release(self, counts: CapCounts) -> bool:
        """Give back what a decision counted (:meth:`FrequencyStore.release`): its answer
        was not sent. True when the store took it; False when it failed (counted in
        ``adfunnel_cap_unavailable_total{step="release"}``: the counts stay, so the user
        sees fewer ads, never more)."""
        if not counts.plans:
            return True
        try:
            self.store.release(counts.user_key, [p.rules for p in counts.plans],
                               unix_s(counts.at))
        except CapStoreUnavailable:
            CAP_UNAVAILABLE_TOTAL.labels("release").inc()
            return False
        return True
