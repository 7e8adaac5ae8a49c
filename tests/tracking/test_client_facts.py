"""Who sent a beacon: X-Forwarded-For is believed only from a trusted proxy."""

from __future__ import annotations

from adfunnel.tracking.client import ClientFacts, ClientResolver, client_facts, parse_networks

PROXY = parse_networks(["10.0.0.0/8", "::1/128"])


def test_an_untrusted_peer_is_the_client_whatever_it_forwards() -> None:
    assert client_facts("203.0.113.9", "1.2.3.4", "ua", PROXY) == ClientFacts("203.0.113.9", "ua")


def test_a_trusted_proxy_names_the_rightmost_untrusted_hop() -> None:
    facts = client_facts("10.1.2.3", "6.6.6.6, 198.51.100.7, 10.9.9.9", "ua", PROXY)
    assert facts.ip == "198.51.100.7"  # 6.6.6.6 is what the client claims: not believed


def test_a_trusted_proxy_without_the_header_is_the_client() -> None:
    assert client_facts("::1", None, None, PROXY) == ClientFacts("::1", None)


def test_a_local_transport_uses_the_header_or_knows_no_address() -> None:
    assert client_facts("testclient", "198.51.100.7", "ua", PROXY).ip == "198.51.100.7"
    assert client_facts(None, None, "ua", PROXY).ip is None


def test_garbage_in_the_header_is_passed_on_for_tier_one_to_refuse() -> None:
    assert client_facts("10.0.0.1", "not-an-ip", "ua", PROXY).ip == "not-an-ip"


PEERS = ["203.0.113.9", "10.1.2.3", "::1", "testclient", None, "10.0.0.1"]
FORWARDED = [None, "1.2.3.4", "6.6.6.6, 198.51.100.7, 10.9.9.9", "not-an-ip", "", " , 10.2.2.2"]


def test_the_resolver_answers_as_client_facts_and_stays_bounded() -> None:
    resolve = ClientResolver(PROXY, size=4)
    for _ in range(2):  # the second pass answers from what it remembers (or recomputes)
        for peer in PEERS:
            for forwarded in FORWARDED:
                for agent in ("ua", None):
                    assert resolve(peer, forwarded, agent) == client_facts(
                        peer, forwarded, agent, PROXY), (peer, forwarded, agent)
    assert len(resolve._known) <= 4


def test_forwarded_for_from_an_untrusted_peer_warns_once(caplog) -> None:
    resolve = ClientResolver(PROXY)
    with caplog.at_level("WARNING", logger="adfunnel.tracking"):
        resolve("10.1.2.3", "198.51.100.7", "ua")  # a trusted proxy: no warning
        resolve("203.0.113.9", None, "ua")  # no header: no warning
        assert not caplog.records
        for client in ("1.2.3.4", "5.6.7.8", "1.2.3.4"):
            assert resolve("203.0.113.9", client, "ua").ip == "203.0.113.9"
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "ADFUNNEL_TRUSTED_PROXIES" in warnings[0] and "203.0.113.9" in warnings[0]
