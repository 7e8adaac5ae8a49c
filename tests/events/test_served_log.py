"""The served log end to end, from real decisions: the columnar and the reference
decider over a small catalogue → ServedLog (bounded queue, writer thread, raw hour
files) → compactor (hourly Parquet) → DuckDB queries, and the join with billed events
from the real SqlLedger on SQLite."""

from __future__ import annotations

import hashlib
import hmac
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from prometheus_client import REGISTRY

from adfunnel.billing.model import EventType, LedgerEvent, Outcome
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.billing.tables import (
    campaign_day_spend,
    campaign_spend,
    ledger,
    ledger_counters,
    ledger_held,
    ledger_ivt,
)
from adfunnel.budget.gate import LocalSpendGate
from adfunnel.campaigns.model import (
    Ad,
    Advertiser,
    BidType,
    Campaign,
    CampaignStatus,
    HouseAd,
    Objective,
    Placement,
    ReviewState,
)
from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.db import make_engine, metadata
from adfunnel.events.compactor import (
    SCHEMA,
    compact,
    compact_hour,
    parquet_path,
    raw_hours,
)
from adfunnel.events.served_log import ServedLog
from adfunnel.events.served_schema import ServedRecord, decode_record
from adfunnel.index import ConjunctionIndex
from adfunnel.learn.query import (
    billed_events,
    join_served_with_billed,
    query,
    query_table,
)
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.catalog import Catalog, Snapshot
from adfunnel.serving.decider import ColumnarDecider
from adfunnel.serving.decision import Decision, Placed
from adfunnel.serving.reference import ReferenceDecider
from adfunnel.serving.request import SelectRequest, decode_request
from adfunnel.serving.served_record import decision_source

SALT = b"served-log-test-salt"
START = datetime(2026, 3, 8, 9, 10, tzinfo=UTC)
USER = "user-key-in-clear-42"


class World:
    """A catalogue of five campaigns (CPM and CPC, one paused, one targeting golf fans)
    on one placement with a 728x90 house ad, and both deciders over it."""

    def __init__(self) -> None:
        today = START.date()
        interests = msgspec.json.encode({"attr": "interests", "in": ["golf"]}).decode()
        campaigns = [
            Campaign(1, 1, "cpm", Objective.IMPRESSIONS, BidType.CPM, 3_000_000, 10**9, "UTC",
                     today),
            Campaign(2, 2, "cpc", Objective.CLICKS, BidType.CPC, 1_000_000, 10**9, "UTC", today),
            Campaign(3, 3, "cpc-low", Objective.CLICKS, BidType.CPC, 200_000, 10**9, "UTC",
                     today),
            Campaign(4, 1, "paused", Objective.CLICKS, BidType.CPC, 9_000_000, 10**9, "UTC",
                     today, status=CampaignStatus.PAUSED),
            Campaign(5, 4, "golf", Objective.CLICKS, BidType.CPC, 800_000, 10**9, "UTC", today,
                     targeting=interests),
        ]
        ads = [Ad(10 + c.id, c.id, "https://x.test/", f"cr/{c.id}", "banner", 300, 250,
                  ReviewState.APPROVED) for c in campaigns]
        placement = Placement("feed", "feed",
                              house_ad=HouseAd("house.png", "https://h.test/", "banner", 728, 90))
        self.catalog = Catalog.shaped(factory=ConjunctionIndex)
        self.catalog.load(Snapshot([Advertiser(i, f"a{i}") for i in range(1, 5)], campaigns,
                                   ads, 0, [placement]))
        self.ctr = SmoothedCtr(0.01, 100.0)
        for _ in range(200):
            self.ctr.observe_impression(12, "feed")
        for _ in range(6):
            self.ctr.observe_click(12, "feed")
        self.clock = ManualClock(START)
        self.gate = LocalSpendGate()
        key = b"k" * 32
        self.columnar = ColumnarDecider(self.catalog, self.gate, self.ctr, self.clock, key)
        self.reference = ReferenceDecider(self.catalog, self.gate, self.ctr, self.clock, key)

    def decide(self, i: int, *, explain: bool = False, golf: bool = False) -> tuple[
            Decision, SelectRequest]:
        """Request ``r<i>``: two 300x250 slots and a 728x90 one (the house ad's)."""
        body = {
            "request_id": f"r{i:03d}", "explain": explain,
            "user": {"key": f"{USER}-{i % 3}", "attributes": {
                "geo.country": "US", "interests": ["golf"] if golf else ["cars", "wine"]}},
            "placement": {"id": "feed", "exchange": "x1", "domain": "news.test"},
            "slots": [{"id": "top", "position": 1, "width": 300, "height": 250},
                      {"id": "side", "position": 2, "width": 300, "height": 250},
                      {"id": "bar", "position": 3, "width": 728, "height": 90}],
        }
        req = decode_request(msgspec.json.encode(body))
        decider = self.reference if explain else self.columnar
        decision = decider.decide(req, f"r{i:03d}", monotonic_ms() + 60_000)
        decider.commit(decision)
        return decision, req


