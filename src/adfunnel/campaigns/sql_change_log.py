"""The campaign store's change log on SQL: appending the change of a committed record
(announced by PostgreSQL's ``NOTIFY`` on :data:`CHANGE_CHANNEL`), reading the changes after
a ``seq``, and the last ``seq``.

One ``change_log`` row per write carries the whole new record
(:mod:`adfunnel.campaigns.codec`); ``committed_at`` is domain time, stored in UTC.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, func, insert, select, text

from adfunnel.campaigns import codec
from adfunnel.campaigns.model import ChangeRecord
from adfunnel.campaigns.tables import change_log

#: PostgreSQL NOTIFY channel carrying the seq of each committed change.
CHANGE_CHANNEL = "adfunnel_changes"


def append_change(conn: Connection, record: Any, now: datetime, entity_id: int, *,
                  pg: bool) -> ChangeRecord:
    """Append ``record``'s change in the caller's transaction (on PostgreSQL, ``pg``,
    also NOTIFY its seq at commit); the change as listeners receive it."""
    entity = codec.entity_of(record)
    seq = conn.execute(
        insert(change_log).values(
            entity=entity,
            entity_id=entity_id,
            version=record.version,
            payload=codec.dumps_payload(record),
            committed_at=now,
        )
    ).inserted_primary_key[0]
    if pg:  # delivered to listeners at commit; polling is the safety net
        conn.execute(text("SELECT pg_notify(:channel, :seq)"),
                     {"channel": CHANGE_CHANNEL, "seq": str(seq)})
    return ChangeRecord(int(seq), entity, entity_id, record.version, record, now)


def changes_after(conn: Connection, seq: int, limit: int) -> list[ChangeRecord]:
    """Committed changes with ``seq`` greater than ``seq``, ascending, at most ``limit``."""
    stmt = (
        select(change_log).where(change_log.c.seq > seq).order_by(change_log.c.seq).limit(limit)
    )
    rows = conn.execute(stmt).mappings().all()
    return [_change_record(r) for r in rows]


def status_before(conn: Connection, campaign_id: int, status: str) -> str | None:
    """The status campaign ``campaign_id`` had before it last took ``status``: walking its
    changes newest first, the first other one (None if it never had another). The log
    keeps every version whole, so this is read from what was written, not guessed."""
    payloads = conn.execute(
        select(change_log.c.payload)
        .where((change_log.c.entity == "campaign") & (change_log.c.entity_id == campaign_id))
        .order_by(change_log.c.version.desc())).scalars()
    for payload in payloads:
        found = codec.from_payload("campaign", payload).status
        if found != status:
            return str(found)
    return None


def last_seq(conn: Connection) -> int:
    """The highest committed ``seq`` (0 for an empty log)."""
    return int(conn.execute(select(func.coalesce(func.max(change_log.c.seq), 0))).scalar_one())


def _change_record(row: Mapping[str, Any]) -> ChangeRecord:
    at = row["committed_at"]
    if at.tzinfo is None:  # SQLite drops the offset; the store always writes UTC
        at = at.replace(tzinfo=UTC)
    record = codec.from_payload(row["entity"], row["payload"])
    return ChangeRecord(
        int(row["seq"]), row["entity"], int(row["entity_id"]), int(row["version"]), record, at
    )


