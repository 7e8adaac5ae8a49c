"""The embedded runtime: every long-lived object of one adfunnel process, built from settings.

``build_runtime`` opens the stores and wires the catalog, the decider, the spend gate, the
event plane and the tracker from one :class:`Settings` into a :class:`Runtime`; the ASGI
app over it is :func:`adfunnel.runtime.asgi.build_app`. Nothing is created at import time.
"""

from __future__ import annotations

import hmac
import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine

from adfunnel.auth import ApiKeys, SqlKeyStore
from adfunnel.billing.ledger import Ledger
from adfunnel.billing.rollup_store import DirtyHours, RollupStore
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.billing.sql_rollups import make_rollup_store
from adfunnel.budget.embedded import InProcessBudget
from adfunnel.budget.gate import LocalSpendGate, SpendGate
from adfunnel.budget.metrics import CAMPAIGNS
from adfunnel.budget.remote import ReportingBudgetClient
from adfunnel.campaigns.change_feed import ChangeFeed, libpq_dsn
from adfunnel.campaigns.errors import VersionConflict
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import CampaignStatus, ModelRelease
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import Clock, ManualClock, SystemClock
from adfunnel.db import make_engine
from adfunnel.events.compactor import compact
from adfunnel.events.served_log import ServedLog
from adfunnel.forecast.sample import RequestSampler
from adfunnel.forecast.store import SampleKeeper, SqlRequestSample
from adfunnel.frequency.redis_store import RedisFrequencyStore
from adfunnel.frequency.scope import NO_SHARED_STORE, caps_refused
from adfunnel.frequency.store import FrequencyStore, MemoryFrequencyStore
from adfunnel.index import ScanIndex
from adfunnel.ivt.lists import IpRanges
from adfunnel.ivt.rules import Tier1Rules
from adfunnel.learn.recalibration_job import RecalibrationJob
from adfunnel.learn.shading_job import ShadingFitJob
from adfunnel.pacing.traffic_log import EligibleCounter, SqlTrafficLog
from adfunnel.periodic import Periodic
from adfunnel.prediction.calibration import CalibrationMonitor
from adfunnel.prediction.model import ClickModel, ModelError
from adfunnel.prediction.published import PublishedFactors
from adfunnel.prediction.scorer import ModelScorer
from adfunnel.prediction.shading_release import ShadingRelease
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.runtime.compiled import warm_up
from adfunnel.runtime.event_plane import EventPlane, make_event_plane
from adfunnel.serving.caps import CapGate
from adfunnel.serving.catalog import Catalog, Snapshot
from adfunnel.serving.deadline import DecisionQueue
from adfunnel.serving.decider import ColumnarDecider
from adfunnel.serving.decision_log import DecisionLog
from adfunnel.serving.placement_traffic import PlacementTraffic
from adfunnel.serving.request import request_attributes
from adfunnel.settings import Settings
from adfunnel.settings.ivt import held_in
from adfunnel.tracking.beacons import Tracker


@dataclass
class Runtime:
    """Every long-lived object of one embedded process."""

    settings: Settings
    clock: Clock
    engine: Engine
    store: SqlCampaignStore
    ledger: Ledger
    catalog: Catalog
    gate: SpendGate
    ctr: SmoothedCtr
    decider: ColumnarDecider
    tracker: Tracker
    decisions: DecisionLog
    feed: ChangeFeed
    background: list[Periodic]
    queue: DecisionQueue  # where ad requests wait for a decision (serving/deadline.py)
    caps: FrequencyStore  # per-user frequency-cap records (Redis, or memory)
    events: EventPlane  # event log, the tracker's publisher, the aggregator
    rollups: RollupStore  # hourly rollups of the ledger (reports by hour, ad, placement)
    keys: ApiKeys  # API keys: the bootstrap admin key and the stored ones
    served: ServedLog | None = None  # committed decisions for the click model
    #: the availability forecast's request sample (kept by default: adfunnel.forecast)
    requests: SampleKeeper | None = None
    #: requests and filled slots per placement (the operator's placement report)
    placements: PlacementTraffic | None = None
    #: the click model's recalibration factors serving uses (the recalibration job's)
    factors: PublishedFactors | None = None
    _closed: bool = False

    def ready(self) -> bool:
        """True while the catalog follows the change log closely enough to decide."""
        return self.feed.ready()

    def close(self) -> None:
        """Stop every background task (with a last flush) and release resources; a
        second call does nothing (the server's shutdown and a test may both call it)."""
        if self._closed:
            return
        self._closed = True
        self.events.close()  # the aggregator's last batch, before the last rollup flush
        for task in self.background:
            task.stop(final=True)
        self.feed.stop()
        if isinstance(self.gate, ReportingBudgetClient | InProcessBudget):
            self.gate.stop()
        self.caps.close()
        if isinstance(self.gate, InProcessBudget):
            CAMPAIGNS.forget(self.gate.snapshot)
        if self.served is not None:
            self.served.close()
        if self.requests is not None:
            try:
                self.requests.flush(final=True)  # the hour in progress too
            except Exception:  # a lost hour of the sample never stops a shutdown
                logging.getLogger("adfunnel.forecast").exception(
                    "the request sample's last hour was not written")
        self.engine.dispose()


