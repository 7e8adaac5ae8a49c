"""The real reference lists, loaded once for the IVT tests.

They come from ``$ADFUNNEL_DATA_DIR`` (default ``shared/data`` beside the checkout),
like the product; a missing directory fails the tests rather than skipping them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adfunnel.data import data_dir
from adfunnel.ivt.lists import CrawlerUserAgents, IpRanges

#: Real browser user agents (current Chrome on Windows, Safari on iPhone, Firefox on
#: Linux, Edge): not crawlers.
BROWSER_UAS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.51",
)
CHROME_UA = BROWSER_UAS[0]
#: An example from the list's own Googlebot entry.
GOOGLEBOT_UA = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return data_dir("ivt")


@pytest.fixture(scope="session")
def crawler_json(shared_data: Path) -> list[dict[str, Any]]:
    path = shared_data / "ivt" / "bot_useragents" / "crawler-user-agents.json"
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def user_agents() -> CrawlerUserAgents:
    return CrawlerUserAgents.from_package()


@pytest.fixture(scope="session")
def ranges(shared_data: Path) -> IpRanges:
    return IpRanges.from_dir(shared_data)
