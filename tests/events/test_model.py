"""The event record: its domain, its msg id, its wire form and its partition."""

from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.billing.model import EventType as LedgerEventType
from adfunnel.clock import LATEST_INSTANT
from adfunnel.events.model import (
    Event,
    EventType,
    MalformedEvent,
    decode,
    encode,
    partition_of,
)

BASE = {
    "event_type": EventType.IMPRESSION,
    "impression_id": "0f3c2b1a9d8e7f60",
    "campaign_id": 12,
    "ad_id": 340,
    "placement": "home_top",
    "price_micros": 2_500_000,
    "billing_type": "CPM",
    "served_at": 1_793_718_000,
    "occurred_at": 1_793_718_001.25,
    "client_ip": "203.0.113.7",
    "user_agent": "Mozilla/5.0",
}


def make(**changes: object) -> Event:
    return Event(**{**BASE, **changes})  # type: ignore[arg-type]


def test_msg_id_is_impression_id_and_event_type() -> None:
    assert make().msg_id == "0f3c2b1a9d8e7f60:impression"
    assert make(event_type=EventType.CONVERSION).msg_id == "0f3c2b1a9d8e7f60:conversion"


def test_event_types_match_the_ledgers() -> None:
    assert EventType.IMPRESSION == LedgerEventType.IMPRESSION
    assert EventType.CLICK == LedgerEventType.CLICK


def test_encode_then_decode_gives_the_same_event() -> None:
    full = make(event_type=EventType.CONVERSION, billing_type="CPA", expected_micros=10,
                conversion_value_micros=49_990_000, click_id="0f3c2b1a9d8e7f60")
    for e in (make(), full):
        assert decode(encode(e)) == e


def test_absent_optional_fields_are_left_out_and_unknown_fields_ignored() -> None:
    wire = msgspec.json.decode(encode(make()))
    assert "click_id" not in wire and "expected_micros" not in wire
    wire["added_later"] = {"x": 1}  # a newer writer
    assert decode(msgspec.json.encode(wire)) == make()


def test_an_int_time_is_accepted_as_seconds() -> None:
    assert make(occurred_at=1_793_718_001).occurred_at == 1_793_718_001


@pytest.mark.parametrize(
    "changes",
    [
        {"impression_id": ""},
        {"impression_id": "has space"},
        {"impression_id": "x" * 65},
        {"campaign_id": -1},
        {"ad_id": 2**63},
        {"price_micros": True},
        {"served_at": 1.5},
        {"served_at": 2**63 - 1},  # no calendar date: the aggregator could not bill it
        {"occurred_at": 1e20},
        {"billing_type": "CPV"},
        {"placement": ""},
        {"placement": "p" * 201},
        {"occurred_at": math.nan},
        {"occurred_at": math.inf},
        {"occurred_at": -1.0},
        {"client_ip": "1" * 65},
        {"user_agent": "u" * 1_025},
        {"expected_micros": -5},
        {"conversion_value_micros": 2**63},
        {"click_id": "not/an/id"},
    ],
)
def test_fields_outside_their_domain_are_refused(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        make(**changes)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"[]",
        b"{}",
        encode(make()).replace(b'"CPM"', b'"CPX"'),
        encode(make()).replace(b'"impression"', b'"view"'),
        encode(make()).replace(b'"campaign_id":12', b'"campaign_id":"12"'),
        encode(make()).replace(b'"campaign_id":12', b'"campaign_id":-12'),
        encode(make())[:-5],
        encode(make()).replace(b'"occurred_at":1793718001.25', b'"occurred_at":1e20'),
        encode(make()).replace(b'"served_at":1793718000', b'"served_at":9223372036854775807'),
    ],
)
def test_malformed_bytes_raise_malformed_event(data: bytes) -> None:
    with pytest.raises(MalformedEvent):
        decode(data)


def test_malformed_event_is_a_value_error() -> None:
    assert issubclass(MalformedEvent, ValueError)


def test_partition_of_is_campaign_id_modulo_partitions() -> None:
    assert [partition_of(c, 4) for c in range(9)] == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    assert partition_of(2**63 - 1, 1) == 0
    with pytest.raises(ValueError):
        partition_of(1, 0)
    with pytest.raises(ValueError):
        partition_of(-1, 4)


#: the latest time an event may name: the domain's latest instant
MAX_UNIX_S = int(LATEST_INSTANT.timestamp())
ids = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
int64 = st.integers(0, 2**63 - 1)
events = st.builds(
    Event,
    event_type=st.sampled_from(list(EventType)),
    impression_id=ids,
    campaign_id=int64,
    ad_id=int64,
    placement=st.text(min_size=1, max_size=200),
    price_micros=int64,
    billing_type=st.sampled_from(["CPM", "CPC", "CPA"]),
    served_at=st.integers(0, MAX_UNIX_S),
    occurred_at=st.floats(0, MAX_UNIX_S, allow_nan=False),
    client_ip=st.text(max_size=64),
    user_agent=st.text(max_size=1_024),
    expected_micros=st.none() | int64,
    conversion_value_micros=st.none() | int64,
    click_id=st.none() | ids,
)


@pytest.mark.slow
@given(events)
def test_every_valid_event_survives_the_wire(e: Event) -> None:
    assert decode(encode(e)) == e


@given(st.integers(0, 2**63 - 1), st.integers(1, 1_024))
def test_partition_is_in_range_and_stable(campaign_id: int, partitions: int) -> None:
    p = partition_of(campaign_id, partitions)
    assert 0 <= p < partitions and p == partition_of(campaign_id, partitions)
