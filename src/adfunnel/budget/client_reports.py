"""The client's reports and replies: pending entries, directives, epochs, re-sends.

A part of :class:`~adfunnel.budget.client.BudgetClient` (mixed in: its state is declared
in ``BudgetClient.__init__``). Once a second ``report(now)`` sends to each shard every
entry not yet acknowledged (so a lost reply is repaired by the next send; the service
dedupes by sequence number); a reply's directives and grants are applied in chunks. A
reply from a new service instance makes the client drop the old instance's slices and
re-send, marked ``resent``, the spend it had acknowledged within ``resend_window_s``.
Money in integer micros, times in domain seconds.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Protocol

from adfunnel.budget.bulk_view import UNKNOWN_LAMBDA
from adfunnel.budget.held import HeldSlice
from adfunnel.budget.protocol import (
    CampaignSpend,
    Directive,
    Reply,
    Report,
    ReportEntry,
    SliceUse,
)
from adfunnel.budget.slices import BudgetState

#: Most unacknowledged entries kept per shard (older ones are merged into the newest).
MAX_PENDING_ENTRIES = 300
#: Seconds of acknowledged spend kept to re-send to a new service instance: the token's
#: life, after which no impression or click of a serve can bill.
RESEND_WINDOW_S = 3600.0
#: Resolution of the kept spend, seconds.
HISTORY_BUCKET_S = 60.0
#: Directives applied per hold of the client's lock (a long reply is applied in chunks).
REPLY_CHUNK = 2048
#: Seconds between prunes of campaign-days long over; days of refusal counts kept.
PRUNE_EVERY_S = 3600.0
REFUSALS_KEPT_DAYS = 8


class ReportTransport(Protocol):
    """Carries a report to the shard it names and the reply back.

    ``send_report`` must not raise: on failure it simply never calls ``on_reply``
    (the entries stay pending and go again with the next report). It may call
    ``on_reply`` before returning (HTTP) or later (simulated delays).
    """

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None: ...



class ClientReports:
    """The report protocol of a :class:`~adfunnel.budget.client.BudgetClient`."""

    # -- reporting ------------------------------------------------------------------------
    def report(self, now: float | None = None) -> None:
        """Close this second's entries and send each shard its pending report."""
        t = self.clock.now().timestamp() if now is None else now
        reports = self.build_reports(t)
        for r in reports:
            self.stats["sent"] += 1
            self.transport.send_report(r, self.handle_reply)

    def build_reports(self, now: float) -> list[Report]:
        """One report per shard: pending entries plus a new one for the spend since the
        last call; campaigns wanting a slice."""
        with self._lock:
            self._expire_slices(now)
            per_shard: list[list[CampaignSpend]] = [[] for _ in range(self.shards)]
            for (cid, day), a in self._acc.items():
                per_shard[cid % self.shards].append(CampaignSpend(
                    cid, day.isoformat(), a.open, a.sliced, a.demand, a.charges))
            self._acc.clear()
            self._collect_wants(now)
            wants: list[list[int]] = [[] for _ in range(self.shards)]
            for cid in self._wants:
                wants[cid % self.shards].append(cid)
            self._wants.clear()
            out = []
            for sh in range(self.shards):
                pend = self._pending[sh]
                if per_shard[sh] or self._closed[sh]:
                    self._seq[sh] += 1
                    pend.append(ReportEntry(self._seq[sh], now, per_shard[sh], self._closed[sh]))
                    self._closed[sh] = []
                if len(pend) > MAX_PENDING_ENTRIES:
                    pend[:] = [_merge(pend[: len(pend) - MAX_PENDING_ENTRIES + 1]),
                               *pend[len(pend) - MAX_PENDING_ENTRIES + 1:]]
                out.append(Report(self.server_id, sh, now, list(pend), wants[sh],
                                  epoch=self._epoch[sh],
                                  directives_version=self._directive_versions()[sh]))
            self._trim_history_when_due(now)
            return out

    def handle_reply(self, reply: Reply) -> None:
        """Apply a reply: drop acknowledged entries, take states, p and slices.

        Directives are changes (``adfunnel.budget.protocol``): the reply's version is
        sent back with the next report. A reply older than one already applied (same
        epoch) only fills in campaign-days this server knows nothing of. A long list
        (a first reply, a control step's p) is applied ``REPLY_CHUNK`` directives per
        hold of the lock, so admits on the request path wait for one chunk at most."""
        with self._lock:
            self.stats["replies"] += 1
            sh = reply.shard
            versions = self._directive_versions()
            if reply.at >= self._last_reply[sh]:
                self._last_reply[sh] = reply.at
            if reply.epoch and reply.epoch != self._epoch[sh]:
                self._resync(sh, reply.epoch)
                versions[sh] = -1
            stale = 0 <= reply.version < versions[sh]
            kept = []
            for e in self._pending[sh]:
                if e.seq > reply.acked_through:
                    kept.append(e)
                elif not e.resent:
                    self._remember(sh, e)
            self._pending[sh] = kept
        directives = reply.directives
        for a in range(0, len(directives), REPLY_CHUNK):
            with self._lock:
                self._apply_directives(directives[a:a + REPLY_CHUNK], stale)
                self.generation += 1
        with self._lock:
            if reply.version > versions[sh]:
                versions[sh] = reply.version
            self.generation += 1
            for g in reply.grants:
                if self._before_cut(g.campaign_id, g.campaign_version):
                    # sized under the old budget: returned unused with the next report
                    self._closed[g.campaign_id % self.shards].append(
                        SliceUse(g.slice_id, 0, g.expires_at))
                    self.stats["slices_before_cut"] += 1
                    continue
                held = HeldSlice(g.slice_id, g.campaign_id, date.fromisoformat(g.day),
                                 g.amount_micros, g.expires_at, worst_case=g.worst_case)
                self._slices.setdefault(g.campaign_id, []).append(held)
                heapq.heappush(self._expiry, (held.expires_at, next(self._expiry_seq), held))
                self._index_slices(g.campaign_id)

    def _apply_directives(self, directives: list[Directive], stale: bool) -> None:
        """Take the states and p of ``directives`` (under the lock); from a stale reply
        only those of campaign-days not known here."""
        for d in directives:
            day = self._day_of(d.day)
            if stale and (day is None or (d.campaign_id, day) in self._state):
                continue  # a newer reply already said (or changed) it
            if self._before_cut(d.campaign_id, d.campaign_version):
                self._wants.add(d.campaign_id)  # decided under the old budget: ask again
                self.stats["directives_before_cut"] += 1
                continue
            state = BudgetState(d.state)
            if day is not None:
                self._state[(d.campaign_id, day)] = state
                if d.campaign_id in self._demand:
                    self._asking.add(d.campaign_id)
            self._p[d.campaign_id] = d.p
            lam = d.lam
            if self._before_terms(d.campaign_id, d.campaign_version):
                lam = UNKNOWN_LAMBDA  # λ of the old strategy terms: ask again
                self._wants.add(d.campaign_id)
            self._lam[d.campaign_id] = lam
            self._note_directive(d.campaign_id, day, state, d.p, lam)

    def _before_cut(self, campaign_id: int, version: int) -> bool:
        """True when the service sent this under a campaign version older than a budget
        cut applied here (:func:`_before_mark`). Called under the lock."""
        return _before_mark(self._cut_version, campaign_id, version)

    def _before_terms(self, campaign_id: int, version: int) -> bool:
        """True when the service sent this under a campaign version older than new bid
        strategy terms applied here (its λ is of the old terms; :func:`_before_mark`).
        Under the lock."""
        return _before_mark(self._terms_version, campaign_id, version)

    def _day_of(self, iso: str) -> date | None:
        """``date.fromisoformat`` with a small cache (a reply names few distinct days)."""
        if not iso:
            return None
        days: dict[str, date] | None = getattr(self, "_days_seen", None)
        if days is None or len(days) > 64:
            days = self._days_seen = {}
        day = days.get(iso)
        if day is None:
            day = days[iso] = date.fromisoformat(iso)
        return day

    def _directive_versions(self) -> list[int]:
        """Per shard, the highest ``Reply.version`` applied in the current epoch (-1:
        none yet: the next reply carries every directive). Called under the lock."""
        versions: list[int] | None = getattr(self, "_dir_versions", None)
        if versions is None:
            versions = self._dir_versions = [-1] * self.shards
        return versions

    def _trim_history_when_due(self, now: float) -> None:
        """:meth:`_trim_history` at most once per history bucket (it walks every kept
        bucket), not on every report. Called under the lock."""
        due: float = getattr(self, "_history_trimmed_at", -math.inf)
        if now - due >= HISTORY_BUCKET_S or now < due:
            self._history_trimmed_at = now
            self._trim_history(now)

    def _remember(self, sh: int, e: ReportEntry) -> None:
        """Keep an acknowledged entry's spend for a possible re-send."""
        bucket = math.ceil(e.period_end / HISTORY_BUCKET_S) * HISTORY_BUCKET_S
        hist = self._history[sh]
        for sp in e.spend:
            spent = sp.open_micros + sp.sliced_micros
            if spent:
                key = (sp.campaign_id, sp.day, bucket)
                hist[key] = hist.get(key, 0) + spent

    def _trim_history(self, now: float) -> None:
        for hist in self._history:
            for key in [k for k in hist if k[2] < now - self.resend_window_s]:
                del hist[key]
        if now - self._pruned_at >= PRUNE_EVERY_S:
            # campaign-days long over: their state can no longer be asked for
            self._pruned_at = now
            self._forget_old_demand()
            state_cut = datetime.fromtimestamp(now - 2 * 86_400, tz=UTC).date()
            for key in [k for k in self._state if k[1] < state_cut]:
                del self._state[key]
            refusal_cut = datetime.fromtimestamp(now - REFUSALS_KEPT_DAYS * 86_400, tz=UTC).date()
            for key in [k for k in self.refusals if k[1] < refusal_cut]:
                del self.refusals[key]

    def _resync(self, sh: int, epoch: str) -> None:
        """A new service instance: forget the old one's slices, re-send what it had
        acknowledged (as in-flight spend, by the time it was served)."""
        if self._epoch[sh]:
            self.stats["resyncs"] += 1
            for cid in [c for c in self._slices if c % self.shards == sh]:
                del self._slices[cid]
                self._index_slices(cid)
                self._note_slices_changed(cid)
            self._closed[sh] = []
            by_time: dict[float, list[CampaignSpend]] = {}
            for (cid, day, bucket), spent in sorted(self._history[sh].items()):
                by_time.setdefault(bucket, []).append(CampaignSpend(cid, day, open_micros=spent))
            for bucket, spend in sorted(by_time.items()):
                self._seq[sh] += 1
                self._pending[sh].append(ReportEntry(self._seq[sh], bucket, spend, resent=True))
            self._history[sh] = {}
        self._epoch[sh] = epoch