def make_catalog(settings: Settings) -> Catalog:
    """The serving catalogue: with the conjunction index, partitioned by creative shape
    (retrieval hands the decider only ads that fit); the reference scan, one index."""
    if settings.index == "scan":
        return Catalog(ScanIndex(), prior_pctr=settings.pctr_prior,
                       prior_pcvr=settings.pcvr_prior)
    return Catalog.shaped(prior_pctr=settings.pctr_prior, prior_pcvr=settings.pcvr_prior)


def make_cap_store(settings: Settings, clock: Clock) -> FrequencyStore:
    """Frequency-cap records: on the Redis at ``redis_url`` (shared by every ad-server
    process), else in this process's memory (the embedded default: one process; with
    several serving processes see :mod:`adfunnel.frequency.scope`)."""
    if settings.redis_url:
        return RedisFrequencyStore(settings.redis_url)
    return MemoryFrequencyStore(clock)


def make_clock(settings: Settings) -> Clock:
    return ManualClock() if settings.clock == "manual" else SystemClock()


def build_runtime(
    settings: Settings, clock: Clock | None = None, seed: int | None = None, *, feed: bool = True
) -> Runtime:
    """Open the database (migrating it to head), load the catalog and wire the planes.

    With ``feed`` a background thread tails the change log, so writes made by other
    processes reach this one; writes made here are applied at once as well.
    """
    warm_up()  # the decision's compiled kernels, before the first request
    clock = clock or make_clock(settings)
    engine = make_engine(settings.database_url)
    upgrade(engine)
    store = SqlCampaignStore(engine, clock)
    ledger = SqlLedger(engine)
    catalog = make_catalog(settings)
    catalog.load(Snapshot.read(store))
    store.subscribe(catalog.apply_local)
    change_feed = ChangeFeed(store, catalog, clock=clock, poll_s=settings.change_poll_s,
                             listen_dsn=libpq_dsn(settings.database_url))
    if feed:
        change_feed.start()
    gate = make_gate(settings, store, ledger, clock, engine)
    changed = getattr(gate, "campaign_changed", None)
    if changed is not None:  # a budget cut reaches the gate with the catalogue
        catalog.campaign_listeners.append(changed)
    ctr = SmoothedCtr(settings.pctr_prior, settings.pctr_prior_strength)
    key = settings.token_secret.encode()
    decisions = DecisionLog()
    background: list[Periodic] = []
    eligible = gate.eligible if isinstance(gate, InProcessBudget) else None
    if settings.budget_service_url:  # the budget service shapes curves from this log
        eligible = EligibleCounter()
        traffic = SqlTrafficLog(engine)
        background.append(Periodic(lambda: traffic.add(eligible.drain()),
                                   settings.traffic_flush_s, "eligible-flush", clock).start())
    # added to the table every few seconds; created placements never count as (other)
    placements = PlacementTraffic(clock, engine, lambda p: p in catalog.placements)
    background.append(Periodic(placements.flush, settings.traffic_flush_s,
                               "placement-traffic-flush", clock).start())
    caps = make_cap_store(settings, clock)
    decider = ColumnarDecider(
        catalog, gate, ctr, clock, key,
        caps=CapGate(caps, catalog.caps,
                     refused=NO_SHARED_STORE if caps_refused(settings) else None),
        token_ttl_s=settings.token_ttl_s, pcvr=settings.pcvr_prior,
        retrieval_limit=settings.retrieval_limit, prerank_keep=settings.prerank_keep,
        candidate_limit=settings.candidate_limit, first_limit=settings.first_candidates,
        rng=_decision_rng(seed if seed is not None else settings.seed), eligible=eligible,
    )
    monitor, factors = CalibrationMonitor(), PublishedFactors()
    cvr = (ClickModel.load(Path(settings.cvr_model_dir))
           if settings.cvr_model_dir is not None else None)
    if settings.model_dir is not None:
        decider.scorer = ModelScorer(ClickModel.load(Path(settings.model_dir)),
                                     settings.model_budget_ms, monitor, cvr,
                                     recall_sample=settings.recall_sample, factors=factors)
        decider.exploration_share = settings.exploration_share
    follow_model_releases(catalog, decider, settings, monitor, cvr, factors)
    rollups = make_rollup_store(engine)
    dirty = DirtyHours(rollups)  # hours the aggregator touched, refreshed every few seconds
    background.append(Periodic(dirty.flush, settings.rollup_refresh_s, "rollup-refresh", clock,
                               run_on_move=True).start())
    events = make_event_plane(settings, clock, ledger, catalog.campaign, gate, ctr,
                              on_lifetime_spent=lambda cid: mark_completed(store, cid),
                              on_lifetime_restored=lambda cid: mark_completed(
                                  store, cid, reopen=True),
                              on_hours=dirty.mark,
                              on_billed=lambda r: monitor.billed(r.impression_id, r.event_type),
                              on_reversed=lambda r: monitor.reversed(r.impression_id,
                                                                     r.event_type))
    tracker = Tracker(events.publisher, catalog, clock, key, ivt=make_ivt_rules(settings),
                      previous_keys=settings.previous_token_keys(),
                      origins=catalog.allowed_origins)
    served = make_served_log(settings, clock)
    if served is not None and settings.served_log_dir:
        directory = settings.served_log_dir
        background.append(Periodic(lambda: compact(directory, clock.now()),
                                   settings.served_compact_s, "served-compact", clock).start())
        # the click model's factors, from the served log and the ledger (on a manual
        # clock in the mover's thread: a replay's decisions see the hour's factors)
        recal = RecalibrationJob(directory, engine, clock, factors, flush=served.flush,
                                 window_s=settings.recalibration_window_s)
        background.append(Periodic(recal.run, settings.recalibration_s, "recalibrate",
                                   clock, run_on_move=True).start())
        if settings.shading_fit_s is not None and settings.shading_release_dir is not None:
            # first-price shading's win curves, registered as the command's output would
            # be: this server (and every other) loads them through the change log
            fit = ShadingFitJob(
                directory, engine, clock, settings.shading_release_dir, store.register_model,
                lambda: getattr(catalog.active_model("shading"), "model_version", None),
                flush=served.flush,
                days=settings.shading_fit_days,
                min_observations=settings.shading_min_observations)
            background.append(Periodic(fit.run, settings.shading_fit_s, "shading-fit", clock,
                                       run_on_move=True).start())
    requests = SampleKeeper(
        RequestSampler(clock.now, request_attributes, settings.forecast_sample_per_hour,
                       seed=seed if seed is not None else settings.seed),
        SqlRequestSample(engine), settings.forecast_history_days)
    background.append(Periodic(requests.flush, settings.forecast_flush_s, "request-sample",
                               clock, run_on_move=True).start())
    return Runtime(settings, clock, engine, store, ledger, catalog, gate, ctr, decider,
                   tracker, decisions, change_feed, background, DecisionQueue(decider), caps,
                   events, rollups, ApiKeys(SqlKeyStore(engine), clock, settings.admin_key),
                   served, requests, placements, factors)


