"""The on-disk spool: order, durability across reopen and crash, the bound, draining."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from adfunnel.events.log import EventLogUnavailable
from adfunnel.events.model import Event, EventType, encode
from adfunnel.events.spool import Spool
from adfunnel.events.spool_files import SpoolError, SpoolFull, SpoolLocked

MiB = 1 << 20


def event(n: int, campaign_id: int = 3) -> Event:
    return Event(
        event_type=EventType.CLICK if n % 2 else EventType.IMPRESSION,
        impression_id=f"imp{n:06d}",
        campaign_id=campaign_id,
        ad_id=9,
        placement="article_side",
        price_micros=400_000,
        billing_type="CPC",
        served_at=1_793_717_000,
        occurred_at=1_793_717_000.0 + n,
        client_ip="198.51.100.4",
        user_agent="Mozilla/5.0",
    )


class Collector:
    """A publisher that keeps what it was given; fails while ``down``."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.batches = 0
        self.down = False
        self.fail_after: int | None = None  # fail on the batch after this many

    def __call__(self, events: Sequence[Event]) -> None:
        if self.down or (self.fail_after is not None and self.batches >= self.fail_after):
            raise EventLogUnavailable("log down")
        self.batches += 1
        self.events.extend(events)


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    return tmp_path / "spool"


def frame_bytes(e: Event) -> int:
    """What one record of ``e`` takes in a segment: 8 bytes of frame header + the event."""
    return len(encode(e)) + 8


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.seg"))


@pytest.mark.slow
def test_drain_publishes_in_append_order_and_empties_the_spool(spool_dir: Path) -> None:
    spool = Spool(spool_dir, MiB)
    sent = [event(n) for n in range(1_200)]
    spool.append(sent[0])
    spool.append_many(sent[1:700])
    for e in sent[700:]:
        spool.append(e)
    assert len(spool) == 1_200
    out = Collector()
    assert spool.drain(out, batch_size=500) == 1_200
    assert out.events == sent
    assert out.batches == 3
    assert len(spool) == 0 and spool.bytes_used == 0
    assert segments(spool_dir) == []
    assert spool.drain(out) == 0
    spool.close()


def test_appends_after_a_drain_are_kept_and_drained_in_order(spool_dir: Path) -> None:
    spool = Spool(spool_dir, MiB)
    out = Collector()
    spool.append_many([event(n) for n in range(3)])
    spool.drain(out)
    spool.append_many([event(n) for n in range(3, 6)])
    spool.close()
    reopened = Spool(spool_dir, MiB)
    assert len(reopened) == 3
    reopened.drain(out)
    assert [e.impression_id for e in out.events] == [f"imp{n:06d}" for n in range(6)]


def test_events_survive_a_reopen_with_the_drained_part_gone(spool_dir: Path) -> None:
    spool = Spool(spool_dir, MiB, segment_bytes=4_000)  # several segments
    sent = [event(n) for n in range(100)]
    spool.append_many(sent[:60])
    spool.append_many(sent[60:])
    assert len(segments(spool_dir)) >= 2
    out = Collector()
    out.fail_after = 1
    with pytest.raises(EventLogUnavailable):
        spool.drain(out, batch_size=7)
    assert out.events == sent[:7]
    spool.close()

    reopened = Spool(spool_dir, MiB, segment_bytes=4_000)
    assert len(reopened) == 93
    rest = Collector()
    reopened.drain(rest, batch_size=50)
    assert rest.events == sent[7:]
    assert len(reopened) == 0
    assert segments(spool_dir) == []
    reopened.close()


@pytest.mark.slow
def test_appended_events_survive_a_killed_process(spool_dir: Path) -> None:
    """A child process appends and dies without closing (os._exit): every append that
    returned is there when the spool is reopened."""
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_spool import event
        from adfunnel.events.spool import Spool
        spool = Spool({str(spool_dir)!r}, 1 << 20, segment_bytes=2_000)
        for n in range(40):
            spool.append(event(n))
        print("appended", flush=True)
        os._exit(9)
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode == 9, run.stderr
    assert "appended" in run.stdout
    spool = Spool(spool_dir, MiB, segment_bytes=2_000)
    out = Collector()
    spool.drain(out)
    assert out.events == [event(n) for n in range(40)]
    spool.close()


