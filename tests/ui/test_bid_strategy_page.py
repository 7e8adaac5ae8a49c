"""The campaign page shows an automatic campaign's bid strategy and λ next to p (issue
#27); a manual campaign's page shows its bid as before."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.settings import load_settings
from adfunnel.ui.session import COOKIE
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.serving.conftest import START
from tests.serving.helpers import make_campaign


@pytest.fixture
def client() -> Iterator[TestClient]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    with TestClient(build_app(rt), follow_redirects=False) as c:
        c.rt = rt  # type: ignore[attr-defined]
        yield c
    rt.close()


def _page(client: TestClient, campaign_id: int) -> str:
    r = client.post("/ui/login", data={"api_key": ADMIN_KEY})
    assert r.status_code == 303, r.text
    client.cookies.set(COOKIE, r.cookies[COOKIE], path="/ui")
    page = client.get(f"/ui/campaigns/{campaign_id}")
    assert page.status_code == 200, page.text
    return page.text


def test_the_page_shows_the_strategy_and_lambda(client: TestClient) -> None:
    """λ is the budget service's, read as p is. Red when the facts drop ``lam`` (the
    page reads 1.000)."""
    client.headers.update(ADMIN_HEADERS)
    made = make_campaign(client, objective="clicks", bid_type="CPC", bid_micros=None,
                         bid_strategy="max_clicks", bid_cap_micros=2_000_000)
    cid = made["campaign"]["id"]
    client.rt.clock.advance(1)  # type: ignore[attr-defined]
    lam = client.rt.gate.process.service.current(  # type: ignore[attr-defined]
        cid, client.rt.clock.now().timestamp()).lam  # type: ignore[attr-defined]
    assert lam > 1.0
    text = _page(client, cid)
    assert re.search(r'id="bid-strategy">max clicks<', text)
    assert f'id="bid-multiplier">{lam:.3f}<' in text
    assert 'id="pacing-p">1.000<' in text


def test_a_manual_campaign_shows_its_bid(client: TestClient) -> None:
    client.headers.update(ADMIN_HEADERS)
    cid = make_campaign(client)["campaign"]["id"]
    text = _page(client, cid)
    assert 'id="bid-strategy">manual<' in text and "bid-multiplier" not in text
