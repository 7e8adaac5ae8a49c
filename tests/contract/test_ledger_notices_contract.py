"""The ledger's OpenRTB notice rows, run against MemoryLedger, SqlLedger on SQLite and on
PostgreSQL: win and loss notices are measured (no money, once per impression id); a bid's
expected cost is settled once, by the first of its billed impression and its loss."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from sqlalchemy import select

from adfunnel.billing.ledger import LedgerWrite, MemoryLedger
from adfunnel.billing.model import EventType, LedgerEvent, Outcome, Recorded
from adfunnel.billing.rollups import rollup_rows
from adfunnel.billing.tables import ledger as ledger_table

from .conftest import LedgerBackend

DAY = date(2026, 3, 14)
NOON = datetime(2026, 3, 14, 12, tzinfo=UTC)
BIG = 10**12
EXPECTED = 1_800


def row(imp: str, event_type: EventType, *, charge: int = 0, expected: int = EXPECTED,
        notice: int | None = None, reason: int | None = None,
        beacon: bool = False) -> LedgerEvent:
    """A CPM bid's row: the impression (its billing notice, unless ``beacon``) charges
    its clearing price per mille."""
    return LedgerEvent(impression_id=imp, event_type=event_type, campaign_id=1, ad_id=10,
                       placement="rtb", billing_type="CPM", charge_micros=charge,
                       occurred_at=NOON + timedelta(minutes=1), day=DAY,
                       charge_per_mille=True, served_at=NOON, expected_micros=expected,
                       notice_micros=notice, loss_reason=reason,
                       billing_notice=event_type is EventType.IMPRESSION and not beacon)


def stored_notice(backend: LedgerBackend, ledger: object, imp: str,
                  event_type: EventType) -> tuple[int | None, int | None]:
    """(notice_micros, loss_reason) of a stored row, as the win-price history reads it."""
    if isinstance(ledger, MemoryLedger):
        valid, _ = ledger.rows_between(NOON - timedelta(days=1), NOON + timedelta(days=1))
        (e,) = [e for e, _, _ in valid if (e.impression_id, e.event_type) == (imp, event_type)]
        return e.notice_micros, e.loss_reason
    t = ledger_table.c
    with backend.engines[-1].connect() as conn:
        found = conn.execute(select(t.notice_micros, t.loss_reason).where(
            t.impression_id == imp, t.event_type == event_type.value)).one()
    return found[0], found[1]


def test_a_loss_settles_its_bids_expected_cost_once(ledger_backend: LedgerBackend) -> None:
    """Breaks if the planner's loss row carries no settled cost (``_measure`` writing
    expected 0 for every measurement row; SQL: ``settles_micros``), or if the duplicate
    check is off (the replayed loss is MEASURED again)."""
    ledger = ledger_backend.open()
    assert ledger.record(row("a", EventType.LOSS), 0).outcome is Outcome.MEASURED
    assert ledger.record(row("a", EventType.LOSS), 0).outcome is Outcome.DUPLICATE
    assert ledger.settled_since(DAY, NOON) == {1: EXPECTED}
    assert ledger.billed_on(DAY) == {}
    assert ledger.stats().measured_rows == 1


def test_a_loss_after_its_billed_impression_settles_nothing_again(
        ledger_backend: LedgerBackend) -> None:
    """Breaks if the planner's loss row keeps its expected cost when the impression has a
    row (the budget service would take the bid out of flight twice)."""
    ledger = ledger_backend.open()
    billed = ledger.record(row("b", EventType.IMPRESSION, charge=1_234_567), BIG)
    assert billed == Recorded(Outcome.BILLED, 1_234, 0)
    assert ledger.record(row("b", EventType.LOSS), BIG).outcome is Outcome.MEASURED
    assert ledger.settled_since(DAY, NOON) == {1: EXPECTED}


def test_an_impression_billed_after_its_loss_settles_nothing_again(
        ledger_backend: LedgerBackend) -> None:
    """An exchange that bills after it said we lost is billed (the billing notice is the
    money signal), its bid settled once. Breaks if the impression after a loss keeps its
    expected cost."""
    ledger = ledger_backend.open()
    ledger.record(row("c", EventType.LOSS), BIG)
    recorded = ledger.record(row("c", EventType.IMPRESSION, charge=2_000_000), BIG)
    assert recorded == Recorded(Outcome.BILLED, 2_000, 0)
    assert ledger.settled_since(DAY, NOON) == {1: EXPECTED}


def test_a_beacon_impression_after_its_loss_bills_nothing(
        ledger_backend: LedgerBackend) -> None:
    """``exchange_beacon``: the markup's ``/i`` after the exchange's loss notice bills
    nothing, ever (held for good, again nothing when redelivered, alone or in a batch
    with its loss), while the exchange's billing notice after a loss bills. Breaks if the
    planner bills an impression whose loss row is there (memory, SQLite, PostgreSQL:
    the held impression must be stored and read back)."""
    ledger = ledger_backend.open()
    ledger.record(row("l", EventType.LOSS), BIG)
    beacon = row("l", EventType.IMPRESSION, charge=2_000_000, beacon=True)
    assert ledger.record(beacon, BIG).outcome is Outcome.NOT_BILLABLE
    assert ledger.record(beacon, BIG).outcome is Outcome.NOT_BILLABLE
    plan = ledger.record_many([
        LedgerWrite(row("m", EventType.LOSS), BIG),
        LedgerWrite(row("m", EventType.IMPRESSION, charge=2_000_000, beacon=True), BIG)])
    assert [r.outcome for r in plan.recorded] == [Outcome.MEASURED, Outcome.NOT_BILLABLE]
    assert ledger.billed_on(DAY) == {}
    assert ledger.settled_since(DAY, NOON) == {1: 2 * EXPECTED}
    assert ledger.counters()["impressions_after_loss"] == 2


def test_in_one_batch_the_bid_is_settled_once_too(ledger_backend: LedgerBackend) -> None:
    """Breaks if the planner's loss check reads only the stored rows (``_view_row_time``),
    not the batch's overlay."""
    ledger = ledger_backend.open()
    plan = ledger.record_many([
        LedgerWrite(row("d", EventType.IMPRESSION, charge=1_000_000), BIG),
        LedgerWrite(row("d", EventType.LOSS), BIG),
        LedgerWrite(row("e", EventType.LOSS), BIG),
        LedgerWrite(row("e", EventType.IMPRESSION, charge=1_000_000), BIG),
        LedgerWrite(row("f", EventType.WIN, expected=0), BIG),
    ])
    assert [r.outcome for r in plan.recorded] == [
        Outcome.BILLED, Outcome.MEASURED, Outcome.MEASURED, Outcome.BILLED, Outcome.MEASURED]
    assert ledger.settled_since(DAY, NOON) == {1: 2 * EXPECTED}
    assert ledger.billed_on(DAY) == {1: 2_000}


