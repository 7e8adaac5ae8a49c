"""``adfunnel bench events`` on the real PostgreSQL and JetStream, tiny: the result's
shape, every figure measured, and nothing left behind (speed is never asserted)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import pytest
from sqlalchemy import Engine, text
from typer.testing import CliRunner

from adfunnel.bench.beacon_load import BeaconLoad, Target, share
from adfunnel.bench.events_setup import CLICK_EVERY, bench_events
from adfunnel.cli import app
from adfunnel.events.model import EventType, decode, encode

pytestmark = [pytest.mark.postgres, pytest.mark.nats, pytest.mark.e2e]

TARGETS = (Target(1, 1, "CPM", 2_000_000), Target(2, 2, "CPC", 300_000))


def _streams(nats_url: str) -> list[str]:
    async def names() -> list[str]:
        nc = await nats.connect(nats_url)
        try:
            return [s.config.name for s in await nc.jetstream().streams_info()]
        finally:
            await nc.close()

    return asyncio.run(names())


def _schemas(pg_admin: Engine, name: str) -> list[str]:
    with pg_admin.connect() as conn:
        return list(conn.execute(text("select nspname from pg_namespace where nspname = :n"),
                                 {"n": name}).scalars())


@pytest.mark.parametrize("total, parts", [(64, 1), (64, 3), (5, 4), (7, 7)])
def test_shares_cover_the_range_once(total: int, parts: int) -> None:
    covered = [m for i in range(parts) for m in share(total, parts, i)]
    assert covered == list(range(total))


def test_a_load_is_checked() -> None:
    with pytest.raises(ValueError):
        BeaconLoad("http://x:1", "s" * 32, TARGETS, "p", connections=1, processes=2)
    with pytest.raises(ValueError):
        BeaconLoad("http://x:1", "s" * 32, (), "p")
    assert BeaconLoad("http://x:1", "s" * 32, TARGETS, "p", duration_s=2,
                      rate_per_s=5).beacons() == 10


def test_the_prefilled_events_are_valid_impressions_and_clicks_on_them() -> None:
    events = bench_events(TARGETS, 3 * CLICK_EVERY, "r1a")
    assert len(events) == 3 * CLICK_EVERY
    clicks = [(i, e) for i, e in enumerate(events) if e.event_type is EventType.CLICK]
    assert len(clicks) == 3
    for i, click in clicks:
        before = events[i - 1]
        assert before.event_type is EventType.IMPRESSION
        assert (click.impression_id, click.campaign_id) == (before.impression_id,
                                                            before.campaign_id)
    assert len({e.msg_id for e in events}) == len(events)
    assert all(decode(encode(e)) == e for e in events)


def test_a_tiny_run_measures_every_figure_and_leaves_nothing(
    pg_url: str, pg_admin: Engine, nats_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "events.json"
    res = CliRunner().invoke(app, [
        "bench", "events", "--database-url", pg_url, "--event-log", nats_url,
        "--campaigns", "4", "--events", "60", "--duration-s", "1", "--connections", "4",
        "--client-processes", "1", "--tokens", "300", "--lag-rate", "40", "--lag-duration-s", "1",
        "--drain-timeout-s", "60", "--json", str(out)])
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    for key in ("tracker_beacons_per_s", "baseline_204_per_s", "tracker_ratio",
                "aggregator_events_per_s", "lag_p50_ms", "lag_p99_ms"):
        assert isinstance(r[key], float) and r[key] > 0, key
    assert r["tracker_ratio"] == pytest.approx(
        r["tracker_beacons_per_s"] / r["baseline_204_per_s"], rel=1e-2)
    assert r["lag_p99_ms"] >= r["lag_p50_ms"]
    floors = r["floors"]
    # nats-py alone received every pre-filled event and published as many, for a cost
    # per event below the aggregator's and the tracker's own (they do it and more)
    assert floors["receive"]["events"] == floors["publish"]["events"] == 60
    for key in ("nats_publish_cpu_us", "nats_receive_cpu_us", "tracker_cpu_us_per_beacon",
                "aggregator_cpu_us_per_event", "baseline_cpu_us_per_request"):
        assert isinstance(r[key], float) and r[key] > 0, key
    for side in ("tracker", "baseline"):
        assert r[side]["statuses"] == {"204": r[side]["answers"]} and r[side]["errors"] == 0
        assert r[side]["server_busy_cores"] > 0 and r[side]["client_busy_cores"] > 0
    agg = r["aggregator"]
    assert agg["recorded"] == agg["events"] == 60 and agg["duplicates"] == 0
    assert agg["outcomes"] == {"billed": 60}  # a click on a CPM impression bills 0
    lag = r["lag"]
    # each /i of a render-billed token appends its render event and its impression
    assert lag["drained"] and lag["recorded"] == lag["appended"] == 2 * lag["statuses"]["204"]
    assert lag["beacons"] == 40 and lag["statuses"]["204"] + lag["unsent"] == 40
    setup = r["setup"]
    assert setup["campaigns"] == 4 and setup["partitions"] == 16
    assert _schemas(pg_admin, setup["schema"]) == []
    assert not set(setup["streams"]) & set(_streams(nats_url))


def test_the_baseline_is_served_through_the_trackers_own_layers() -> None:
    """bench events compares the tracker's /i with a baseline served the same way: the
    request log, the arrival stamp, and /i a bare ASGI hot route that never enters
    Starlette (a Starlette-routed baseline paid the router the tracker skips)."""
    from starlette.testclient import TestClient

    from adfunnel.bench.baseline_server import baseline_app, no_content_asgi
    from adfunnel.observability.request_log import RequestLog
    from adfunnel.serving.deadline import ArrivalStamp

    app = baseline_app(access_log=True, access_log_beacons=False)
    assert isinstance(app, RequestLog) and isinstance(app.app, ArrivalStamp)
    assert app.app.hot == {("GET", "/i"): no_content_asgi}
    assert app.log is not None  # the tracker's access-log setting, passed through
    assert [r.path for r in app.app.app.routes] == ["/healthz"]  # /i is not routed
    with TestClient(app) as client:
        assert client.get("/i?t=x").status_code == 204
        assert client.get("/healthz").status_code == 204
