"""The UTC hours a batch's events fell in: what the rollups refresh after the aggregator
commits the batch (aware datetimes at the hour)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def hour_of(at: datetime) -> datetime:
    """The UTC hour ``at`` falls in."""
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)

class BatchHours:
    """The UTC hours (aware datetimes at the hour) of a batch's events; an event in the
    same hour as the one before costs two comparisons."""

    __slots__ = ("_end", "_start", "hours")

    def __init__(self) -> None:
        self.hours: set[datetime] = set()
        self._start = self._end = datetime.min.replace(tzinfo=UTC)

    def add(self, at: datetime) -> None:
        if self._start <= at < self._end:
            return
        hour = self._start = hour_of(at)
        try:
            self._end = hour + timedelta(hours=1)
        except OverflowError:  # the last hour of year 9999
            self._end = hour
        self.hours.add(hour)
