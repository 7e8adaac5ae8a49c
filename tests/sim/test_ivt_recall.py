"""The replay's IVT figures read event by event from the ledger's two tables: recall per
injected source, and false positives among the events known to be genuine."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

from sqlalchemy import insert

from adfunnel.billing.tables import ledger, ledger_ivt
from adfunnel.campaigns.migrate import upgrade
from adfunnel.db import make_engine
from adfunnel.sim.ivt_recall import distinct_events, measure_ivt

AT = datetime(2013, 10, 19, tzinfo=UTC)


def _ledger_row(iid: str, event: str) -> dict:
    return {"impression_id": iid, "event_type": event, "campaign_id": 1, "ad_id": 1,
            "placement": "p", "billing_type": "CPM", "charge_micros": 1,
            "charge_millimicros": 1000, "billed_micros": 1, "absorbed_micros": 0,
            "day": date(2013, 10, 19), "occurred_at": AT}


def _ivt_row(iid: str, event: str, reason: str) -> dict:
    return {"impression_id": iid, "event_type": event, "reason": reason, "campaign_id": 1,
            "ad_id": 1, "placement": "p", "day": date(2013, 10, 19), "occurred_at": AT}


def test_recall_per_source_and_false_positives_are_counted_event_by_event(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.sqlite3'}"
    engine = make_engine(url)
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(insert(ledger), [_ledger_row("b1", "impression"),
                                      _ledger_row("g1", "impression"),
                                      _ledger_row("g1", "click")])
        conn.execute(insert(ledger_ivt), [_ivt_row("b2", "impression", "crawler_ua"),
                                          _ivt_row("d1", "impression", "datacenter_ip"),
                                          _ivt_row("d1", "click", "datacenter_ip"),
                                          _ivt_row("g2", "impression", "datacenter_ip"),
                                          # flagged, but neither injected nor genuine
                                          # (not sent by this replay): not a false positive
                                          _ivt_row("x9", "impression", "crawler_ua")])
    engine.dispose()
    injected = [("b1", "impression", "crawler_ua:bots"), ("b2", "impression", "crawler_ua:bots"),
                ("b2", "impression", "crawler_ua:bots"),  # a re-sent beacon: one event
                ("d1", "impression", "datacenter_ip:amazon"),
                ("d1", "click", "datacenter_ip:amazon")]
    genuine = [("g1", "impression"), ("g1", "click"), ("g2", "impression"),
               ("g3", "impression")]  # g3: dropped (neither billed nor flagged)
    events: dict = {"ivt_total": 99}  # the server's counter plays no part
    measure_ivt(events, injected, genuine, url)
    assert events["injected_by_source"] == {
        "crawler_ua:bots": {"injected": 2, "flagged": 1, "billed": 1},
        "datacenter_ip:amazon": {"injected": 2, "flagged": 2, "billed": 0}}
    assert events["injected_invalid_flagged"] == 3
    assert events["injected_invalid_billed"] == 1
    assert events["genuine_events"] == 4
    assert events["ivt_false_positives"] == 1  # g2 only


def test_distinct_events_keep_unknown_ids() -> None:
    assert distinct_events([("a", "click"), ("a", "click"), (None, "click"),
                            (None, "click")]) == [("a", "click"), (None, "click"),
                                                  (None, "click")]
