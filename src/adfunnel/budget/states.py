"""Budget state and pacing status of campaign-days from their spend, and the warm-up
that keeps a (re)started shard cold.

A part of :class:`~adfunnel.budget.service.BudgetService` (mixed in: its state is
declared in ``BudgetService.__init__``). ``_refresh`` applies the rules of
:mod:`adfunnel.budget.slices` to rows (vectorised) and publishes what changed: a row
whose (state, p) moved gets a new version and enters the change log the replies read.
"""

from __future__ import annotations

import numpy as np

from adfunnel.budget.day_rows import CampaignDay
from adfunnel.budget.grants import CPM_CODE
from adfunnel.budget.rows import (
    EXHAUSTED,
    METERED,
    NAN,
    OPEN,
    S_BID,
    S_BUDGET,
    S_COLD,
    S_EXHAUSTED,
    S_PACING,
    S_STOPPED,
    STOPPED,
)
from adfunnel.budget.slices import OPEN_RESERVE_CHARGES, OPEN_RESERVE_S, last_charges

#: How far behind its curve (a share of the day's budget: the controller's integral) a
#: campaign at full participation (p = 1) must be to read ``limited_by_bid_or_audience``:
#: a quarter hour of the day's average spend. At 0.002 (under three minutes) a new
#: campaign read "limited by bid" on the dashboard a minute into its day, before it had
#: lost enough auctions to say so; the integral is clamped at 0.03, so the status still
#: shows within about 15 minutes of a stall.
LIMITED_BEHIND_SHARE = 1 / 96
#: Seconds after start before a fleet shard may grant (three report periods).
WARMUP_S = 3.0
#: A server silent this long no longer holds a new instance's warm-up back (seconds).
SERVER_STALE_S = 10.0


class States:
    """Budget states and cold start of a :class:`~adfunnel.budget.service.BudgetService`."""

    def warm(self, now: float | None = None) -> bool:
        """True once every live server has synced with this instance (module docstring)."""
        if self._warm:
            return True
        now = self._now() if now is None else now
        if self.expected_servers is not None:
            ok = self.expected_servers <= self._synced
        else:
            live = {s for s, t in self._heard.items() if now - t <= SERVER_STALE_S}
            ok = now - self.started_at >= self.warmup_s and live <= self._synced
        self._warm = ok
        return ok

    def can_grant(self, cd: CampaignDay, now: float) -> bool:
        """Grants need the day's billed spend read and a warm instance."""
        return bool(self._rows.billed_read[cd.row]) and self.warm(now)

    def _refresh(self, rows: np.ndarray, now: float) -> None:
        """Budget state and pacing status of ``rows`` from their spend (vectorised), then
        publish what changed."""
        if not len(rows):
            return
        self._lapse(now)
        t, s = self._rows, self._slots
        sl = t.slot[rows]
        charge = s.charge[sl]
        daily, life = s.daily[sl], s.lifetime[sl]
        allot = t.allot[rows]
        if (allot >= 0).any():  # flight and average-day rows: the day's allotment
            daily = np.where(allot >= 0, allot, daily)
        budget = np.where(life < 0, daily,
                          np.maximum(0, np.minimum(daily, life - t.lifetime_before[rows])))
        day = t.day[rows]
        flying = (s.fstart[sl] <= day) & (day <= s.fend[sl])
        stopped = ~s.active[sl] | ~flying | (budget <= 0)
        read = t.billed_read[rows]
        # warm() is asked only where a campaign-day has its billed spend read, as the
        # per-campaign rule ``read and warm()`` asks it (a fleet shard's warm-up is
        # decided at the first such question)
        warm = self.warm(now) if (read & ~stopped).any() else self._warm
        cold = ~(read & warm)
        in_fl = np.maximum(0, t.bucket_sum[rows] + t.sl_used[rows] - t.settled_after[rows])
        billed = t.billed[rows]
        committed = billed + in_fl + t.sl_open[rows]
        peak = np.maximum(t.peak_rate[rows], t.plan_peak_rate[rows])
        thr_rate = np.floor(OPEN_RESERVE_S * np.maximum(0.0, peak)).astype(np.int64)
        thr = np.where(t.rate_measured[rows],
                       np.maximum(thr_rate, OPEN_RESERVE_CHARGES * charge), budget)
        g = np.maximum(0, budget - billed - in_fl)
        least = last_charges(charge, s.bid[sl] == CPM_CODE, t.served_total[rows],
                             t.served_charges[rows])
        st = np.where(budget - committed > thr, OPEN,
                      np.where(g < least, EXHAUSTED, METERED)).astype(np.int8)
        normal = ~stopped & ~cold
        ex = t.exhausted_at[rows]
        ex = np.where(normal & (st == EXHAUSTED) & np.isnan(ex), now,
                      np.where(normal & (st != EXHAUSTED), NAN, ex))
        t.exhausted_at[rows] = ex
        limited = (t.p[rows] >= 1.0) & (t.integral[rows] > LIMITED_BEHIND_SHARE)
        status = np.select([st == EXHAUSTED, st == METERED, limited],
                           [S_EXHAUSTED, S_BUDGET, S_BID], S_PACING)
        t.state[rows] = np.where(stopped, STOPPED, np.where(cold, METERED, st))
        t.status[rows] = np.where(stopped, S_STOPPED, np.where(cold, S_COLD, status))
        if (~stopped & cold & read).any():
            self._maybe_cold = True
        self._publish(rows)

    def _publish(self, rows: np.ndarray) -> None:
        """Directive values of ``rows``; the rows whose (state, p) changed, or whose λ
        moved by more than ``LAM_PUBLISH_SHARE``, get a new version and enter the change
        log."""
        t, s = self._rows, self._slots
        st = t.state[rows]
        p = np.where(st == STOPPED, 0.0, np.where(s.accel[t.slot[rows]], 1.0, t.p[rows]))
        lam, lam_moved = self._lam_published(rows)
        changed = (st != t.pub_state[rows]) | (p != t.pub_p[rows]) | lam_moved
        if not changed.any():
            return
        ch = rows[changed]
        self._version += 1
        t.pub_state[ch] = st[changed]
        t.pub_p[ch] = p[changed]
        t.pub_lam[ch] = lam[changed]
        t.ver[ch] = self._version
        self._log_vers.append(self._version)
        self._log_rows.append(ch.copy())

    def _refresh_cold(self, rows: np.ndarray, now: float) -> None:
        """Refresh those of the current ``rows`` still cold, as each reply once did for
        every cold campaign-day. Only those with their day's billed spend read can
        leave the cold state here (once the instance is warm); the others' refresh
        would give them again what they hold, so they are skipped."""
        if not self._maybe_cold:
            return
        self._maybe_cold = False
        t = self._rows
        self._refresh(rows[(t.status[rows] == S_COLD) & t.billed_read[rows]], now)
