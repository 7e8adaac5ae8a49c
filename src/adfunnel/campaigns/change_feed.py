"""The change feed: keeps a read model of the campaigns (an ad server's catalog, the
tracker's read model) current by tailing the campaign change log.

DESIGN.md §Processes: each ad server boots from a snapshot and replays the change
log from its position. Records arrive in ``seq`` order from ``changes_since``; the
catalog applies a record only when its version is newer, so duplicates and overlaps
with local writes are harmless. On PostgreSQL a ``LISTEN`` wakes the reader as soon
as a change commits; a poll every ``poll_s`` seconds is the safety net (and the only
mechanism on SQLite).

Readiness: a process is *behind* by the time since it last reached the head of the
log; more than ``max_lag_s`` (5 s) behind it reports not-ready and takes no decisions.
"""

from __future__ import annotations

import logging
import threading
import time

from prometheus_client import Gauge, Histogram

from adfunnel.campaigns.readmodel import CampaignReadModel
from adfunnel.campaigns.sql_change_log import CHANGE_CHANNEL
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import Clock, SystemClock

log = logging.getLogger(__name__)

APPLY_LAG = Histogram(
    "adfunnel_change_apply_lag_seconds", "Commit-to-applied lag of change-log records",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0),
)
BEHIND = Gauge(
    "adfunnel_change_feed_behind_seconds", "Seconds since the feed last reached the head"
)
POSITION = Gauge("adfunnel_change_feed_position", "Last change-log seq applied")

BATCH = 1_000


class ChangeFeed:
    """A background reader of ``store``'s change log into ``catalog``.

    ``listen_dsn`` (a libpq URL) enables PostgreSQL LISTEN/NOTIFY wake-ups.
    """

    def __init__(
        self,
        store: SqlCampaignStore,
        catalog: CampaignReadModel,
        *,
        clock: Clock | None = None,
        poll_s: float = 0.25,
        max_lag_s: float = 5.0,
        listen_dsn: str | None = None,
    ) -> None:
        self.store = store
        self.catalog = catalog
        # commit-to-applied lag compares two domain times (the store stamps commits
        # with the injected clock); readiness below is measured in real seconds
        self.clock = clock or SystemClock()
        self.poll_s = poll_s
        self.max_lag_s = max_lag_s
        self.listen_dsn = listen_dsn
        self.caught_up_at = time.monotonic()
        self.last_apply_lag_s = 0.0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []

    def poll_once(self) -> int:
        """Apply every change after the catalog's position; returns how many were read."""
        read = 0
        while True:
            changes = self.store.changes_since(self.catalog.position, BATCH)
            now = self.clock.now()
            for change in changes:
                self.catalog.apply(change)
                lag = max(0.0, (now - change.committed_at).total_seconds())
                self.last_apply_lag_s = lag
                APPLY_LAG.observe(lag)
            read += len(changes)
            if len(changes) < BATCH:
                break
        self.caught_up_at = time.monotonic()
        POSITION.set(self.catalog.position)
        return read

    def behind_s(self) -> float:
        behind = time.monotonic() - self.caught_up_at
        BEHIND.set(behind)
        return behind

    def ready(self) -> bool:
        """True while the catalog is at most ``max_lag_s`` behind the log."""
        return self.behind_s() <= self.max_lag_s

    def start(self) -> None:
        self._threads.append(threading.Thread(target=self._run, name="change-feed", daemon=True))
        if self.listen_dsn:
            self._threads.append(
                threading.Thread(target=self._listen, name="change-listen", daemon=True)
            )
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # the database may be briefly away; readiness shows it
                log.exception("change feed poll failed")
            self._wake.wait(self.poll_s)
            self._wake.clear()

    def _listen(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(self.listen_dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANGE_CHANNEL}")
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self._wake.set()
            except Exception:
                log.warning("change feed LISTEN connection lost; retrying", exc_info=True)
                self._stop.wait(1.0)


def libpq_dsn(database_url: str) -> str | None:
    """The libpq URL of a PostgreSQL SQLAlchemy URL (None for other databases)."""
    for prefix in ("postgresql+psycopg://", "postgresql://"):
        if database_url.startswith(prefix):
            return "postgresql://" + database_url.removeprefix(prefix)
    return None
