"""The replay's invalid-traffic figures, measured per event from the ledger after the run.

The replay labels every event it sent — (impression id, event type) — as genuine or as
injected from a named source (:mod:`adfunnel.sim.invalid`). Read back from the
``ledger`` (billed) and ``ledger_ivt`` (flagged, with its reason) tables:

- per source, the distinct events injected, flagged and billed: the filter's recall on
  each source is ``flagged / injected``;
- ``ivt_false_positives``: genuine events the server flagged, counted event by event
  (not the flagged total less the injected), over ``genuine_events``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

#: Impression ids per ``IN (...)`` query.
CHUNK = 500

Event = tuple[str | None, str]  # (impression id, event type)


def distinct_events(events: Iterable[Event]) -> list[Event]:
    """Each (impression id, event type) once — the server records an event once, however
    often its beacon is sent; beacons whose impression id is unknown (None) all count."""
    seen: set[tuple[str, str]] = set()
    out: list[Event] = []
    for iid, event in events:
        if iid is not None:
            if (iid, event) in seen:
                continue
            seen.add((iid, event))
        out.append((iid, event))
    return out


def measure_ivt(events: dict[str, Any], injected: list[tuple[str | None, str, str]],
                genuine: list[Event], database_url: str) -> None:
    """Fill ``events``' ``injected_by_source`` ({source: {"injected", "flagged",
    "billed"}}), ``injected_invalid_flagged``, ``injected_invalid_billed``,
    ``genuine_events`` and ``ivt_false_positives`` from the ledger at
    ``database_url``. ``injected`` holds (impression id, event type, source)."""
    by_source: dict[str, list[Event]] = defaultdict(list)
    for iid, event, source in injected:
        by_source[source].append((iid, event))
    by_source = {source: distinct_events(evs) for source, evs in sorted(by_source.items())}
    genuine = distinct_events(genuine)
    ids = {iid for evs in (*by_source.values(), genuine) for iid, _ in evs if iid is not None}
    billed, flagged = read_outcomes(ids, database_url)
    report: dict[str, dict[str, int]] = {}
    for source, evs in by_source.items():
        report[source] = {"injected": len(evs),
                          "flagged": sum(1 for e in evs if e in flagged),
                          "billed": sum(1 for e in evs if e in billed)}
    events["injected_by_source"] = report
    events["injected_invalid_flagged"] = sum(r["flagged"] for r in report.values())
    events["injected_invalid_billed"] = sum(r["billed"] for r in report.values())
    events["genuine_events"] = len(genuine)
    events["ivt_false_positives"] = sum(1 for e in genuine if e in flagged)


def read_outcomes(ids: set[str], database_url: str
                  ) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(billed, flagged): the (impression id, event type) pairs of ``ids`` that the
    ``ledger`` and the ``ledger_ivt`` tables hold."""
    from sqlalchemy import select

    from adfunnel.billing.tables import ledger, ledger_ivt
    from adfunnel.db import make_engine

    ordered = sorted(ids)
    found: tuple[set[tuple[str, str]], set[tuple[str, str]]] = (set(), set())
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            for table, out in zip((ledger, ledger_ivt), found, strict=True):
                for i in range(0, len(ordered), CHUNK):
                    q = select(table.c.impression_id, table.c.event_type).where(
                        table.c.impression_id.in_(ordered[i:i + CHUNK]))
                    out.update((r[0], str(r[1])) for r in conn.execute(q))
    finally:
        engine.dispose()
    return found
