"""λ across a restart: what the budget service hands the store, and resuming from it.

A part of :class:`~adfunnel.budget.service.BudgetService` (mixed in: its state is
declared in ``BudgetService.__init__``). Every row whose λ moved (a step, a restart on
new strategy terms, a new day's first λ) is marked (``lam_dirty``);
:meth:`ResumeMultipliers.kept_multipliers` hands the marked ones over as
:class:`~adfunnel.budget.kept_lams.KeptLams` for the process to write
(:mod:`adfunnel.budget.kept_lams`) — only while ad servers report to this instance
(``HEARD_WITHIN_S``): a standby's λ, stepped on no spend, is never written.

A starting service, after its campaigns are loaded (their strategy terms known), is
given what was kept (:meth:`ResumeMultipliers.resume_multipliers`). Only entries of the
campaign's current terms count (an automatic campaign whose ``bid_strategy_since`` is
the kept one: a strategy switch keeps its restart at the safe value), and then:

- the same campaign-day resumes its λ controller state as it was — λ, the integral
  (leaked over the time since its last step, as the controller leaks it between steps),
  the averages — and its quarter hours of λ (for the next day);
- a new day follows the in-memory rules (:mod:`adfunnel.budget.multipliers`):
  yesterday's λ at the nearest quarter hour, now read from the kept quarters of
  yesterday, else the campaign's latest kept λ, else ``START_LAMBDA``.

The resumed row's step clock starts at its making (``last_step_s``), as any new row's:
the new instance's step spend counts from its start, so the first step's ratio compares
like with like.
"""

from __future__ import annotations

import math

import numpy as np

from adfunnel.budget.kept_lams import KeptLams
from adfunnel.budget.multipliers import LAM_SLOT_S
from adfunnel.budget.rows import DAY_BITS
from adfunnel.pacing.bid_multiplier import DEFAULT_GAINS


def _same(a: float, b: float) -> bool:
    """Equal strategy instants (NaN: none, equal to none)."""
    return a == b or (math.isnan(a) and math.isnan(b))


#: Seconds since the last report of any ad server within which an instance's λ is
#: written: a standby that no server reports to steps λ on no spend (it would walk every
#: λ down to 1), and must not overwrite what the instance the servers follow wrote.
HEARD_WITHIN_S = 300.0


