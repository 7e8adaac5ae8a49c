"""The country of a client address: DB-IP's country lite ranges in sorted arrays.

The data is ``$ADFUNNEL_DATA_DIR/geo`` (see its PROVENANCE.md): ``dbip-country-ipv4.csv``
and ``dbip-country-ipv6.csv.gz``, rows ``first,last,CC`` — inclusive, sorted, disjoint
ranges (DB-IP Lite, CC BY 4.0: a page showing results links to https://db-ip.com). The
data is country-level only: there is no region or city to derive.

The ranges are not CIDR-aligned (355,800 IPv4 rows would become well over a million
prefixes in a Patricia tree), so they are kept as numpy arrays of range starts and ends
and searched by bisection (``searchsorted``): IPv4 as ``uint32``, IPv6 as two ``uint64``
halves. About 0.3 MB of codes and 14 MB of arrays; lookups take a few microseconds.

:func:`countries` loads the process-wide table once, on first call (about 1 s), under a
lock; call it at start-up so no request pays for it. The table is read-only afterwards.
"""

from __future__ import annotations

import csv
import gzip
import ipaddress
import socket
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

import numpy as np

from adfunnel.data import DATA_DIR_ENV, data_dir

#: The files of ``<data dir>/geo`` read, IPv4 then IPv6.
IPV4_FILE = "dbip-country-ipv4.csv"
IPV6_FILE = "dbip-country-ipv6.csv.gz"
_MASK64 = (1 << 64) - 1


class CountryRanges:
    """Inclusive address ranges → ISO 3166-1 alpha-2 country code.

    Args:
        v4: ``(first, last, code)`` IPv4 ranges as integers, sorted and disjoint.
        v6: the same for IPv6.

    Raises:
        ValueError: ranges that are not sorted and disjoint, or a code that is not two
            letters.
    """

    def __init__(self, v4: Iterable[tuple[int, int, str]],
                 v6: Iterable[tuple[int, int, str]] = ()) -> None:
        v4_rows, v6_rows = list(v4), list(v6)
        _check_sorted(v4_rows, "IPv4")
        _check_sorted(v6_rows, "IPv6")
        codes = sorted({code for *_, code in v4_rows} | {code for *_, code in v6_rows})
        self.codes: tuple[str, ...] = tuple(codes)
        index = {code: i for i, code in enumerate(codes)}
        self._v4_first = np.fromiter((r[0] for r in v4_rows), np.uint32, len(v4_rows))
        self._v4_last = np.fromiter((r[1] for r in v4_rows), np.uint32, len(v4_rows))
        self._v4_code = np.fromiter((index[r[2]] for r in v4_rows), np.uint16, len(v4_rows))
        n6 = len(v6_rows)
        self._v6_first_hi = np.fromiter((r[0] >> 64 for r in v6_rows), np.uint64, n6)
        self._v6_first_lo = np.fromiter((r[0] & _MASK64 for r in v6_rows), np.uint64, n6)
        self._v6_last_hi = np.fromiter((r[1] >> 64 for r in v6_rows), np.uint64, n6)
        self._v6_last_lo = np.fromiter((r[1] & _MASK64 for r in v6_rows), np.uint64, n6)
        self._v6_code = np.fromiter((index[r[2]] for r in v6_rows), np.uint16, n6)

    @classmethod
    def from_dir(cls, root: Path | None = None) -> CountryRanges:
        """Load both files from ``root/geo`` (``root``: :func:`adfunnel.data.data_dir`).

        Raises:
            FileNotFoundError: a file is missing (the message names it and the variable).
            ValueError: a row is not ``first,last,CC``.
        """
        base = (root or data_dir("geo")) / "geo"
        v4, v6 = base / IPV4_FILE, base / IPV6_FILE
        for path in (v4, v6):
            if not path.is_file():
                raise FileNotFoundError(f"geo data missing: {path} (set {DATA_DIR_ENV})")
        with v4.open(encoding="ascii", newline="") as fh4, \
                gzip.open(v6, "rt", encoding="ascii", newline="") as fh6:
            return cls(_rows(fh4, socket.AF_INET, v4), _rows(fh6, socket.AF_INET6, v6))

    def __len__(self) -> int:
        return len(self._v4_first) + len(self._v6_first_hi)

    def country(self, ip: str | None) -> str | None:
        """The country code of ``ip`` (IPv4, IPv6, or IPv4-mapped IPv6), or None when the
        address is unknown, does not parse, or lies in no range (private, reserved)."""
        if not ip:
            return None
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return None
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        value = int(address)
        if address.version == 4:
            i = int(np.searchsorted(self._v4_first, np.uint32(value), side="right")) - 1
            if i < 0 or value > int(self._v4_last[i]):
                return None
            return self.codes[self._v4_code[i]]
        i = self._v6_index(value >> 64, value & _MASK64)
        if i < 0 or (value >> 64, value & _MASK64) > (int(self._v6_last_hi[i]),
                                                       int(self._v6_last_lo[i])):
            return None
        return self.codes[self._v6_code[i]]

    def _v6_index(self, hi: int, lo: int) -> int:
        """The last range whose start is ≤ (hi, lo), compared as 128-bit numbers: bisect the
        high halves, then the low halves of the ranges that share ``hi``."""
        key = np.uint64(hi)
        left = int(np.searchsorted(self._v6_first_hi, key, side="left"))
        right = int(np.searchsorted(self._v6_first_hi, key, side="right"))
        if left == right:
            return right - 1
        return left + int(np.searchsorted(self._v6_first_lo[left:right], np.uint64(lo),
                                          side="right")) - 1


def _rows(fh: TextIO, family: int, path: Path) -> Iterator[tuple[int, int, str]]:
    for lineno, row in enumerate(csv.reader(fh), 1):
        if not row:
            continue
        try:
            first, last, code = row
            yield (int.from_bytes(socket.inet_pton(family, first), "big"),
                   int.from_bytes(socket.inet_pton(family, last), "big"), code)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}:{lineno}: expected first,last,CC, got {row!r}") from exc


def _check_sorted(rows: list[tuple[int, int, str]], family: str) -> None:
    previous = -1
    for first, last, code in rows:
        if not previous < first <= last:
            raise ValueError(f"{family} ranges must be sorted and disjoint (at {first})")
        if len(code) != 2 or not code.isalpha():
            raise ValueError(f"{family} range at {first}: country code {code!r}")
        previous = last


class _Once:
    """The process-wide table, built on first :meth:`get`, once even when threads race."""

    def __init__(self) -> None:
        self._value: CountryRanges | None = None
        self._lock = threading.Lock()

    def get(self) -> CountryRanges:
        value = self._value
        if value is None:
            with self._lock:
                if self._value is None:
                    self._value = CountryRanges.from_dir()
                value = self._value
        return value


_COUNTRIES = _Once()


def countries() -> CountryRanges:
    """The process-wide table from :func:`adfunnel.data.data_dir`, loaded on first call.

    Raises:
        FileNotFoundError: the data directory or a file is missing.
    """
    return _COUNTRIES.get()