def test_win_and_loss_rows_count_nothing_in_the_rollups() -> None:
    """Breaks if the memory rollups count a win or loss row as a conversion (their
    fall-through branch), as the SQL rollups never do (they count each type by name)."""
    valid = [(row("g", EventType.IMPRESSION, charge=1_000_000), 1_000, 0),
             (row("g", EventType.WIN, expected=0), 0, 0), (row("g", EventType.LOSS), 0, 0)]
    (rollup,) = rollup_rows(valid, [])
    assert (rollup.impressions, rollup.clicks, rollup.conversions, rollup.billed_micros,
            rollup.rendered, rollup.viewable) == (1, 0, 0, 1_000, 0, 0)


def test_win_and_loss_rows_keep_the_notices_price_and_reason(
        ledger_backend: LedgerBackend) -> None:
    """The win-price history: a win's clearing price, a loss's minimum bid to win and
    reason code are stored with the row (one by one, and in a batch: PostgreSQL's COPY).
    Breaks if the SQL rows leave the columns out (``ledger_row`` / the COPY)."""
    ledger = ledger_backend.open()
    ledger.record(row("h", EventType.WIN, expected=0, notice=1_750_000), 0)
    ledger.record_many([LedgerWrite(row("i", EventType.LOSS, notice=2_500_000, reason=102)),
                        LedgerWrite(row("j", EventType.LOSS))])
    assert stored_notice(ledger_backend, ledger, "h", EventType.WIN) == (1_750_000, None)
    assert stored_notice(ledger_backend, ledger, "i", EventType.LOSS) == (2_500_000, 102)
    assert stored_notice(ledger_backend, ledger, "j", EventType.LOSS) == (None, None)