def _merge(entries: list[ReportEntry]) -> ReportEntry:
    """Entries folded into one, keeping the newest sequence number (the service has
    applied none of them, or their seqs are below its window)."""
    acc: dict[tuple[int, str], list[int]] = {}
    closed: list[SliceUse] = []
    for e in entries:
        for sp in e.spend:
            v = acc.setdefault((sp.campaign_id, sp.day), [0, 0, 0, 0])
            v[0] += sp.open_micros
            v[1] += sp.sliced_micros
            v[2] += sp.demand_micros
            v[3] += sp.charges
        closed.extend(e.closed_slices)
    spend = [CampaignSpend(cid, d, *v) for (cid, d), v in acc.items()]
    return ReportEntry(entries[-1].seq, entries[-1].period_end, spend, closed,
                       resent=all(e.resent for e in entries))


def _before_mark(marks: dict[int, int], campaign_id: int, version: int) -> bool:
    """True when ``version`` (the campaign version a reply was made under) is older than
    the version marked for the campaign in ``marks``; -1 (unknown: a service from before
    versions were sent) and a version at or past the mark are taken, the latter clearing
    the mark."""
    mark = marks.get(campaign_id)
    if mark is None or version < 0:
        return False
    if version < mark:
        return True
    del marks[campaign_id]
    return False
