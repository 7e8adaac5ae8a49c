"""Steps 2-3 of the columnar decision, the gates: the budget gate (in bulk where it
can answer so, else campaign by campaign or lazily when a campaign can win), the pacing
coin, and the frequency caps over the arrays.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np

from adfunnel.auction.draws import PACING_COIN, unit_base
from adfunnel.budget.gate import ASK, BUDGET_EXHAUSTED, PACED_OUT, REFUSE, BulkGate, SpendGate
from adfunnel.frequency.windows import CapPlan
from adfunnel.pacing.traffic_log import EligibleCounter
from adfunnel.serving.caps import CAPPED, CapGate
from adfunnel.serving.catalog import Catalog
from adfunnel.serving.columns import ColumnsView
from adfunnel.serving.decision import CAMPAIGN_COMPLETED, Decision
from adfunnel.serving.direct_book import GuaranteedSupply
from adfunnel.serving.kernels import gate_inputs, paced_out
from adfunnel.serving.request import SelectRequest
from adfunnel.serving.stages.filter import CODE, REASONS, Servable, add_reason
from adfunnel.serving.tiers import (
    AHEAD_OF_PLAN,
    DIRECT_LINE,
    GOAL_MET,
    KIND_AUCTION,
    KIND_GUARANTEED,
    SHARE_NOT_DRAWN,
    coin_masks,
)

#: A candidate's budget answer (``s["lazy"]``): admitted, pending (its campaign is
#: asked when it reaches the decisive prefix) or refused after the ask.
LAZY_ADMITTED, LAZY_PENDING, LAZY_REFUSED = 0, 1, 2
#: Ask rounds per slot run before pending campaigns still in the prefix go without.
MAX_SETTLE_ROUNDS = 8
_NO_IDS = np.zeros(0, dtype=np.int64)


class GatingStage:
    """The gates of :class:`~adfunnel.serving.decider.ColumnarDecider` (a part of it: the
    decider holds the gate, the caps and the counters below)."""

    catalog: Catalog
    gate: SpendGate
    caps: CapGate | None
    eligible: EligibleCounter | None
    capped: EligibleCounter
    supply: GuaranteedSupply

    def _campaign_gate(self, sv: Servable, now: datetime, seed: int, extra: list[str],
                       exchange: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The budget gate and pacing coin for the campaigns :meth:`_servable` left in,
        in first-retrieved order: each candidate's reason code (0 = in; status, flight
        and daypart codes kept), and whether its campaign's budget answer waits until
        it can win (:meth:`_gate`). The campaigns in count as eligible traffic, and the
        guaranteed lines among them as their supply (:class:`GuaranteedSupply`).
        Sponsorship and guaranteed lines take the tiers' draws
        (:func:`~adfunnel.serving.tiers.coin_masks`) instead of the pacing coin's reason."""
        verdict = sv.verdict.copy()
        pending = np.zeros(len(sv.uc), dtype=bool)
        if not len(sv.uc):
            return verdict[sv.inverse], pending[sv.inverse]
        book = self.catalog.direct
        done = np.flatnonzero(verdict == CODE[CAMPAIGN_COMPLETED])
        if len(done) and book.any():  # a completed direct line: its goal met
            verdict[done[book.kinds(sv.uc[done])[0] != KIND_AUCTION]] = CODE[GOAL_MET]
        if exchange and book.any():  # an exchange's request: no direct line, no supply
            live = np.flatnonzero(verdict == 0)
            verdict[live[book.kinds(sv.uc[live])[0] != KIND_AUCTION]] = CODE[DIRECT_LINE]
        live = np.flatnonzero(verdict == 0)
        if self.eligible is not None and len(live):  # the pacing curve's traffic
            self.eligible.add_many(sv.uc[live], now)
        kinds = shares = None
        if book.any():  # some campaign sells direct: the tiers' draws and reasons
            kinds, shares = book.kinds(sv.uc[live])
            self.supply.observe(sv.uc[live][kinds == KIND_GUARANTEED].tolist())
        verdict[live], pending[live] = self._gate(sv.uc[live], sv.local[live],
                                                  sv.charges[live], sv.budgets[live], now,
                                                  seed, extra, kinds, shares)
        return verdict[sv.inverse], pending[sv.inverse]

    def _gate(self, cids: np.ndarray, days: np.ndarray, charges: np.ndarray,
              budgets: np.ndarray, now: datetime, seed: int, extra: list[str],
              kinds: np.ndarray | None = None,
              shares: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Reason code per campaign (0 = admitted and in by the pacing coin), and
        whether it is left pending. A reason of the gate's own that :data:`REASONS` lacks
        (e.g. ``no_slice``) gets a code past them, its name at that index of ``extra``.

        A gate whose asks share one round (``asks_together``: the embedded service on
        the system clock) is asked lazily: a campaign it cannot answer in bulk (metered,
        no slice) stays in as *pending*, and is asked only when it reaches the auction's
        decisive prefix (:meth:`_settle_pending`). At catalogue scale a decision meets
        thousands of such campaigns, of which a handful can win; asking for all of
        them granted tens of thousands of slices nobody used, and re-granted them as
        they expired. Other gates are asked here, in the reference path's order.

        ``kinds`` (tier code per campaign; None: all auction) and ``shares``: direct
        lines are never left pending (they do not reach the auction's prefix), a spent
        budget is their ``goal_met``, and they take the tiers' draws."""
        n = len(cids)
        out = np.zeros(n, dtype=np.int8)
        pending = np.zeros(n, dtype=bool)
        if not n:
            return out, pending
        gate = self.gate
        bulk = _is_bulk(gate)
        t = now.timestamp()
        if bulk:
            codes = gate.bulk_admit(cids, days, charges, budgets, t)
            p = gate.bulk_pacing(cids)
            gen = gate.generation
        else:
            codes = np.full(n, ASK, dtype=np.int8)
            p = np.ones(n)
            gen = 0
        out[codes == REFUSE] = CODE[BUDGET_EXHAUSTED]
        asks = np.flatnonzero(codes == ASK)
        together = getattr(gate, "asks_together", False)
        if len(asks) and together:
            later = asks if kinds is None else asks[kinds[asks] == KIND_AUCTION]
            pending[later] = True  # asked when they can win; no pacing coin before
            asks = asks[:0] if kinds is None else asks[kinds[asks] != KIND_AUCTION]
        while len(asks):
            k = int(asks[0])
            reason = gate.admit(self.catalog.campaigns[int(cids[k])], now, int(charges[k]))
            if reason is not None:
                out[k] = _code_of(reason, extra)
            if bulk and gate.generation != gen:
                # the ask changed the gate (an in-process reply): later campaigns, and
                # this one's p, are read anew, as the reference path reads them
                gen = gate.generation
                codes[k + 1:] = gate.bulk_admit(cids[k + 1:], days[k + 1:], charges[k + 1:],
                                                budgets[k + 1:], t)
                out[k + 1:] = np.where(codes[k + 1:] == REFUSE, CODE[BUDGET_EXHAUSTED], 0)
                p[k:] = gate.bulk_pacing(cids[k:])
            elif not bulk and reason is None:
                p[k] = gate.pacing_rate(int(cids[k]))
            rest = np.flatnonzero(codes[k + 1:] == ASK)
            asks = rest + k + 1
            if together and kinds is not None:  # auction campaigns wait until they can win
                pending[asks[kinds[asks] == KIND_AUCTION]] = True
                asks = asks[kinds[asks] != KIND_AUCTION]
        admitted = np.flatnonzero(out == 0)
        if pending.any():
            admitted = admitted[~pending[admitted]]
        paced = paced_out(unit_base(seed, PACING_COIN), cids[admitted], p[admitted])
        if kinds is None:
            out[admitted[paced]] = CODE[PACED_OUT]
            return out, pending
        assert shares is not None
        out[(out == CODE[BUDGET_EXHAUSTED]) & (kinds != KIND_AUCTION)] = CODE[GOAL_MET]
        auction, ahead, not_drawn = coin_masks(kinds[admitted], cids[admitted], paced,
                                               shares[admitted], seed)
        out[admitted[auction]] = CODE[PACED_OUT]
        out[admitted[ahead]] = CODE[AHEAD_OF_PLAN]
        out[admitted[not_drawn]] = CODE[SHARE_NOT_DRAWN]
        return out, pending

    def _settle_pending(self, at: np.ndarray, camp: np.ndarray, s: dict[str, np.ndarray],
                        view: ColumnsView, now: datetime, seed: int,
                        counts: dict[str, int]) -> None:
        """Ask the gate in one round (``ask_many``) for the pending campaigns among the
        candidates ``at``; those admitted take the pacing coin with the p read after the
        round. The round may change other campaigns' states too, so the other campaigns
        of ``at`` are read again from the bulk view: refused ones leave, and one that
        lost its slice meanwhile is pending again. ``s["lazy"]`` is updated in place
        (:data:`LAZY_PENDING` and the others); candidates turned away are counted by reason."""
        gate = self.gate
        lazy = s["lazy"]
        asked = np.unique(camp[at[lazy[at] == LAZY_PENDING]])
        others = np.setdiff1d(camp[at[lazy[at] == LAZY_ADMITTED]], asked, assume_unique=False)
        reasons = gate.ask_many(  # type: ignore[attr-defined]
            [self.catalog.campaigns[int(c)] for c in asked.tolist()], now,
            view.c_charge[asked].tolist())
        out: dict[int, str] = {c: r for c, r in zip(asked.tolist(), reasons, strict=True)
                               if r is not None}
        admitted = np.array([c for c in asked.tolist() if c not in out], dtype=np.int64)
        if len(admitted):
            paced = paced_out(unit_base(seed, PACING_COIN), admitted,
                              gate.bulk_pacing(admitted))  # type: ignore[attr-defined]
            out.update(dict.fromkeys(admitted[paced].tolist(), PACED_OUT))
        again = _NO_IDS
        if len(others):
            ordinals, _ = self.catalog.columns.zones.at(now)
            charges, budgets = gate_inputs(others, view.campaigns)
            codes = gate.bulk_admit(  # type: ignore[attr-defined]
                others, ordinals[view.c_zone[others]], charges, budgets, now.timestamp())
            out.update(dict.fromkeys(others[codes == REFUSE].tolist(), BUDGET_EXHAUSTED))
            again = others[codes == ASK]
        lazy[np.isin(camp, asked) & (lazy == LAZY_PENDING)] = LAZY_ADMITTED
        if len(again):
            lazy[np.isin(camp, again) & (lazy == LAZY_ADMITTED)] = LAZY_PENDING
        for c, r in out.items():
            gone = (camp == c) & (lazy != LAZY_REFUSED)
            add_reason(counts, r, int(np.count_nonzero(gone)))
            lazy[gone] = LAZY_REFUSED

    def _screen_caps_columns(self, req: SelectRequest, ids: np.ndarray, camp: np.ndarray,
                             pending: np.ndarray, view: ColumnsView, now: datetime,
                             decision: Decision,
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, CapPlan]]:
        """The reference path's cap screen
        (:meth:`~adfunnel.serving.reference_filter.ReferenceFilter._screen_caps`) on the arrays:
        the candidates with caps screened with one read, the others untouched; reasons
        counted. ``pending`` (a flag per candidate) is filtered with them."""
        gate = self.caps
        if gate is None or not gate.book.any() or not len(ids):
            return ids, camp, pending, {}
        at = np.flatnonzero(gate.book.capped_mask(camp, view.c_advertiser[camp]))
        if not len(at):
            return ids, camp, pending, {}
        campaigns, counts = self.catalog.campaigns, decision.reason_counts
        assert counts is not None
        screen = gate.screen(req.user.key, [(int(ids[i]), campaigns[int(camp[i])])
                                            for i in at.tolist()], now)
        out = [i for i, r in zip(at.tolist(), screen.reasons, strict=True) if r is not None]
        for r in screen.reasons:
            if r is not None:
                add_reason(counts, r, 1)
        self.capped.add_many({campaigns[int(camp[i])].id
                              for i, r in zip(at.tolist(), screen.reasons, strict=True)
                              if r == CAPPED}, now)
        if not out:
            return ids, camp, pending, screen.plans
        keep = np.ones(len(ids), dtype=bool)
        keep[out] = False
        return ids[keep], camp[keep], pending[keep], screen.plans


_BULK: dict[type, bool] = {}


def _is_bulk(gate: object) -> bool:
    """isinstance(gate, BulkGate), cached per class (a protocol check is slow)."""
    kind = type(gate)
    known = _BULK.get(kind)
    if known is None:
        known = _BULK[kind] = isinstance(gate, BulkGate)
    return known


def _code_of(reason: str, extra: list[str]) -> int:
    """The code of ``reason``: its index in :data:`REASONS`, else past them, its name at
    that index of ``extra`` (appended the first time)."""
    code = CODE.get(reason)
    if code is None:
        if reason not in extra:
            extra.append(reason)
        code = len(REASONS) + extra.index(reason)
    return code
