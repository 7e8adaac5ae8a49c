"""Reference lists: crawler user agents (RE2 over the package's patterns) and IP ranges
(py-radix trees over the shared data), IPv4 and IPv6, with differential checks."""

from __future__ import annotations

import ipaddress
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.ivt import lists
from adfunnel.ivt.lists import (
    IP_SOURCES,
    CrawlerUserAgents,
    IpKind,
    IpRanges,
    IpSource,
    parse_ip,
)
from tests.ivt.conftest import BROWSER_UAS, GOOGLEBOT_UA

# --- user agents -------------------------------------------------------------------


def test_googlebot_is_a_crawler_and_browsers_are_not(user_agents: CrawlerUserAgents) -> None:
    assert user_agents.is_crawler(GOOGLEBOT_UA)
    assert user_agents.match(GOOGLEBOT_UA) == "Googlebot/"
    for ua in BROWSER_UAS:
        assert not user_agents.is_crawler(ua), ua
        assert user_agents.match(ua) is None


def test_every_example_of_the_list_is_matched(user_agents: CrawlerUserAgents) -> None:
    """The one RE2 alternation agrees with the list: each entry's own examples match."""
    import crawleruseragents

    examples = [ua for entry in crawleruseragents.CRAWLER_USER_AGENTS_DATA
                for ua in entry.get("instances", [])]
    assert len(examples) > 2000
    missed = [ua for ua in examples if not user_agents.is_crawler(ua)]
    assert missed == []


def test_the_shared_json_loads_and_agrees(crawler_json: list[dict[str, Any]],
                                          shared_data: Path,
                                          user_agents: CrawlerUserAgents) -> None:
    path = shared_data / "ivt" / "bot_useragents" / "crawler-user-agents.json"
    from_file = CrawlerUserAgents.from_json(path)
    assert len(from_file) == len(crawler_json) > 1400
    examples = [ua for entry in crawler_json for ua in entry.get("instances", [])]
    assert all(from_file.is_crawler(ua) for ua in examples)
    assert all(user_agents.is_crawler(ua) for ua in examples)
    assert not any(from_file.is_crawler(ua) for ua in BROWSER_UAS)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_matching_never_raises(user_agents: CrawlerUserAgents, ua: str) -> None:
    assert user_agents.is_crawler(ua) == (user_agents.match(ua) is not None)


def test_bad_pattern_lists_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no crawler"):
        CrawlerUserAgents([])
    with pytest.raises(ValueError, match=r"\(\?<=x\)y"):
        CrawlerUserAgents(["bot", "(?<=x)y"])  # look-behind: not RE2
    bad = tmp_path / "bad.json"
    bad.write_text('{"pattern": "bot"}', encoding="utf-8")
    with pytest.raises(ValueError, match="JSON list"):
        CrawlerUserAgents.from_json(bad)


# --- addresses ---------------------------------------------------------------------


@pytest.mark.parametrize(("ip", "packed"), [
    ("81.2.69.142", bytes([81, 2, 69, 142])),
    ("::ffff:81.2.69.142", bytes([81, 2, 69, 142])),
    ("2001:4860:4801:2::1", ipaddress.IPv6Address("2001:4860:4801:2::1").packed),
])
def test_parse_ip(ip: str, packed: bytes) -> None:
    assert parse_ip(ip) == packed


@pytest.mark.parametrize("ip", [
    "", "1.2.3", "999.1.1.1", "1.2.3.4 ", " 1.2.3.4", "10.0.0.1/8", "fe80::1%eth0",
    "[::1]", "1.2.3.4:80", "abc", "::g",
])
def test_parse_ip_refuses(ip: str) -> None:
    with pytest.raises(ValueError, match="not an IP address"):
        parse_ip(ip)


