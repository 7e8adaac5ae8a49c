"""Fitting shading's win curves from the served log (#27): the prices to beat of a known
distribution give the expected curve, with back-off, in a release that loads back."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from adfunnel.bidding.shading import shaded_bid
from adfunnel.cli import app
from adfunnel.events.compactor import compact, parquet_path, records_table
from adfunnel.events.served_schema import ServedRecord, SlotRecord, WinnerRecord
from adfunnel.learn.shading_fit import NoObservations, fit_release, observations
from adfunnel.prediction.model import ModelError
from adfunnel.prediction.shading_release import ShadingRelease

DAY = datetime(2026, 7, 15, tzinfo=UTC)


def _record(i: int, at: datetime, beat: float | None, width: int = 300) -> ServedRecord:
    winner = WinnerRecord("s1", 1, f"imp{i}", 1, 1, 1, "CPC", 1_000_000, 1_000_000, 1_000_000,
                          10_000, 0.01, 1.0, 0.0, 10_000.0, beat_micros=beat)
    return ServedRecord(f"r{i}", at.timestamp(), None, {}, "feed", None, None, 0,
                        [SlotRecord("s1", 1, width, 250, "banner")], [winner], [], {}, [], 0,
                        False, 1)


def _write(directory: Path, records: list[ServedRecord]) -> None:
    by_hour: dict[tuple[str, str], list[ServedRecord]] = {}
    for r in records:
        t = datetime.fromtimestamp(r.time, UTC)
        by_hour.setdefault((t.date().isoformat(), f"{t.hour:02d}"), []).append(r)
    for hour, rows in by_hour.items():
        path = parquet_path(directory, hour)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(records_table(rows), path)


def _log(tmp_path: Path) -> Path:
    """Hour 21: 500 prices to beat uniform on 1,000..10,000 (50 of each); hour 22: ten
    prices of 20,000.2; a direct line's win (no beat); a 728-wide slot; one the day
    before (outside the window)."""
    nine, ten = DAY + timedelta(hours=21), DAY + timedelta(hours=22)
    records = [_record(i, nine + timedelta(seconds=i), float(1_000 * (1 + i % 10)))
               for i in range(500)]
    records += [_record(500 + i, ten, 20_000.2) for i in range(10)]
    records += [_record(600, ten, None), _record(601, ten, 7_000.0, width=728),
                _record(602, nine - timedelta(days=1), 1.0)]
    _write(tmp_path, records)
    return tmp_path


def test_a_known_price_distribution_gives_its_curve(tmp_path: Path) -> None:
    """Red when the fit reads the winner's own total instead of the price it beat (every
    curve a point at 10,000), when it ignores the window, or when the slot's size or the
    UTC hour is taken from elsewhere (no ``feed|300x250|21`` curve)."""
    directory = _log(tmp_path)
    release = fit_release(directory, DAY, DAY + timedelta(days=1), min_observations=100)
    model = release.model
    nine = model.curves["feed|300x250|21"]
    assert nine.n == 500 and nine.prices == tuple(range(1_000, 10_001, 1_000))
    assert [nine.p_win(b) for b in (999, 1_000, 5_000, 10_000)] == [0.0, 0.1, 0.5, 1.0]
    assert shaded_bid(10_000, nine) == 5_000  # (10,000 − b) × b / 10,000 peaks at 5,000
    # hour 22 has ten prices (under 100): it backs off to placement × size
    assert model.curves["feed|300x250|22"].prices == (20_001,)  # 20,000.2 rounded up
    assert model.curve_for("feed", "300x250", 22) is model.curves["feed|300x250|*"]
    assert model.curves["feed|300x250|*"].n == 510
    assert model.curves["feed|728x250|22"].n == 1 and model.curves["*|*|*"].n == 511
    assert release.metrics["observations"] == 511


def test_the_release_loads_back_with_its_version(tmp_path: Path) -> None:
    """Red when the version is not a content hash (two fits differ) or load skips the
    check of the version against the content."""
    directory = _log(tmp_path / "log")
    first = fit_release(directory, DAY, DAY + timedelta(days=1))
    first.save(tmp_path / "rel")
    again = ShadingRelease.load(tmp_path / "rel")
    assert again.version == first.version == fit_release(directory, DAY, DAY + timedelta(
        days=1)).version
    assert again.model == first.model
    text = (tmp_path / "rel" / "shading.json").read_text().replace('"n": 511', '"n": 512')
    (tmp_path / "rel" / "shading.json").write_text(text)
    with pytest.raises(ModelError, match="does not match version"):
        ShadingRelease.load(tmp_path / "rel")


def test_an_empty_window_fits_nothing(tmp_path: Path) -> None:
    """Red when the query ignores the window (a fit from every hour of the log)."""
    directory = _log(tmp_path)
    assert observations(directory, DAY + timedelta(days=2), DAY + timedelta(days=3)) == []
    with pytest.raises(NoObservations):
        fit_release(directory, DAY + timedelta(days=2), DAY + timedelta(days=3))


def test_the_command_writes_a_release_that_loads(tmp_path: Path) -> None:
    """``adfunnel model shading-fit``: red when it writes no release, or fits another
    window than the last ``--days``."""
    directory = _log(tmp_path / "log")
    days = (datetime.now(UTC) - DAY).days + 2  # the log's day and the one before it
    done = CliRunner().invoke(app, ["model", "shading-fit", "--input", str(directory),
                                    "--out", str(tmp_path / "rel"), "--days", str(days),
                                    "--min-observations", "100"])
    assert done.exit_code == 0, done.output
    release = ShadingRelease.load(tmp_path / "rel")
    assert release.metrics["observations"] == 512  # the day before counts too
    assert release.model.curve_for("feed", "300x250", 21).n == 501  # its 21:00 too


@pytest.mark.slow
def test_real_decisions_through_the_served_log_fit_their_prices_to_beat(
        tmp_path: Path) -> None:
    """Twenty decisions of both deciders (second price) → served log → Parquet → fit: one
    observation per auction winner, the price it beat. Red when the served record drops
    ``beat_micros`` (nothing to fit) or the fit joins a winner to another slot's size."""
    from tests.events.test_served_log import START, World, _record_hours, _served_log

    world = World()
    log = _served_log(tmp_path, world)
    made = _record_hours(world, log)
    log.close()
    compact(tmp_path, START + timedelta(hours=3))
    want = sorted((req.placement.id, f"{s.width}x{s.height}", math.ceil(d.beats[p.win.slot_id]))
                  for d, req in made for p in d.placed for s in req.slots
                  if s.id == p.win.slot_id)
    got = observations(tmp_path, START - timedelta(hours=1), START + timedelta(hours=3))
    assert len(got) == len(want) > 20
    assert sorted((placement, size, price) for placement, size, _, price in got) == want
    assert {size for _, size, _, _ in got} == {"300x250"}
    assert {hour for _, _, hour, _ in got} == {9, 10}
