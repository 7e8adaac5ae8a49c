"""The report protocol on the service's side: servers' spend in, directives out.

A part of :class:`~adfunnel.budget.service.BudgetService` (mixed in: its state is
declared in ``BudgetService.__init__``). Reports are idempotent by ``(server_id, seq)``;
a re-sent message gets the reply it had. A reply carries the directives changed since
the version the server holds (the change log, trimmed to what every recent server has
acknowledged), plus those of the campaigns it names.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections import deque
from datetime import date

import numpy as np

from adfunnel.budget.protocol import CampaignSpend, Directive, Reply, Report, SliceUse
from adfunnel.budget.rows import STATE_VALUES

#: Seen sequence numbers kept per (server, shard); older ones count as seen.
SEQ_WINDOW = 4096
#: Seconds a server's acknowledged directive version holds the change log back.
ACK_KEPT_S = 60.0


class Reports:
    """The report protocol of a :class:`~adfunnel.budget.service.BudgetService`."""

    def handle_report(self, report: Report) -> Reply:
        """Apply a server's report; return directives and any new slices.

        Entries already applied (duplicates) are skipped; a message identical to the last
        one from that server (same sequence numbers) gets the same reply, so a retry never
        doubles spend nor grants. Directives: see :class:`~adfunnel.budget.protocol.Reply`.
        Every report makes the new local days of every campaign and refreshes the
        current ones still cold, as a reply carrying every directive did.
        """
        now = self._now()
        self._heard[report.server_id] = now
        if report.epoch == self.epoch:
            self._synced.add(report.server_id)
        seqs = tuple(e.seq for e in report.entries)
        top = max(seqs, default=-1)
        cached = self._last_reply.get(report.server_id)
        if cached is not None and seqs and cached[0] == seqs:
            return cached[1]
        named = self._apply_entries(report, now)
        grants = self._grants(report.server_id, report.wants, now)
        current = self._roll_over(now)
        self._refresh_cold(current, now)
        max_seq = self._seen[report.server_id][0] if report.server_id in self._seen else -1
        directives = self._reply_directives(report, named, current, now)
        reply = Reply(shard=self.shard, at=now, acked_through=max(top, max_seq if top >= 0 else -1),
                      directives=directives, grants=grants, epoch=self.epoch,
                      version=self._version)
        if seqs:
            self._last_reply[report.server_id] = (seqs, reply)
        return reply

    def _apply_entries(self, report: Report, now: float) -> set[int]:
        """Apply the entries not seen yet (each entry's spend, then the state of the days
        it named, then its closed slices); the campaigns they name."""
        named: set[int] = set()
        max_seq, seen = self._seen.get(report.server_id, (-1, set()))
        for entry in report.entries:
            for sp in entry.spend:
                named.add(sp.campaign_id)
            if entry.seq in seen or entry.seq <= max_seq - SEQ_WINDOW:
                continue
            seen.add(entry.seq)
            if entry.seq > max_seq:
                max_seq = entry.seq
            rows = [self._apply_spend(report.server_id, sp, entry.period_end, entry.resent)
                    for sp in entry.spend]
            rows = [r for r in rows if r >= 0]
            if rows:
                self._refresh(np.unique(np.array(rows, dtype=np.int64)), now)
            for use in entry.closed_slices:
                self._close_slice(use)
        if len(seen) > 2 * SEQ_WINDOW:
            seen = {s for s in seen if s > max_seq - SEQ_WINDOW}
        self._seen[report.server_id] = (max_seq, seen)
        return named

    def _apply_spend(self, server_id: str, sp: CampaignSpend, t: float,
                     resent: bool = False) -> int:
        row = self._row(sp.campaign_id, date.fromisoformat(sp.day))
        if row < 0:
            self.unknown_campaign_reports += 1
            return -1
        rows = self._rows
        wm = float(rows.watermark[row])
        if sp.open_micros and not (wm and t < wm):
            self._buckets.setdefault(row, deque()).append((t, sp.open_micros))
            rows.bucket_sum[row] += sp.open_micros
        if resent:  # in flight, but not this period's spend rate
            return row
        spent = sp.open_micros + sp.sliced_micros
        rows.step_spend[row] += spent
        rows.step_charges[row] += sp.charges
        rows.served_total[row] += spent
        rows.served_charges[row] += sp.charges
        rates = self._rates.setdefault(row, {})
        r = rates.get(server_id, float(sp.demand_micros))
        rates[server_id] = 0.7 * r + 0.3 * sp.demand_micros
        return row

    def _close_slice(self, use: SliceUse) -> None:
        """A server closed a slice: its use replaces the amount (or the worst case
        assumed at its expiry). The day's state is refreshed at its next refresh."""
        row = self._slice_row.get(use.slice_id)
        if row is None:
            return
        s = self._slices[row][use.slice_id]
        if s.used is None or s.provisional:
            # a late close replaces the worst case assumed at expiry
            t = self._rows
            if s.used is None:
                if not s.lapsed:
                    t.sl_open[row] -= s.amount
            else:
                t.sl_used[row] -= s.used
            s.used = min(s.amount, use.used_micros)
            t.sl_used[row] += s.used
            s.closed_at = use.closed_at
            s.provisional = False

    def _reply_directives(self, report: Report, named: set[int], current: np.ndarray,
                          now: float) -> list[Directive]:
        """Everything on first contact, after an epoch change or an unknown version; else
        the current campaign-days changed since the server's version, plus those of the
        campaigns it wants or reports spend on."""
        known = report.directives_version
        full = (report.epoch != self.epoch or known < self._log_floor or known < 0
                or known > self._version)
        if full:
            self._ack(report.server_id, self._version, now)
            return self._directives_of(current)
        self._ack(report.server_id, known, now)
        extra = []
        for cid in itertools.chain(report.wants, named):
            slot = self._slot_of.get(cid)
            if slot is not None and self._slots.owned[slot]:
                extra.append(self._current_row(slot, now))
        i = bisect_right(self._log_vers, known)
        parts = self._log_rows[i:]
        if extra:
            parts = [*parts, np.array(extra, dtype=np.int64)]
        if not parts:
            return []
        rows = np.unique(np.concatenate(parts))
        t, s = self._rows, self._slots
        sl = t.slot[rows]
        keep = t.live[rows] & (s.cur[sl] == rows) & s.owned[sl]
        keep &= (t.ver[rows] > known) | np.isin(rows, np.array(extra, dtype=np.int64))
        rows = rows[keep]
        return self._directives_of(rows[np.argsort(sl[keep], kind="stable")])

    def _directives_of(self, rows: np.ndarray) -> list[Directive]:
        t, s = self._rows, self._slots
        slots = t.slot[rows]
        cids = s.cid[slots].tolist()
        versions = s.version[slots].tolist()
        states = t.pub_state[rows].tolist()
        ps = t.pub_p[rows].tolist()
        lams = np.nan_to_num(t.pub_lam[rows], nan=1.0).tolist()
        days = [self._day_iso(d) for d in t.day[rows].tolist()]
        vals = STATE_VALUES
        return [Directive(c, vals[st], p, d, lam, v)
                for c, st, p, d, lam, v in zip(cids, states, ps, days, lams, versions,
                                               strict=True)]

    def _day_iso(self, ordinal: int) -> str:
        s = self._days_iso.get(ordinal)
        if s is None:
            s = self._days_iso[ordinal] = date.fromordinal(ordinal).isoformat()
        return s

    def _ack(self, server_id: str, version: int, now: float) -> None:
        """Note the version a server holds; drop change-log entries every recent server
        has (a server coming back later than that gets everything)."""
        self._acked[server_id] = (version, now)
        recent = [v for v, at in self._acked.values() if now - at <= ACK_KEPT_S]
        floor = min(recent) if recent else self._version
        i = bisect_right(self._log_vers, floor)
        if i:
            del self._log_vers[:i]
            del self._log_rows[:i]
            self._log_floor = max(self._log_floor, floor)
        for sid in [k for k, (_, at) in self._acked.items() if now - at > ACK_KEPT_S]:
            del self._acked[sid]