@pytest.fixture
def world() -> World:
    return World()


def _served_log(directory: Path, world: World, **kwargs: object) -> ServedLog:
    return ServedLog(directory, world.clock, salt=SALT, writer_id="w1", **kwargs)  # type: ignore[arg-type]


def _record_hours(world: World, log: ServedLog) -> list[tuple[Decision, SelectRequest]]:
    """Thirteen decisions in the 09:00 hour and seven in the 10:00 hour (two of them
    explain requests through the reference path, two from golf fans)."""
    made = []
    for i in range(20):
        world.clock.set(START + timedelta(minutes=4 * i))  # 09:10 … 10:26
        d, req = world.decide(i, explain=i in (3, 15), golf=i in (4, 16))
        assert log.record(decision_source(d, req, pacing_rate=world.gate.pacing_rate))
        made.append((d, req))
    return made


@pytest.mark.slow
def test_records_round_trip_through_hourly_parquet(tmp_path: Path, world: World) -> None:
    log = _served_log(tmp_path, world)
    made = _record_hours(world, log)
    log.close()
    assert (log.written, log.dropped) == (20, 0)
    hours = raw_hours(tmp_path)
    assert sorted(hours) == [("2026-03-08", "09"), ("2026-03-08", "10")]
    assert [p.name for p in hours[("2026-03-08", "09")]] == ["09.w1.jsonl"]

    report = compact(tmp_path, START.replace(hour=11, minute=10))
    assert report.written == [("2026-03-08", "09"), ("2026-03-08", "10")]
    assert (report.rows, report.bad_lines) == (20, 0)
    assert parquet_path(tmp_path, ("2026-03-08", "09")).is_file()

    assert query(tmp_path, "SELECT hour, count(*) FROM served GROUP BY hour ORDER BY hour") \
        == [(9, 13), (10, 7)]
    rows = query_table(tmp_path, "SELECT * FROM served ORDER BY request_id").to_pylist()
    assert [r["request_id"] for r in rows] == [d.request_id for d, _ in made]
    for row, (d, req) in zip(rows, made, strict=True):
        assert row["time"] == pytest.approx(
            (START + timedelta(minutes=4 * int(d.request_id[1:]))).timestamp())
        assert str(row["date"]) == "2026-03-08"
        assert row["index_version"] == d.index_version
        assert dict(row["reason_counts"]) == d.rejection_counts()
        assert row["rejections_total"] == len(d.rejections)
        assert row["placement"] == "feed" and row["domain"] == "news.test"
        assert dict(row["attributes"])["interests"] == req.user.attributes["interests"]
        assert [s["id"] for s in row["slots"]] == ["top", "side", "bar"]
        assert row["house_slots"] == [h.slot_id for h in d.house] == ["bar"]
        assert row["exploration"] is None and row["model_version"] is None
        won = [(w["slot_id"], w["impression_id"], w["ad_id"], w["campaign_id"],
                w["price_micros"], w["charge_micros"], w["pctr"], w["total_micros"],
                w["pacing_p"], w["tier"]) for w in row["winners"]]
        assert won == [(p.win.slot_id, p.served.impression_id, p.ad.id, p.campaign.id,
                        p.win.price_micros, p.charge_micros, p.win.candidate.pctr,
                        p.win.candidate.total, 1.0, "auction") for p in d.placed]
        assert len(won) == 2
    # the paused campaign is a rejection in every decision; explain ones name each ad
    assert all(dict(r["reason_counts"]).get("paused") == 1 for r in rows)
    explained = [r for r in rows if r["request_id"] in ("r003", "r015")]
    assert all({(x["ad_id"], x["reason"]) for x in r["rejections"]} >= {(14, "paused")}
               for r in explained)
    assert all(r["rejections"] == [] for r in rows if r not in explained)
    # the golf campaign wins only for golf fans
    assert query(tmp_path, "SELECT DISTINCT request_id FROM served, unnest(winners) AS t(w) "
                           "WHERE w.campaign_id = 5 ORDER BY 1") == [("r004",), ("r016",)]


