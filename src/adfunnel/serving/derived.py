"""What the server derives for an ad request that a browser cannot send: the country
from the client address and the device type, OS and browser from the User-Agent.

A page's tag sends only the placement, its slots and a user key; targeting on
``geo.country``, ``device_type``, ``os`` and ``browser`` still works because
:class:`ClientDerivation` fills them in — each only where the request's own
``user.attributes`` do not give it (the request wins: an app knows better).

- ``geo.country``: the client address (the socket's peer, or ``X-Forwarded-For`` when
  the peer is a trusted proxy: :class:`~adfunnel.tracking.client.ClientResolver`, the
  beacons' own rule) looked up in DB-IP's country lite data (:mod:`adfunnel.geo`). The
  data is country-level only: ``geo.region`` and ``geo.city`` stay what the request says.
- ``device_type`` (``mobile``, ``tablet``, ``desktop``), ``os`` and ``browser``:
  ``ua-parser`` (uap-core's regexes), lower-cased names with the families of one product
  merged (:data:`OS_NAMES`, :data:`BROWSER_NAMES`: "Mobile Safari" is ``safari``,
  "Chrome Mobile iOS" is ``chrome``). A user agent ua-parser does not know (``Other``)
  gives nothing, and a crawler's gives no device type.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

import ua_parser

from adfunnel.geo import CountryRanges, countries
from adfunnel.serving.request import SelectRequest
from adfunnel.tracking.client import ClientResolver, Network

#: ua-parser's OS family → the ``os`` value (unlisted families: lower-cased).
OS_NAMES = {
    "Mac OS X": "macos", "iOS": "ios", "iPadOS": "ios", "Android": "android",
    "Windows": "windows", "Chrome OS": "chromeos", "Linux": "linux", "Ubuntu": "linux",
    "Fedora": "linux", "Debian": "linux",
}
#: ua-parser's browser family → the ``browser`` value (unlisted families: lower-cased).
BROWSER_NAMES = {
    "Chrome": "chrome", "Chrome Mobile": "chrome", "Chrome Mobile iOS": "chrome",
    "Chrome Mobile WebView": "chrome", "Chromium": "chrome", "HeadlessChrome": "chrome",
    "Safari": "safari", "Mobile Safari": "safari", "Mobile Safari UI/WKWebView": "safari",
    "Firefox": "firefox", "Firefox Mobile": "firefox", "Firefox iOS": "firefox",
    "Edge": "edge", "Edge Mobile": "edge", "Opera": "opera", "Opera Mobile": "opera",
    "Samsung Internet": "samsung",
}
_MOBILE_OS = frozenset({"ios", "android", "windows phone", "blackberry os", "kaios"})
_DESKTOP_OS = frozenset({"macos", "windows", "linux", "chromeos", "freebsd", "openbsd"})
_UA_CACHE = 8192  # distinct user agents remembered; real traffic repeats a few thousand


@functools.lru_cache(maxsize=_UA_CACHE)
def user_agent_facts(user_agent: str) -> tuple[tuple[str, str], ...]:
    """``(attribute, value)`` pairs of ``device_type``, ``os`` and ``browser`` that
    ``user_agent`` tells; empty for an unknown one."""
    parsed = ua_parser.parse(user_agent)
    facts: list[tuple[str, str]] = []
    os_name = browser = None
    if parsed.os is not None and parsed.os.family != "Other":
        os_name = OS_NAMES.get(parsed.os.family, parsed.os.family.lower())
        facts.append(("os", os_name))
    if parsed.user_agent is not None and parsed.user_agent.family != "Other":
        browser = BROWSER_NAMES.get(parsed.user_agent.family, parsed.user_agent.family.lower())
        facts.append(("browser", browser))
    device = _device_type(parsed.device.family if parsed.device is not None else None,
                          os_name, user_agent)
    if device is not None:
        facts.append(("device_type", device))
    return tuple(facts)


def _device_type(family: str | None, os_name: str | None, user_agent: str) -> str | None:
    if family == "Spider":
        return None
    if family is not None and ("iPad" in family or "Tablet" in family
                               or "Kindle" in family):
        return "tablet"
    if os_name == "android" and "Mobile" not in user_agent:  # Android's tablet convention
        return "tablet"
    if os_name in _MOBILE_OS:
        return "mobile"
    if os_name in _DESKTOP_OS:
        return "desktop"
    return None


class ClientDerivation:
    """Fills in an ad request's ``geo.country``, ``device_type``, ``os`` and ``browser``
    from its HTTP scope (see the module docstring).

    Args:
        countries: the address → country table, or None (no country is derived).
        trusted_proxies: whose ``X-Forwarded-For`` names the client.
    """

    def __init__(self, countries: CountryRanges | None,
                 trusted_proxies: Sequence[Network] = ()) -> None:
        self.countries = countries
        self._resolve = ClientResolver(trusted_proxies)

    def __call__(self, req: SelectRequest, scope: dict[str, Any]) -> None:
        """Add the derived attributes the request does not give to ``req.user``."""
        forwarded = agent = None
        for name, value in scope["headers"]:
            if name == b"x-forwarded-for" and forwarded is None:
                forwarded = value.decode("latin-1")
            elif name == b"user-agent" and agent is None:
                agent = value.decode("latin-1")
        given = req.user.attributes
        derived: dict[str, object] = {}
        if agent:
            derived.update(p for p in user_agent_facts(agent) if p[0] not in given)
        if self.countries is not None and "geo.country" not in given:
            client = scope.get("client")
            ip = self._resolve(client[0] if client else None, forwarded, agent).ip
            country = self.countries.country(ip)
            if country is not None:
                derived["geo.country"] = country
        if derived:
            req.user.attributes = {**given, **derived}


_log = logging.getLogger("adfunnel.serving")


def client_derivation(enabled: bool, trusted_proxies: Sequence[Network]
                      ) -> ClientDerivation | None:
    """The derivation of a serving process (setting ``derive_client_facts``), its data
    loaded now so no request pays for it (about 1 s); None when turned off. Without the
    geo data (a data directory lacking ``geo/``) it derives the device facts only, and
    says so once in the log."""
    if not enabled:
        return None
    table: CountryRanges | None
    try:
        table = countries()
    except FileNotFoundError as exc:
        _log.warning("no country is derived from client addresses: %s", exc)
        table = None
    user_agent_facts("Mozilla/5.0")  # ua-parser compiles its regexes on first use
    return ClientDerivation(table, trusted_proxies)