#: Seconds of the injected clock between refreshes of the rollup hours the aggregator
#: touched (on a manual clock they follow its moves, so a replay's reports fill in).
ROLLUP_REFRESH_S = 5.0  # the default of ``Settings.rollup_refresh_s``


def make_ivt_rules(settings: Settings) -> Tier1Rules | None:
    """Tier-1 invalid-traffic rules, their lists loaded now (half a second, once per
    process) rather than on the first beacon; None when ``ivt`` is off."""
    if not settings.ivt:
        return None
    # lists held out (a recall measurement) load apart from the process-wide ones
    ranges = (IpRanges.from_dir(sources=held_in(settings.ivt_held_out_lists))
              if settings.ivt_held_out_lists else None)
    return Tier1Rules(ranges=ranges, min_click_delay_ms=settings.ivt_min_click_delay_ms)


def follow_model_releases(catalog: Catalog, decider: ColumnarDecider, settings: Settings,
                          monitor: CalibrationMonitor, cvr: ClickModel | None = None,
                          factors: PublishedFactors | None = None) -> None:
    """Serve with the active model releases of the change log (``POST
    /v1/admin/models``) — the click model, the conversion model of CPA candidates, and
    first-price shading's win curves (:func:`use_shading`) — switching when another
    becomes active, without a restart. A release whose artifact
    cannot be loaded, or is not the version and target registered, is logged and the
    current model kept. A conversion model waits for a click model to serve with."""
    log = logging.getLogger("adfunnel.model")
    state: dict[str, ClickModel | None] = {"conversion": cvr}

    def use(release: ModelRelease) -> None:
        if release.target == "shading":
            use_shading(decider, release)
            return
        try:
            model = ClickModel.load(Path(release.path))
        except ModelError as exc:
            log.error("model release %d not loaded: %s", release.id, exc)
            return
        if model.version != release.model_version or model.target != release.target:
            log.error("model release %d: %s holds a %s model %s, not the %s model %s",
                      release.id, release.path, model.target, model.version,
                      release.target, release.model_version)
            return
        if release.target == "conversion":
            state["conversion"] = model
            current = decider.scorer
            if current is not None:
                decider.scorer = ModelScorer(current.model, settings.model_budget_ms,
                                             monitor, model,
                                             recall_sample=settings.recall_sample,
                                             factors=factors)
        else:
            decider.scorer = ModelScorer(model, settings.model_budget_ms, monitor,
                                         state["conversion"],
                                         recall_sample=settings.recall_sample,
                                         factors=factors)
            decider.exploration_share = settings.exploration_share
        log.info("serving with %s model %s (release %d)", release.target, model.version,
                 release.id)

    catalog.model_listeners.append(use)
    for target in ("conversion", "click", "shading"):
        found = catalog.active_model(target)
        if found is not None:
            use(found)