# Real examples, each from the file named.
@pytest.mark.parametrize(("ip", "kind"), [
    ("3.5.140.1", IpKind.DATACENTER),  # lord-alfred amazon 3.5.128.0/19 (AWS)
    ("34.2.10.20", IpKind.DATACENTER),  # lord-alfred google 34.2.0.0/16 (GCP)
    ("8.8.8.8", IpKind.DATACENTER),  # lord-alfred google 8.8.8.0/24
    ("66.249.66.1", IpKind.CRAWLER),  # lord-alfred googlebot 66.249.66.0/24
    ("157.55.39.10", IpKind.CRAWLER),  # lord-alfred bing 157.55.39.0/24
    ("104.28.28.1", IpKind.RELAY),  # apple-proxy 104.28.28.0/26, inside ipcat 104.16.0.0/12
    ("::ffff:3.5.140.1", IpKind.DATACENTER),  # AWS, as a dual-stack socket reports it
    # IPv6
    ("2600:1f18::1", IpKind.DATACENTER),  # x4bnet/amazon 2600:1f18::/33 (AWS us-east-1)
    ("2a00:1450:4001:82a::200e", IpKind.DATACENTER),  # lord-alfred google 2a00:1450::/32
    ("2001:4860:4801:2::1", IpKind.CRAWLER),  # lord-alfred googlebot 2001:4860:4801:2::/64
    ("2a02:26f7:b00a:4000::1", IpKind.RELAY),  # apple-proxy 2a02:26f7:b00a:4000::/64
])
def test_real_ranges(ranges: IpRanges, ip: str, kind: IpKind) -> None:
    match = ranges.lookup(ip)
    assert match is not None and match.kind is kind, match


@pytest.mark.parametrize("ip", [
    "81.2.69.142",  # a UK broadband address (MaxMind's GeoIP test address)
    "90.0.0.1",  # Orange France broadband
    "2003:c1:1234::1",  # Deutsche Telekom's 2003::/19 broadband
])
def test_residential_addresses_are_in_no_range(ranges: IpRanges, ip: str) -> None:
    assert ranges.lookup(ip) is None


def test_every_listed_prefix_is_found(ranges: IpRanges, shared_data: Path) -> None:
    """The first and last address of every 50th prefix of each CIDR list falls in a range
    of at least the precedence its list gives (crawler > relay > datacenter)."""
    rank = {IpKind.CRAWLER: 0, IpKind.RELAY: 1, IpKind.DATACENTER: 2}
    base = shared_data / "ivt" / "datacenter_ips"
    checked = 0
    for source in IP_SOURCES:
        if source.fmt != "cidr":
            continue
        lines = [ln.strip() for ln in (base / source.path).read_text().splitlines()]
        for text in [ln for ln in lines if ln and not ln.startswith("#")][::50]:
            network = ipaddress.ip_network(text)
            for address in (network[0], network[-1]):
                match = ranges.lookup(str(address))
                assert match is not None, (source.path, text)
                assert rank[match.kind] <= rank[source.kind], (source.path, text, match)
                checked += 1
    assert checked > 2000
    sizes = ranges.sizes()
    assert sizes[IpKind.DATACENTER] > 50_000 and sizes[IpKind.CRAWLER] > 1000


def test_ipcat_ranges_are_split_into_prefixes(ranges: IpRanges, shared_data: Path) -> None:
    rows = (shared_data / "ivt/datacenter_ips/ipcat-datacenters.csv").read_text().splitlines()
    for row in rows[::100]:
        first, last = row.split(",")[:2]
        for address in (first, last):
            assert ranges.lookup(address) is not None, row


_PREFIXES = st.builds(
    lambda addr, length: ipaddress.ip_network(f"{ipaddress.IPv4Address(addr)}/{length}",
                                              strict=False),
    st.integers(0, 2**32 - 1), st.integers(8, 32))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_PREFIXES, st.sampled_from(list(IpKind))), max_size=30),
       st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=30))
