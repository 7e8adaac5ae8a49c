"""Budget & pacing service at catalogue scale: start-up, control step, report round.

``adfunnel bench budget --campaigns N --json F`` (and ``benchmarks/budget_bench.py``)
runs :func:`run_budget_bench`:

1. **setup** (``setup_s``, not part of any figure): a SQLite database file with the
   project's tables (migrations), ``N`` campaigns inserted in bulk through the
   ``campaigns`` table (a mix of time zones, bid types, pacing modes; 1 % paused),
   today's billed spend for ``SPEND_SHARE`` of them (``campaign_day_spend`` and
   ``campaign_spend`` rows; ``NEAR_BUDGET_SHARE`` of all campaigns billed to 99 % of their
   budget), and 7 days of eligible traffic for ``SHAPED`` campaigns.
2. **start** (``start_s``): from nothing to a warm shard — a
   :class:`~adfunnel.budget.process.BudgetServiceProcess` reads the campaigns
   (``load_s``), the day's billed spend (``billed_s``) and the traffic shapes
   (``shapes_s``) in bulk from that file, then one server reports twice (the first
   reply carries every directive: ``first_reply_s``, ``first_reply_directives``; the
   second names the epoch, so the shard is warm).
3. **first step** (``first_step_s``): the first control step after start.
4. **load**: ten report rounds of a second each, with spend for ``SPEND_SHARE`` of the
   campaigns (charges, so their rate is measured) and slices wanted for
   ``WANT_SHARE`` metered ones, then **``step_s``**: one control step over every
   campaign with that state (``metered``, ``open`` count the states after it).
5. **report round** (``report_s``): one report with 1,000 campaigns' spend and its
   reply (the directives changed since the server's last reply: ``report_directives``),
   ``report_per_campaign_us``; ``step_per_campaign_us`` likewise.
6. the ad server's side: a :class:`~adfunnel.budget.client.BudgetClient` applying a
   first (full) reply of ``N`` directives (``client_first_reply_s``).
7. the embedded default on the same file: :class:`~adfunnel.budget.embedded.InProcessBudget`
   from nothing to serving (``embedded_start_s``: the shard's start plus its client
   taking every directive), the first admit of a metered campaign after it (it asks
   the in-process service for a slice: ``embedded_first_admit_ms``), and ten seconds of
   domain time with a control step and its report (``embedded_tick_s``).
8. a metrics scrape of the per-campaign series (on the shard of 2-6, before 7):
   ``scrape_s`` from the bulk snapshot (``BudgetServiceProcess.snapshot``), against
   ``scrape_status_s``, the same series folded from ``status()`` records (how scrapes
   read it before), measured in the same run: ``scrape_speedup`` = their ratio.

Times are seconds of wall clock (``time.perf_counter``) on the machine that runs it;
``peak_rss_mb`` is the process's peak resident memory.
"""

from __future__ import annotations

import math
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine, Table

from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.billing.tables import campaign_day_spend, campaign_spend
from adfunnel.budget.client import BudgetClient
from adfunnel.budget.embedded import InProcessBudget
from adfunnel.budget.metrics import CampaignSeries
from adfunnel.budget.process import BudgetServiceProcess
from adfunnel.budget.protocol import CampaignSpend, Reply, Report, ReportEntry
from adfunnel.budget.snapshot import BudgetSnapshot
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import DEFAULT_ATTRIBUTION_WINDOW_S, CampaignStatus
from adfunnel.campaigns.schedule import local_day
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.campaigns.tables import advertisers, campaigns
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine
from adfunnel.pacing.traffic_tables import eligible_traffic

#: The bench's domain time: a Wednesday afternoon (UTC).
NOW = datetime(2026, 7, 15, 14, 0, 5, tzinfo=UTC)
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Asia/Kolkata")
#: Share of campaigns with billed spend today, and with spend in the load phase.
SPEND_SHARE = 0.10
#: Share of campaigns billed to 99 % of their daily budget (metered or exhausted).
NEAR_BUDGET_SHARE = 0.02
#: Share of campaigns wanting a slice per report round in the load phase.
WANT_SHARE = 0.002
#: Campaigns with 7 days of logged eligible traffic (their own curve shape).
SHAPED = 10_000
SERVER = "bench-server"
_STAMP = "%Y-%m-%d %H:%M:%S.%f"


