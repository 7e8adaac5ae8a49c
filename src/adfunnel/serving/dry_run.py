"""A dry run's decision (an OpenRTB ``test = 1`` request): decided as a live one reads
the state, written nowhere.

:meth:`~adfunnel.serving.decider.ColumnarDecider.decide` commits no spend, but as it goes
it writes what later decisions and the budget service read: the pacing curve's eligible
traffic (``eligible``), the guaranteed lines' supply (``supply``), the capped-decision
counter of the dashboard (``capped``), the budget gate's demand, refusals and slice asks
(``gate.admit`` / ``ask_many``), the frequency-cap store (``caps.count``, given back
after a late answer, but its record, expiry and cooldown stamps moved), and the seeded
draw of the next decision (``rng``). :func:`decide_dry` runs one decision with each of
them swapped for a stand-in that reads through and writes nothing, and puts them back
before it returns, on the same thread with nothing awaited in between (the decision
queue's consumer: no other decision of the server runs meanwhile; a caller deciding on
the same decider from another thread at that moment, which the server never does, would
see the stand-ins):

- the counters (``eligible``, ``capped``, ``supply``): adds and observations dropped,
  every read (``supply.order``, ``capped.peek``) the real one's;
- the budget gate: bulk answers as they are (side-effect free by contract); a campaign
  the gate would ask is judged by :func:`dry_admit` (no demand, no refusal counted, no
  slice asked): in when it fits, or when a live request would ask the budget service
  for a slice (metered: the dry run supposes it granted — its bid never bills); else
  ``budget_exhausted``;
- the frequency caps: screened as live; a winner's count is a read (allowed when every
  rule of its plan still allows one more serve), nothing written, so the decision holds
  no counts to give back (the auction takes one winner per campaign and advertiser, so
  its winners share no counter; a direct line's winner and an auction winner of one
  advertiser might, where a live count could refuse the second);
- the decision's draw: the rng's state restored, so the next live decision draws what
  it would have drawn without the dry run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import numpy as np

from adfunnel.budget.gate import BUDGET_EXHAUSTED, SpendGate, fits
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import Campaign
from adfunnel.campaigns.schedule import local_day
from adfunnel.frequency.store import CapStoreUnavailable
from adfunnel.frequency.windows import CapPlan, CapStatus, evaluate, fields_to_read, unix_s
from adfunnel.serving.caps import CAP_UNAVAILABLE, CAPPED, CapCounts, CapGate
from adfunnel.serving.decision import Decides, Decision
from adfunnel.serving.request import SelectRequest

#: The decider attributes a dry run swaps (present on the columnar and reference paths).
_SWAPPED = ("gate", "caps", "eligible", "capped", "supply")


def decide_dry(decider: Decides, req: SelectRequest, request_id: str,
               deadline_at_ms: float) -> Decision:
    """``decider.decide(req, …)`` writing nothing (module doc); the decision holds no
    frequency-cap counts (none were made)."""
    with unobserved(decider):
        decision = decider.decide(req, request_id, deadline_at_ms)
    decision.cap_counts = None
    return decision


@contextmanager
def unobserved(decider: Any) -> Iterator[None]:
    """``decider`` (and its composed reference path) with every writer swapped for a
    stand-in (module doc) until the block ends; its rng's state restored after it."""
    targets = [decider]
    reference = getattr(decider, "reference", None)
    if reference is not None:
        targets.append(reference)
    saved = [(t, name, getattr(t, name)) for t in targets for name in _SWAPPED
             if hasattr(t, name)]
    rng = getattr(decider, "rng", None)
    state = rng.getstate() if rng is not None else None
    try:
        for target, name, real in saved:
            setattr(target, name, _stand_in(name, real))
        yield
    finally:
        for target, name, real in saved:
            setattr(target, name, real)
        if rng is not None:
            rng.setstate(state)


def _stand_in(name: str, real: Any) -> Any:
    if real is None:
        return None
    if name == "gate":
        return DryBulkGate(real) if hasattr(real, "bulk_admit") else DryGate(real)
    if name == "caps":
        return DryCaps(real)
    return Unobserved(real)


class Unobserved:
    """A counter (:class:`~adfunnel.pacing.traffic_log.EligibleCounter`,
    :class:`~adfunnel.serving.direct_book.GuaranteedSupply`) whose additions are
    dropped; everything else is the real one's."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def add(self, *_: object) -> None:
        """Dropped."""

    def add_many(self, *_: object) -> None:
        """Dropped."""

    def observe(self, *_: object) -> None:
        """Dropped."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def dry_admit(gate: SpendGate, campaign: Campaign, now: datetime,
              charge_micros: int) -> str | None:
    """``gate.admit``'s answer for a dry run, without its side effects: None when the
    campaign has room for ``charge_micros`` now (:func:`~adfunnel.budget.gate.fits`), or
    when a live admit would ask the budget service for a slice (the campaign-day
    metered, no slice with room held: supposed granted); else ``budget_exhausted``."""
    if fits(gate, campaign, now, charge_micros):
        return None
    # a budget client's state (the fleet's is the gate; the embedded service holds one)
    state = getattr(gate, "state", None) or getattr(getattr(gate, "client", None), "state",
                                                    None)
    if state is not None and state(campaign.id, local_day(now, campaign.time_zone),
                                   now.timestamp()) is BudgetState.METERED:
        return None
    return BUDGET_EXHAUSTED


class DryGate:
    """A spend gate asked without side effects: :meth:`admit` is :func:`dry_admit`."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        return dry_admit(self._real, campaign, now, max_charge_micros)

    def ask_many(self, campaigns: Sequence[Campaign], now: datetime,
                 charges: Sequence[int]) -> list[str | None]:
        """:meth:`admit` for each (no report round: no slice is asked for)."""
        return [self.admit(c, now, ch) for c, ch in zip(campaigns, charges, strict=True)]

    def pacing_rate(self, campaign_id: int) -> float:
        return float(self._real.pacing_rate(campaign_id))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class DryBulkGate(DryGate):
    """:class:`DryGate` over a :class:`~adfunnel.budget.gate.BulkGate` (its members
    spelled out: a runtime protocol check does not see ``__getattr__``); the bulk answers
    are side-effect free by the protocol's contract."""

    @property
    def generation(self) -> int:
        return int(self._real.generation)

    def bulk_admit(self, campaign_ids: np.ndarray, day_ordinals: np.ndarray,
                   charges: np.ndarray, budgets: np.ndarray, t: float) -> np.ndarray:
        return self._real.bulk_admit(campaign_ids, day_ordinals, charges, budgets, t)

    def bulk_pacing(self, campaign_ids: np.ndarray) -> np.ndarray:
        return self._real.bulk_pacing(campaign_ids)


class DryCaps(CapGate):
    """The real cap gate's store and book, counting nothing: :meth:`count` reads."""

    def __init__(self, real: CapGate) -> None:
        super().__init__(real.store, real.book, refused=real.refused)

    def count(self, user_key: str, plans: Sequence[CapPlan],
              at: datetime) -> list[str | None]:
        """None where each rule of the plan allows one more serve now, else ``capped``
        (``cap_unavailable`` for every winner when the store cannot be read)."""
        if not plans:
            return []
        try:
            values = self.store.read(user_key, fields_to_read(list(plans)))
        except CapStoreUnavailable:
            return [CAP_UNAVAILABLE] * len(plans)
        now_s = unix_s(at)
        return [None if evaluate(p, values, now_s).status is CapStatus.ALLOWED else CAPPED
                for p in plans]

    def release(self, counts: CapCounts) -> bool:
        """Nothing was counted: nothing to give back."""
        return True