class ResumeMultipliers:
    """Kept λ of a :class:`~adfunnel.budget.service.BudgetService`: out and back in."""

    def kept_multipliers(self, now: float) -> KeptLams:
        """The λ state of every live campaign-day whose λ moved since the last call
        (the marks are cleared); none while no ad server reported here within
        ``HEARD_WITHIN_S`` of ``now`` (Unix s)."""
        t, s = self._rows, self._slots
        n = t.n
        rows = np.flatnonzero(t.live[:n] & t.lam_dirty[:n])
        t.lam_dirty[rows] = False
        if not any(now - at <= HEARD_WITHIN_S for at in self._heard.values()):
            rows = rows[:0]
        hist = t.lam_hist[rows]
        quarters = np.full((len(rows), self._lam_history.data.shape[1]), np.nan,
                           dtype=np.float32)
        has = hist >= 0
        quarters[has] = self._lam_history.data[hist[has]]
        sl = t.slot[rows]
        return KeptLams(s.cid[sl].copy(), t.day[rows].copy(), t.lam[rows].copy(),
                        t.lam_integral[rows].copy(), t.lam_spend_avg[rows].copy(),
                        t.lam_target_avg[rows].copy(), t.lam_charges_avg[rows].copy(),
                        t.last_step_s[rows].copy(), s.since[sl].copy(), quarters)

    def mark_unsaved(self, kept: KeptLams) -> None:
        """Mark the live rows of ``kept`` again (their write failed: the next one retries)."""
        t = self._rows
        keys = (kept.campaign_id << DAY_BITS | kept.day).tolist()
        rows = [r for r in (self._row_of.get(k) for k in keys) if r is not None]
        t.lam_dirty[np.array(rows, dtype=np.int64)] = True

    def resume_multipliers(self, kept: KeptLams, now: float) -> int:
        """Take in ``kept`` (module docstring); call once the campaigns are loaded. Entries
        of unknown, manual or re-termed campaigns are dropped. Returns how many count."""
        s, t = self._slots, self._rows
        n = 0
        for i in range(len(kept)):
            cid = int(kept.campaign_id[i])
            slot = self._slot_of.get(cid)
            if (slot is None or not s.owned[slot] or not s.auto[slot]
                    or not _same(float(kept.since[i]), float(s.since[slot]))):
                continue  # another shard's, a manual campaign's, or of other terms
            n += 1
            key = cid << DAY_BITS | int(kept.day[i])
            q = kept.quarters[i]
            self._kept[key] = (float(kept.lam[i]), float(kept.integral[i]),
                               float(kept.spend_avg[i]), float(kept.target_avg[i]),
                               float(kept.charges_avg[i]), float(kept.stepped_at[i]),
                               float(kept.since[i]), None if np.isnan(q).all() else q.copy())
            s.lam_last[slot] = kept.lam[i]  # entries come by day: the latest wins
            row = self._row_of.get(key)
            if row is not None and t.live[row]:  # a day made already: resume it now
                self._resume_row(row, self._kept.pop(key), now)
        return n

    def _resume_kept(self, slots: np.ndarray, days: np.ndarray, rows: np.ndarray,
                     yrows: np.ndarray, now: float) -> None:
        """New automatic ``rows`` (their λ already set from memory): a kept state of the
        same day resumes; a day with no yesterday in memory takes yesterday's kept λ at
        the nearest quarter hour. Kept entries of other strategy terms are ignored."""
        s, t = self._slots, self._rows
        cids = s.cid[slots].tolist()
        for i, (cid, d) in enumerate(zip(cids, days.tolist(), strict=True)):
            since = float(s.since[slots[i]])
            entry = self._kept.pop(cid << DAY_BITS | d, None)
            # the days before are read here or never: let them go
            y = self._kept.pop(cid << DAY_BITS | (d - 1), None)
            self._kept.pop(cid << DAY_BITS | (d - 2), None)
            if entry is not None and _same(entry[6], since):
                self._resume_row(int(rows[i]), entry, now)
                continue
            if yrows[i] >= 0:  # yesterday is in memory: its own quarters were read
                continue
            if y is None or not _same(y[6], since) or y[7] is None:
                continue
            marks = np.flatnonzero(~np.isnan(y[7]))
            if len(marks):  # the nearest quarter, the earlier one on a tie
                r = int(rows[i])
                q = max(0, int((now - t.start_s[r]) // LAM_SLOT_S))
                t.lam[r] = float(y[7][marks[np.abs(marks - q).argmin()]])
                s.lam_last[slots[i]] = t.lam[r]

    def _resume_row(self, row: int, entry: tuple, now: float) -> None:
        """``row`` takes the kept state ``entry`` (λ, integral, spend, target and charges
        averages, stepped at, since, quarters)."""
        t = self._rows
        lam, integral, spend_avg, target_avg, charges_avg, stepped_at, _, quarters = entry
        gap = max(0.0, now - stepped_at)  # no step while down: the integral only leaks
        t.lam[row] = lam
        t.lam_integral[row] = integral * math.exp(-gap / DEFAULT_GAINS.leak_s)
        t.lam_spend_avg[row], t.lam_target_avg[row] = spend_avg, target_avg
        t.lam_charges_avg[row] = charges_avg
        self._slots.lam_last[t.slot[row]] = lam
        if quarters is not None:
            h = int(t.lam_hist[row])
            if h < 0:
                h = int(self._lam_history.take(1)[0])
                t.lam_hist[row] = h
            self._lam_history.data[h] = quarters
        t.lam_dirty[row] = True