def test_a_torn_last_record_is_cut_and_the_rest_kept(spool_dir: Path) -> None:
    spool = Spool(spool_dir, MiB)
    spool.append_many([event(n) for n in range(5)])
    spool.close()
    (last,) = segments(spool_dir)
    whole = last.read_bytes()
    frame = frame_bytes(event(5))
    with open(last, "ab") as f:  # a crash in the middle of writing a sixth record
        f.write(whole[-frame:][: frame // 2])
    reopened = Spool(spool_dir, MiB)
    assert len(reopened) == 5
    assert last.stat().st_size == len(whole)
    reopened.append(event(6))
    out = Collector()
    reopened.drain(out)
    assert [e.impression_id for e in out.events] == [
        "imp000000", "imp000001", "imp000002", "imp000003", "imp000004", "imp000006"
    ]
    reopened.close()


def test_a_corrupted_record_ends_the_segment_at_reopen(spool_dir: Path) -> None:
    spool = Spool(spool_dir, MiB)
    spool.append_many([event(n) for n in range(4)])
    spool.close()
    (seg,) = segments(spool_dir)
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0xFF  # flip a byte of the last record: its CRC no longer matches
    seg.write_bytes(bytes(data))
    reopened = Spool(spool_dir, MiB)
    assert len(reopened) == 3
    reopened.close()


# --- the bound --------------------------------------------------------------------------------


def test_a_full_spool_refuses_and_keeps_what_it_has(spool_dir: Path) -> None:
    ten = sum(frame_bytes(event(n)) for n in range(10))
    spool = Spool(spool_dir, 8 + ten)  # a segment header and exactly 10 records
    for n in range(10):
        spool.append(event(n))
    assert spool.bytes_used == 8 + ten
    with pytest.raises(SpoolFull):
        spool.append(event(10))
    with pytest.raises(SpoolFull):
        spool.append_many([event(11)])
    assert len(spool) == 10
    out = Collector()
    spool.drain(out)
    assert [e.impression_id for e in out.events] == [f"imp{n:06d}" for n in range(10)]
    spool.append(event(12))  # drained: room again
    assert len(spool) == 1
    spool.close()


def test_a_batch_that_does_not_fit_is_refused_whole(spool_dir: Path) -> None:
    spool = Spool(spool_dir, 8 + sum(frame_bytes(event(n)) for n in range(5)))
    spool.append_many([event(n) for n in range(3)])
    with pytest.raises(SpoolFull):
        spool.append_many([event(n) for n in range(3, 6)])
    assert len(spool) == 3
    spool.append_many([event(3), event(4)])
    assert len(spool) == 5
    spool.close()


def test_the_bound_counts_every_segment_on_disk(spool_dir: Path) -> None:
    spool = Spool(spool_dir, 6_000, segment_bytes=1_000)
    with pytest.raises(SpoolFull):
        for n in range(1_000):
            spool.append(event(n))
    assert len(segments(spool_dir)) > 3
    on_disk = sum(p.stat().st_size for p in segments(spool_dir))
    assert on_disk == spool.bytes_used <= 6_000
    spool.close()


# --- draining with a failing log ----------------------------------------------------------------


def test_a_failing_publisher_keeps_everything_in_order(spool_dir: Path) -> None:
    spool = Spool(spool_dir, MiB)
    sent = [event(n) for n in range(30)]
    spool.append_many(sent)
    down = Collector()
    down.down = True
    for _ in range(3):
        with pytest.raises(EventLogUnavailable):
            spool.drain(down, batch_size=10)
    assert down.events == [] and len(spool) == 30

    flaky = Collector()
    flaky.fail_after = 2  # two batches go through, then the log fails again
    with pytest.raises(EventLogUnavailable):
        spool.drain(flaky, batch_size=10)
    assert flaky.events == sent[:20] and len(spool) == 10

    up = Collector()
    assert spool.drain(up, batch_size=10) == 10
    assert up.events == sent[20:]
    spool.close()


@pytest.mark.slow
def test_appends_during_a_drain_are_neither_lost_nor_reordered(spool_dir: Path) -> None:
    spool = Spool(spool_dir, 4 * MiB, segment_bytes=20_000)
    spool.append_many([event(n) for n in range(200)])
    out = Collector()
    stop = threading.Event()

    def keep_appending() -> None:
        n = 200
        while not stop.is_set() and n < 2_000:
            spool.append(event(n))
            n += 1

    writer = threading.Thread(target=keep_appending)
    writer.start()
    try:
        for _ in range(20):
            spool.drain(out, batch_size=37)
    finally:
        stop.set()
        writer.join()
    spool.drain(out, batch_size=37)
    ids = [e.impression_id for e in out.events]
    assert ids == [f"imp{n:06d}" for n in range(len(ids))]
    assert len(spool) == 0
    spool.close()


# --- the directory ----------------------------------------------------------------------------


def test_a_directory_is_held_by_one_open_spool(spool_dir: Path) -> None:
    spool = Spool(spool_dir, MiB)
    with pytest.raises(SpoolLocked):
        Spool(spool_dir, MiB)
    spool.close()
    spool.close()  # idempotent
    Spool(spool_dir, MiB).close()


def test_a_closed_spool_refuses(spool_dir: Path) -> None:
    spool = Spool(spool_dir, MiB)
    spool.close()
    with pytest.raises(SpoolError):
        spool.append(event(1))
    with pytest.raises(SpoolError):
        spool.drain(Collector())


def test_arguments_are_checked(spool_dir: Path) -> None:
    with pytest.raises(ValueError):
        Spool(spool_dir, 0)
    spool = Spool(spool_dir, MiB)
    with pytest.raises(ValueError):
        spool.drain(Collector(), batch_size=0)
    spool.close()


def test_an_unusable_directory_is_a_spool_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(SpoolError):
        Spool(blocker / "spool", MiB)
    assert os.path.exists(blocker)
