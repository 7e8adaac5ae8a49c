"""First-price shading fitted with an exchange's notices: a loss's minimum bid to win and
a second-price win's clearing price replace the served log's price to beat of our
exchange bids; a first-price win (charged its bid) and a price-less notice are left out.
The notices are read from a real SQLite ledger written by the aggregator's ledger code."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.cli import app
from adfunnel.db import make_engine, metadata
from adfunnel.learn.shading_fit import notice_prices, observations
from adfunnel.prediction.shading_release import ShadingRelease
from tests.learn.test_shading_fit import _record, _write

DAY = datetime(2026, 7, 15, tzinfo=UTC)
NINE = DAY + timedelta(hours=21)
BID = 1_000_000  # the served records' bid: $1.00 CPM


def _notice(imp: str, kind: EventType, micros: int | None) -> LedgerEvent:
    return LedgerEvent(impression_id=imp, event_type=kind, campaign_id=1, ad_id=1,
                       placement="feed", billing_type="CPM", charge_micros=0,
                       occurred_at=NINE + timedelta(minutes=1), day=date(2026, 7, 15),
                       served_at=NINE, expected_micros=0, notice_micros=micros,
                       billing_notice=kind is EventType.IMPRESSION)  # the exchange's bill


def _ledger(tmp_path: Path) -> str:
    """A SQLite ledger holding the notices of imp0..imp7 (imp4 has none; imp6 and imp7
    were billed too)."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = make_engine(url)
    metadata.create_all(engine)
    sql = SqlLedger(engine)
    for imp, kind, micros in (("imp0", EventType.LOSS, 2_500_000),  # min to win $2.50
                              ("imp1", EventType.WIN, 600_000),  # second price: $0.60
                              ("imp2", EventType.WIN, BID),  # first price: charged the bid
                              ("imp3", EventType.LOSS, None),  # no min to win given
                              ("imp5", EventType.WIN, 100_000),
                              ("imp5", EventType.LOSS, 3_000_000),  # the loss is exact
                              # billed, then a contradicting loss: the bid won
                              ("imp6", EventType.IMPRESSION, 400_000),
                              ("imp6", EventType.WIN, 400_000),
                              ("imp6", EventType.LOSS, 5_000_000),
                              ("imp7", EventType.LOSS, 5_000_000),
                              ("imp7", EventType.IMPRESSION, 400_000)):
        sql.record(_notice(imp, kind, micros), 0)
    engine.dispose()
    return url


def _log(tmp_path: Path) -> Path:
    """Six auction winners at 21:00, each with the served log's own price to beat 9,999."""
    directory = tmp_path / "log"
    _write(directory, [_record(i, NINE + timedelta(seconds=i), 9_999.0) for i in range(6)])
    return directory


def test_notices_replace_the_served_logs_price_to_beat(tmp_path: Path) -> None:
    """Red when a first-price win's clearing price is taken as the price to beat (1,000
    would appear), when the CPM is not turned per impression (÷ 1000), when a bid with
    notices keeps the served log's 9,999, or when a win read first hides its bid's loss
    (imp5 at 100), or when a loss notice of a bid the ledger billed is taken (imp6 and
    imp7 would read 5,000: the bill says the bid won, whichever came first)."""
    notices = notice_prices(make_engine(_ledger(tmp_path)), DAY)
    assert notices == {"imp0": ("loss", 2_500_000), "imp1": ("win", 600_000),
                       "imp2": ("win", BID), "imp3": ("loss", None),
                       "imp5": ("loss", 3_000_000), "imp6": ("win", 400_000)}
    got = observations(_log(tmp_path), DAY, DAY + timedelta(days=1), notices)
    assert [price for _, _, _, price in got] == [2_500, 600, 9_999, 3_000]
    assert observations(_log(tmp_path), DAY, DAY + timedelta(days=1)) == [
        ("feed", "300x250", 21, 9_999)] * 6  # without notices: as before


def test_notices_before_the_window_are_not_read(tmp_path: Path) -> None:
    """Red when ``notice_prices`` ignores ``since``."""
    assert notice_prices(make_engine(_ledger(tmp_path)), NINE + timedelta(hours=1)) == {}


def test_the_command_reads_the_ledgers_notices(tmp_path: Path) -> None:
    """``adfunnel model shading-fit --database-url``: red when the option is not passed
    on to the fit (imp0's curve point would be 9,999, not 2,500)."""
    url, directory = _ledger(tmp_path), _log(tmp_path)
    days = (datetime.now(UTC) - DAY).days + 2
    done = CliRunner().invoke(app, ["model", "shading-fit", "--input", str(directory),
                                    "--out", str(tmp_path / "rel"), "--days", str(days),
                                    "--min-observations", "1", "--database-url", url])
    assert done.exit_code == 0, done.output
    curve = ShadingRelease.load(tmp_path / "rel").model.curves["feed|300x250|21"]
    assert curve.n == 4 and curve.prices == (600, 2_500, 3_000, 9_999)


def test_an_openrtb_bid_is_judged_by_the_bid_sent_and_its_auction_type(
        tmp_path: Path) -> None:
    """Two OpenRTB bids of a CPC campaign (its bid 1.00 a click; sent as 0.30 CPM, the
    served log's price): a second-price win at 0.30 (our bid: censored), a first-price
    win at 0.25 (censored whatever its price); a second-price win at 0.20 is a price to
    beat. Red when the fit compares notices with the per-click bid (tried: ``_RTB`` read
    as ``_NO_RTB``: 300 and 250 appear), or ignores ``at`` (tried: ``at == 1`` dropped
    from ``_notice_beat``: 250 appears)."""
    records = [_record(i, NINE + timedelta(seconds=i), 9_999.0) for i in range(3)]
    for r, at in zip(records, (2, 1, 2), strict=True):
        r.winners[0].price_micros, r.winners[0].openrtb_at = 300_000, at
    directory = tmp_path / "rtb"
    _write(directory, records)
    notices = {"imp0": ("win", 300_000), "imp1": ("win", 250_000), "imp2": ("win", 200_000)}
    got = observations(directory, DAY, DAY + timedelta(days=1), notices)
    assert [price for _, _, _, price in got] == [200]