def use_shading(decider: ColumnarDecider, release: ModelRelease) -> None:
    """Shade automatic bids on first-price placements with a shading release
    (:mod:`adfunnel.serving.bid_shading`); one that cannot be loaded, or is not the
    version registered, is logged and the current curves kept."""
    log = logging.getLogger("adfunnel.model")
    try:
        loaded = ShadingRelease.load(Path(release.path))
    except ModelError as exc:
        log.error("shading release %d not loaded: %s", release.id, exc)
        return
    if loaded.version != release.model_version:
        log.error("shading release %d: %s holds version %s, not %s", release.id,
                  release.path, loaded.version, release.model_version)
        return
    decider.shading = loaded
    log.info("shading first-price bids with release %s (release %d)", loaded.version,
             release.id)


def make_served_log(settings: Settings, clock: Clock) -> ServedLog | None:
    """The served log under ``served_log_dir`` (None without one). The user-key hash is
    keyed by ``served_log_salt``, else by a key derived from the token secret."""
    if not settings.served_log_dir:
        return None
    salt = (settings.served_log_salt.encode() if settings.served_log_salt else
            hmac.new(settings.token_secret.encode(), b"served-log salt", "sha256").digest())
    return ServedLog(settings.served_log_dir, clock, salt=salt)


def _decision_rng(seed: int | None) -> random.Random | None:
    return random.Random(seed) if seed is not None else None


def make_gate(settings: Settings, store: SqlCampaignStore, ledger: Ledger, clock: Clock,
              engine: Engine) -> SpendGate:
    """The spend gate: the budget client of the budget & pacing service — a separate
    process (fleet, ``budget_service_url``) or in this process (embedded default) — or,
    with ``budget="local"``, committed spend held in this process without pacing."""
    if settings.budget_service_url:
        assert settings.internal_token is not None  # required with budget_service_url
        client = ReportingBudgetClient(clock, settings.budget_service_url.split(","),
                                       token=settings.internal_token)
        client.start()
        return client
    if settings.budget == "service":
        return InProcessBudget(store, ledger, clock, engine=engine,
                               token_ttl_s=settings.token_ttl_s)
    gate = LocalSpendGate()
    _seed_billed(gate, ledger, clock.now())
    return gate


def _seed_billed(gate: LocalSpendGate, ledger: Ledger, now: datetime) -> None:
    """Committed spend survives a restart: start from the ledger's billed totals."""
    days = {(now + timedelta(days=d)).date() for d in (-1, 0, 1)}
    gate.seed_billed({(cid, day): v for day in days for cid, v in ledger.billed_on(day).items()})
    gate.seed_lifetime(ledger.lifetime_billed())


def mark_completed(store: SqlCampaignStore, campaign_id: int, attempts: int = 3, *,
                   reopen: bool = False) -> None:
    """Set an active or paused campaign's status to ``completed`` (its lifetime budget is
    spent); the change log carries it to every server, whose filter then rejects it.
    With ``reopen``, set a ``completed`` one back to what it was before (tier 2 refunded
    a billed event: its lifetime is not spent any more): ``paused`` if its owner had
    paused it (a line paused, then completed by beacons in flight, served again once
    reopened ``active``), else ``active``. A concurrent edit (version conflict) is
    retried on the new version."""
    before = ((CampaignStatus.COMPLETED,) if reopen
              else (CampaignStatus.ACTIVE, CampaignStatus.PAUSED))
    for _ in range(attempts):
        c = store.get_campaign(campaign_id)
        if c.status not in before:
            return
        after = CampaignStatus.COMPLETED
        if reopen:
            was = store.status_before(campaign_id, CampaignStatus.COMPLETED)
            after = CampaignStatus.PAUSED if was is CampaignStatus.PAUSED else CampaignStatus.ACTIVE
        try:
            store.update_campaign(campaign_id, {"status": after}, c.version)
            return
        except VersionConflict:
            continue


