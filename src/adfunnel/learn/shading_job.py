"""The shading job: ``adfunnel model shading-fit`` on the server's own schedule (issue #27).

Off the request path, on the process's periodic machinery (every ``shading_fit_s`` of
the injected clock when set; ``runtime/embedded.py`` schedules it, as it does the
recalibration job), each run does what the command and its registration do:

1. writes out the served log's queue and compacts its closed hours;
2. fits the win curves of the served log's last ``shading_fit_days`` days (UTC, up to
   the clock's now), with the ledger's OpenRTB win and loss notices
   (:func:`~adfunnel.learn.shading_fit.fit_release`, as ``--database-url`` gives the
   command);
3. unless the fit is the active release already (the version is a content hash: the
   same curves, the same version), writes it to ``<shading_release_dir>/<version>/``
   and registers it as the active ``shading`` release
   (:meth:`~adfunnel.campaigns.sql_store.SqlCampaignStore.register_model`, as ``POST
   /v1/admin/models`` does): every ad server, this one included, loads it through the
   change log (``follow_model_releases``), as it loads the command's output.

A window with no price to beat fits nothing and keeps the active release. A run that
fails (the database away, a file being replaced) is logged by the scheduler; the
release in use stays until the next run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy import Engine

from adfunnel.bidding.shading import DEFAULT_MIN_OBSERVATIONS
from adfunnel.clock import Clock
from adfunnel.events.compactor import compact
from adfunnel.learn.shading_fit import NoObservations, fit_release, notice_prices
from adfunnel.prediction.shading_release import ShadingRelease

log = logging.getLogger(__name__)

#: Default days of the served log each run reads (the command's ``--days``).
FIT_DAYS = 7.0

#: Registers a release: (version, path, dataset, target) -> anything.
Register = Callable[[str, str, str, str], object]


class ShadingFitJob:
    """One fit per :meth:`run` (module doc).

    Args:
        directory: the served log's directory.
        engine: the ledger's database (its notices).
        clock: the injected clock (the window ends at its now).
        out: the directory releases are written under (one folder per version).
        register: registers a release (the campaign store's ``register_model``).
        active_version: the version of the active shading release (None: none).
        flush: writes out the served log's queue before a run (None: nothing to wait for).
        days: the window, days (> 0); min_observations: per segment before back-off (≥ 1).
    """

    def __init__(self, directory: str | os.PathLike[str], engine: Engine, clock: Clock,
                 out: str | os.PathLike[str], register: Register,
                 active_version: Callable[[], str | None], *,
                 flush: Callable[[], object] | None = None, days: float = FIT_DAYS,
                 min_observations: int = DEFAULT_MIN_OBSERVATIONS) -> None:
        if days <= 0 or min_observations < 1:
            raise ValueError("days must be > 0 and min_observations >= 1")
        self.directory, self.engine, self.clock = directory, engine, clock
        self.out, self.register, self.active_version = Path(out), register, active_version
        self.flush, self.days, self.min_observations = flush, days, min_observations

    def run(self) -> ShadingRelease | None:
        """Fit the window ending now; register the release when it is new. The release
        fitted (None: nothing to fit)."""
        now = self.clock.now()
        since = now - timedelta(days=self.days)
        if self.flush is not None:
            self.flush()
        compact(self.directory, now)
        try:
            release = fit_release(self.directory, since, now,
                                  min_observations=self.min_observations,
                                  notices=notice_prices(self.engine, since))
        except NoObservations as exc:
            log.info("shading fit: %s; the active release stays", exc)
            return None
        if release.version == self.active_version():
            return release
        path = self.out / release.version
        release.save(path)
        self.register(release.version, str(path), release.dataset, "shading")
        log.info("shading fit: release %s registered (%s observations)", release.version,
                 release.metrics.get("observations"))
        return release
