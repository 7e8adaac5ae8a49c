"""How a campaign is sold, in the dashboard: the form fields of priority, goal, budget
period, flight budget and pacing mode → API bodies, and a line's progress toward its goal
or flight budget (from the API's campaign report).

Pure but for :func:`sale_progress`, which reads the report through the viewer's
:class:`~adfunnel.ui.api_client.ApiClient`. Parsers raise
:class:`~adfunnel.ui.forms.FieldProblem` naming the API field they fill (``goal.share``,
``goal.total``, ``flight_budget_micros``), so a problem found here shows where the API's
own would.
"""

from __future__ import annotations

import math
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from adfunnel.pacing.progress import PACE_BAND
from adfunnel.ui.api_client import ApiClient
from adfunnel.ui.forms import FieldProblem, int_field, units_to_micros, without_thousands

PRIORITIES = ("auction", "guaranteed", "sponsorship")
GOAL_METRICS = ("impressions", "clicks", "share")
BUDGET_PERIODS = ("day", "flight", "average_day")
PACING_MODES = ("even", "frontloaded", "accelerated")
#: How a guaranteed line's page names its state against its plan.
STATE_LABELS = {"on_track": "on track", "behind": "behind plan", "ahead": "ahead of plan",
                "not_started": "not started", "met": "goal met", "missed": "goal missed"}
#: Its badge's tone (the dashboard's status tones).
STATE_TONES = {"on_track": "good", "behind": "warn", "ahead": "warn", "not_started": "idle",
               "met": "done", "missed": "warn"}
#: Longest span one campaign report may cover (the API's default ``report_max_days``).
REPORT_MAX_DAYS = 366


def goal_from_form(form: Any) -> dict[str, Any] | None:
    """The ``goal`` of the form's ``priority``, ``goal_metric``, ``goal_share`` and
    ``goal_total`` (an auction line with no goal field filled: None). The metric, when
    not chosen, is ``share`` for a sponsorship and ``impressions`` otherwise.

    Raises:
        FieldProblem: a share or total that is not a number (``goal.share``,
            ``goal.total``).
    """
    priority = str(form.get("priority", "auction"))
    metric = str(form.get("goal_metric", "")).strip()
    share = str(form.get("goal_share", "")).strip()
    total = str(form.get("goal_total", "")).strip()
    if priority == "auction" and not (share or total):
        return None
    if not metric:
        metric = "share" if priority == "sponsorship" else "impressions"
    goal: dict[str, Any] = {"metric": metric}
    if share:
        try:
            value = Decimal(share.rstrip("%"))
            number = float(value / 100 if share.endswith("%") else value)
        except ArithmeticError:  # not a number, or 1e999999999% overflowing the division
            raise FieldProblem("goal.share", "must be a share like 0.5 (or 50%)") from None
        if not math.isfinite(number):
            raise FieldProblem("goal.share", "must be a share like 0.5 (or 50%)")
        goal["share"] = number
    if total:
        goal["total"] = int_field(without_thousands(total, "goal.total"), "goal.total")
    return goal


def sale_fields(form: Any, *, edit: bool) -> dict[str, Any]:
    """The API fields of the form's sale section: ``priority``, ``goal``,
    ``budget_period``, ``flight_budget_micros`` and ``pacing_mode``. On create, an
    empty budget period or flight budget is left out (the API's defaults); on an
    edit (``edit``), an empty flight budget or goal clears it (null) and an empty
    period is left out (a line made guaranteed gets ``flight``).

    Raises:
        FieldProblem: see :func:`goal_from_form`; a flight budget that is not an amount.
    """
    body: dict[str, Any] = {"priority": str(form.get("priority", "auction")),
                            "pacing_mode": str(form.get("pacing_mode", "even"))}
    goal = goal_from_form(form)
    if goal is not None or edit:
        body["goal"] = goal
    period = str(form.get("budget_period", "")).strip()
    if period:
        body["budget_period"] = period
    flight = str(form.get("flight_budget", "")).strip()
    if flight:
        body["flight_budget_micros"] = units_to_micros(flight, "flight_budget_micros")
    elif edit:
        body["flight_budget_micros"] = None
    return body


async def sale_progress(api: ApiClient, campaign: dict[str, Any], today: date
                        ) -> dict[str, Any] | None:
    """A goal or flight line's progress for its page, from the campaign report over its
    flight up to ``today`` (local; the last :data:`REPORT_MAX_DAYS` of it at most):
    ``{"metric", "goal", "delivered", "pct", "billed_micros", "flight_budget_micros",
    "budget_pct", "share", "until", "plan"}`` (``plan``: a guaranteed line's progress
    against its plan, :func:`plan_view`); None for a line sold by the day without a
    goal, or when the report cannot be read (the page shows the rest)."""
    goal = campaign.get("goal")
    flight_budget = campaign.get("flight_budget_micros")
    if goal is None and flight_budget is None:
        return None
    start = date.fromisoformat(str(campaign["flight_start"]))
    end = campaign.get("flight_end")
    last = min(today, date.fromisoformat(str(end))) if end else today
    delivered, billed, progress = 0, 0, None
    if last >= start:
        first = max(start, last - timedelta(days=REPORT_MAX_DAYS - 1))
        answer = await api.call("GET", f"/v1/campaigns/{campaign['id']}/report",
                                params={"from": first.isoformat(), "to": last.isoformat()})
        if not answer.ok:
            return None
        billed = int(answer.body["billed_micros"])
        metric = goal.get("metric") if goal else None
        delivered = int(answer.body["clicks" if metric == "clicks" else "impressions"])
        progress = (answer.body.get("period") or {}).get("progress")
    total = goal.get("total") if goal else None
    return {"metric": goal.get("metric") if goal else None, "goal": total,
            "share": goal.get("share") if goal else None, "delivered": delivered,
            "pct": _pct(delivered, total), "billed_micros": billed,
            "flight_budget_micros": flight_budget, "budget_pct": _pct(billed, flight_budget),
            "until": end, "plan": plan_view(progress)}


def plan_view(progress: dict[str, Any] | None) -> dict[str, Any] | None:
    """A guaranteed line's ``period.progress`` (the campaign report's) for its page's
    plan bar: the figures, each as a percentage of the goal (``*_pct``, 0-100), the
    state's label and tone and the band it is named by (``band_pct``); None without
    one."""
    if not progress or not progress.get("goal"):
        return None
    goal = int(progress["goal"])

    def pct(n: int) -> float:
        return round(min(100.0, 100.0 * n / goal), 1)

    return {**progress, "delivered_pct": pct(progress["delivered"]),
            "planned_pct": pct(progress["planned_to_date"]),
            "projected_pct": pct(progress["projected_final"]),
            "label": STATE_LABELS.get(progress["state"], progress["state"]),
            "tone": STATE_TONES.get(progress["state"], "idle"),
            "band_pct": round(100 * PACE_BAND)}


def _pct(part: int, whole: int | None) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None
