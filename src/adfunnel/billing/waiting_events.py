"""Events of a campaign this process does not know yet (the change feed has not applied
it): kept unacknowledged and retried with later batches for a while (network seconds),
then rejected; the aggregator's waiting room."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence

from prometheus_client import Counter

from adfunnel.events.log import Delivery

#: Network seconds an event of a campaign this process does not know yet (its change
#: feed has not applied it) is kept unacknowledged and retried before it is rejected.
UNKNOWN_CAMPAIGN_RETRY_S = 600.0
#: Most such events kept waiting at once (past it the oldest is left to the log's
#: redelivery).
UNKNOWN_CAMPAIGN_WAITING = 100_000

UNKNOWN_CAMPAIGN = Counter(
    "adfunnel_aggregator_unknown_campaign_total",
    "Events of a campaign the aggregator did not know yet: retried (each attempt), "
    "recorded (once the campaign was known) or rejected (still unknown after the retry "
    "window)", ["outcome"])


class WaitingEvents:
    """The unacknowledged deliveries of unknown campaigns, by sequence, with the monotonic
    second each was first seen; at most :data:`UNKNOWN_CAMPAIGN_WAITING`."""

    def __init__(self) -> None:
        self._waiting: OrderedDict[int, tuple[Delivery, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._waiting)

    def with_fetched(self, fetched: Sequence[Delivery]) -> tuple[list[Delivery], set[int]]:
        """The waiting deliveries and ``fetched`` in sequence order, one per sequence
        (a redelivery of a waiting one replaces it); the waiting sequences."""
        if not self._waiting:
            return list(fetched), set()
        by_seq = {seq: d for seq, (d, _) in self._waiting.items()}
        retried = set(by_seq)
        for d in fetched:
            by_seq[d.seq] = d
        return [by_seq[seq] for seq in sorted(by_seq)], retried

    def wait(self, delivery: Delivery, retry_s: float) -> bool:
        """Keep ``delivery`` (its campaign is not known yet) unacknowledged for a later
        batch; False when it has waited ``retry_s`` already (reject it)."""
        now = time.monotonic()
        first = self._waiting.get(delivery.seq, (delivery, now))[1]
        if now - first >= retry_s:
            return False
        self._waiting[delivery.seq] = (delivery, first)
        while len(self._waiting) > UNKNOWN_CAMPAIGN_WAITING:
            self._waiting.popitem(last=False)  # the oldest: redelivered by the log later
        UNKNOWN_CAMPAIGN.labels("retried").inc()
        return True

    def done(self, deliveries: Sequence[Delivery]) -> None:
        """``deliveries`` were acknowledged: none of them waits any more."""
        for d in deliveries:
            self._waiting.pop(d.seq, None)
