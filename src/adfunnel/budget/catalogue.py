"""Campaign records of the budget service: one slot per campaign, from records or columns.

A part of :class:`~adfunnel.budget.service.BudgetService` (mixed in: its state is
declared in ``BudgetService.__init__``). Records come from the change log one by one
(newer versions only; a budget edit rescales today's plan) or, at start-up, as columns
(:class:`~adfunnel.budget.columns.CampaignColumns`) written into the slots in bulk.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from adfunnel.budget.columns import BID_CODE, NO_END, CampaignColumns, OwnedCampaigns
from adfunnel.budget.periods import slot_lifetime
from adfunnel.campaigns.model import BudgetPeriod, Campaign, CampaignStatus, PacingMode

#: Pacing modes the controller follows a plan for (``accelerated`` spends as it comes).
PACED = frozenset({PacingMode.EVEN, PacingMode.FRONTLOADED})


class Catalogue:
    """The campaign slots of a :class:`~adfunnel.budget.service.BudgetService`."""

    def owns(self, campaign_id: int) -> bool:
        return campaign_id % self.shards == self.shard

    def upsert_campaign(self, campaign: Campaign, *, created_at: float | None = None) -> None:
        """Apply a campaign record from the change log (newer versions only). A budget
        edit rescales the rest of today's curve from the spend committed now.

        ``created_at`` (Unix s) marks a campaign created now: on the local day it was
        created, its curve starts at that moment, so the whole daily budget is spread
        over the rest of the day instead of being "behind" the part of the curve that
        passed before it existed.
        """
        slot = self._slot_of.get(campaign.id)
        if slot is not None and self._slots.version[slot] > campaign.version:
            return
        old_daily = None if slot is None else int(self._slots.daily[slot])
        old_parts = None if slot is None else self._dayparts.get(slot, ())
        slot = self._slot(campaign)
        if created_at is not None:
            self._slots.created[slot] = created_at
        now = self._now()
        self._period_note(slot, campaign, now)
        rows = self._rows_of_slot(slot)
        period = slot in self._period and campaign.budget_period is not BudgetPeriod.DAY
        if period and rows:  # its days follow the flight (adfunnel.budget.periods)
            self._period_step(np.array([self._current_row(slot, now)]), now)
            rows = self._rows_of_slot(slot)
        elif old_daily is not None and old_daily != campaign.daily_budget_micros:
            for row in rows:
                self._rescale(row, campaign.daily_budget_micros, now)
        if old_parts is not None and old_parts != tuple(campaign.dayparts):
            self._reshape_days(slot)  # a daypart edit: the rest of today where it serves
        if rows:
            self._refresh(np.array(rows, dtype=np.int64), now)

    def upsert_campaigns(self, campaigns: Sequence[Campaign]) -> None:
        """Campaign records in bulk: new campaigns are added vectorised, known ones go
        through :meth:`upsert_campaign`."""
        new = []
        for c in campaigns:
            if c.id in self._slot_of:
                self.upsert_campaign(c)
            else:
                new.append(c)
        if new:
            self._campaigns.update((c.id, c) for c in new)
            self.load_campaigns(CampaignColumns.of(new))

    def load_campaigns(self, cols: CampaignColumns) -> None:
        """Campaigns not known yet, as columns (start-up reads the store in bulk; no
        record objects are made). Ids already known go through their records
        (:meth:`upsert_campaign`) only; here they are skipped."""
        get = self._slot_of.get
        fresh = np.fromiter((get(c, -1) < 0 for c in cols.ids.tolist()), dtype=bool,
                            count=len(cols))
        ix = np.flatnonzero(fresh)
        if len(ix):
            self._add_slots(cols, ix)
            if cols.special is not None:  # their records: budget periods, dayparts
                now = self._now()
                for cid in cols.ids[ix][cols.special[ix]].tolist():
                    self._note_record(int(cid), now)

    def _note_record(self, campaign_id: int, now: float) -> None:
        """Read the record of a campaign loaded as columns that needs it (a budget
        period, dayparts, frontloading) and apply what it says."""
        try:
            c = self.campaign(campaign_id)
        except LookupError:
            return
        slot = self._slot_of[campaign_id]
        self._write_slot(slot, c, known=False)
        self._period_note(slot, c, now)

    def campaign(self, campaign_id: int) -> Campaign:
        """The record of a known campaign.

        Raises:
            LookupError: unknown here, or loaded as columns with no ``campaign_loader``.
        """
        c = self._campaigns.get(campaign_id)
        if c is None:
            if campaign_id not in self._slot_of or self.campaign_loader is None:
                raise LookupError(f"campaign {campaign_id}: no record here")
            c = self.campaign_loader(campaign_id)
        return c

    def _slot(self, c: Campaign) -> int:
        slot = self._slot_of.get(c.id)
        if slot is None:
            slot = int(self._slots.take(1)[0])
            self._owned_cache = None
            self._next_roll = -math.inf
            self._slot_of[c.id] = slot
            self._slots.cid[slot] = c.id
            self._slots.shape[slot] = self._pending_shapes.pop(c.id, -1)
            self._campaigns[c.id] = c
            self._write_slot(slot, c, known=False)
            return slot
        self._campaigns[c.id] = c
        self._write_slot(slot, c)
        return slot

    def _write_slot(self, slot: int, c: Campaign, *, known: bool = True) -> None:
        """Write ``c`` into its slot; ``known``: the slot held its record before (a λ
        restart reads the old bid, ``adfunnel.budget.multipliers``)."""
        s = self._slots
        self._note_strategy(slot, c, known)  # before the old bid is overwritten
        before = (s.owned[slot], s.tz[slot], s.bid[slot], s.lifetime[slot] >= 0)
        s.version[slot] = c.version
        s.bid[slot] = BID_CODE[c.bid_type]
        s.charge[slot] = c.max_charge_micros
        s.daily[slot] = c.daily_budget_micros
        s.lifetime[slot] = slot_lifetime(c)  # a flight: its money (adfunnel.budget.periods)
        s.even[slot] = c.pacing_mode in PACED
        s.accel[slot] = c.pacing_mode is PacingMode.ACCELERATED
        s.active[slot] = c.status is CampaignStatus.ACTIVE
        s.owned[slot] = self.owns(c.id)
        s.fstart[slot] = c.flight_start.toordinal()
        s.fend[slot] = NO_END if c.flight_end is None else c.flight_end.toordinal()
        s.tz[slot] = self._tz_id(c.time_zone)
        if c.dayparts:
            self._dayparts[slot] = tuple(c.dayparts)
        else:
            self._dayparts.pop(slot, None)
        if (s.owned[slot], s.tz[slot], s.bid[slot], s.lifetime[slot] >= 0) != before:
            self._owned_cache = None
            self._next_roll = -math.inf

    def _add_slots(self, cols: CampaignColumns, ix: np.ndarray) -> None:
        """Vectorised slot creation for the campaigns ``cols[ix]`` (none known yet)."""
        self._owned_cache = None
        self._next_roll = -math.inf
        slots = self._slots.take(len(ix))
        s = self._slots
        ids = cols.ids[ix]
        s.shape[slots] = -1
        s.cid[slots] = ids
        s.version[slots] = cols.versions[ix]
        s.bid[slots] = cols.bid[ix]
        s.charge[slots] = cols.charges()[ix]
        s.daily[slots] = cols.daily[ix]
        s.lifetime[slots] = cols.lifetime[ix]
        s.active[slots] = cols.active[ix]
        s.even[slots] = cols.even[ix]
        s.accel[slots] = cols.accel[ix]
        s.owned[slots] = ids % self.shards == self.shard
        s.fstart[slots] = cols.fstart[ix]
        s.fend[slots] = cols.fend[ix]
        zone_ids = np.array([self._tz_id(z) for z in cols.zones] or [0], dtype=np.int64)
        s.tz[slots] = zone_ids[cols.tz[ix]]
        self._slot_of.update(zip(ids.tolist(), slots.tolist(), strict=True))
        for cid, parts in cols.dayparts.items():
            slot = self._slot_of.get(cid)
            if slot is not None and parts:
                self._dayparts[slot] = tuple(parts)
        for cid in [c for c in self._pending_shapes if c in self._slot_of]:
            s.shape[self._slot_of[cid]] = self._pending_shapes.pop(cid)

    def owned(self) -> OwnedCampaigns:
        """This shard's campaigns as columns (cached until a campaign record changes)."""
        if self._owned_cache is None:
            s = self._slots
            slots = np.flatnonzero(s.owned[: s.n])
            ids = s.cid[slots].copy()
            self._owned_cache = OwnedCampaigns(
                ids, s.tz[slots].copy(), list(self._tz_names), s.bid[slots].copy(),
                s.lifetime[slots] >= 0, np.argsort(ids, kind="stable"), slots)
        return self._owned_cache

    def _tz_id(self, tz: str) -> int:
        i = self._tz_ids.get(tz)
        if i is None:
            i = self._tz_ids[tz] = len(self._tz_names)
            self._tz_names.append(tz)
        return i