def test_records_written_before_tiers_read_with_a_null_tier(tmp_path: Path,
                                                            world: World) -> None:
    """An hour compacted before winners had a tier and one after it read as one table
    (DuckDB unions the files by name); the old winners' tier is null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    log = _served_log(tmp_path, world)
    _record_hours(world, log)
    log.close()
    compact(tmp_path, START.replace(hour=11, minute=10))
    old = parquet_path(tmp_path, ("2026-03-08", "09"))
    table = pq.read_table(old)
    i = table.schema.get_field_index("winners")
    fields = [f for f in table.schema.field(i).type.value_type if f.name != "tier"]
    winners = pa.array([[{f.name: w[f.name] for f in fields} for w in ws]
                        for ws in table.column(i).to_pylist()], pa.list_(pa.struct(fields)))
    pq.write_table(table.set_column(i, "winners", winners), old)
    got = query(tmp_path, "SELECT hour, w.tier, count(*) FROM served, unnest(winners) AS t(w)"
                          " GROUP BY ALL ORDER BY 1")
    assert got == [(9, None, 26), (10, "auction", 14)]


def test_raw_lines_decode_into_the_record_type(tmp_path: Path, world: World) -> None:
    log = _served_log(tmp_path, world, max_rejections=1)
    d, req = world.decide(1, explain=True)
    log.record(decision_source(d, req, exploration=True, propensities={"top": 0.25},
                               model_version="m7"))
    log.flush()
    (path,) = next(iter(raw_hours(tmp_path).values()))
    rec = decode_record(path.read_bytes().splitlines()[0])
    assert isinstance(rec, ServedRecord)
    assert rec.exploration is True and rec.model_version == "m7"
    assert [w.propensity for w in rec.winners] == [0.25, None]
    assert [w.pacing_p for w in rec.winners] == [None, None]  # no pacing_rate given
    assert len(rec.rejections) == 1 and rec.rejections_total == len(d.rejections) > 1
    log.close()


def test_schema_names_every_record_field() -> None:
    assert SCHEMA.names == list(ServedRecord.__struct_fields__)


def test_the_user_key_is_never_stored_in_clear(tmp_path: Path, world: World) -> None:
    log = _served_log(tmp_path, world)
    made = _record_hours(world, log)
    log.close()
    compact(tmp_path, START + timedelta(days=1))
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert USER.encode() not in stored
    hashes = [h for (h,) in query(tmp_path, "SELECT user_hash FROM served ORDER BY request_id")]
    expected = [hmac.new(SALT, str(req.user.key).encode(), hashlib.sha256).hexdigest()
                for _, req in made]
    assert hashes == expected
    assert len(set(hashes)) == 3  # three users: the same key hashes alike
    other = ServedLog(tmp_path / "other", world.clock, salt=b"another salt")
    other.record(decision_source(*made[0]))
    other.close()
    (line,) = next(iter(raw_hours(tmp_path / "other").values()))[0].read_bytes().splitlines()
    assert decode_record(line).user_hash != hashes[0]  # keyed by the salt


@pytest.mark.slow
def test_compaction_is_idempotent_and_leaves_open_hours(tmp_path: Path, world: World) -> None:
    log = _served_log(tmp_path, world)
    _record_hours(world, log)
    log.flush()
    # at 10:30 the 09:00 hour is closed (+ grace), 10:00 is still being written
    first = compact(tmp_path, START.replace(hour=10, minute=30), grace_s=60)
    assert first.written == [("2026-03-08", "09")] and first.still_open == [("2026-03-08", "10")]
    part = parquet_path(tmp_path, ("2026-03-08", "09"))
    before = (part.read_bytes(), part.stat().st_mtime_ns)
    again = compact(tmp_path, START.replace(hour=12), grace_s=60)
    assert again.unchanged == [("2026-03-08", "09")] and again.written == [("2026-03-08", "10")]
    assert (part.read_bytes(), part.stat().st_mtime_ns) == before
    assert compact_hour(tmp_path, ("2026-03-08", "09")) is None
    assert compact(tmp_path, START.replace(hour=12)).written == []
    assert query(tmp_path, "SELECT count(*) FROM served") == [(20,)]
    assert not [p for p in part.parent.iterdir() if p.name != part.name]  # no temp left

    # a late record of a compacted hour (a stalled writer) rebuilds that hour
    world.clock.set(START.replace(hour=12))
    late = ServedLog(tmp_path, ManualClock(START.replace(minute=59)), salt=SALT,
                     writer_id="w2")  # records at 09:59, into a file of its own
    d, req = world.decide(99)
    late.record(decision_source(d, req))
    late.close()
    assert compact(tmp_path, START.replace(hour=13)).written == [("2026-03-08", "09")]
    assert query(tmp_path, "SELECT count(*) FROM served WHERE hour = 9") == [(14,)]
    log.close()


def test_a_pass_over_unchanged_hours_opens_no_parquet_file(
        tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once this process built or checked an hour, a later pass over it reads only the
    raw files' sizes. Red when every pass opens each hour's Parquet footer again (the
    cost grew with the log). A deleted Parquet file is rebuilt all the same."""
    from adfunnel.events import compactor
    log = _served_log(tmp_path, world)
    _record_hours(world, log)
    log.flush()
    at = START.replace(hour=12)
    assert len(compact(tmp_path, at).written) == 2
    opened: list[Path] = []
    real = compactor._sources
    monkeypatch.setattr(compactor, "_sources", lambda p: opened.append(p) or real(p))
    assert len(compact(tmp_path, at).unchanged) == 2 and opened == []
    part = parquet_path(tmp_path, ("2026-03-08", "09"))
    part.unlink()
    assert compact(tmp_path, at).written == [("2026-03-08", "09")]
    assert query(tmp_path, "SELECT count(*) FROM served") == [(20,)]
    log.close()


