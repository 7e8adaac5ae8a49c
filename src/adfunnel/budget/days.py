"""A campaign's current local day as the budget service holds it, for the dashboard.

One read for both deployments: the embedded default calls :func:`day_view` under the
service's lock; a separate ``adfunnel budget-service`` answers it on
``GET /v1/days?campaign_ids=…`` and ``GET /v1/days/{campaign_id}?plan_step_s=…``
(:func:`add_day_routes`), so the dashboard of a fleet's ad server shows the same
budget state, p and target curve as the embedded one (``adfunnel.ui.facts``).
"""

from __future__ import annotations

import threading
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adfunnel.budget.service import BudgetService
from adfunnel.clock import Clock
from adfunnel.http_errors import error_response

#: The most campaigns one ``GET /v1/days`` answers (a dashboard page shows fewer).
MAX_DAYS = 1_000
DAY_S = 86_400


def day_view(service: BudgetService, campaign_id: int, now: float,
             plan_step_s: int | None = None) -> dict[str, Any] | None:
    """The campaign's day at ``now`` (Unix s) as JSON-able fields: ``day`` (ISO),
    ``state``, ``pacing_status``, ``p`` (probability), ``lam`` (the bid multiplier λ
    of an automatic campaign, 1 for others), ``budget_micros`` (the day's
    budget, lifetime budget included), ``billed_micros``, ``served_micros`` (spend
    reported served), ``period`` (a flight's or average day's: allotment, spend,
    plan; null for a day campaign), and with ``plan_step_s`` the pacing plan on a grid of that step
    over the local day: ``target_micros`` (cumulative target at each point) and
    ``p_by_minute`` (p after the last control step of each elapsed minute, keyed by the
    minute as a string). None for a campaign the service does not own. Call it under
    the service's lock."""
    cd = service.current(campaign_id, now)
    if cd is None:
        return None
    out: dict[str, Any] = {
        "campaign_id": campaign_id, "day": cd.day.isoformat(), "state": cd.state.value,
        "pacing_status": cd.status.value, "p": float(cd.ctl.p), "lam": cd.lam,
        "budget_micros": cd.day_budget(), "billed_micros": cd.billed,
        "served_micros": cd.served_total,
        # a flight's or average day's figures (adfunnel.budget.periods); null for a day
        "period": service.period_view(campaign_id, now),
    }
    if plan_step_s is not None:
        plan = cd.plan
        out["target_micros"] = [round(plan.target_micros(g), 1)
                                for g in range(0, DAY_S + 1, plan_step_s)]
        out["p_by_minute"] = {str(m): p for m, p in cd.p_by_minute.items()}
    return out


def add_day_routes(routes: list[Any], service: BudgetService, lock: threading.Lock,
                   clock: Clock) -> None:
    """Append the two ``/v1/days`` routes of a shard to ``routes``; bad parameters
    answer 422 naming the field."""

    async def days(request: Request) -> Response:
        raw = request.query_params.get("campaign_ids", "")
        try:
            ids = [int(x) for x in raw.split(",") if x.strip()]
        except ValueError:
            return _bad("campaign_ids", "must be comma-separated integers")
        if len(ids) > MAX_DAYS:
            return _bad("campaign_ids", f"at most {MAX_DAYS} at once")
        now = clock.now().timestamp()
        with lock:
            found = [day_view(service, cid, now) for cid in ids]
        return JSONResponse({"days": [d for d in found if d is not None]})

    async def one(request: Request) -> Response:
        try:
            cid = int(request.path_params["campaign_id"])
        except ValueError:
            return _bad("campaign_id", "must be an integer")
        step_raw = request.query_params.get("plan_step_s")
        step: int | None = None
        if step_raw is not None:
            try:
                step = int(step_raw)
            except ValueError:
                step = 0
            if not 60 <= step <= DAY_S:
                return _bad("plan_step_s", f"must be an integer from 60 to {DAY_S}")
        now = clock.now().timestamp()
        with lock:
            found = day_view(service, cid, now, step)
        if found is None:
            return error_response(404, "not_found",
                                  [("campaign_id", "not a campaign of this shard")])
        return JSONResponse(found)

    routes.append(Route("/v1/days", days, methods=["GET"]))
    routes.append(Route("/v1/days/{campaign_id}", one, methods=["GET"]))


def _bad(field: str, problem: str) -> JSONResponse:
    return error_response(422, "invalid_parameter", [(field, problem)])