def test_lookup_agrees_with_a_scan(entries: list[tuple[ipaddress.IPv4Network, IpKind]],
                                   addresses: list[int]) -> None:
    """Differential: the trees answer as a scan of the prefixes does (per kind the
    longest prefix, first listed wins a tie; kinds by precedence)."""
    ranges = IpRanges()
    for i, (network, kind) in enumerate(entries):
        ranges.add(str(network), kind, f"s{i}")
    probes = addresses + [int(n.network_address) for n, _ in entries]
    for value in probes:
        address = ipaddress.IPv4Address(value)
        expected = None
        for kind in (IpKind.CRAWLER, IpKind.RELAY, IpKind.DATACENTER):
            hits = [(n, i) for i, (n, k) in enumerate(entries) if k is kind and address in n]
            if hits:
                best = max(hits, key=lambda h: (h[0].prefixlen, -h[1]))
                expected = (kind, f"s{best[1]}", str(best[0]))
                break
        match = ranges.lookup(str(address))
        got = None if match is None else (match.kind, match.source, match.prefix)
        assert got == expected


def test_ipv6_prefixes_of_any_length() -> None:
    ranges = IpRanges()
    ranges.add("2001:db8::/32", IpKind.DATACENTER, "doc")
    ranges.add("2001:db8:1::/48", IpKind.RELAY, "relay")
    ranges.add("2001:db8:1:2::/64", IpKind.CRAWLER, "bot")
    assert ranges.lookup("2001:db8:ffff::1").kind is IpKind.DATACENTER  # type: ignore[union-attr]
    assert ranges.lookup("2001:db8:1:3::1").kind is IpKind.RELAY  # type: ignore[union-attr]
    assert ranges.lookup("2001:db8:1:2::99").kind is IpKind.CRAWLER  # type: ignore[union-attr]
    assert ranges.lookup("2001:db9::1") is None
    with pytest.raises(ValueError, match="CIDR"):
        ranges.add("not-a-prefix", IpKind.DATACENTER, "x")


# --- loading -----------------------------------------------------------------------


def test_from_dir_reads_both_formats_and_names_a_missing_file(tmp_path: Path) -> None:
    base = tmp_path / "ivt" / "datacenter_ips"
    base.mkdir(parents=True)
    (base / "dc.txt").write_text("# comment\n192.0.2.0/24\n2001:db8::/32  # trailing\n\n")
    (base / "cat.csv").write_text("198.51.100.0,198.51.100.9,Example Host,http://x/\n")
    sources = (IpSource("dc.txt", IpKind.DATACENTER, "dc"),
               IpSource("cat.csv", IpKind.DATACENTER, "cat", "ipcat"))
    ranges = IpRanges.from_dir(tmp_path, sources)
    assert ranges.lookup("192.0.2.7").source == "dc"  # type: ignore[union-attr]
    assert ranges.lookup("2001:db8::5") is not None
    match = ranges.lookup("198.51.100.9")
    assert match is not None and match.source == "cat:Example Host"
    assert match.prefix == "198.51.100.8/31"  # 0–9 split into /29 and /31
    assert ranges.lookup("198.51.100.10") is None
    with pytest.raises(FileNotFoundError, match="ADFUNNEL_DATA_DIR"):
        IpRanges.from_dir(tmp_path, (IpSource("absent.txt", IpKind.DATACENTER, "x"),))


def test_process_wide_lists_load_once_under_racing_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    barrier = threading.Barrier(8)

    def build() -> object:
        calls.append(1)
        return object()

    once: lists._Once[object] = lists._Once(build)
    seen: list[object] = []

    def worker() -> None:
        barrier.wait()
        seen.append(once.get())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len({id(v) for v in seen}) == 1
    once.reset()
    assert once.get() is not seen[0] and len(calls) == 2


def test_process_wide_accessors(monkeypatch: pytest.MonkeyPatch, shared_data: Path) -> None:
    lists.reset()
    try:
        user_agents, ranges = lists.preload()
        assert lists.crawler_user_agents() is user_agents
        assert lists.ip_ranges() is ranges
        assert ranges.lookup("66.249.66.1") is not None
    finally:
        lists.reset()
