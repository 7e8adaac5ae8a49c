"""Known invalid traffic the replay injects into its beacons, drawn from the real lists
in ``shared/data/ivt``: crawler user agents (the example user agents of the
crawler-user-agents list) and datacenter addresses (cloud providers' published IPv4
ranges). Every injected beacon must be flagged; the report counts any that bills.
"""

from __future__ import annotations

import ipaddress
import json
import random
from pathlib import Path

from adfunnel.sim.ipinyou import data_dir

#: The user agent of simulated people's browsers (genuine beacons of the simulations).
PERSON_UA = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
             "Chrome/131.0.0.0 Safari/537.36")
#: Share of served ads whose beacons carry a crawler user agent / a datacenter address.
CRAWLER_SHARE = 0.03
DATACENTER_SHARE = 0.02
#: Cloud providers whose published ranges the datacenter addresses come from.
PROVIDERS = ("amazon", "digitalocean", "linode", "vultr", "oracle")


class InvalidTraffic:
    """Draws, per served ad, whether its beacons are injected invalid traffic and with
    which user agent or address. Seeded: the same seed draws the same traffic.

    Raises (on construction):
        OSError: the reference files cannot be read.
    """

    def __init__(self, seed: int, root: Path | None = None) -> None:
        base = (root or data_dir()) / "ivt"
        crawlers = json.loads((base / "bot_useragents" / "crawler-user-agents.json")
                              .read_text(encoding="utf-8"))
        self.user_agents = sorted({ua for entry in crawlers for ua in entry.get("instances", [])})
        ranges = base / "datacenter_ips" / "lord-alfred-ipranges"
        self.networks = [ipaddress.ip_network(line.strip())
                         for provider in PROVIDERS
                         for line in (ranges / provider / "ipv4_merged.txt").read_text()
                         .splitlines() if line.strip()]
        self.rng = random.Random(seed)

    def draw(self) -> tuple[str | None, str | None]:
        """(kind, value) for one served ad: ("crawler_ua", a user agent), ("datacenter",
        an address), or (None, None) for genuine traffic."""
        x = self.rng.random()
        if x < CRAWLER_SHARE:
            return "crawler_ua", self.rng.choice(self.user_agents)
        if x < CRAWLER_SHARE + DATACENTER_SHARE:
            net = self.rng.choice(self.networks)
            offset = self.rng.randrange(1, max(2, net.num_addresses - 1))
            return "datacenter", str(net.network_address + offset)
        return None, None


def row_address(masked: str) -> str:
    """The log's masked address (``113.76.1.*``) with a host part: ``113.76.1.1``."""
    return masked.replace("*", "1")
