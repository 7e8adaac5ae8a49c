"""The bid multiplier λ of automatic campaigns: its control step beside p's, its restart on
a change of strategy terms, and λ kept by minute for the next day (issue #27).

A part of :class:`~adfunnel.budget.service.BudgetService` (mixed in: its state is
declared in ``BudgetService.__init__``). An automatic campaign (``bid_strategy``
max_clicks, max_conversions or target_cpa; :mod:`adfunnel.campaigns.bidding_terms`)
bids pCTR × v ÷ λ per auction, v its ``bid_micros``; the control loop
(:meth:`~adfunnel.budget.control.Control._control`) steps λ of its evenly paced rows
with :func:`adfunnel.pacing.bid_multiplier.step_arrays` against the same target plan,
step spend and behind/committed figures that p's controller reads. Its p stays 1 —
λ does the cut — except as the fallback: once λ is at its bound (``LAMBDA_MAX``) and
the campaign is still ahead of plan, p's controller takes over; while p < 1, λ holds,
and it may move again once p has come back to 1 (:func:`split_control`).

Restart (the campaign's ``bid_strategy_since`` moved, or it became automatic): λ
restarts where the bid is the one the campaign made just before, in the same unit —
a manual bid's λ is ``start_multiplier(v, old bid)``, an automatic one's keeps its
old bid v_old ÷ λ_old — and, with no bid in the same unit (a new campaign, a change
of the billed action: a CPM bid says nothing of a click's worth), at ``START_LAMBDA``
= ``LAMBDA_MAX``: the lowest bids, which the controller raises by up to 25 % a step
while the campaign is behind (to λ = 1 in 42 steps, 7 minutes at the 10 s step).
A new day starts from yesterday's λ at the nearest quarter hour a step recorded (as
p's first value does by minute, :meth:`~adfunnel.budget.control.Control._first_p`),
else from the campaign's latest λ, else from ``START_LAMBDA``; a restarted service
resumes them from the store (:mod:`adfunnel.budget.lam_resume`). λ is kept by quarter
hour in float32 (:class:`LamHistory`, 400 bytes per automatic campaign-day) where p
keeps minutes in float64 (12 kB, only for the days whose p moved): λ moves on nearly
every step of every automatic campaign, and 10⁶ of them by minute would take 12 GB.

Accelerated (unpaced) automatic campaigns have no plan to follow: they are published
λ = 1 (bid the value; the budget gate stops them at the budget).
"""

from __future__ import annotations

import math

import numpy as np

from adfunnel.budget.columns import BID_CODE
from adfunnel.budget.rows import NAN
from adfunnel.campaigns.bidding_terms import is_automatic
from adfunnel.campaigns.model import BidType, Campaign, Priority
from adfunnel.pacing import bid_multiplier
from adfunnel.pacing.bid_multiplier import LAMBDA_MAX, at_bound, start_multiplier
from adfunnel.pacing.curve_bank import MAX_MINUTES