def test_torn_lines_are_skipped_and_the_writer_starts_a_new_line(
        tmp_path: Path, world: World) -> None:
    log = _served_log(tmp_path, world)
    d, req = world.decide(1)
    log.record(decision_source(d, req))
    log.close()
    (path,) = next(iter(raw_hours(tmp_path).values()))
    with open(path, "ab") as f:
        f.write(b'{"request_id": "torn", "ti')  # a crash in the middle of a line
    again = _served_log(tmp_path, world)  # the same writer id, after a restart
    d2, req2 = world.decide(2)
    again.record(decision_source(d2, req2))
    again.close()
    report = compact(tmp_path, START + timedelta(hours=2))
    assert (report.rows, report.bad_lines) == (2, 1)
    assert query(tmp_path, "SELECT request_id FROM served ORDER BY 1") == [("r001",), ("r002",)]


def _dropped_metric(reason: str) -> float:
    value = REGISTRY.get_sample_value("adfunnel_served_log_dropped_total", {"reason": reason})
    return value or 0.0


@pytest.mark.slow
def test_a_full_queue_drops_and_counts_without_blocking(tmp_path: Path, world: World) -> None:
    log = _served_log(tmp_path, world, max_queue=3)
    made = [world.decide(i) for i in range(10)]
    metric_before = _dropped_metric("queue_full")
    with log.paused():  # the test hook: the writer parks, the queue only fills
        accepted = [log.record(decision_source(d, req)) for d, req in made]
        with pytest.raises(TimeoutError):
            log.flush(timeout_s=0.2)  # nothing can be written while parked
    assert accepted == [True] * 3 + [False] * 7
    assert log.dropped == 7
    assert _dropped_metric("queue_full") - metric_before == 7
    log.flush()
    assert log.written == 3
    log.close()
    assert log.record(decision_source(*made[0])) is False  # closed: dropped, counted
    assert log.dropped == 8
    compact(tmp_path, START + timedelta(hours=2))
    assert query(tmp_path, "SELECT request_id FROM served ORDER BY 1") == [
        ("r000",), ("r001",), ("r002",)]


