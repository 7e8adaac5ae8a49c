"""Reference lists for invalid traffic: crawler user agents and bot/datacenter IP ranges.

Crawler user agents come from the ``crawler-user-agents`` package (monperrus/
crawler-user-agents, MIT; the same list as ``shared/data/ivt/bot_useragents``). Its
own matcher tries chunks of Python ``re`` alternations (about 0.2–1 ms per browser
user agent), so the patterns are compiled here into one RE2 alternation
(``google-re2``, a DFA: a few microseconds whatever the pattern count), matched
case-sensitively as the list intends.

IP ranges come from ``$ADFUNNEL_DATA_DIR/ivt/datacenter_ips`` (see its PROVENANCE.md)
and go into ``py-radix`` Patricia trees, IPv4 and IPv6 alike, one tree per
:class:`IpKind`:

- ``crawler``: published ranges of declared bots (Googlebot, Bingbot, DuckDuckBot,
  DuckAssistBot, OpenAI, Perplexity, Pingdom, StatusCake). Every request from them is
  a bot, verified or not, so it is never billed.
- ``relay``: iCloud Private Relay egress ranges. People browse through them, and most
  of them sit inside datacenter lists (12,937 of its 13,745 ranges overlap), so an
  address in a relay range is not called datacenter traffic.
- ``datacenter``: hosting, cloud and VPN ranges (X4BNet datacenter and VPN lists,
  ipcat, the cloud providers' own published lists).

The process-wide lists load once, on first use, under a lock
(:func:`crawler_user_agents`, :func:`ip_ranges`); call :func:`preload` at start-up to
pay the ~0.3 s before the first request. Both matchers are read-only afterwards and
safe to share between threads.
"""

from __future__ import annotations

import csv
import ipaddress
import json
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Generic, Literal, TypeVar

import radix
import re2

from adfunnel.data import DATA_DIR_ENV, data_dir

#: RE2's memory budget for the compiled crawler alternation (bytes). The default 8 MiB
#: can make the DFA give up and fall back to the slower NFA on long user agents.
UA_REGEX_MAX_MEM = 64 << 20
#: distinct user agents whose verdict is remembered (an LRU); real traffic repeats a
#: few thousand user agents, so most lookups are a dictionary hit.
UA_CACHE_SIZE = 8192

_V4_MAPPED_PREFIX = b"\x00" * 10 + b"\xff\xff"


# --- user agents -------------------------------------------------------------------


class CrawlerUserAgents:
    """Known crawler/bot user-agent patterns, compiled into one RE2 alternation.

    Args:
        patterns: regular expressions (RE2 syntax, which every pattern of the
            crawler-user-agents list is); a user agent is a crawler when any of them
            matches anywhere in it, case-sensitively.
        source: where the patterns came from, for logs.

    Raises:
        ValueError: no patterns, or one that RE2 cannot compile (named in the message).
    """

    def __init__(self, patterns: Iterable[str], source: str = "") -> None:
        self.patterns: tuple[str, ...] = tuple(patterns)
        self.source = source
        if not self.patterns:
            raise ValueError("no crawler user-agent patterns")
        options = re2.Options()
        options.max_mem = UA_REGEX_MAX_MEM
        options.never_capture = True
        options.log_errors = False
        try:
            self._regex = re2.compile("|".join(f"(?:{p})" for p in self.patterns), options)
        except re2.error as exc:
            bad = next((p for p in self.patterns if not _compiles(p)), "?")
            raise ValueError(f"crawler pattern RE2 cannot compile: {bad!r}") from exc
        self._cached = lru_cache(maxsize=UA_CACHE_SIZE)(self._search)

    @classmethod
    def from_package(cls) -> CrawlerUserAgents:
        """The list the ``crawler-user-agents`` package ships (imported here, lazily)."""
        import crawleruseragents  # the module reads its JSON at import time

        data = crawleruseragents.CRAWLER_USER_AGENTS_DATA
        return cls((entry["pattern"] for entry in data), source="crawler-user-agents package")

    @classmethod
    def from_json(cls, path: Path) -> CrawlerUserAgents:
        """A crawler-user-agents JSON file (a list of ``{"pattern": …}`` objects).

        Raises:
            OSError: the file cannot be read.
            ValueError: it is not such a list, or a pattern does not compile.
        """
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON list of crawler entries")
        return cls((entry["pattern"] for entry in data), source=str(path))

    def match(self, user_agent: str) -> str | None:
        """The text of ``user_agent`` that a crawler pattern matched, or None.

        About 3–15 µs uncached (RE2, linear in the user agent's length), well under
        1 µs for a user agent among the last :data:`UA_CACHE_SIZE` distinct ones.
        """
        return self._cached(user_agent)

    def is_crawler(self, user_agent: str) -> bool:
        """Whether any crawler pattern matches ``user_agent``."""
        return self._cached(user_agent) is not None

    def _search(self, user_agent: str) -> str | None:
        m = self._regex.search(user_agent)
        return None if m is None else m.group(0)

    def __len__(self) -> int:
        return len(self.patterns)