def run_budget_bench(campaigns: int, *, seed: int = 1, workdir: str | None = None) -> dict:
    """The figures of one run over ``campaigns`` campaigns (module docstring)."""
    rng = np.random.default_rng(seed)
    tmp = Path(tempfile.mkdtemp(prefix="budget-bench-", dir=workdir))
    try:
        t0 = time.perf_counter()
        engine = make_engine(f"sqlite:///{tmp / 'budget.sqlite3'}")
        upgrade(engine)
        shaped = _fill(engine, campaigns, rng)
        out: dict[str, Any] = {"campaigns": campaigns, "setup_s": _r(time.perf_counter() - t0),
                               "shaped_campaigns": shaped}
        clock = ManualClock(NOW)
        proc = _start(engine, clock, out)
        _load_and_step(proc, clock, campaigns, rng, out)
        _report_round(proc, clock, campaigns, rng, out)
        _client_side(proc, clock, out)
        _scrape(proc, out)
        del proc
        _embedded(engine, out)
        out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        engine.dispose()
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _r(x: float) -> float:
    return round(x, 4)


# -- setup ------------------------------------------------------------------------------------
def _insert(engine: Engine, table: Table, rows: list[tuple[object, ...]]) -> None:
    """Bulk insert of positional rows (every column of ``table``, in order)."""
    names = [c.name for c in table.columns]
    sql = (f"INSERT INTO {table.name} ({', '.join(names)}) "
           f"VALUES ({', '.join('?' for _ in names)})")
    with engine.begin() as conn:
        for a in range(0, len(rows), 100_000):
            conn.exec_driver_sql(sql, rows[a:a + 100_000])


def _fill(engine: Engine, n: int, rng: np.random.Generator) -> int:
    """N campaigns, today's billed spend, 7 days of traffic; the shaped campaigns."""
    stamp = NOW.strftime(_STAMP)
    _insert(engine, advertisers, [(1, "bench", 1, stamp)])
    budgets = rng.choice([5, 20, 50, 200, 1000], size=n) * 1_000_000
    bid_type = rng.choice(["CPM", "CPC", "CPA"], size=n, p=[0.5, 0.4, 0.1])
    bids = np.where(bid_type == "CPM", 2_000_000, np.where(bid_type == "CPC", 500_000,
                                                             5_000_000))
    zone = rng.integers(0, len(ZONES), size=n)
    pacing = np.where(rng.random(n) < 0.9, "even", "accelerated")
    status = np.where(rng.random(n) < 0.01, "paused", "active")
    rows = [(i + 1, 1, f"c{i + 1}", "clicks", bid_type[i], int(bids[i]), int(budgets[i]), None,
             ZONES[zone[i]], "2026-01-01", None, "[]", status[i], pacing[i], "[]", None, 1, stamp,
             DEFAULT_ATTRIBUTION_WINDOW_S, "rendered",  # billable_event (migration 0017)
             "auction", None, "day", None,  # priority, goal, budget period, flight (0018)
             "manual", None, None, None)  # strategy, cap, target, since (0021)
            for i in range(n)]
    _insert(engine, campaigns, rows)
    spend = np.flatnonzero(rng.random(n) < SPEND_SHARE)
    share = rng.uniform(0.05, 0.6, size=len(spend))
    near = rng.random(len(spend)) < NEAR_BUDGET_SHARE / SPEND_SHARE
    billed = (budgets[spend] * np.where(near, 0.99, share)).astype(np.int64)
    day = NOW.date().isoformat()  # every zone's local day at 14:00 UTC but Tokyo's
    tokyo = (NOW + timedelta(hours=9)).date().isoformat()
    days = [tokyo if ZONES[zone[i]] == "Asia/Tokyo" else day for i in spend.tolist()]
    _insert(engine, campaign_day_spend,
            [(int(i) + 1, d, 100, 0, int(b), 0, 0, 0)
             for i, d, b in zip(spend.tolist(), days, billed.tolist(), strict=True)])
    _insert(engine, campaign_spend, [(int(i) + 1, int(b), 0)
                                     for i, b in zip(spend.tolist(), billed.tolist(), strict=True)])
    return _traffic(engine, rng, n)