def test_threads_record_at_once(tmp_path: Path, world: World) -> None:
    made = [world.decide(i) for i in range(40)]
    log = _served_log(tmp_path, world, max_queue=1_000)
    go = threading.Barrier(4)

    def worker(part: list[tuple[Decision, SelectRequest]]) -> None:
        go.wait()
        for d, req in part:
            assert log.record(decision_source(d, req))

    threads = [threading.Thread(target=worker, args=(made[k::4],)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    assert (log.written, log.dropped) == (40, 0)
    compact(tmp_path, START + timedelta(hours=2))
    assert query(tmp_path, "SELECT count(DISTINCT request_id) FROM served") == [(40,)]


def test_an_empty_directory_has_an_empty_served_view(tmp_path: Path) -> None:
    assert query(tmp_path, "SELECT count(*) FROM served") == [(0,)]
    assert join_served_with_billed(tmp_path, []).num_rows == 0


@pytest.mark.slow
def test_served_log_joined_with_billed_events_from_the_ledger(
        tmp_path: Path, world: World) -> None:
    log = _served_log(tmp_path, world)
    made = [world.decide(i) for i in range(3)]
    for d, req in made:
        log.record(decision_source(d, req, pacing_rate=world.gate.pacing_rate))
    log.close()
    compact(tmp_path, START + timedelta(hours=2))

    engine = make_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    metadata.create_all(engine, tables=[ledger, campaign_day_spend, campaign_spend,
                                        ledger_counters, ledger_ivt, ledger_held])
    book = SqlLedger(engine)
    clicked = next(p for p in made[1][0].placed if p.campaign.bid_type is BidType.CPC)
    shown = next(p for p in made[0][0].placed if p.campaign.bid_type is BidType.CPM)

    def bill(p: Placed, kind: EventType) -> None:
        at = START + timedelta(minutes=1)
        cpm = p.campaign.bid_type is BidType.CPM
        billable = EventType.IMPRESSION if cpm else EventType.CLICK
        charge = p.win.price_micros if kind is billable else 0
        ev = LedgerEvent(p.served.impression_id, kind, p.campaign.id, p.ad.id, "feed",
                         p.campaign.bid_type.value, charge, at, at.date(),
                         charge_per_mille=cpm)
        assert book.record(ev, 10**9).outcome is Outcome.BILLED

    bill(clicked, EventType.IMPRESSION)
    bill(clicked, EventType.CLICK)
    bill(shown, EventType.IMPRESSION)

    billed = billed_events(engine)
    assert billed.num_rows == 3
    rows = join_served_with_billed(tmp_path, billed).to_pylist()
    winners = [(d.request_id, p.win.slot_id) for d, _ in made for p in d.placed]
    assert [(r["request_id"], r["slot_id"]) for r in rows] == winners  # one row per winner
    by_imp = {r["impression_id"]: r for r in rows}
    assert len(by_imp) == len(rows)
    hit = by_imp[clicked.served.impression_id]
    assert (hit["impressed"], hit["clicked"], hit["billed_micros"]) == (
        True, True, clicked.win.price_micros)
    assert hit["pctr"] == clicked.win.candidate.pctr and hit["pacing_p"] == 1.0
    seen = by_imp[shown.served.impression_id]
    assert (seen["impressed"], seen["clicked"]) == (True, False)
    assert seen["billed_micros"] == shown.win.price_micros // 1000 > 0  # CPM: per mille
    assert sum(r["clicked"] for r in rows) == 1
    assert sum(r["impressed"] for r in rows) == 2

    # billed rows that carry the IVT flag: the flagged winner leaves the training rows
    flagged = billed.append_column(
        "ivt", [[imp == clicked.served.impression_id
                 for imp in billed.column("impression_id").to_pylist()]])
    kept = join_served_with_billed(tmp_path, flagged).to_pylist()
    assert len(kept) == len(rows) - 1
    assert clicked.served.impression_id not in {r["impression_id"] for r in kept}

    # a window on decision time
    after = START + timedelta(seconds=1)
    assert join_served_with_billed(tmp_path, billed, since=after).num_rows == 0
    with pytest.raises(ValueError, match="billed_micros"):
        join_served_with_billed(tmp_path, [{"impression_id": "x", "event_type": "click"}])