def _compiles(pattern: str) -> bool:
    try:
        re2.compile(pattern)
    except re2.error:
        return False
    return True


# --- IP ranges ---------------------------------------------------------------------


class IpKind(StrEnum):
    """What a range says about the traffic from it (see the module docstring)."""

    CRAWLER = "crawler"
    RELAY = "relay"
    DATACENTER = "datacenter"


@dataclass(frozen=True, slots=True)
class IpSource:
    """One reference file under ``<data>/ivt/datacenter_ips``.

    ``fmt`` is ``cidr`` (one CIDR per line, ``#`` comments) or ``ipcat`` (CSV rows
    ``first,last,provider,url``, inclusive dotted IPv4 bounds).
    """

    path: str
    kind: IpKind
    name: str
    fmt: Literal["cidr", "ipcat"] = "cidr"


def _lord_alfred(kind: IpKind, provider: str, *versions: int) -> tuple[IpSource, ...]:
    return tuple(
        IpSource(f"lord-alfred-ipranges/{provider}/ipv{v}_merged.txt", kind, provider)
        for v in versions
    )


#: The files loaded, and what each says. lord-alfred's ``all/`` union is not loaded: it
#: mixes the relay and crawler lists into the datacenter one.
IP_SOURCES: tuple[IpSource, ...] = (
    # declared bots' published ranges
    *_lord_alfred(IpKind.CRAWLER, "googlebot", 4, 6),
    *_lord_alfred(IpKind.CRAWLER, "bing", 4),
    *_lord_alfred(IpKind.CRAWLER, "duckduckbot", 4),
    *_lord_alfred(IpKind.CRAWLER, "duckassistbot", 4),
    *_lord_alfred(IpKind.CRAWLER, "openai", 4),
    *_lord_alfred(IpKind.CRAWLER, "perplexity", 4),
    *_lord_alfred(IpKind.CRAWLER, "pingdom", 4, 6),
    *_lord_alfred(IpKind.CRAWLER, "statuscake", 4),
    # privacy relays people browse through
    *_lord_alfred(IpKind.RELAY, "apple-proxy", 4, 6),
    # hosting, cloud and VPN
    IpSource("x4bnet-datacenter-ipv4.txt", IpKind.DATACENTER, "x4bnet-datacenter"),
    IpSource("x4bnet-datacenter-ipv6.txt", IpKind.DATACENTER, "x4bnet-datacenter"),
    IpSource("x4bnet-vpn-ipv4.txt", IpKind.DATACENTER, "x4bnet-vpn"),
    IpSource("ipcat-datacenters.csv", IpKind.DATACENTER, "ipcat", "ipcat"),
    *_lord_alfred(IpKind.DATACENTER, "amazon", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "google", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "microsoft", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "oracle", 4),
    *_lord_alfred(IpKind.DATACENTER, "digitalocean", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "linode", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "vultr", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "cloudflare", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "github", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "facebook", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "twitter", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "telegram", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "protonvpn", 4),
)


def held_in(held_out: Iterable[str]) -> tuple[IpSource, ...]:
    """:data:`IP_SOURCES` less the lists named in ``held_out`` (by :attr:`IpSource.name`):
    what a filter loads when some lists are held out to measure its recall on them.

    Raises:
        ValueError: a name that is no list's (the message names it and the known ones).
    """
    names = set(held_out)
    unknown = names - {s.name for s in IP_SOURCES}
    if unknown:
        known = ", ".join(sorted({s.name for s in IP_SOURCES}))
        raise ValueError(f"unknown IP lists {sorted(unknown)}; known: {known}")
    return tuple(s for s in IP_SOURCES if s.name not in names)


@dataclass(frozen=True, slots=True)
class IpMatch:
    """The range an address fell in: its kind, the list it came from and the prefix."""

    kind: IpKind
    source: str
    prefix: str


def parse_ip(ip: str) -> bytes:
    """The address as 4 (IPv4) or 16 (IPv6) network-order bytes, strictly parsed.

    An IPv4-mapped IPv6 address (``::ffff:1.2.3.4``, what a dual-stack socket reports
    for an IPv4 peer) comes back as its 4 IPv4 bytes, so both spellings key alike.

    Raises:
        ValueError: not a plain dotted-quad IPv4 or RFC 4291 IPv6 address (no zone
            index, port, brackets, CIDR suffix or whitespace).
    """
    try:
        if ":" in ip:
            packed = socket.inet_pton(socket.AF_INET6, ip)
            return packed[12:] if packed.startswith(_V4_MAPPED_PREFIX) else packed
        return socket.inet_pton(socket.AF_INET, ip)
    except (OSError, TypeError, ValueError) as exc:
        raise ValueError(f"not an IP address: {ip!r}") from exc