#: λ of an automatic campaign with no earlier bid in its unit (module docstring).
START_LAMBDA = LAMBDA_MAX
#: Relative change of λ that is published to ad servers (a new directive version): at
#: 10⁶ campaigns every step would otherwise re-send every automatic campaign (λ moves
#: a little at almost every step); a bid off by under 1 % costs less than the churn.
#: λ reaching 1 or its bound is always published.
LAM_PUBLISH_SHARE = 0.01
_CPM = BID_CODE[BidType.CPM]
#: Seconds of one kept λ (a quarter hour), and how many a day (of up to MAX_MINUTES) has.
LAM_SLOT_S = 900
LAM_SLOTS = -(-MAX_MINUTES * 60 // LAM_SLOT_S)


class LamHistory:
    """λ of campaign-days by quarter hour of their day (NaN: no step in it), one row of
    ``LAM_SLOTS`` float32 per automatic campaign-day that had a step."""

    def __init__(self) -> None:
        self.data = np.full((0, LAM_SLOTS), np.nan, dtype=np.float32)
        self.free: list[int] = []

    def take(self, k: int) -> np.ndarray:
        """``k`` rows of NaN."""
        if len(self.free) < k:
            n = len(self.data)
            cap = max(2 * n, n + k - len(self.free), 64)
            data = np.full((cap, LAM_SLOTS), np.nan, dtype=np.float32)
            data[:n] = self.data
            self.data = data
            self.free.extend(range(cap - 1, n - 1, -1))
        idx = np.array(self.free[len(self.free) - k:], dtype=np.int64)
        del self.free[len(self.free) - k:]
        self.data[idx] = np.nan
        return idx

    def release(self, idx: np.ndarray) -> None:
        self.free.extend(idx.tolist())


def automatic(c: Campaign) -> bool:
    """True when the campaign bids value ÷ λ (an automatic strategy, auction tier)."""
    return is_automatic(c.bid_strategy) and c.priority is Priority.AUCTION


def lam_restarts(old: Campaign | None, new: Campaign) -> bool:
    """Whether a campaign record edit restarts λ (module docstring): ``new`` bids
    automatically and ``old`` did not, or its ``bid_strategy_since`` moved. An ad server
    holding λ of the old terms must not bid with it until the service's restarted λ
    comes (:meth:`~adfunnel.budget.client.BudgetClient.campaign_changed`). A new
    campaign (``old`` None) has no λ yet to forget."""
    if old is None or not automatic(new):
        return False
    return not automatic(old) or old.bid_strategy_since != new.bid_strategy_since


def split_control(lam_old: np.ndarray, lam_new: np.ndarray, p_old: np.ndarray,
                  p_new: np.ndarray, behind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(λ, p) of automatic rows from both controllers' proposals (module docstring).

    ``lam_*``: λ before and as :func:`~adfunnel.pacing.bid_multiplier.step_arrays`
    proposes; ``p_*``: p before and as p's controller proposes; ``behind``: planned
    minus committed spend, micros (< 0: ahead). Throttling is in charge while p < 1
    (λ holds), or once λ is at its bound and the campaign still ahead; else p = 1.
    """
    throttling = p_old < 1.0
    lam = np.where(throttling, lam_old, lam_new)
    take = throttling | (at_bound(lam) & (behind < 0))
    return lam, np.where(take, p_new, 1.0)


class Multipliers:
    """λ of the automatic campaigns of a :class:`~adfunnel.budget.service.BudgetService`."""

    def _note_strategy(self, slot: int, c: Campaign, known: bool) -> None:
        """Called by ``_write_slot`` before it writes ``c``: restart λ when the strategy
        terms moved (module docstring); a campaign gone manual bids λ = 1."""
        s = self._slots
        was_auto, old_since = bool(s.auto[slot]), float(s.since[slot])
        since = NAN if c.bid_strategy_since is None else c.bid_strategy_since.timestamp()
        auto = automatic(c)
        s.auto[slot], s.since[slot] = auto, since
        same = since == old_since or (math.isnan(since) and math.isnan(old_since))
        if not auto:
            if was_auto:
                self._restart_lam(slot, 1.0)
            return
        if was_auto and same and known:
            return
        lam = START_LAMBDA
        if known and s.bid[slot] == BID_CODE[c.bid_type] and s.bid[slot] != _CPM:
            # the bid it made before, per click or conversion: the charge column
            old_bid = float(s.charge[slot])
            lam_old = float(s.lam_last[slot])
            if was_auto and lam_old >= 1.0:  # an automatic bid: v_old ÷ λ_old
                old_bid /= lam_old
            lam = start_multiplier(c.bid_micros, old_bid)
        self._restart_lam(slot, lam)

    def _restart_lam(self, slot: int, lam: float) -> None:
        """λ of the campaign restarts at ``lam``: its live rows' λ states start afresh
        there, and their minutes of λ are let go (the next day must not start from a
        λ of the old terms)."""
        self._slots.lam_last[slot] = lam
        t = self._rows
        rows = np.array(self._rows_of_slot(slot), dtype=np.int64)
        if not len(rows):
            return
        t.lam[rows], t.lam_integral[rows] = lam, 0.0
        t.lam_spend_avg[rows] = t.lam_target_avg[rows] = t.lam_charges_avg[rows] = -1.0
        t.lam_dirty[rows] = True
        hist = t.lam_hist[rows]
        self._lam_history.release(hist[hist >= 0])
        t.lam_hist[rows] = -1

    def _step_lam(self, rows: np.ndarray, dt: np.ndarray, target: np.ndarray,
                  behind: np.ndarray, p_old: np.ndarray, now: float) -> None:
        """One λ step of automatic ``rows`` (a subset of ``_control``'s, whose p is already
        p's controller's proposal) and the split of the cut with p."""
        t = self._rows
        state = bid_multiplier.MultiplierArrays(
            t.lam[rows], t.lam_integral[rows], t.lam_spend_avg[rows], t.lam_target_avg[rows],
            t.lam_charges_avg[rows])
        lam_old = state.lam
        for d in np.unique(dt).tolist():  # dt is one value in practice (one step)
            k = dt == d
            new = bid_multiplier.step_arrays(
                _take(state, k), t.step_spend[rows[k]], target[k], d,
                budget_micros=t.plan_budget[rows[k]], charges=t.step_charges[rows[k]],
                behind_micros=behind[k])
            r = rows[k]
            lam, t.p[r] = split_control(lam_old[k], new.lam, p_old[k], t.p[r], behind[k])
            t.lam[r], t.lam_integral[r] = lam, new.integral
            t.lam_spend_avg[r], t.lam_target_avg[r] = new.spend_avg, new.target_avg
            t.lam_charges_avg[r] = new.charges_avg
        self._slots.lam_last[t.slot[rows]] = t.lam[rows]
        t.lam_dirty[rows] = True
        self._record_lam(rows, now)

    def _record_lam(self, rows: np.ndarray, now: float) -> None:
        """Note λ at this step's quarter hour of each row's day (the last step of a
        quarter wins), for the next day."""
        t = self._rows
        new = t.lam_hist[rows] < 0
        if new.any():
            t.lam_hist[rows[new]] = self._lam_history.take(int(new.sum()))
        q = np.floor_divide(now - t.start_s[rows], LAM_SLOT_S).astype(np.int64)
        ok = (q >= 0) & (q < LAM_SLOTS)
        self._lam_history.data[t.lam_hist[rows[ok]], q[ok]] = t.lam[rows[ok]]

    def _first_lams(self, slots: np.ndarray, days: np.ndarray, rows: np.ndarray,
                    now: float) -> None:
        """λ of new ``rows`` of automatic campaigns (module docstring); yesterday's
        minutes are let go once read."""
        s, t = self._slots, self._rows
        auto = s.auto[slots]
        if not auto.any():
            return
        slots, days, rows = slots[auto], days[auto], rows[auto]
        last = s.lam_last[slots]
        lam = np.where(np.isnan(last), START_LAMBDA, last)
        yrows = self._find_rows(slots, days - 1)
        elapsed = np.maximum(0, np.floor_divide(now - t.start_s[rows], LAM_SLOT_S)
                             ).astype(np.int64)
        for i in np.flatnonzero(yrows >= 0).tolist():
            y = int(yrows[i])
            h = int(t.lam_hist[y])
            if h < 0:
                continue
            marks = np.flatnonzero(~np.isnan(self._lam_history.data[h]))
            if len(marks):  # the nearest quarter, the earlier one on a tie
                lam[i] = float(self._lam_history.data[h, marks[np.abs(marks - elapsed[i])
                                                                  .argmin()]])
            if t.end_s[y] <= now:
                self._lam_history.release(np.array([h]))
                t.lam_hist[y] = -1
        t.lam[rows] = lam
        s.lam_last[slots] = lam
        t.lam_dirty[rows] = True
        if self._kept:  # what a restarted service read back (adfunnel.budget.lam_resume)
            self._resume_kept(slots, days, rows, yrows, now)

    def _lam_published(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(λ to publish, changed enough to publish) of ``rows``: the row's λ for paced
        automatic campaigns, 1 for every other (``LAM_PUBLISH_SHARE``)."""
        t, s = self._rows, self._slots
        sl = t.slot[rows]
        lam = np.where(s.auto[sl] & s.even[sl], t.lam[rows], 1.0)
        pub = t.pub_lam[rows]
        edge = (lam != pub) & ((lam <= 1.0) | (lam >= LAMBDA_MAX))
        return lam, ~(np.abs(lam - pub) <= LAM_PUBLISH_SHARE * pub) | edge


def _take(state: bid_multiplier.MultiplierArrays, k: np.ndarray
          ) -> bid_multiplier.MultiplierArrays:
    return bid_multiplier.MultiplierArrays(state.lam[k], state.integral[k], state.spend_avg[k],
                                           state.target_avg[k], state.charges_avg[k])
