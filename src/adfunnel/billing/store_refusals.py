"""Events the ledger cannot store, kept from stopping everyone else's billing.

A batch is recorded in one transaction (:meth:`Ledger.record_many`). When the database
refuses a value of one event (PostgreSQL stores no NUL character in text: SQLSTATE class
22, a data exception) or the money rules refuse its charge (:class:`MoneyError`), the
whole transaction fails; retried as it is, it would fail for ever and block every event
behind it. Such a failure is permanent for that event, not an outage, so the batch is
recorded again one write at a time (``record_many`` is defined equal to that) and the
writes refused on their own are returned, to be acknowledged as rejected and counted
(DESIGN.md: a malformed event is rejected and counted, never half-applied). Any other
error (a connection lost, a lock timeout) propagates: the batch is retried whole.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg
from sqlalchemy.exc import DataError

from adfunnel.billing.batch_model import BatchPlan
from adfunnel.billing.ledger import Ledger, LedgerWrite
from adfunnel.money import MoneyError

_log = logging.getLogger(__name__)

#: What one event can make the ledger refuse for good: a data exception from the
#: database (through SQLAlchemy, or from psycopg itself where the ledger copies rows in
#: bulk) or the money rules.
UNSTORABLE: tuple[type[Exception], ...] = (DataError, psycopg.DataError, MoneyError)


def record_isolating(ledger: Ledger, writes: Sequence[LedgerWrite]
                     ) -> tuple[BatchPlan, list[int]]:
    """Record ``writes``: in one transaction, or (after a refusal of the kinds in
    :data:`UNSTORABLE`) one transaction per write. Returns the plan of what was recorded
    (``recorded`` aligned with the writes not refused, in order; ``released`` of all) and
    the indexes of the refused writes (empty when the batch went in whole).

    Raises:
        Exception: whatever else the ledger raised (nothing acknowledged: retried).
    """
    try:
        return ledger.record_many(writes), []
    except UNSTORABLE:
        pass
    plan, refused = BatchPlan(), []
    for i, write in enumerate(writes):
        try:
            one = ledger.record_many([write])
        except UNSTORABLE as exc:
            refused.append(i)
            # the event's ids only: never its address, user agent or token
            _log.warning("ledger refused event %s/%s of campaign %s: %s",
                         write.event.impression_id[:64], write.event.event_type,
                         write.event.campaign_id, type(exc).__name__)
            continue
        plan.recorded.extend(one.recorded)
        plan.released.extend(one.released)
    return plan, refused
