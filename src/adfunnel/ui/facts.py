"""What the dashboard reads from a running server, beside the API.

The API answers records and reports; the decisions' per-campaign reasons (requests
matched, refused by caps) and today's billed spend live in the process, the budget
service's state (p, budget state, pacing status, target plan) in the embedded service
or in a fleet's budget shards (:mod:`adfunnel.ui.budget_reads`). :class:`ServerFacts`
reads them for campaigns whose records the caller already fetched through the API
(so the viewer's role has been checked there). Money in integer micros; days are each
campaign's local days.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.days import DAY_S
from adfunnel.campaigns.schedule import day_bounds, local_day, zone
from adfunnel.pacing.traffic_log import EligibleCounter, SqlTrafficLog
from adfunnel.ui.budget_reads import BudgetReads, budget_reads
from adfunnel.ui.delivery import DeliveryFacts

#: Chart grid: one point every this many seconds of the local day.
CHART_STEP_S = 900


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """The budget service's row of a campaign's current local day."""

    state: str
    pacing_status: str
    p: float
    budget_micros: int
    billed_micros: int
    served_micros: int
    #: the bid multiplier λ of an automatic campaign (1: manual, or a shard before λ)
    lam: float = 1.0


def local_midnight(day: date, time_zone: str) -> datetime:
    """The aware instant at which local ``day`` starts in ``time_zone``."""
    return datetime(day.year, day.month, day.day, tzinfo=zone(time_zone))


class ServerFacts:
    """Reads of one embedded runtime (:class:`adfunnel.runtime.embedded.Runtime`) for the pages."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self.reads: BudgetReads | None
        #: the budget client whose refusals this process counted
        self.client: BudgetClient | None
        self.reads, self.client = budget_reads(rt)
        self.traffic = SqlTrafficLog(rt.engine)

    def now(self) -> datetime:
        return self.rt.clock.now()

    def today(self, time_zone: str) -> date:
        return local_day(self.now(), time_zone)

    # -- budget service -------------------------------------------------------------------
    async def budget_rows(self, campaign_ids: Iterable[int]) -> dict[int, BudgetRow]:
        """campaign id -> its budget row today, for ``campaign_ids`` only (a catalogue
        holds a million campaigns); empty without a budget service (the ``local``
        gate), and without the campaigns of a shard that did not answer."""
        if self.reads is None:
            return {}
        days = await self.reads.days(list(campaign_ids))
        return {cid: BudgetRow(d["state"], d["pacing_status"], float(d["p"]),
                               int(d["budget_micros"]), int(d["billed_micros"]),
                               int(d["served_micros"]), float(d.get("lam", 1.0)))
                for cid, d in days.items()}

    def budget_refusals(self, campaign_id: int, day: date) -> int:
        """Admits of the campaign on its local ``day`` refused for budget by this
        process (each ad server of a fleet counts its own)."""
        return self.client.refusals_on(campaign_id, day) if self.client is not None else 0

    # -- decision reasons -----------------------------------------------------------------
    def matched_requests(self, campaign_ids: Iterable[int], since: datetime) -> dict[int, int]:
        """Requests since ``since`` in which each campaign passed targeting, flight and
        daypart: the eligible traffic already flushed to the traffic log plus what this
        process still holds."""
        out = self.traffic.requests_since(campaign_ids, _hour_floor(since))
        counter: EligibleCounter | None = self.rt.decider.eligible
        if counter is not None:
            _add_held(out, counter.peek(), since)
        return out

    def capped_requests(self, campaign_ids: Iterable[int], since: datetime) -> dict[int, int]:
        """Decisions since ``since`` whose frequency caps refused each campaign."""
        counter: EligibleCounter = self.rt.decider.capped
        counter.forget_before(_hour_floor(since) - timedelta(days=1))
        out = dict.fromkeys(campaign_ids, 0)
        _add_held(out, counter.peek(), since)
        return out

    def measures_traffic(self) -> bool:
        """False where the decider counts no eligible traffic (the ``local`` gate)."""
        return self.rt.decider.eligible is not None

    # -- one campaign ---------------------------------------------------------------------
    def delivery_facts(self, campaign: dict[str, Any], servable_ads: int,
                       budget: BudgetRow | None, matched: int | None, capped: int,
                       billed_today: int) -> DeliveryFacts:
        """:class:`DeliveryFacts` of a campaign as the API answers it (``campaign``)."""
        today = self.today(campaign["time_zone"])
        end = campaign.get("flight_end")
        return DeliveryFacts(
            campaign_status=campaign["status"],
            flight_over=end is not None and date.fromisoformat(str(end)) < today,
            flight_not_started=date.fromisoformat(str(campaign["flight_start"])) > today,
            servable_ads=servable_ads,
            budget_state=budget.state if budget else None,
            pacing_status=budget.pacing_status if budget else None,
            budget_refusals=self.budget_refusals(campaign["id"], today),
            matched_requests=matched,
            capped_requests=capped,
            served_micros=budget.served_micros if budget else 0,
            billed_micros=billed_today,
            priority=str(campaign.get("priority", "auction")),
            day_elapsed_s=(self.now() - day_bounds(today, campaign["time_zone"])[0]
                           ).total_seconds(),
        )

    def ads_of(self, campaign_ids: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
        """campaign id -> its ads' review state and status, from the store: for a list
        of campaigns the API already answered (one API call per campaign would spend
        the viewer's request rate on a single page)."""
        return {cid: [{"review_state": a.review_state.value, "status": a.status.value}
                      for a in self.rt.store.list_ads(cid)] for cid in campaign_ids}

    def billed_today(self, campaigns: Iterable[dict[str, Any]]) -> dict[int, int]:
        """campaign id -> billed micros on its current local day (the ledger)."""
        by_day: dict[date, dict[int, int]] = {}
        out: dict[int, int] = {}
        for c in campaigns:
            day = self.today(c["time_zone"])
            if day not in by_day:
                by_day[day] = self.rt.ledger.billed_on(day)
            out[c["id"]] = by_day[day].get(c["id"], 0)
        return out

    async def pacing_chart(self, campaign: dict[str, Any],
                           hourly_billed: dict[datetime, int]) -> dict[str, Any]:
        """The campaign page's chart over its current local day, on a grid of
        :data:`CHART_STEP_S`: ``hours`` (elapsed local hours), ``spend_micros``
        (cumulative billed at each hour's end and at the last point before now; null
        elsewhere and after now), ``target_micros`` (the budget service's target curve;
        null without one), ``p`` (the pacing probability after the last control step
        at or before each point; null after now or without a service row).
        ``hourly_billed``: billed micros by local hour start (the rollups' rows)."""
        tz = campaign["time_zone"]
        now = self.now()
        today = self.today(tz)
        start = local_midnight(today, tz)
        elapsed_now = (now - start).total_seconds()
        grid = list(range(0, DAY_S + 1, CHART_STEP_S))
        spend = _cumulative_spend(grid, start, hourly_billed, elapsed_now,
                                  self.billed_today([campaign])[campaign["id"]])
        target, p = await self._plan_series(campaign["id"], grid, elapsed_now)
        return {"campaign_id": campaign["id"], "day": today.isoformat(), "time_zone": tz,
                "now_hours": round(elapsed_now / 3600, 4),
                "budget_micros": campaign["daily_budget_micros"],
                "hours": [g / 3600 for g in grid], "spend_micros": spend,
                "target_micros": target, "p": p}

    async def _plan_series(self, campaign_id: int, grid: list[int], elapsed_now: float
                           ) -> tuple[list[float | None], list[float | None]]:
        nothing: list[float | None] = [None] * len(grid)
        day = (await self.reads.plan(campaign_id, CHART_STEP_S)
               if self.reads is not None else None)
        if day is None:
            return nothing, list(nothing)
        by_minute = {int(m): float(p) for m, p in day["p_by_minute"].items()}
        target: list[float | None] = list(day["target_micros"])
        return target, _p_steps(grid, by_minute, float(day["p"]), elapsed_now)


def _hour_floor(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _add_held(out: dict[int, int], held: dict[tuple[int, datetime], int],
              since: datetime) -> None:
    floor = _hour_floor(since)
    for (cid, hour), n in held.items():
        if cid in out and hour >= floor:
            out[cid] += n


def _cumulative_spend(grid: list[int], start: datetime, hourly_billed: dict[datetime, int],
                      elapsed_now: float, billed_now: int) -> list[float | None]:
    """Cumulative billed micros at each hour's end before now (an hour without rollups
    billed nothing) and at the last grid point before now (the ledger's total of the
    day so far, ahead of the rollups); null between hours and after now."""
    by_end: dict[int, int] = {}
    for hour, billed in hourly_billed.items():
        end = int((hour - start).total_seconds()) + 3600
        by_end[end] = by_end.get(end, 0) + billed
    out: list[float | None] = [None] * len(grid)
    last = max((i for i, g in enumerate(grid) if g <= elapsed_now), default=0)
    running = 0
    for i, g in enumerate(grid[: last + 1]):
        if g % 3600 == 0:
            running += sum(v for end, v in by_end.items() if g - 3600 < end <= g)
            out[i] = running
    out[last] = max(billed_now, running)
    return out


def _p_steps(grid: list[int], by_minute: dict[int, float], p_now: float,
             elapsed_now: float) -> list[float | None]:
    """p held by each grid point up to now (the last step at or before it)."""
    minutes = sorted(by_minute)
    out: list[float | None] = []
    j, current = 0, (by_minute[minutes[0]] if minutes else p_now)
    for g in grid:
        if g > elapsed_now:
            out.append(None)
            continue
        while j < len(minutes) and minutes[j] * 60 <= g:
            current = by_minute[minutes[j]]
            j += 1
        out.append(round(current, 6))
    last = max((i for i, g in enumerate(grid) if g <= elapsed_now), default=0)
    out[last] = round(p_now, 6)
    return out
