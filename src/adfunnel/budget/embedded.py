"""The budget & pacing service inside the ad-server process (the embedded default).

:class:`InProcessBudget` is the spend gate of an ad server that runs its own shard: the
production :class:`~adfunnel.budget.process.BudgetServiceProcess` and a
:class:`~adfunnel.budget.client.BudgetClient` that reports straight into it
(:class:`_DirectTransport`, under the shard's lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import date, datetime

import numpy as np
from sqlalchemy import Engine

from adfunnel.budget.billed import BilledTotals
from adfunnel.budget.client import BudgetClient
from adfunnel.budget.feed import TOKEN_TTL_S
from adfunnel.budget.gate import NO_SLICE, Served, budget_lowered
from adfunnel.budget.multipliers import lam_restarts
from adfunnel.budget.process import SHAPE_REFRESH_S, BudgetServiceProcess
from adfunnel.budget.protocol import Reply, Report
from adfunnel.budget.snapshot import BudgetSnapshot
from adfunnel.campaigns.model import Campaign
from adfunnel.campaigns.schedule import local_day
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import Clock, ManualClock
from adfunnel.pacing.traffic_log import EligibleCounter, SqlTrafficLog
from adfunnel.periodic import Job, Ticker


class _DirectTransport:
    """Reports straight into an in-process shard (under its lock). A report sent from
    a thread inside :meth:`bounded` waits at most that long (wall seconds) for the lock
    and is otherwise not sent: its entries stay pending, as after a failed send."""

    def __init__(self, process: BudgetServiceProcess) -> None:
        self.process = process
        self._wait = threading.local()
        self.skipped = 0  # reports not sent: the shard was busy past the bound

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        wait_s: float | None = getattr(self._wait, "s", None)
        lock = self.process.lock
        if not lock.acquire(timeout=-1 if wait_s is None else wait_s):
            self.skipped += 1
            return
        try:
            reply = self.process.service.handle_report(report)
        finally:
            lock.release()
        on_reply(reply)

    def bounded(self, wait_s: float | None) -> _Bounded:
        """Within ``with``: this thread's reports wait at most ``wait_s`` (None: no bound)."""
        return _Bounded(self._wait, wait_s)


class _Bounded:
    def __init__(self, local: threading.local, wait_s: float | None) -> None:
        self.local, self.wait_s = local, wait_s

    def __enter__(self) -> None:
        self.local.s = self.wait_s

    def __exit__(self, *exc: object) -> None:
        self.local.s = None


#: The embedded default's one ad server, as the in-process service knows it.
EMBEDDED_SERVER = "embedded"
#: Longest wait (wall seconds) of a decision's slice ask for the in-process service on
#: the system clock: while a control step or a report holds the service, the ask is
#: left to the next report. On a manual clock (replays, simulations) the ask waits, so
#: what a replay decides never depends on the machine's timing.
ASK_WAIT_S = 0.005