def _traffic(engine: Engine, rng: np.random.Generator, n: int) -> int:
    shaped = rng.choice(n, size=min(SHAPED, n), replace=False) + 1  # 167 hours each
    hours = [(NOW - timedelta(hours=h)).replace(minute=0, second=0, microsecond=0)
             for h in range(1, 7 * 24)]
    peak = rng.integers(0, 24, size=len(shaped))
    rows = []
    for cid, pk in zip(shaped.tolist(), peak.tolist(), strict=True):
        for h in hours:
            w = 1 + 9 * np.exp(-((h.hour - pk) % 24) / 4.0)
            rows.append((cid, h.strftime(_STAMP), int(w * 10)))
    _insert(engine, eligible_traffic, rows)
    return len(shaped)


# -- phases -----------------------------------------------------------------------------------
def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    got = fn()
    return got, time.perf_counter() - t


def _start(engine: Engine, clock: ManualClock, out: dict[str, Any]) -> BudgetServiceProcess:
    """Nothing -> a warm shard that has read campaigns, billed spend and shapes."""
    t0 = time.perf_counter()
    store, ledger = SqlCampaignStore(engine, clock), SqlLedger(engine)
    proc = BudgetServiceProcess(store, ledger, clock, engine=engine,
                                expected_servers={SERVER})
    _, out["load_s"] = _timed(proc.load)
    out["own_shapes"], out["shapes_s"] = _timed(proc.refresh_shapes)
    out["billed_rows"], out["billed_s"] = _timed(proc.feed_billed)
    now = clock.now().timestamp()
    first, out["first_reply_s"] = _timed(lambda: proc.service.handle_report(
        Report(SERVER, 0, now)))
    second = proc.service.handle_report(Report(SERVER, 0, now, epoch=first.epoch,
                                               directives_version=first.version))
    assert proc.service.warm(), "the shard is not warm"
    out["_version"] = second.version
    out["start_s"] = _r(time.perf_counter() - t0)
    out["first_reply_directives"] = len(first.directives)
    clock.advance(10)
    _, out["first_step_s"] = _timed(proc.step)
    for k in ("load_s", "billed_s", "shapes_s", "first_reply_s", "first_step_s"):
        out[k] = _r(out[k])
    return proc


class _Server:
    """A fake ad server: reports with increasing sequence numbers, tracks its version."""

    def __init__(self, proc: BudgetServiceProcess, version: int) -> None:
        self.proc = proc
        self.seq = 0
        self.epoch = proc.service.epoch
        self.version = version

    def report(self, spend: list[CampaignSpend], wants: list[int], at: float) -> Reply:
        self.seq += 1
        rep = Report(SERVER, 0, at, [ReportEntry(self.seq, at, spend)], wants,
                     epoch=self.epoch, directives_version=self.version)
        reply = self.proc.service.handle_report(rep)
        self.version = reply.version
        return reply


def _spend(ids: np.ndarray, days: dict[int, str]) -> list[CampaignSpend]:
    return [CampaignSpend(c, days[c], 2_000, 0, 4_000, 2) for c in ids.tolist()]


def _days(proc: BudgetServiceProcess, now: float) -> dict[int, str]:
    """Each campaign's local day at ``now`` (ISO)."""
    owned = proc.service.owned()
    at = datetime.fromtimestamp(now, tz=UTC)
    iso = [local_day(at, z).isoformat() for z in owned.zones]
    return dict(zip(owned.ids.tolist(), (iso[z] for z in owned.tz.tolist()), strict=True))


