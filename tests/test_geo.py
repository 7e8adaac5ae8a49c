"""The country of an address from DB-IP's country lite data (real rows of the CSV)."""

from __future__ import annotations

import gzip
import itertools
import socket

import pytest

from adfunnel.data import data_dir
from adfunnel.geo import IPV4_FILE, IPV6_FILE, CountryRanges, countries


@pytest.fixture(scope="module")
def table() -> CountryRanges:
    return countries()


def _first_rows(path: str, n: int, opener=open) -> list[list[str]]:  # type: ignore[no-untyped-def]
    with opener(path, "rt") as fh:
        return [line.strip().split(",") for line in itertools.islice(fh, n)]


@pytest.mark.parametrize(("ip", "code"), [
    ("1.0.0.0", "AU"), ("1.0.0.255", "AU"), ("1.0.1.0", "CN"), ("1.0.3.255", "CN"),
    ("8.8.240.0", "US"), ("8.10.5.255", "US"),  # the row 8.8.240.0,8.10.5.255,US
    ("2001:200::1", "JP"), ("2001::5", "US"), ("2000:ffff::", "CH"),
    ("::ffff:1.0.1.7", "CN"),  # an IPv4-mapped IPv6 address: its IPv4 row
])
def test_real_rows(table: CountryRanges, ip: str, code: str) -> None:
    assert table.country(ip) == code


@pytest.mark.parametrize("ip", ["10.0.0.1", "192.168.1.1", "127.0.0.1", "::1", "fe80::1",
                                "not an ip", "", None, "1.2.3.4:80"])
def test_private_unparsable_or_missing_has_no_country(table: CountryRanges,
                                                      ip: str | None) -> None:
    assert table.country(ip) is None


def test_every_boundary_of_the_first_rows_and_the_gaps_between() -> None:
    """Both ends of each of the first 2,000 rows of both files map to its code, and the
    address after a row that is not followed directly by the next maps to none."""
    base = data_dir("geo") / "geo"
    table = countries()
    for path, family, opener in ((base / IPV4_FILE, socket.AF_INET, open),
                                 (base / IPV6_FILE, socket.AF_INET6, gzip.open)):
        rows = _first_rows(str(path), 2000, opener)
        for (first, last, code), nxt in zip(rows, [*rows[1:], None], strict=True):
            assert table.country(first) == code, first
            assert table.country(last) == code, last
            after = int.from_bytes(socket.inet_pton(family, last), "big") + 1
            if nxt is not None and int.from_bytes(socket.inet_pton(family, nxt[0]),
                                                  "big") != after:
                size = 4 if family == socket.AF_INET else 16
                assert table.country(socket.inet_ntop(family, after.to_bytes(size, "big"))) \
                    is None


def test_ranges_sharing_the_high_half_of_an_ipv6_address() -> None:
    """IPv6 ranges finer than a /64 are told apart by the low half."""
    base = 0x2001_0db8_0000_0000 << 64
    table = CountryRanges([], [(base, base + 9, "DE"), (base + 10, base + 19, "FR"),
                               (base + 30, base + 39, "IT")])
    assert table.country("2001:db8::5") == "DE"
    assert table.country("2001:db8::a") == "FR"
    assert table.country("2001:db8::14") is None  # the gap 20..29
    assert table.country("2001:db8::27") == "IT"
    assert table.country("2001:db8::28") is None


def test_unsorted_or_overlapping_ranges_are_refused() -> None:
    with pytest.raises(ValueError, match="sorted and disjoint"):
        CountryRanges([(10, 20, "US"), (15, 30, "CA")])
    with pytest.raises(ValueError, match="country code"):
        CountryRanges([(10, 20, "USA")])


def test_missing_data_names_the_variable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(FileNotFoundError, match="ADFUNNEL_DATA_DIR"):
        CountryRanges.from_dir(tmp_path)
