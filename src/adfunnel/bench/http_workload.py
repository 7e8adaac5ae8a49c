"""The HTTP benchmark's workload: the catalogue database and the wire requests.

The catalogue (:func:`catalogue`, :func:`populate`) is a SQLite database holding ``ads``
campaigns of one ad each, written in bulk through the store's tables
(:mod:`adfunnel.campaigns.tables`), each record with its ``change_log`` row carrying the
same payload the store writes. Targeting is drawn from the iPinYou log's attribute
distributions exactly as ``adfunnel bench index --workload real`` draws it
(:func:`adfunnel.bench.index._real`: at most 200,000 distinct expressions, ads share
them); every ad is CPM, sized like the log's slots. The requests (:func:`select_body`)
are the same workload's rows (region, city, slot size, exchange, domain, OS, browser,
user tags; some moved to other provinces and given audiences, as the index benchmark
does) in the wire form of ``POST /v1/ads:select``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine

from adfunnel.bench.index import MAX_TEMPLATES, _real
from adfunnel.campaigns import codec
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import Ad, Advertiser, BidType, Campaign, Objective
from adfunnel.campaigns.tables import ads as ads_table
from adfunnel.campaigns.tables import advertisers, campaigns, change_log
from adfunnel.db import make_engine
from adfunnel.targeting.expr import All, Any_, Expr, In, Not, NotIn, parse_expr

#: Campaigns per advertiser in the generated catalogue.
CAMPAIGNS_PER_ADVERTISER = 10
#: Distinct request bodies the load generator cycles through.
REQUESTS = 2_000
#: Rows per bulk INSERT statement batch.
BATCH = 20_000
#: deadline_ms of every benchmark request (the server's default).
DEADLINE_MS = 100
SELECT_PATH = "/v1/ads:select"
TIME_ZONE = "Asia/Shanghai"
#: Slot sizes of the iPinYou log (the fallback stand-in's too), for ads' sizes.
_FALLBACK_SIZES = ("300x250", "728x90", "1000x90", "250x250")


# ---- the catalogue ----------------------------------------------------------------------


def _workload(ads: int, seed: int) -> tuple[list[Expr], list[dict[str, frozenset[str]]], str]:
    """Targeting templates and requests of the index benchmark's ``real`` workload."""
    rng = random.Random(seed)
    exprs, reqs, source = _real(rng, min(ads, MAX_TEMPLATES), REQUESTS, None)
    return exprs, reqs, source


def catalogue(path: Path, ads: int, seed: int,
              rewrite: Callable[[Expr], Expr] | None = None,
              ) -> tuple[str, list[dict[str, frozenset[str]]], str]:
    """(the SQLite URL of the catalogue at ``path``, the workload's requests, their
    source): the database is written (:func:`populate`, each targeting through
    ``rewrite`` first) unless it exists, when it is reused as it is."""
    url = f"sqlite:///{path}"
    exprs, reqs, source = _workload(ads, seed)
    if not path.exists():
        populate(make_engine(url), ads, [rewrite(e) for e in exprs] if rewrite else exprs,
                 reqs, seed)
    return url, reqs, source


def expr_json(expr: Expr) -> dict[str, Any]:
    """The targeting JSON of an expression tree (values sorted; the inverse of
    :func:`adfunnel.targeting.parse_expr`)."""
    if isinstance(expr, In):
        return {"attr": expr.attr, "in": sorted(expr.values)}
    if isinstance(expr, NotIn):
        return {"attr": expr.attr, "not_in": sorted(expr.values)}
    if isinstance(expr, Not):
        return {"not": expr_json(expr.child)}
    op = "all" if isinstance(expr, All) else "any"
    assert isinstance(expr, All | Any_)
    return {op: [expr_json(c) for c in expr.children]}


def targeting_text(expr: Expr) -> str:
    """Canonical stored text of ``expr``, checked by the API's own parser.

    Raises:
        TargetingError: an expression the advertiser API would refuse.
    """
    raw = expr_json(expr)
    parse_expr(raw)
    return json.dumps(raw, ensure_ascii=False, separators=(",", ":"))