def _load_and_step(proc: BudgetServiceProcess, clock: ManualClock, n: int,
                   rng: np.random.Generator, out: dict[str, Any]) -> None:
    """Ten seconds of reports (spend for a share, slices wanted), then one timed step."""
    server = _Server(proc, out.pop("_version"))
    ids = np.arange(1, n + 1)
    spenders = rng.choice(ids, size=max(1, int(n * SPEND_SHARE)), replace=False)
    days = _days(proc, clock.now().timestamp())
    sizes = []
    for part in np.array_split(spenders, 10):
        clock.advance(1)
        wants = rng.choice(ids, size=max(1, int(n * WANT_SHARE)), replace=False)
        reply = server.report(_spend(part, days), wants.tolist(), clock.now().timestamp())
        sizes.append(len(reply.directives))
    out["load_reply_directives_max"] = max(sizes)
    clock.advance(1)
    _, step_s = _timed(proc.step)
    out["step_s"] = _r(step_s)
    out["step_per_campaign_us"] = round(step_s / n * 1e6, 3)
    out["after_step"] = proc.service.census(clock.now().timestamp())
    out["_server"] = server


def _report_round(proc: BudgetServiceProcess, clock: ManualClock, n: int,
                  rng: np.random.Generator, out: dict[str, Any]) -> None:
    """One report with 1,000 campaigns' spend (after the step's directives were
    acknowledged) and its reply."""
    server: _Server = out.pop("_server")
    clock.advance(1)
    days = _days(proc, clock.now().timestamp())
    server.report([], [], clock.now().timestamp())  # takes the step's directives
    clock.advance(1)
    k = min(1000, n)
    ids = rng.choice(np.arange(1, n + 1), size=k, replace=False)
    spend = _spend(ids, days)
    reply, report_s = _timed(lambda: server.report(spend, [], clock.now().timestamp()))
    out["report_campaigns"] = k
    out["report_s"] = _r(report_s)
    out["report_per_campaign_us"] = round(report_s / k * 1e6, 3)
    out["report_directives"] = len(reply.directives)


def _client_side(proc: BudgetServiceProcess, clock: ManualClock, out: dict[str, Any]) -> None:
    """An ad server's client taking a first (full) reply."""
    reply = proc.service.handle_report(Report("new-server", 0, clock.now().timestamp()))
    client = BudgetClient("new-server", clock, _NoTransport())
    _, s = _timed(lambda: client.handle_reply(reply))
    out["client_first_reply_s"] = _r(s)
    out["client_first_reply_directives"] = len(reply.directives)


def _embedded(engine: Engine, out: dict[str, Any]) -> None:
    """The embedded default: start, first admit, a tick with a control step."""
    clock = ManualClock(NOW)
    store = SqlCampaignStore(engine, clock)
    gate, s = _timed(lambda: InProcessBudget(store, SqlLedger(engine), clock, engine=engine,
                                             background=False))
    out["embedded_start_s"] = _r(s)
    camp = next(c for c in map(store.get_campaign, range(1, 100))
                if c.status is CampaignStatus.ACTIVE)
    reason, s = _timed(lambda: gate.admit(camp, clock.now(), camp.max_charge_micros))
    out["embedded_first_admit_ms"] = round(s * 1e3, 3)
    out["embedded_first_admit"] = reason or "admitted"
    _, s = _timed(lambda: clock.advance(10))  # report, billed feed, control step
    out["embedded_tick_s"] = _r(s)
    gate.stop()


def _scrape(proc: BudgetServiceProcess, out: dict[str, Any]) -> None:
    """A metrics scrape of the per-campaign series: from the bulk snapshot
    (``scrape_s``), and from ``status()`` records as scrapes read them before
    (``scrape_status_s``, the baseline); the same series either way."""
    series = CampaignSeries()

    def scrape() -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        return sorted((f.name, tuple(sorted(x.labels.items())), x.value)
                      for f in series.collect() for x in f.samples)

    series.follow(proc.snapshot)
    bulk, s = _timed(scrape)
    series.follow(lambda: BudgetSnapshot.from_status(proc.status()))
    by_records, baseline_s = _timed(scrape)
    # the same series; values alike up to the records' p rounded to 6 decimals
    if [k[:2] for k in bulk] != [k[:2] for k in by_records] or not all(
            math.isclose(a[2], b[2], rel_tol=1e-9, abs_tol=1e-6)
            for a, b in zip(bulk, by_records, strict=True)):
        raise AssertionError("the snapshot's series differ from the status records'")
    out["scrape_s"], out["scrape_status_s"] = _r(s), _r(baseline_s)
    out["scrape_speedup"] = round(baseline_s / s, 1) if s > 0 else None


class _NoTransport:
    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        return None

