"""The advertiser API: REST routes over the campaign store and the billing ledger.

Build the routes with :func:`make_advertiser_router` and install the JSON error
handlers with :func:`adfunnel.api.errors.install_error_handlers` on the app. Nothing is
created at import time.

Routes (JSON bodies; money in integer micros; dates ``YYYY-MM-DD``, local to the
campaign's time zone)::

    POST  /v1/advertisers                   201 advertiser
    GET   /v1/advertisers                   200 [advertiser]
    GET   /v1/advertisers/{id}              200 advertiser
    POST  /v1/campaigns                     201 campaign
    GET   /v1/campaigns?advertiser_id=      200 [campaign]
    GET   /v1/campaigns/{id}                200 campaign
    PATCH /v1/campaigns/{id}                200 campaign   (body "version": 409 if stale)
    POST  /v1/campaigns/{id}:pause|/pause   200 campaign   (optional body {"version"})
    POST  /v1/campaigns/{id}:resume|/resume 200 campaign
    PUT   /v1/campaigns/{id}/budget         200 campaign
    POST  /v1/campaigns/{id}/ads            201 ad
    GET   /v1/campaigns/{id}/ads            200 [ad]
    GET   /v1/ads/{id}                      200 ad
    PATCH /v1/ads/{id}                      200 ad
          (the ad routes: adfunnel.api.ads)
    GET   /v1/review/ads                    200 [ad] pending review (reviewer, admin)
    POST  /v1/ads/{id}:approve|:reject      200 ad   (reviewer, admin;
          adfunnel.api.review)
    GET   /v1/campaigns/{id}/report?from=&to=  200 report
    GET   /v1/campaigns/{id}/report/rollups?…  200 rollup report, JSON or CSV
    GET   /v1/advertisers/{id}/report/rollups?… 200 rollup report, JSON or CSV
          (adfunnel.api.reports)

Every route needs an API key (``adfunnel.auth``): admins see everything; an advertiser
key sees only its own advertiser (other ids answer 404; its new ads start
``pending_review``, ``adfunnel.api.access``); a reviewer reads, and reviews ads.
Creating advertisers is the admin's.

Campaigns carry how they are sold (``priority``, ``goal``, ``budget_period``,
``flight_budget_micros``; rules in ``adfunnel.campaigns.sales``, every broken one named
at once in a 422): a guaranteed line's period defaults to ``flight`` (also when a PATCH
makes a line guaranteed), and with ``flight`` the daily budget may be left out (0: no
daily ceiling). ``PUT .../budget`` also sets ``flight_budget_micros``.

How a campaign bids (``bid_strategy``, ``bid_cap_micros``, ``target_cpa_micros``) is set
by :func:`adfunnel.campaigns.bidding_terms.bidding_terms` on create, PATCH and budget
writes: an automatic strategy's ``bid_micros`` is derived (given: 422 naming it) and
follows its cap, target or budget; a change of strategy, cap or target stamps
``bid_strategy_since`` (the budget service restarts λ then).

Campaign writes (create, PATCH, budget) also answer ``warnings`` — ``[{"field",
"problem"}]``, only when the campaign cannot deliver as written
(``adfunnel.campaigns.checks``).

A write's body is read by ``adfunnel.api.write_bodies`` (PATCH fields, sale defaults,
canonical targeting).

Errors: see ``adfunnel.http_errors`` (422 validation with named fields, 400 malformed
JSON, 404 not found, 409 version conflict).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Response
from sqlalchemy import Engine

from adfunnel.api import access
from adfunnel.api.access import Writer
from adfunnel.api.ads import add_ad_routes
from adfunnel.api.campaign_report_route import add_report_route
from adfunnel.api.campaign_schemas import (
    CAMPAIGN_NULLABLE,
    AdvertiserIn,
    AdvertiserOut,
    BudgetIn,
    CampaignIn,
    CampaignOut,
    CampaignPatch,
    CampaignWritten,
    FieldProblemOut,
)
from adfunnel.api.creatives import UploadLookup
from adfunnel.api.field_types import VersionIn
from adfunnel.api.met_goal import (
    completes_a_met_goal,
    refuse_resuming_a_met_goal,
    with_patched_goal,
)
from adfunnel.api.pagination import (
    DEFAULT_LIMIT,
    Cursor,
    Limit,
    Page,
    by_id,
    decode_cursor,
    known_query_only,
    page,
)
from adfunnel.api.period_today import DayReads
from adfunnel.api.render import advertiser_out, campaign_out, written_out
from adfunnel.api.reports import make_rollup_router
from adfunnel.api.review import make_review_router
from adfunnel.api.write_bodies import canonical_targeting, patch_changes, sale_defaults
from adfunnel.auth.http import Caller, require_role
from adfunnel.auth.keys import Principal, Role
from adfunnel.billing.ledger import Ledger
from adfunnel.billing.period_report import period_edit_problems
from adfunnel.billing.rollup_store import RollupStore
from adfunnel.billing.sql_rollups import make_rollup_store
from adfunnel.campaigns.bidding_terms import bidding_terms, name_the_source
from adfunnel.campaigns.checks import money_limit_problems
from adfunnel.campaigns.errors import NotFound
from adfunnel.campaigns.model import (
    BudgetPeriod,
    Campaign,
    CampaignStatus,
    Priority,
)
from adfunnel.campaigns.schedule import local_day
from adfunnel.campaigns.store import CampaignStore
from adfunnel.campaigns.validate import campaign_problems, storable_id
from adfunnel.clock import Clock
from adfunnel.http_errors import ApiError, validation_error
from adfunnel.settings.model import (
    DEFAULT_CURRENCY,
    DEFAULT_MAX_BID_MICROS,
    DEFAULT_MAX_BUDGET_MICROS,
)

__all__ = ["make_advertiser_router"]

#: Optional body of pause/resume (module level: FastAPI resolves annotations globally).
OptionalVersion = Annotated[VersionIn | None, Body()]

#: Longest report span in days, unless ``settings_like.report_max_days`` says otherwise.
DEFAULT_REPORT_MAX_DAYS = 366
#: The fields of a guaranteed line that change what it is booked against (a patch of
#: any re-checks its availability).
BOOKING_FIELDS = frozenset({"goal", "priority", "flight_start", "flight_end", "targeting"})


def make_advertiser_router(
    store: CampaignStore, ledger: Ledger, clock: Clock, settings_like: object = None,
    rollups: RollupStore | None = None, uploads: UploadLookup | None = None,
    budget: DayReads | None = None,
    availability: Callable[[Campaign], int | None] | None = None,
    left_short: Callable[[Campaign], list[tuple[int, int, int]]] | None = None,
) -> APIRouter:
    """The advertiser API routes over ``store`` (records), ``ledger`` (reports) and
    ``rollups`` (rollup reports, :mod:`adfunnel.api.reports`).

    ``clock`` gives "today" for reports without dates; ``settings_like`` may carry
    ``report_max_days`` (int) and ``currency`` (named in every report). ``rollups``
    defaults to the SQL rollup store of the campaign store's database when it has one
    (``SqlCampaignStore.engine``: the embedded runtime's database, where the rollups
    also join ``campaigns``); without either there are no rollup routes. ``uploads``
    finds an advertiser's uploaded image (an image creative's ``upload_id``,
    :mod:`adfunnel.api.creatives`; none: every ``upload_id`` is unknown). ``budget``
    reads the budget service's current day of a campaign (the report's
    ``period.today``; None: null). ``availability`` forecasts the
    impressions left to a new guaranteed line (:class:`adfunnel.api.forecasts.Forecaster`;
    None: no forecast): a goal above it is created all the same, with a
    ``goal_exceeds_availability`` warning (the operator may overbook). ``left_short``
    names the booked guaranteed lines a new sponsorship leaves short of their goals
    (``(id, needed, available)``, :meth:`adfunnel.api.forecasts.Forecaster.lines_left_short`;
    None: no check): booked all the same, with a ``leaves_booked_line_short`` warning
    each. The app must also call
    :func:`adfunnel.api.errors.install_error_handlers`.
    """
    router = APIRouter(tags=["advertiser"], dependencies=[Depends(known_query_only)])
    max_days = int(getattr(settings_like, "report_max_days", DEFAULT_REPORT_MAX_DAYS))
    max_bid = int(getattr(settings_like, "max_bid_micros", DEFAULT_MAX_BID_MICROS))
    max_budget = int(getattr(settings_like, "max_budget_micros", DEFAULT_MAX_BUDGET_MICROS))
    currency = str(getattr(settings_like, "currency", DEFAULT_CURRENCY))

    def check_money(values: dict[str, Any], current: Campaign | None = None,
                    more: list[tuple[str, str]] | None = None) -> None:
        """422 naming each bid or budget above the server's limits (and ``more``),
        together with every rule the record would break in the store: all at once."""
        problems = name_the_source(
            [*(more or []), *money_limit_problems(values, max_bid, max_budget, current)],
            values, current)
        if problems:
            named = {field for field, _ in problems}
            problems += [p for p in campaign_problems(values, current) if p[0] not in named]
            raise validation_error(*problems)
    engine = getattr(store, "engine", None)
    if rollups is None and isinstance(engine, Engine):
        rollups = make_rollup_store(engine)
    if rollups is not None:
        router.include_router(make_rollup_router(store, rollups, clock, max_days=max_days,
                                                 currency=currency))
    router.include_router(make_review_router(store))

    # --- advertisers ----------------------------------------------------------------

    @router.post("/v1/advertisers", status_code=201, response_model=AdvertiserOut,
                 dependencies=[Depends(require_role(Role.ADMIN))])
    def create_advertiser(body: AdvertiserIn, response: Response) -> AdvertiserOut:
        created = store.create_advertiser(body.name)
        response.headers["Location"] = f"/v1/advertisers/{created.id}"
        return advertiser_out(created)

    @router.get("/v1/advertisers", response_model=Page[AdvertiserOut])
    def list_advertisers(who: Caller, limit: Limit = DEFAULT_LIMIT,
                         cursor: Cursor = None) -> Page[AdvertiserOut]:
        start = decode_cursor("advertisers", cursor, int)
        if who.role is Role.ADVERTISER:  # its own advertiser is its whole list
            own = store.get_advertiser(int(who.advertiser_id or 0))
            rows = [own] if start is None or own.id > start else []
        else:
            rows = store.list_advertisers(after=start, limit=limit + 1)
        return page("advertisers", [advertiser_out(a) for a in rows], limit, by_id)

    @router.get("/v1/advertisers/{advertiser_id}", response_model=AdvertiserOut)
    def get_advertiser(advertiser_id: int, who: Caller) -> AdvertiserOut:
        return advertiser_out(access.advertiser(store, who, advertiser_id))

    # --- campaigns ------------------------------------------------------------------

    @router.post("/v1/campaigns", status_code=201, response_model=CampaignWritten,
                 response_model_exclude_unset=True)
    def create_campaign(body: CampaignIn, who: Writer, response: Response) -> CampaignWritten:
        values = body.model_dump(exclude={"targeting"})
        values["dayparts"] = tuple(values["dayparts"])
        values["frequency_caps"] = tuple(values["frequency_caps"])
        access.direct_line_terms(who, None, values)
        more = sale_defaults(values)  # first: a derived bid reads the period's budget
        check_money(values, more=[*more, *bidding_terms(values, None, clock.now())])
        if body.targeting is not None:
            values["targeting"] = canonical_targeting(body.targeting)
        try:
            access.advertiser(store, who, body.advertiser_id, write=True)
        except NotFound as exc:
            raise validation_error(("advertiser_id", "no such advertiser")) from exc
        created = store.create_campaign(**values)
        response.headers["Location"] = f"/v1/campaigns/{created.id}"
        return with_availability(written_out(created, clock.now()), created)

    def with_availability(out: CampaignWritten, c: Campaign) -> CampaignWritten:
        """``out`` with a ``goal_exceeds_availability`` warning when ``c`` is a
        guaranteed line whose goal is above what the forecast leaves it (it is booked
        all the same: the operator may overbook)."""
        available = availability(c) if availability is not None else None
        total = c.goal.total if c.goal is not None else None
        if available is not None and total is not None and total > available:
            out.warnings = [*out.warnings, FieldProblemOut(
                field="goal.total", code="goal_exceeds_availability",
                available_impressions=available,
                problem=f"the forecast leaves {available} impressions over the flight")]
        for line, needed, left in left_short(c) if left_short is not None else []:
            out.warnings = [*out.warnings, FieldProblemOut(
                field="goal.share", code="leaves_booked_line_short",
                available_impressions=left,
                problem=f"guaranteed line {line} still needs {needed} impressions; the "
                        f"forecast leaves it {left} once this line is served first")]
        return out

    @router.get("/v1/campaigns", response_model=Page[CampaignOut])
    def list_campaigns(who: Caller, advertiser_id: int | None = None,
                       include_archived: bool = False, limit: Limit = DEFAULT_LIMIT,
                       cursor: Cursor = None) -> Page[CampaignOut]:
        """Campaigns by id (archived ones only with ``include_archived``); an
        advertiser key lists only its own advertiser's."""
        start = decode_cursor("campaigns", cursor, int)
        if who.role is Role.ADVERTISER:
            if advertiser_id not in (None, who.advertiser_id):
                return Page[CampaignOut](items=[])
            advertiser_id = who.advertiser_id
        if advertiser_id is not None and not storable_id(advertiser_id):
            return Page[CampaignOut](items=[])  # names no advertiser (nor fits the query)
        rows = store.list_campaigns(advertiser_id, after=start, limit=limit + 1,
                                    include_archived=include_archived)
        return page("campaigns", [campaign_out(c) for c in rows], limit, by_id)

    @router.get("/v1/campaigns/{campaign_id}", response_model=CampaignOut)
    def get_campaign(campaign_id: int, who: Caller) -> CampaignOut:
        return campaign_out(access.campaign(store, who, campaign_id))

    @router.patch("/v1/campaigns/{campaign_id}", response_model=CampaignWritten,
                  response_model_exclude_unset=True)
    def patch_campaign(campaign_id: int, body: CampaignPatch, who: Writer) -> CampaignWritten:
        current = access.campaign(store, who, campaign_id, write=True)
        changes = patch_changes(body, CAMPAIGN_NULLABLE)
        access.direct_line_terms(who, current.priority, changes)
        forgotten = period_edit_problems(ledger, current, changes,
                                         local_day(clock.now(), current.time_zone))
        if forgotten:
            raise validation_error(*forgotten)
        if (changes.get("priority") is Priority.GUARANTEED and "budget_period" not in changes
                and current.budget_period is not BudgetPeriod.FLIGHT):
            changes["budget_period"] = BudgetPeriod.FLIGHT  # a guaranteed line's period
        check_money(changes, current, bidding_terms(changes, current, clock.now()))
        if changes.get("status") is CampaignStatus.ARCHIVED:
            raise validation_error(("status", "archive with DELETE /v1/campaigns/{id}"))
        # judged by the goal the PATCH leaves: a raised goal resumes, one re-sent as it is
        # (or any goal the line has already met) does not
        patched = with_patched_goal(current, changes)
        refuse_resuming_a_met_goal(ledger, clock, patched, changes.get("status"))
        completes_a_met_goal(ledger, clock, patched, changes)
        if "targeting" in changes and changes["targeting"] is not None:
            changes["targeting"] = canonical_targeting(body.targeting)
        updated = store.update_campaign(campaign_id, changes, body.version)
        out = written_out(updated, clock.now())
        if changes.keys() & BOOKING_FIELDS:  # what it is booked for changed: re-check
            out = with_availability(out, updated)
        return out

    @router.delete("/v1/campaigns/{campaign_id}", status_code=204)
    def archive_campaign(campaign_id: int, who: Writer) -> Response:
        """Archive the campaign: it is no longer served nor listed by default; its
        record, ads and reports stay. Archiving it again changes nothing. A sponsorship
        or guaranteed line is the operator's to archive (403 for an advertiser key,
        which may pause it: archiving cannot be undone)."""
        current = access.campaign(store, who, campaign_id, write=True, archived_ok=True)
        access.direct_line_terms(who, current.priority, {"status": CampaignStatus.ARCHIVED})
        if current.status is not CampaignStatus.ARCHIVED:
            store.update_campaign(campaign_id, {"status": CampaignStatus.ARCHIVED})
        return Response(status_code=204)

    def set_status(campaign_id: int, body: VersionIn | None, to: CampaignStatus,
                   who: Principal) -> CampaignOut:
        version = body.version if body else None
        current = access.campaign(store, who, campaign_id, write=True)
        if current.status is CampaignStatus.ENDED:
            raise ApiError(409, "conflict", f"campaign {campaign_id} has ended",
                           fields=[("status", "the campaign has ended")])
        refuse_resuming_a_met_goal(ledger, clock, current, to)
        if current.status is to and version in (None, current.version):
            return campaign_out(current)  # already there: nothing to write
        return campaign_out(store.update_campaign(campaign_id, {"status": to}, version))

    @router.post("/v1/campaigns/{campaign_id}:pause", response_model=CampaignOut)
    @router.post(
        "/v1/campaigns/{campaign_id}/pause", response_model=CampaignOut, include_in_schema=False
    )
    def pause_campaign(campaign_id: int, who: Writer,
                       body: OptionalVersion = None) -> CampaignOut:
        return set_status(campaign_id, body, CampaignStatus.PAUSED, who)

    @router.post("/v1/campaigns/{campaign_id}:resume", response_model=CampaignOut)
    @router.post(
        "/v1/campaigns/{campaign_id}/resume", response_model=CampaignOut, include_in_schema=False
    )
    def resume_campaign(campaign_id: int, who: Writer,
                        body: OptionalVersion = None) -> CampaignOut:
        return set_status(campaign_id, body, CampaignStatus.ACTIVE, who)

    @router.put("/v1/campaigns/{campaign_id}/budget", response_model=CampaignWritten,
                response_model_exclude_unset=True)
    def put_budget(campaign_id: int, body: BudgetIn, who: Writer) -> CampaignWritten:
        current = access.campaign(store, who, campaign_id, write=True)
        changes: dict[str, Any] = {}
        if body.daily_budget_micros is not None:
            changes["daily_budget_micros"] = body.daily_budget_micros
        elif current.budget_period is not BudgetPeriod.FLIGHT:
            raise validation_error(("daily_budget_micros", "is required"))
        for name in ("lifetime_budget_micros", "flight_budget_micros"):
            if name in body.model_fields_set:
                changes[name] = getattr(body, name)
        access.direct_line_terms(who, current.priority, changes)
        check_money(changes, current, bidding_terms(changes, current, clock.now()))
        return written_out(store.update_campaign(campaign_id, changes, body.version),
                           clock.now())

    add_ad_routes(router, store, uploads)
    add_report_route(router, store, ledger, clock, rollups, budget,
                     max_days=max_days, currency=currency)
    return router
