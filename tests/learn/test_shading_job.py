"""The shading fit scheduled in the server (#27): on a manual clock, each ``shading_fit_s``
the embedded runtime fits the served log's window, registers a new release as the
command's output would be registered, and serves with it; the period is validated at
start-up."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.clock import ManualClock
from adfunnel.learn.shading_fit import fit_release, notice_prices
from adfunnel.runtime.embedded import build_runtime
from adfunnel.settings import SettingsError, load_settings
from tests.learn.test_shading_fit import _record, _write
from tests.serving.conftest import START

HOUR = 3600.0


def _settings(tmp_path: Path, **more: object):
    return load_settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite3'}", clock="manual",
                         token_secret="k" * 32, budget="local", ivt=False, ivt_tier2=False,
                         served_log_dir=str(tmp_path / "served"), **more)


def _prices(directory: Path, first: int, at, price: float, n: int = 300) -> None:
    """``n`` auction wins at ``at`` (+1 s each) whose price to beat was ``price``..10×."""
    _write(directory, [_record(first + i, at + timedelta(seconds=i), price * (1 + i % 10))
                       for i in range(n)])


def test_the_scheduled_fit_registers_and_serves_a_new_release(tmp_path: Path) -> None:
    """No release before the first period; an hour on, the window's fit is registered
    (a ``shading`` model release) and the decider shades with it; a run that fits the
    same curves registers nothing; new prices give a new release, served at once.
    Breaks if the job is not scheduled on the clock's moves (tried: ``run_on_move``
    off: nothing after the move), if every run registers (tried: the active-version
    check dropped: two releases of one version) or if the release is written but not
    registered (tried: no ``register`` call: the decider keeps none)."""
    served = tmp_path / "served"
    _prices(served, 0, START - timedelta(hours=2), 1_000.0)
    settings = _settings(tmp_path, shading_fit_s=HOUR, shading_min_observations=50,
                         shading_release_dir=str(tmp_path / "releases"))
    clock = ManualClock(START)
    rt = build_runtime(settings, clock, seed=1)
    try:
        assert rt.decider.shading is None
        clock.advance(HOUR)
        want = fit_release(served, clock.now() - timedelta(days=7), clock.now(),
                           min_observations=50).version
        assert rt.decider.shading is not None and rt.decider.shading.version == want
        releases = [m for m in rt.store.list_models() if m.target == "shading"]
        assert [(m.model_version, m.active) for m in releases] == [(want, True)]
        assert Path(releases[0].path) == tmp_path / "releases" / want
        clock.advance(HOUR)  # nothing new: the same curves, no second release
        assert len([m for m in rt.store.list_models() if m.target == "shading"]) == 1
        _prices(served, 1_000, clock.now() - timedelta(minutes=30), 5_000.0)
        clock.advance(HOUR)
        newer = rt.decider.shading.version
        assert newer != want
        assert [m.model_version for m in rt.store.list_models()
                if m.target == "shading" and m.active] == [newer]
    finally:
        rt.close()


def test_no_prices_keeps_the_server_unshaded(tmp_path: Path) -> None:
    """A window with nothing to fit registers nothing (and the run does not fail).
    Breaks if ``NoObservations`` escapes the job (tried: the except clause removed: the
    scheduler logs a failure and the count of runs with a result is 0)."""
    settings = _settings(tmp_path, shading_fit_s=HOUR,
                         shading_release_dir=str(tmp_path / "releases"))
    clock = ManualClock(START)
    rt = build_runtime(settings, clock, seed=1)
    try:
        clock.advance(HOUR)
        assert rt.decider.shading is None
        assert [m for m in rt.store.list_models() if m.target == "shading"] == []
        [job] = [p for p in rt.background if p._ticker.name == "shading-fit"]
        assert job._ticker.runs["shading-fit"] == 1
    finally:
        rt.close()


def test_the_period_and_its_inputs_are_checked_at_start_up(tmp_path: Path) -> None:
    """Breaks if a period of 0 is taken (tried: ``gt=0`` dropped) or a scheduled fit
    without a served log or a release folder starts (tried: the validator removed)."""
    with pytest.raises(SettingsError) as err:
        load_settings(shading_fit_s=0)
    assert any(p.startswith("shading_fit_s") for p in err.value.problems)
    with pytest.raises(SettingsError) as err:
        load_settings(shading_fit_s=HOUR)
    assert "served_log_dir and shading_release_dir" in str(err.value)
    assert load_settings().shading_fit_s is None  # off by default: the command only


def test_the_scheduled_fit_reads_the_ledgers_notices(tmp_path: Path) -> None:
    """The exchange's loss notices (a minimum bid to win) in the server's own ledger
    replace the served log's price to beat, as ``--database-url`` makes the command do.
    Breaks if the job fits without them (tried: ``notices=None`` in ``ShadingFitJob.run``:
    the release of the served log alone is registered)."""
    served = tmp_path / "served"
    at = START - timedelta(hours=2)
    _prices(served, 0, at, 1_000.0)
    settings = _settings(tmp_path, shading_fit_s=HOUR, shading_min_observations=50,
                         shading_release_dir=str(tmp_path / "releases"))
    clock = ManualClock(START)
    rt = build_runtime(settings, clock, seed=1)
    try:
        ledger = SqlLedger(rt.engine)
        for i in range(0, 300, 2):  # every other bid lost to 25.00 CPM
            ledger.record(LedgerEvent(
                impression_id=f"imp{i}", event_type=EventType.LOSS, campaign_id=1, ad_id=1,
                placement="feed", billing_type="CPM", charge_micros=0,
                occurred_at=at + timedelta(seconds=i + 1), day=at.date(), served_at=at,
                expected_micros=0, notice_micros=25_000_000), 0)
        clock.advance(HOUR)
        since = clock.now() - timedelta(days=7)
        with_notices = fit_release(served, since, clock.now(), min_observations=50,
                                   notices=notice_prices(rt.engine, since)).version
        alone = fit_release(served, since, clock.now(), min_observations=50).version
        assert with_notices != alone
        assert rt.decider.shading is not None
        assert rt.decider.shading.version == with_notices
    finally:
        rt.close()


def test_prices_older_than_the_window_are_not_fitted(tmp_path: Path) -> None:
    """Only the last ``shading_fit_days`` of the served log are fitted. Breaks if the
    window is not kept (tried: ``days * 1000`` in ``ShadingFitJob.run``: the prices of
    8 days ago are fitted and registered)."""
    served = tmp_path / "served"
    _prices(served, 0, START - timedelta(days=8), 1_000.0)
    settings = _settings(tmp_path, shading_fit_s=HOUR, shading_min_observations=50,
                         shading_release_dir=str(tmp_path / "releases"))
    clock = ManualClock(START)
    rt = build_runtime(settings, clock, seed=1)
    try:
        clock.advance(HOUR)
        assert rt.decider.shading is None
        assert [m for m in rt.store.list_models() if m.target == "shading"] == []
    finally:
        rt.close()
