"""Who sent a beacon: the client's IP address and user agent, as tier-1 invalid-traffic
rules need them (:mod:`adfunnel.ivt.rules`).

The address is the socket's peer, or — only when that peer is one of the configured
trusted proxies (``trusted_proxies``, CIDRs) — the right-most ``X-Forwarded-For`` entry
that is not itself a trusted proxy (entries further left are what the client claims,
and anyone can claim anything). A peer that is not an IP address (a Unix socket, an
in-process test client) is a local transport: it is trusted the same way, and without
``X-Forwarded-For`` the address is unknown (None: the address rules are skipped).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class ClientFacts:
    """A beacon's sender: ``ip`` (text, None when unknown) and ``user_agent`` (None when
    the request had no ``User-Agent``)."""

    ip: str | None
    user_agent: str | None


def parse_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """CIDRs (``10.0.0.0/8``, ``::1/128``, a bare address) as networks.

    Raises:
        ValueError: an entry that is not an address or network.
    """
    return tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs)


def client_facts(peer: str | None, forwarded_for: str | None, user_agent: str | None,
                 trusted: Sequence[Network]) -> ClientFacts:
    """The :class:`ClientFacts` of one request (see the module docstring)."""
    return _resolve(peer, forwarded_for, user_agent, trusted)


_log = logging.getLogger("adfunnel.tracking")


class ClientResolver:
    """:func:`client_facts` for one set of trusted proxies, remembering the address of
    up to ``size`` (peer, ``X-Forwarded-For``) pairs: a feed's pairs repeat (a proxy, its
    clients) and the answer is pure. Thread-safe (a lost race recomputes).

    The first request that carries ``X-Forwarded-For`` from a peer outside the trusted
    proxies logs one warning naming ``ADFUNNEL_TRUSTED_PROXIES``: behind a proxy that is
    not trusted, every viewer has the proxy's address, and the per-address invalid
    traffic rules would reverse their real impressions."""

    def __init__(self, trusted: Sequence[Network], size: int = 65_536) -> None:
        self.trusted = tuple(trusted)
        self._size = size
        self._known: dict[tuple[str | None, str | None], str | None] = {}
        self.warned = False  # the untrusted X-Forwarded-For warning was logged

    def __call__(self, peer: str | None, forwarded_for: str | None,
                 user_agent: str | None) -> ClientFacts:
        key = (peer, forwarded_for)
        try:
            return ClientFacts(self._known[key], user_agent)
        except KeyError:
            pass
        facts = _resolve(peer, forwarded_for, user_agent, self.trusted)
        if forwarded_for and not self.warned and facts.ip == peer and peer is not None:
            self._warn_untrusted(peer)
        if len(self._known) >= self._size:
            self._known.clear()
        self._known[key] = facts.ip
        return facts

    def _warn_untrusted(self, peer: str) -> None:
        self.warned = True
        _log.warning(
            "requests arrive with X-Forwarded-For from %s, which is not in "
            "ADFUNNEL_TRUSTED_PROXIES: the header is ignored and every client behind it "
            "has the proxy's address (invalid-traffic rate rules count per address). "
            "Set ADFUNNEL_TRUSTED_PROXIES to the proxy's address or CIDR.", peer)


def trusted_peer(peer: str | None, trusted: Sequence[Network]) -> bool:
    """True when the socket's ``peer`` may speak for the client (its ``X-Forwarded-*``
    headers are believed): one of the ``trusted`` proxies, or a local transport (a peer
    that is not an IP address). The one rule for beacons and the dashboard's cookie."""
    address = _address(peer)
    return address is None or _trusted(address, trusted)


def _resolve(peer: str | None, forwarded_for: str | None, user_agent: str | None,
             trusted: Sequence[Network]) -> ClientFacts:
    address = _address(peer)
    if not trusted_peer(peer, trusted):
        return ClientFacts(peer, user_agent)
    if forwarded_for:
        hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
        for hop in reversed(hops):
            hop_address = _address(hop)
            if hop_address is None or not _trusted(hop_address, trusted):
                return ClientFacts(hop, user_agent)  # unparseable: tier 1 says bad_ip
        if hops:
            return ClientFacts(hops[0], user_agent)
    return ClientFacts(peer if address is not None else None, user_agent)


def _address(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    return _parsed(text) if text else None


@functools.lru_cache(maxsize=65_536)
def _parsed(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``text`` as an address (None: not one); the addresses of a feed repeat (a proxy,
    its clients), so parses are kept."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address: ipaddress.IPv4Address | ipaddress.IPv6Address,
             trusted: Sequence[Network]) -> bool:
    return _trusted_in(address, tuple(trusted))


@functools.lru_cache(maxsize=65_536)
def _trusted_in(address: ipaddress.IPv4Address | ipaddress.IPv6Address,
                trusted: tuple[Network, ...]) -> bool:
    return any(address.version == n.version and address in n for n in trusted)