def populate(engine: Engine, n: int, exprs: list[Expr], reqs: list[dict[str, frozenset[str]]],
             seed: int) -> None:
    """Migrate ``engine``'s database and write ``n`` active CPM campaigns of one approved
    ad each (one advertiser per :data:`CAMPAIGNS_PER_ADVERTISER`), each record with the
    ``change_log`` row the store would append, in one transaction.

    Rows are inserted with the DB-API's ``executemany`` on statements named after the
    tables' own columns, :data:`BATCH` records at a time; values are the codec's row and
    payload forms (:mod:`adfunnel.campaigns.codec`), built from one record per entity
    with the fields that differ replaced — the first record of each batch is checked
    against the codec's own output."""
    upgrade(engine)
    now = datetime.now(UTC)
    gen = np.random.default_rng(seed)
    texts = [targeting_text(e) for e in exprs]
    tmpl = gen.integers(0, len(exprs), size=n).tolist()
    bids = (np.round(gen.lognormal(0.0, 0.6, size=n) * 2_000_000).astype(np.int64)
            + 100_000).tolist()
    sizes = _ad_sizes(reqs, gen, n)
    start = (now - timedelta(days=1)).date()
    n_adv = -(-n // CAMPAIGNS_PER_ADVERTISER)
    makers = (
        ("advertiser", advertisers, n_adv, lambda i: Advertiser(i, f"bench-{i}")),
        ("campaign", campaigns, n, lambda i: _campaign(i, texts[tmpl[i - 1]], bids[i - 1],
                                                        start)),
        ("ad", ads_table, n, lambda i: _ad(i, *sizes[i - 1])),
    )
    writer = _BulkWriter(engine, now)
    with engine.begin() as conn:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        for entity, table, count, make in makers:
            for lo in range(1, count + 1, BATCH):
                records = [make(i) for i in range(lo, min(count, lo + BATCH - 1) + 1)]
                writer.write(cursor, entity, table, records)
        cursor.close()
    engine.dispose()


class _BulkWriter:
    """Positional rows of the entity tables and ``change_log`` for the DB-API cursor.

    Column values go through each column type's bind processor (dates and instants as
    SQLAlchemy stores them), once per distinct value kind; the varying fields of a
    record are plain strings and integers."""

    def __init__(self, engine: Engine, now: datetime) -> None:
        self.dialect = engine.dialect
        self.now = now
        self._proto: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}

    def write(self, cursor: Any, entity: str, table: Any, records: list[Any]) -> None:
        row0, payload0 = self._prototype(entity, records[0])
        names = codec.field_names(entity)
        cols = [*names, "updated_at"]
        rows = []
        payloads = []
        for r in records:
            values = {k: getattr(r, k) for k in _VARYING[entity]}
            rows.append(tuple({**row0, **values}[c] for c in cols))
            payloads.append(_dumps({**payload0, **values}))
        if payloads[0] != codec.dumps_payload(records[0]):
            raise AssertionError(f"{entity} payload differs from the store's")
        cursor.executemany(_insert_sql(table, cols), rows)
        log_cols = ["entity", "entity_id", "version", "payload", "committed_at"]
        at = self._bind(change_log, "committed_at", self.now)
        cursor.executemany(_insert_sql(change_log, log_cols),
                           [(entity, r.id, r.version, p, at) for r, p in zip(records, payloads,
                                                                              strict=True)])

    def _prototype(self, entity: str, record: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Bound column values and payload of a record, less what varies per record."""
        if entity not in self._proto:
            table = _TABLES[entity]
            names = codec.field_names(entity)
            row = codec.to_row(entity, {k: getattr(record, k) for k in names})
            row["updated_at"] = self.now
            bound = {k: self._bind(table, k, v) for k, v in row.items()}
            self._proto[entity] = (bound, codec.to_payload(record))
        return self._proto[entity]

    def _bind(self, table: Any, column: str, value: Any) -> Any:
        proc = table.c[column].type.dialect_impl(self.dialect).bind_processor(self.dialect)
        return value if proc is None or value is None else proc(value)


#: Fields of a generated record that differ between records (plain str or int values).
_VARYING = {
    "advertiser": ("id", "name"),
    "campaign": ("id", "advertiser_id", "name", "bid_micros", "targeting"),
    "ad": ("id", "campaign_id", "landing_url", "creative_ref", "width", "height"),
}
_TABLES = {"advertiser": advertisers, "campaign": campaigns, "ad": ads_table}


def _insert_sql(table: Any, cols: list[str]) -> str:
    names = ", ".join(table.c[c].name for c in cols)
    return f"INSERT INTO {table.name} ({names}) VALUES ({', '.join('?' * len(cols))})"


def _dumps(payload: dict[str, Any]) -> str:
    """As :func:`adfunnel.campaigns.codec.dumps_payload` writes a payload."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def _campaign(i: int, targeting: str, bid_micros: int, start: date) -> Campaign:
    """Campaign ``i``: CPM, a daily budget that never binds, running since ``start``."""
    return Campaign(
        id=i, advertiser_id=(i - 1) // CAMPAIGNS_PER_ADVERTISER + 1, name=f"bench-{i}",
        objective=Objective.IMPRESSIONS, bid_type=BidType.CPM, bid_micros=bid_micros,
        daily_budget_micros=10**12, time_zone=TIME_ZONE, flight_start=start,
        targeting=targeting)


def _ad(i: int, width: int, height: int) -> Ad:
    """Ad ``i`` of campaign ``i``: an approved banner whose creative is an https image
    (so an OpenRTB bid has markup to render: :mod:`adfunnel.openrtb.markup`)."""
    return Ad(id=i, campaign_id=i, landing_url=f"https://example.test/{i}",
              creative_ref=f"https://cdn.example.test/bench/{i}.png", format="banner",
              width=width, height=height)


def _ad_sizes(reqs: list[dict[str, frozenset[str]]], gen: np.random.Generator,
              n: int) -> list[tuple[int, int]]:
    """``n`` ad sizes drawn from the requests' slot sizes (as often as they occur)."""
    seen = [s for r in reqs for s in r.get("slot_size", ())] or list(_FALLBACK_SIZES)
    picked = gen.choice(np.array(seen), size=n)
    return [(int(w), int(h)) for w, h in (s.split("x") for s in picked.tolist())]


# ---- the requests -----------------------------------------------------------------------

#: Request attributes the server derives from placement and slots (not sent as user's).
_DERIVED = ("slot_size", "exchange", "domain", "placement")


def select_body(req: dict[str, frozenset[str]], n: int) -> bytes:
    """The wire form (JSON) of one workload request."""
    attrs: dict[str, Any] = {}
    for name, values in req.items():
        if name in _DERIVED:
            continue
        vals = sorted(values)
        attrs[name] = vals if name in ("interests", "audiences") else vals[0]
    w, h = next(iter(sorted(req.get("slot_size", {"300x250"})))).split("x")
    placement: dict[str, Any] = {"id": "ipinyou"}
    for name in ("exchange", "domain"):
        if req.get(name):
            placement[name] = min(req[name])
    return json.dumps({
        "user": {"key": f"u{n % 997}", "attributes": attrs},
        "placement": placement,
        "slots": [{"id": "s1", "position": 1, "width": int(w), "height": int(h)}],
        "deadline_ms": DEADLINE_MS,
    }, separators=(",", ":")).encode()