class InProcessBudget:
    """The budget & pacing service inside the ad-server process (the embedded default).

    The same production pieces as the fleet — :class:`BudgetService`, its change-log and
    ledger feeders, and a :class:`BudgetClient` as the spend gate — scheduled on domain
    time by a :class:`~adfunnel.periodic.Ticker`, off the request path: a daemon thread
    runs what is due (report once a second, billed feed, control step, traffic shapes),
    and a :class:`~adfunnel.clock.ManualClock` runs it synchronously each time it is
    moved, so a replay on a manual clock is deterministic. A decision only reads
    in-memory state; when a metered campaign has no slice it asks the in-process service
    for one at once (memory only, no I/O): on the system clock all of a decision's
    asks in one round (:meth:`ask_many`), on a manual clock one campaign at a time.

    Writes made through ``store`` in this process reach the service at once; others'
    through the change log.
    """

    def __init__(self, store: SqlCampaignStore, ledger: BilledTotals, clock: Clock, *,
                 engine: Engine | None = None, report_every_s: float = 1.0,
                 control_interval_s: float = 10.0, billed_every_s: float = 5.0,
                 token_ttl_s: float = TOKEN_TTL_S, poll_s: float = 0.1,
                 background: bool = True) -> None:
        self.process = BudgetServiceProcess(
            store, ledger, clock, control_interval_s=control_interval_s,
            billed_every_s=billed_every_s, token_ttl_s=token_ttl_s, engine=engine,
            expected_servers={EMBEDDED_SERVER})
        self._transport = _DirectTransport(self.process)
        self.client = BudgetClient(EMBEDDED_SERVER, clock, self._transport)
        self.clock = clock
        self._ask_wait_s = None if isinstance(clock, ManualClock) else ASK_WAIT_S
        self.eligible = EligibleCounter()  # filled by the decider, flushed by the ticker
        self._traffic = SqlTrafficLog(engine) if engine is not None else None
        self._refused_at: dict[int, float] = {}  # campaign -> instant of a refused ask
        self.ticker = Ticker(clock, [
            Job("report", report_every_s, self._report),
            Job("billed", billed_every_s, self.process.feed_billed),
            Job("step", control_interval_s, self.process.step),
            Job("shapes", SHAPE_REFRESH_S, self._shapes),
        ], name="embedded-budget", poll_s=poll_s)
        store.subscribe(self.process.apply_local)
        self.process.load()
        self.ticker.run_due()  # campaigns, the day's billed spend, a first report
        self.client.report()  # names the service's epoch: the service is warm
        lams = self.process.lam_ticker  # λ writes: their own thread (BudgetServiceProcess)
        if isinstance(clock, ManualClock):
            clock.on_move(lambda at: self.ticker.run_due(at.timestamp()))
            clock.on_move(lambda at: lams.run_due(at.timestamp()))
        if background:
            self.ticker.start()
            lams.start()

    def tick(self, t: float | None = None) -> list[str]:
        """Run whatever is due at domain time ``t`` (Unix s; default now)."""
        return self.ticker.run_due(t)

    def stop(self) -> None:
        """Stop the schedule and write the λ that moved since the last write."""
        self.ticker.stop()
        self.process.stop()  # the λ writes' thread, and a last write

    def _report(self) -> None:
        self.process.poll_changes()
        self.client.report()

    def _shapes(self) -> None:
        if self._traffic is not None:
            self._traffic.add(self.eligible.drain())
        self.process.refresh_shapes()

    # -- SpendGate ------------------------------------------------------------------------
    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        """The client's answer; a metered campaign without a slice asks the in-process
        service at once with a report round (the spend of this second so far, and the
        campaigns that want a slice): it costs what the report carries and the
        directives changed since the last reply, not the catalogue. On the system clock
        the round waits at most ``ASK_WAIT_S`` for a busy service (then the want goes
        with the next report)."""
        t = now.timestamp()
        reason = self.client.admit(campaign, now, max_charge_micros, count_refusal=False)
        if reason == NO_SLICE and self._refused_at.get(campaign.id) != t:
            # the service is in this process: ask for the slice now rather than at the
            # next report; after a refused ask, not again at the same instant (a
            # refusal costs one round), but a granted one may be followed by another
            with self._transport.bounded(self._ask_wait_s):
                self.client.report(t)
            reason = self.client.admit(campaign, now, max_charge_micros, count_refusal=False)
            if reason is not None:
                self._refused_at[campaign.id] = t
        if reason is not None:
            self.client.note_refusal(campaign.id, local_day(now, campaign.time_zone))
        return reason

    @property
    def asks_together(self) -> bool:
        """True on the system clock: a decision's slice asks share one report round
        (:meth:`ask_many`); on a manual clock each is asked alone, in order."""
        return self._ask_wait_s is not None

    def ask_many(self, campaigns: Sequence[Campaign], now: datetime,
                 charges: Sequence[int]) -> list[str | None]:
        """:meth:`admit` for many campaigns with one report round for all of them: those
        refused for want of a slice are asked for together (waiting at most
        ``ASK_WAIT_S`` for a busy service), then admitted again. At catalogue scale a
        decision meets thousands of campaigns never served yet (metered, no slice); a
        round each would cost the decision its deadline. Answers as :meth:`admit`."""
        t = now.timestamp()
        client = self.client
        reasons = [client.admit(c, now, ch, count_refusal=False)
                   for c, ch in zip(campaigns, charges, strict=True)]
        if NO_SLICE in reasons:
            with self._transport.bounded(self._ask_wait_s):
                client.report(t)
            reasons = [client.admit(c, now, ch, count_refusal=False) if r == NO_SLICE else r
                       for c, ch, r in zip(campaigns, charges, reasons, strict=True)]
        for c, r in zip(campaigns, reasons, strict=True):
            if r is not None:
                client.note_refusal(c.id, local_day(now, c.time_zone))
        return reasons

    def fits(self, campaign: Campaign, now: datetime, charge_micros: int) -> bool:
        """The client's :meth:`~adfunnel.budget.client.BudgetClient.fits`."""
        return self.client.fits(campaign, now, charge_micros)

    def pacing_rate(self, campaign_id: int) -> float:
        return self.client.pacing_rate(campaign_id)

    @property
    def generation(self) -> int:
        return self.client.generation

    def bulk_admit(self, campaign_ids: np.ndarray, day_ordinals: np.ndarray,
                   charges: np.ndarray, budgets: np.ndarray, t: float) -> np.ndarray:
        """:class:`~adfunnel.budget.gate.BulkGate` (the client's bulk view)."""
        return self.client.bulk_admit(campaign_ids, day_ordinals, charges, budgets, t)

    def bulk_pacing(self, campaign_ids: np.ndarray) -> np.ndarray:
        return self.client.bulk_pacing(campaign_ids)

    def bid_multiplier(self, campaign_id: int) -> float:
        """λ of an automatic campaign from the in-process service (1.0 for others)."""
        return self.client.bid_multiplier(campaign_id)

    def bulk_multiplier(self, campaign_ids: np.ndarray) -> np.ndarray:
        return self.client.bulk_multiplier(campaign_ids)

    def campaign_changed(self, old: Campaign | None, new: Campaign) -> None:
        """The ad server's catalogue applied a campaign record. After a budget cut the
        in-process service takes it now (it reads other processes' writes only at the
        next report), so the client's ask (:meth:`BudgetClient.campaign_changed`) is
        answered under the new budget; so do new bid strategy terms (λ restarts now)."""
        if budget_lowered(old, new) or lam_restarts(old, new):
            with self.process.lock:
                self.process.service.upsert_campaign(new)
        self.client.campaign_changed(old, new)

    def record_served(self, served: Served) -> None:
        self.client.record_served(served)

    def record_billed(self, campaign_id: int, day: date, billed_micros: int, impression_id: str,
                      settles: bool) -> None:
        """Billed spend reaches the service from the ledger feed."""

    def status(self) -> list[dict[str, object]]:
        return self.process.status()

    def snapshot(self) -> BudgetSnapshot:
        """The in-process shard's :meth:`BudgetServiceProcess.snapshot`."""
        return self.process.snapshot()

    def pacing_summary(self) -> dict[str, object]:
        """Control steps run, lowest p given to an evenly paced campaign (None: no step
        has run), and per campaign and local day the admits refused for budget."""
        with self.process.lock:
            svc = self.process.service
            steps, p_min = svc.steps, svc.p_min
        with self.client._lock:
            refusals = dict(self.client.refusals)
        by_campaign: dict[str, dict[str, int]] = {}
        for (cid, day), n in sorted(refusals.items()):
            by_campaign.setdefault(str(cid), {})[day.isoformat()] = n
        return {"steps": steps, "p_min": p_min, "budget_refusals": by_campaign}
