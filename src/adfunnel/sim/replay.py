"""The main job: replay real iPinYou traffic through a real adfunnel server over HTTP.

1. Start the server (embedded SQLite, manual clock) unless a URL is given.
2. Create one campaign per iPinYou advertiser through the advertiser API, with bids
   from the advertiser's real CPM or CPC (``train-info.txt``), targeting built from
   attributes present in the log, and daily budgets of which some bind
   (:mod:`adfunnel.sim.replay_plans`); and two direct lines, a guaranteed one and a
   sponsorship, sized from the log's matching supply (:mod:`adfunnel.sim.replay_direct`).
3. Replay the log in timestamp order on the simulated clock (the server's clock is
   moved with ``PUT /v1/admin/clock``), one ad request per row, firing impression
   beacons for rendered ads and clicks from the click model of
   :mod:`adfunnel.sim.replayer`.
4. Read the ledger back through the API and report (:mod:`adfunnel.sim.replay_report`;
   the direct lines' ``direct_lines``; total revenue and revenue, fill and eCPM per
   placement and slot size, :mod:`adfunnel.sim.replay_sales`).

Requests carry a 2 s deadline so that the report depends on the seed only, not on the
machine's load (the report counts late decisions all the same).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from adfunnel.sim import replay_report
from adfunnel.sim.invalid import HELD_OUT_PROVIDERS
from adfunnel.sim.ipinyou import CHINA, LogRow
from adfunnel.sim.ivt_recall import measure_ivt
from adfunnel.sim.learn import AttributeClicks, split_last_day, train_and_register
from adfunnel.sim.potential import judge_delivery
from adfunnel.sim.replay_auto import auto_figures, create_auto, parse_mode, served_lambda
from adfunnel.sim.replay_direct import DirectSetup, direct_report
from adfunnel.sim.replay_openrtb import EXCHANGE_KEYS, OpenRtbReplayer
from adfunnel.sim.replay_openrtb_report import openrtb_report
from adfunnel.sim.replay_sales import sales_report
from adfunnel.sim.replayer import Replayer

#: Seconds the started server may take to answer /healthz.
START_TIMEOUT_S = 180.0


def run_replay(
    rows: list[LogRow],
    *,
    server: str | None = None,
    database_url: str | None = None,
    seed: int = 7,
    ctr_scale: float = 3.0,
    pctr_prior: float = 0.0005,
    speed: float | None = None,
    progress: Callable[[int], None] | None = None,
    workdir: Path | None = None,
    server_env: dict[str, str] | None = None,
    event_log: str | None = None,
    learn: bool = False,
    catalogue: int = 0,
    api_key: str | None = None,
    direct: bool = True,
    auto_bidding: str | None = None,
    openrtb: bool = False,
) -> dict[str, Any]:
    """Replay ``rows`` against ``server`` (with its admin key ``api_key``), or against a
    server started here (with an admin key of its own), and report.

    ``learn`` (not with ``server``; ValueError): click by :class:`AttributeClicks`, serve the days
    before the last, train a model on their served log, register it, serve the last day
    with it and report ``model`` (:mod:`adfunnel.sim.learn`).

    ``direct`` (the default) adds a guaranteed line and a sponsorship, their goal and
    budget sized from the rows' matching supply counted before the run, and reports
    ``direct_lines`` (:mod:`adfunnel.sim.replay_direct`; null without them).

    ``auto_bidding`` (``max_clicks`` or ``manual:<cpc micros>``; ValueError otherwise)
    adds the campaign of :mod:`adfunnel.sim.replay_auto` and reports ``auto_bidding``
    (:func:`~adfunnel.sim.replay_auto.auto_figures`; null without it).

    ``catalogue`` adds that many run-of-network CPC campaigns
    (:meth:`Replayer.create_catalogue`), so that requests have more candidates than the
    pre-rank keeps; with ``learn`` the started server then checks the pre-rank's recall
    on every model decision (``model.prerank_recall``).

    ``openrtb`` sells the nine campaigns over OpenRTB 2.6 instead, the replay playing
    the exchange (:mod:`adfunnel.sim.replay_openrtb`; no direct lines, no delivery
    judgement: the potential model is the select path's), and reports ``openrtb``
    (:mod:`adfunnel.sim.replay_openrtb_report`; null without it).

    The started server uses ``database_url`` (default: a SQLite file in ``workdir`` or a
    temporary directory), a manual clock, and ``pctr_prior`` as its prior click rate.
    Its event log is in memory, or NATS JetStream at ``event_log`` (a stream of this
    run's own, deleted afterwards, read by the server's aggregator thread).
    """
    import tempfile

    from adfunnel.sim.server_proc import ServerProcess

    if learn and server is not None:
        raise ValueError("--learn trains on the served log and ledger of the server the "
                         "replay starts: it cannot be used with --server")
    first, last = first_last(rows)
    mode = parse_mode(auto_bidding) if auto_bidding is not None else None
    auto_id: int | None = None
    lines = DirectSetup(rows) if direct and not openrtb else None  # sized before the run
    with tempfile.TemporaryDirectory() as tmp:
        work = workdir or Path(tmp)
        proc = None
        served_dir = work / "served-log"
        url = database_url or f"sqlite:///{work / 'replay.sqlite3'}"
        secret = None
        stream = f"ADFUNNEL_REPLAY_{secrets.token_hex(4).upper()}"
        if server is None:
            secret = secrets.token_hex(32)
            # every model decision with more candidates than the pre-rank keeps is checked
            recall_env = {"ADFUNNEL_RECALL_SAMPLE": "1.0"} if learn and catalogue else {}
            events_env = ({"ADFUNNEL_EVENT_LOG_URL": event_log, "ADFUNNEL_EVENT_STREAM": stream,
                           "ADFUNNEL_SPOOL_DIR": str(work / "spool")} if event_log else {})
            # a start-up deadline, not a measurement: a loaded machine starts slowly
            proc = ServerProcess(url, clock="manual", log_path=work / "server.log",
                                 timeout_s=START_TIMEOUT_S,
                                 extra_env={"ADFUNNEL_PCTR_PRIOR": str(pctr_prior),
                                            "ADFUNNEL_SEED": str(seed),
                                            # the iPinYou log's money: bids, budgets
                                            # and reports in CNY (fen x 10,000)
                                            "ADFUNNEL_CURRENCY": "CNY",
                                            "ADFUNNEL_SERVED_LOG_DIR": str(served_dir),
                                            "ADFUNNEL_TOKEN_SECRET": secret,
                                            # beacons come through this loopback "proxy"
                                            # with the log row's address
                                            "ADFUNNEL_TRUSTED_PROXIES": '["127.0.0.1/32"]',
                                            # the manual clock does not move between a
                                            # serve and its click: no delay to judge
                                            "ADFUNNEL_IVT_MIN_CLICK_DELAY_MS": "0",
                                            # rollups once per quarter-hour of the log:
                                            # the clock moves every request, and the
                                            # report reads the ledger
                                            "ADFUNNEL_ROLLUP_REFRESH_S": "900",
                                            # the lists the injected addresses come
                                            # from: the filter's recall on lists it
                                            # has not seen (adfunnel.sim.invalid)
                                            "ADFUNNEL_IVT_HELD_OUT_LISTS":
                                                json.dumps(HELD_OUT_PROVIDERS),
                                            **recall_env, **events_env,
                                            **(_openrtb_env() if openrtb else {}),
                                            **(server_env or {})})
            server = proc.url
            api_key = proc.admin_key
        kind = OpenRtbReplayer if openrtb else Replayer
        replayer = kind(server, seed=seed, ctr_scale=ctr_scale, speed=speed,
                        token_key=secret.encode() if secret else None, api_key=api_key)
        learned: dict[str, Any] | None = None
        try:
            replayer.http.put("/v1/admin/clock", json={"now": first.isoformat()})
            replayer.create_campaigns(first)
            if mode is not None:
                auto_id = create_auto(replayer, first, mode)
            if lines is not None:
                lines.create(replayer)
            replayer.create_catalogue(rows, first, catalogue)
            if learn:
                replayer.clicks = AttributeClicks(seed)
                before, last_day = split_last_day(rows)
                replayer.replay(before, progress)
                day_start = last_day[0].timestamp.replace(hour=0, minute=0, second=0,
                                                          microsecond=0)
                learned = train_and_register(replayer.http, served_dir, url, work / "model",
                                             day_start)
                replayer.replay(last_day, progress)
                learned["serving"] = replayer.http.get("/v1/serving/stats").json().get("model")
                learned["fallbacks"] = _fallbacks(replayer.http.get("/metrics").text)
                learned["last_day_decisions"] = len(last_day)
            else:
                replayer.replay(rows, progress)
            report = replay_report.report(replayer, first, last)
            report["delivery"] = None if openrtb else judge_delivery(
                report["campaigns"], replay_report.potential(replayer, rows, pctr_prior))
            report["openrtb"] = (openrtb_report(replayer, url if proc is not None else None)
                                 if isinstance(replayer, OpenRtbReplayer) else None)
            report["direct_lines"] = (direct_report(replayer, lines) if lines is not None
                                      else None)
            # last: it moves the server's clock past a rollup refresh
            report.update(sales_report(replayer, first, last))
        finally:
            replayer.close()
            if proc is not None:
                proc.stop()  # a graceful stop: the served log's queue is written out
                if event_log:
                    _delete_stream(event_log, stream)
        report["served_log"] = (replay_report.served_log_summary(served_dir, url, last, report)
                                if proc is not None else None)
        report["model"] = (replay_report.model_report(learned, served_dir, url, rows,
                                                      pctr_prior)
                           if learned is not None else None)
        if auto_id is not None:
            lam = served_lambda(served_dir, auto_id) if proc is not None else None
            report["auto_bidding"] = auto_figures(
                next(c for c in report["campaigns"] if c["campaign_id"] == auto_id), lam,
                sorted({r.timestamp.astimezone(CHINA).date().isoformat() for r in rows}))
        else:
            report["auto_bidding"] = None
        if proc is not None:
            measure_ivt(report["events"], replayer.injected, replayer.genuine, url)
        return report


def _openrtb_env() -> dict[str, str]:
    """The started server's OpenRTB settings: the three exchanges' keys (their names are
    the log's ``adexchange``, the ``exchange`` attribute campaigns target)."""
    return {"ADFUNNEL_OPENRTB_EXCHANGE_KEYS": json.dumps(EXCHANGE_KEYS)}


def _fallbacks(metrics: str) -> int:
    """Decisions that fell back to the pre-rank scores, from ``/metrics``."""
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith("adfunnel_model_fallback_total{")))


def _delete_stream(url: str, stream: str) -> None:
    """Remove the run's JetStream stream (its events are in the ledger by now)."""
    from adfunnel.events.jetstream_log import JetStreamEventLog

    log = JetStreamEventLog(url, stream=stream, subject_prefix=f"adfunnel.{stream.lower()}")
    try:
        log.delete_stream()
    finally:
        log.close()


def first_last(rows: list[LogRow]) -> tuple[datetime, datetime]:
    return rows[0].timestamp, rows[-1].timestamp
