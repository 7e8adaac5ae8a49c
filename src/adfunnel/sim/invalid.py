"""Known invalid traffic the replay injects into its beacons, from sources the filter it
tests does not load, so that what is flagged measures the filter's recall rather than
its lists' agreement with themselves:

- ``crawler_ua:device-detector``: the user agents of the bots in Matomo Device
  Detector's test fixtures (the ``device-detector`` package's ``bots.yml``: 1,346
  distinct real bot user agents a header can carry). The filter matches the
  crawler-user-agents list, an independent project; a bot of one list that the other's
  patterns miss is billed.
- ``datacenter_ip:<provider>``: addresses in a cloud provider's own published IPv4
  ranges (lord-alfred/ipranges). The replay's server is started with these lists held
  out (``ADFUNNEL_IVT_HELD_OUT_LISTS``, :data:`HELD_OUT_PROVIDERS`), so only the lists it
  keeps — X4BNet's datacenter and VPN lists, ipcat, and the other providers' — can flag
  them.

Each source is drawn with its own share of served ads; the replay reports, per source,
the events injected and those the server flagged (``events.injected_by_source``).
"""

from __future__ import annotations

import importlib.resources
import ipaddress
import random
from pathlib import Path

import yaml_rs

from adfunnel.data import data_dir

#: The user agent of simulated people's browsers (genuine beacons of the simulations).
PERSON_UA = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
             "Chrome/131.0.0.0 Safari/537.36")
#: Share of served ads whose beacons carry a bot's user agent / a datacenter address.
CRAWLER_SHARE = 0.03
DATACENTER_SHARE = 0.02
#: Cloud providers whose own published ranges the datacenter addresses come from; the
#: replay's server does not load these lists (``ivt_held_out_lists``).
HELD_OUT_PROVIDERS = ("amazon", "google", "microsoft", "oracle", "digitalocean", "linode",
                      "vultr")
#: The bot fixtures of Matomo Device Detector inside the ``device-detector`` package.
BOT_FIXTURES = "tests/fixtures/upstream/bots.yml"
CRAWLER_SOURCE = "crawler_ua:device-detector"


def bot_user_agents() -> list[str]:
    """The distinct user agents of Device Detector's bot fixtures that an HTTP header can
    carry as printable ASCII (1,346 of 1,347: one holds an emoji), sorted.

    Raises:
        OSError: the package's fixture file cannot be read.
    """
    text = (importlib.resources.files("device_detector") / BOT_FIXTURES).read_text("utf-8")
    return sorted({ua for entry in yaml_rs.loads(text)
                   if (ua := entry.get("user_agent")) and ua.isascii() and ua.isprintable()})


class InvalidTraffic:
    """Draws, per served ad, whether its beacons are injected invalid traffic, from which
    source and with which user agent or address. Seeded: the same seed draws the same
    traffic. Providers are drawn evenly, then a range of the provider's, then an address
    in it, so each provider's recall rests on a similar count.

    Raises (on construction):
        OSError: the reference files cannot be read.
    """

    def __init__(self, seed: int, root: Path | None = None) -> None:
        self.user_agents = bot_user_agents()
        ranges = (root or data_dir("ivt")) / "ivt" / "datacenter_ips" / "lord-alfred-ipranges"
        self.networks = {
            provider: [ipaddress.ip_network(line.strip())
                       for line in (ranges / provider / "ipv4_merged.txt").read_text()
                       .splitlines() if line.strip()]
            for provider in HELD_OUT_PROVIDERS}
        self.rng = random.Random(seed)

    def draw(self) -> tuple[str | None, str | None, str | None]:
        """(kind, source, value) for one served ad: ("crawler_ua", its source, a user
        agent), ("datacenter", ``datacenter_ip:<provider>``, an address), or
        (None, None, None) for genuine traffic."""
        x = self.rng.random()
        if x < CRAWLER_SHARE:
            return "crawler_ua", CRAWLER_SOURCE, self.rng.choice(self.user_agents)
        if x < CRAWLER_SHARE + DATACENTER_SHARE:
            provider = self.rng.choice(HELD_OUT_PROVIDERS)
            net = self.rng.choice(self.networks[provider])
            offset = self.rng.randrange(1, max(2, net.num_addresses - 1))
            return "datacenter", f"datacenter_ip:{provider}", str(net.network_address + offset)
        return None, None, None


def row_address(masked: str) -> str:
    """The log's masked address (``113.76.1.*``) with a host part: ``113.76.1.1``."""
    return masked.replace("*", "1")
