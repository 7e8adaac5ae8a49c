"""The recalibration job: served log ⋈ ledger over a window, factors fitted and published.

Off the request path, on the process's periodic machinery (hourly by default,
``recalibration_s`` of the injected clock; ``runtime/embedded.py`` schedules it), each
run:

1. writes out the served log's queue and compacts its closed hours (grace 0: an hour is
   rebuilt when a late record grows its raw file, so nothing is lost by compacting early);
2. joins the decisions of [now − ``window_s``, now − ``click_delay_s``) with the ledger's
   billed rows (:func:`~adfunnel.learn.query.join_served_with_billed`; invalid traffic
   never reaches the ledger): the last ``click_delay_s`` are left out, as their clicks
   may not be billed yet and would read as misses;
3. sums, per (model version, placement), the raw model pCTR of the winners with a billed
   impression (predicted clicks) and the billed clicks among them (observed) — the raw
   pCTR, not the used one, so a factor never feeds on itself;
4. fits the factors (:func:`~adfunnel.prediction.recalibration.fit`) and publishes them
   to the scorer (:class:`~adfunnel.prediction.published.PublishedFactors`).

A run that fails (the database away, a file being replaced) is logged by the scheduler
and the factors in use stay until the next run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine

from adfunnel.clock import Clock
from adfunnel.events.compactor import compact
from adfunnel.learn.query import billed_events, join_served_with_billed
from adfunnel.prediction.published import PublishedFactors
from adfunnel.prediction.recalibration import Evidence, FactorTable, fit

#: Default window of decisions each run reads, seconds (a day: a version's bias is
#: mostly steady, and a small placement needs the clicks of many hours).
WINDOW_S = 86_400.0
#: Default seconds before now whose decisions are left out (their clicks may be on the way).
CLICK_DELAY_S = 300.0


def evidence_of(joined: pa.Table) -> dict[tuple[str, str], Evidence]:
    """Per (model version, placement) of joined rows (the trainer's input): billed
    impressions the model scored (raw ``model_pctr`` known), Σ raw pCTR, billed clicks."""
    scored = joined.filter(pc.field("impressed") & pc.field("model_pctr").is_valid())
    if scored.num_rows == 0:
        return {}
    rows = scored.select(["model_version", "placement", "model_pctr", "clicked"])
    rows = rows.set_column(3, "clicked", pc.cast(rows.column("clicked"), pa.int64()))
    grouped = rows.group_by(["model_version", "placement"]).aggregate(
        [("model_pctr", "count"), ("model_pctr", "sum"), ("clicked", "sum")])
    return {(g["model_version"], g["placement"]):
            Evidence(int(g["model_pctr_count"]), float(g["model_pctr_sum"]),
                     int(g["clicked_sum"]))
            for g in grouped.to_pylist()}


class RecalibrationJob:
    """One run per :meth:`run` (module doc).

    Args:
        directory: the served log's directory.
        engine: the ledger's database.
        clock: the injected clock (the window ends at its now).
        published: where serving reads the factors.
        flush: writes out the served log's queue before a run (None: nothing to wait for).
        window_s, click_delay_s: the window of decisions read, seconds (module doc).
    """

    def __init__(self, directory: str | os.PathLike[str], engine: Engine, clock: Clock,
                 published: PublishedFactors, *, flush: Callable[[], object] | None = None,
                 window_s: float = WINDOW_S, click_delay_s: float = CLICK_DELAY_S) -> None:
        if window_s <= click_delay_s or click_delay_s < 0:
            raise ValueError("window_s must exceed click_delay_s >= 0")
        self.directory, self.engine, self.clock = directory, engine, clock
        self.published, self.flush = published, flush
        self.window_s, self.click_delay_s = window_s, click_delay_s

    def run(self) -> FactorTable:
        """Fit the factors of the window ending now and publish them; the table."""
        now = self.clock.now()
        since = now - timedelta(seconds=self.window_s)
        until = now - timedelta(seconds=self.click_delay_s)
        if self.flush is not None:
            self.flush()
        compact(self.directory, now, grace_s=0.0)
        table = fit(self.evidence(since, until))
        self.published.publish(table, now, (since, until))
        return table

    def evidence(self, since: datetime, until: datetime) -> dict[tuple[str, str], Evidence]:
        """The evidence of decisions in [since, until), their billed rows joined."""
        billed = billed_events(self.engine, since=since)  # clicks come after their serve
        return evidence_of(join_served_with_billed(self.directory, billed,
                                                   since=since, until=until))
