"""The spend gate: what the ad server asks before a campaign may take part in an auction.

DESIGN.md §Money and budgets: committed spend = billed spend + expected cost served
and not yet billed. The embedded :class:`LocalSpendGate` holds both in the server;
the fleet's budget client (``adfunnel.budget.client``) implements the same protocol
against the budget & pacing service.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol, runtime_checkable

import numpy as np

from adfunnel.campaigns.model import Campaign
from adfunnel.campaigns.schedule import local_day
from adfunnel.dense import DENSE_IDS, DenseIds
from adfunnel.pacing.flight import period_budgets

# Reason codes carried by rejected candidates (rejections are data, not exceptions).
BUDGET_EXHAUSTED = "budget_exhausted"
PACED_OUT = "paced_out"
NO_SLICE = "no_slice"


def effective_daily_budget(
    daily_budget_micros: int, lifetime_budget_micros: int | None, billed_before_day_micros: int
) -> int:
    """A campaign-day's budget under a lifetime budget, micros (DESIGN.md §Money and budgets):
    min(daily, lifetime − billed on earlier days), ≥ 0; the daily budget without one.

    So remaining = effective − billed today = min(daily remaining, lifetime remaining),
    and the open / metered / slice rules apply to it unchanged.
    """
    if lifetime_budget_micros is None:
        return daily_budget_micros
    return max(0, min(daily_budget_micros, lifetime_budget_micros - billed_before_day_micros))


def budget_lowered(old: Campaign | None, new: Campaign) -> bool:
    """Whether a campaign record edit may leave less to spend: a limit of
    :func:`~adfunnel.pacing.flight.period_budgets` lowered (or newly set), or the budget
    period, goal or flight changed. A spend gate that holds the service's state from
    before the edit (open, slices) must ask again; a raise leaves it as open as it was,
    so delivery does not pause for it. A new campaign (``old`` None) lowers nothing."""
    if old is None:
        return False
    if (old.budget_period, old.goal, old.flight_start, old.flight_end) != (
            new.budget_period, new.goal, new.flight_start, new.flight_end):
        return True
    (old_day, old_life), (new_day, new_life) = period_budgets(old), period_budgets(new)
    return new_day < old_day or (new_life is not None
                                 and (old_life is None or new_life < old_life))


@dataclass(frozen=True, slots=True)
class Served:
    """One served impression's expected cost, outstanding until billed or expired.

    ``expected_micros``: CPM → the impression's charge; CPC → price × pCTR;
    CPA → price × pCTR × pCVR (DESIGN.md §The funnel, step 7).
    ``max_charge_micros``: the most the serve can bill (CPM impression charge, CPC/CPA
    price); a metered campaign takes it from its slice. 0 = unknown (use expected).
    """

    campaign_id: int
    day: date
    impression_id: str
    expected_micros: int
    expires_at: float  # unix seconds
    max_charge_micros: int = 0


class SpendGate(Protocol):
    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        """None when ``campaign`` may bid now for a charge of up to ``max_charge_micros``;
        otherwise the rejection reason (``budget_exhausted``, ``paced_out``, ``no_slice``)."""
        ...

    def pacing_rate(self, campaign_id: int) -> float:
        """Participation probability p in [0, 1] (1.0 when unpaced)."""
        ...

    def record_served(self, served: Served) -> None: ...

    def record_billed(
        self, campaign_id: int, day: date, billed_micros: int, impression_id: str, settles: bool
    ) -> None:
        """Billing moved ``billed_micros`` into spend; ``settles`` releases the impression's
        outstanding expected cost (CPM impression billed, CPC click billed)."""
        ...


#: Codes of :meth:`BulkGate.bulk_admit`: admitted (certain, no side effect), refused for
#: budget (certain, no side effect), or ask :meth:`SpendGate.admit` (the scalar answer).
ADMIT, REFUSE, ASK = 0, 1, 2


@runtime_checkable
class BulkGate(Protocol):
    """A spend gate that answers for many campaigns at once (the decider's columnar path).

    ``generation`` increases whenever states or p change (a reply from the budget
    service); a decider that asked :meth:`SpendGate.admit` re-reads the bulk answers of
    the campaigns after it when the generation moved, so both paths see the same states.
    """

    generation: int

    def bulk_admit(self, campaign_ids: np.ndarray, day_ordinals: np.ndarray,
                   charges: np.ndarray, budgets: np.ndarray, t: float) -> np.ndarray:
        """Per campaign: ADMIT, REFUSE or ASK (int8[n]).

        ``campaign_ids`` int64[n]; ``day_ordinals`` int[n], each campaign's local day
        now (``date.toordinal``); ``charges`` int64[n], the most one event can cost,
        micros; ``budgets`` int64[n, 2], daily and lifetime budget (−1: none), micros;
        ``t`` Unix s.
        ADMIT and REFUSE must equal what :meth:`SpendGate.admit` would answer, with no
        side effect skipped; anything else is ASK.
        """
        ...

    def bulk_pacing(self, campaign_ids: np.ndarray) -> np.ndarray:
        """p of each campaign (float64[n]), as :meth:`SpendGate.pacing_rate` answers."""
        ...


def bid_multipliers(gate: object, campaign_ids: np.ndarray) -> np.ndarray:
    """λ of each campaign (float64[n], ≥ 1) from a spend gate: its ``bulk_multiplier``, or
    1.0 for a gate that has none (no budget service controls bids: a test's gate)."""
    bulk = getattr(gate, "bulk_multiplier", None)
    if bulk is None:
        return np.ones(len(campaign_ids))
    return np.asarray(bulk(campaign_ids), dtype=np.float64)


def fits(gate: SpendGate, campaign: Campaign, now: datetime, charge_micros: int) -> bool:
    """Whether ``campaign`` has room now for one more serve whose worst cost is
    ``charge_micros`` (micros), asked just before that serve is committed: the gate's
    ``fits`` (side-effect free: no demand, no refusal counted), else its ``admit``.

    A decision admits a campaign for its largest charge, but decisions of one queue
    turn are all admitted before any of them commits (:class:`~adfunnel.serving.
    deadline.DecisionQueue`): a serve re-checked here, with nothing awaited before its
    commit, never takes a budget or slice past what it holds."""
    one = getattr(gate, "fits", None)
    if one is not None:
        return bool(one(campaign, now, charge_micros))
    return gate.admit(campaign, now, charge_micros) is None


def bid_multiplier(gate: object, campaign_id: int) -> float:
    """λ of one campaign from a spend gate (:func:`bid_multipliers`, one at a time)."""
    one = getattr(gate, "bid_multiplier", None)
    return 1.0 if one is None else float(one(campaign_id))


class LocalSpendGate:
    """Committed spend held in one server process (embedded mode).

    Admits while billed + outstanding + ``max_charge`` <= the campaign-day's budget
    (:func:`effective_daily_budget`: daily, or less under a lifetime budget) on the
    campaign's local day. Outstanding expected costs expire with their token.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._billed: dict[tuple[int, date], int] = {}
        self._outstanding: dict[tuple[int, date], int] = {}
        self._open: dict[str, Served] = {}
        self._expiry: list[tuple[float, str]] = []
        self._lifetime: dict[int, int] = {}  # campaign id -> billed on every day
        # campaigns with any spend held (1): their admit is asked; the others' is
        # known in bulk (committed 0: admitted while the charge fits the budget)
        self._touched = DenseIds(np.int8, 0)
        self.generation = 0

    def seed_lifetime(self, billed: dict[int, int]) -> None:
        """Start from lifetime billed totals read from the ledger (restart recovery)."""
        with self._lock:
            self._lifetime.update(billed)
            for cid in billed:
                self._touch(cid)

    def seed_billed(self, billed: dict[tuple[int, date], int]) -> None:
        """Start from billed totals read from the ledger (restart recovery)."""
        with self._lock:
            self._billed.update(billed)
            for cid, _ in billed:
                self._touch(cid)

    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        key = (campaign.id, local_day(now, campaign.time_zone))
        with self._lock:
            self._expire(now.timestamp())
            today = self._billed.get(key, 0)
            committed = today + self._outstanding.get(key, 0)
            before = self._lifetime.get(campaign.id, 0) - today
        daily, lifetime = period_budgets(campaign)  # a flight's or average day's limits
        budget = effective_daily_budget(daily, lifetime, before)
        if committed + max_charge_micros > budget:
            return BUDGET_EXHAUSTED
        return None

    def fits(self, campaign: Campaign, now: datetime, charge_micros: int) -> bool:
        """:func:`fits`: :meth:`admit`'s rule (it has no side effect here)."""
        return self.admit(campaign, now, charge_micros) is None

    def pacing_rate(self, campaign_id: int) -> float:
        return 1.0

    def bid_multiplier(self, campaign_id: int) -> float:
        """λ: 1.0 (no budget service controls bids here: automatic campaigns bid their
        value pCTR × v, and the budget stops them)."""
        return 1.0

    def bulk_multiplier(self, campaign_ids: np.ndarray) -> np.ndarray:
        return np.ones(len(campaign_ids))

    def bulk_admit(self, campaign_ids: np.ndarray, day_ordinals: np.ndarray,
                   charges: np.ndarray, budgets: np.ndarray, t: float) -> np.ndarray:
        """:class:`BulkGate`, never ASK: :meth:`admit`'s rule for every campaign, on the
        local days given. Campaigns without spend held (committed 0) in one expression;
        the others under one lock."""
        daily, lifetime = budgets[:, 0], budgets[:, 1]
        cap = np.where(lifetime >= 0, np.maximum(0, np.minimum(daily, lifetime)), daily)
        out = np.where(charges > cap, REFUSE, ADMIT).astype(np.int8)
        touched = np.flatnonzero(self._touched.get(campaign_ids).astype(bool)
                                 | (campaign_ids >= DENSE_IDS))
        if len(touched):
            with self._lock:
                self._expire(t)
                for i in touched.tolist():
                    out[i] = self._rule(int(campaign_ids[i]), int(day_ordinals[i]),
                                        int(charges[i]), int(daily[i]), int(lifetime[i]))
        return out

    def _rule(self, cid: int, day_ordinal: int, charge: int, daily: int, lifetime: int) -> int:
        """:meth:`admit` on one campaign-day (under the lock): REFUSE or ADMIT."""
        key = (cid, date.fromordinal(day_ordinal))
        today = self._billed.get(key, 0)
        committed = today + self._outstanding.get(key, 0)
        before = self._lifetime.get(cid, 0) - today
        budget = effective_daily_budget(daily, lifetime if lifetime >= 0 else None, before)
        return REFUSE if committed + charge > budget else ADMIT

    def bulk_pacing(self, campaign_ids: np.ndarray) -> np.ndarray:
        return np.ones(len(campaign_ids))

    def _touch(self, campaign_id: int) -> None:
        self._touched.set(campaign_id, 1)

    def committed(self, campaign_id: int, day: date) -> int:
        key = (campaign_id, day)
        with self._lock:
            return self._billed.get(key, 0) + self._outstanding.get(key, 0)

    def record_served(self, served: Served) -> None:
        key = (served.campaign_id, served.day)
        with self._lock:
            self._open[served.impression_id] = served
            self._touch(served.campaign_id)
            self._outstanding[key] = self._outstanding.get(key, 0) + served.expected_micros
            heapq.heappush(self._expiry, (served.expires_at, served.impression_id))

    def record_billed(
        self, campaign_id: int, day: date, billed_micros: int, impression_id: str, settles: bool
    ) -> None:
        key = (campaign_id, day)
        with self._lock:
            self._billed[key] = self._billed.get(key, 0) + billed_micros
            self._lifetime[campaign_id] = self._lifetime.get(campaign_id, 0) + billed_micros
            self._touch(campaign_id)
            if settles:
                self._release(impression_id)

    def _release(self, impression_id: str) -> None:
        served = self._open.pop(impression_id, None)
        if served is not None:
            key = (served.campaign_id, served.day)
            self._outstanding[key] -= served.expected_micros

    def _expire(self, now_s: float) -> None:
        while self._expiry and self._expiry[0][0] <= now_s:
            _, imp = heapq.heappop(self._expiry)
            self._release(imp)