class IpRanges:
    """Longest-prefix lookup of an address in the crawler, relay and datacenter trees.

    Lookups take about 1–2 µs (parse, then up to three Patricia-tree searches in C).
    Build it with :meth:`from_dir`, or empty and :meth:`add` prefixes (tests).
    """

    def __init__(self) -> None:
        self._trees: dict[IpKind, radix.Radix] = {kind: radix.Radix() for kind in IpKind}
        self._crawler = self._trees[IpKind.CRAWLER]
        self._relay = self._trees[IpKind.RELAY]
        self._datacenter = self._trees[IpKind.DATACENTER]

    @classmethod
    def from_dir(cls, root: Path | None = None, sources: Iterable[IpSource] = IP_SOURCES
                 ) -> IpRanges:
        """Load ``sources`` from ``root/ivt/datacenter_ips`` (``root``:
        :func:`adfunnel.data.data_dir`).

        Raises:
            FileNotFoundError: a listed file is missing (the message names it and the
                environment variable); an incomplete list would let invalid traffic
                through unnoticed.
            ValueError: a line is not a CIDR or an ipcat row.
        """
        base = (root or data_dir("ivt")) / "ivt" / "datacenter_ips"
        ranges = cls()
        for source in sources:
            path = base / source.path
            if not path.is_file():
                raise FileNotFoundError(f"IP range list missing: {path} (set {DATA_DIR_ENV})")
            prefixes = _ipcat_prefixes(path) if source.fmt == "ipcat" else _cidr_lines(path)
            for prefix, name in prefixes:
                ranges.add(prefix, source.kind, f"{source.name}:{name}" if name else source.name)
        return ranges

    def add(self, prefix: str, kind: IpKind, source: str) -> None:
        """Add a CIDR prefix (IPv4 or IPv6; host bits are masked off) of ``kind``; of a
        prefix listed twice in one kind the first source is kept.

        Raises:
            ValueError: ``prefix`` is not an address or CIDR network.
        """
        try:
            node = self._trees[kind].add(prefix)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a CIDR prefix: {prefix!r}") from exc
        data = node.data
        if "match" not in data:
            data["match"] = IpMatch(kind, source, node.prefix)

    def lookup(self, ip: str) -> IpMatch | None:
        """The range ``ip`` belongs to, by precedence crawler, then relay (which hides a
        datacenter listing), then datacenter; None for an address in none of them.

        Raises:
            ValueError: ``ip`` does not parse (:func:`parse_ip`).
        """
        return self.lookup_packed(parse_ip(ip))

    def lookup_packed(self, packed: bytes) -> IpMatch | None:
        """:meth:`lookup` for an address already parsed by :func:`parse_ip`."""
        node = self._crawler.search_best(packed=packed)
        if node is not None:
            return node.data["match"]
        node = self._relay.search_best(packed=packed)
        if node is not None:
            return node.data["match"]
        node = self._datacenter.search_best(packed=packed)
        return None if node is None else node.data["match"]

    def sizes(self) -> dict[IpKind, int]:
        """Distinct prefixes per kind."""
        return {kind: len(tree.nodes()) for kind, tree in self._trees.items()}


def _cidr_lines(path: Path) -> Iterator[tuple[str, str]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            text = line.split("#", 1)[0].strip()
            if text:
                yield text, ""


def _ipcat_prefixes(path: Path) -> Iterator[tuple[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        for lineno, row in enumerate(csv.reader(fh), 1):
            if not row:
                continue
            if len(row) < 3:
                raise ValueError(f"{path}:{lineno}: expected first,last,provider,url")
            first, last = ipaddress.IPv4Address(row[0]), ipaddress.IPv4Address(row[1])
            for network in ipaddress.summarize_address_range(first, last):
                yield str(network), row[2]


# --- process-wide, loaded once -----------------------------------------------------

T = TypeVar("T")


class _Once(Generic[T]):
    """A value built on first :meth:`get`, exactly once even when threads race."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        value = self._value
        if value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._build()
                value = self._value
        return value

    def reset(self) -> None:
        with self._lock:
            self._value = None


_USER_AGENTS: _Once[CrawlerUserAgents] = _Once(CrawlerUserAgents.from_package)
_IP_RANGES: _Once[IpRanges] = _Once(IpRanges.from_dir)


def crawler_user_agents() -> CrawlerUserAgents:
    """The process-wide crawler matcher (the package's list), built on first call."""
    return _USER_AGENTS.get()


def ip_ranges() -> IpRanges:
    """The process-wide IP ranges from :func:`adfunnel.data.data_dir`, loaded on first call.

    Raises:
        FileNotFoundError: the data directory or a listed file is missing.
    """
    return _IP_RANGES.get()


def preload() -> tuple[CrawlerUserAgents, IpRanges]:
    """Load both process-wide lists now (start-up), so no request pays for it."""
    return crawler_user_agents(), ip_ranges()


def reset() -> None:
    """Forget the process-wide lists; the next call loads them again (tests, reloads)."""
    _USER_AGENTS.reset()
    _IP_RANGES.reset()
