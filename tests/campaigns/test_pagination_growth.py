"""Every list route with rows added between its pages: the new row is listed once, at
the end, and no row is skipped or repeated — whatever the new row's id sorts like
(README: lists are in creation order). On SQLite and PostgreSQL stores, with the API-key
list over the memory and the SQL key store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from adfunnel.api.campaigns import make_advertiser_router
from adfunnel.api.errors import install_error_handlers
from adfunnel.api.keys import make_api_key_router
from adfunnel.api.operator import make_operator_router
from adfunnel.auth import ApiKeys, MemoryKeyStore, install_auth
from adfunnel.auth.store import KeyStore, SqlKeyStore
from adfunnel.billing.ledger import MemoryLedger
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY

from .test_pagination import AD, CAMPAIGN

NOW = datetime(2026, 11, 3, 15, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite-memkeys", "sqlite-sqlkeys",
                        pytest.param("postgres", marks=pytest.mark.postgres)])
def client(request: pytest.FixtureRequest) -> Iterator[TestClient]:
    """The advertiser, operator and API-key routes over a migrated database; API keys
    in memory or in the same database. The clock moves a second per key issued."""
    url = ("sqlite://" if request.param.startswith("sqlite")
           else request.getfixturevalue("pg_schema_url"))
    engine = make_engine(url)
    upgrade(engine)
    clock = ManualClock(NOW)
    store = SqlCampaignStore(engine, clock)
    key_store: KeyStore = (MemoryKeyStore() if request.param == "sqlite-memkeys"
                           else SqlKeyStore(engine))
    keys = ApiKeys(key_store, clock, ADMIN_KEY)
    app = FastAPI()
    install_error_handlers(app)
    install_auth(app, keys)
    app.include_router(make_advertiser_router(store, MemoryLedger(), clock, None))
    app.include_router(make_operator_router(store))
    app.include_router(make_api_key_router(keys, store))
    with TestClient(app, headers=ADMIN_HEADERS) as c:
        c.app_state = {"clock": clock}  # type: ignore[attr-defined]
        yield c
    engine.dispose()


def _key_of(item: dict[str, Any]) -> Any:
    return item.get("id", item.get("prefix"))


def _pages_with_a_row_added(client: TestClient, path: str, add: Callable[[], Any],
                            ) -> tuple[list[Any], Any]:
    """Read ``path`` two rows a page; after the first page call ``add`` (it returns the
    new row's key); every key listed, in order, and the new key."""
    body = client.get(path, params={"limit": 2}).json()
    listed = [_key_of(i) for i in body["items"]]
    assert body["next_cursor"] is not None
    added = add()
    while body["next_cursor"] is not None:
        body = client.get(path, params={"limit": 2, "cursor": body["next_cursor"]}).json()
        listed += [_key_of(i) for i in body["items"]]
    return listed, added


def _created(r: Any) -> Any:
    assert r.status_code == 201, r.text
    return _key_of(r.json())


def test_a_placement_created_between_pages_is_listed_once_at_the_end(
    client: TestClient,
) -> None:
    """The issue's input: m1…m4, a page past m2, then a0-added (sorts before them)."""
    before = [_created(client.post("/v1/placements", json={"id": f"m{i}", "name": "m"}))
              for i in range(1, 5)]
    listed, added = _pages_with_a_row_added(client, "/v1/placements", lambda: _created(
        client.post("/v1/placements", json={"id": "a0-added", "name": "a"})))
    assert listed == [*before, added]


def test_every_other_list_lists_a_row_added_between_pages_once_at_the_end(
    client: TestClient,
) -> None:
    adv = [_created(client.post("/v1/advertisers", json={"name": f"a{i}"}))
           for i in range(4)]
    cids = [_created(client.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": adv[0]}))
            for _ in range(4)]
    pending = {**AD, "review_state": "pending_review"}
    ads = [_created(client.post(f"/v1/campaigns/{cids[0]}/ads", json=pending))
           for _ in range(4)]
    clock: ManualClock = client.app_state["clock"]  # type: ignore[attr-defined]

    def new_key() -> Any:
        clock.advance(1)  # a key issued later sorts later, whatever its random prefix
        return _created(client.post("/v1/api-keys", json={"role": "admin"}))

    keys = [new_key() for _ in range(4)]
    lists: list[tuple[str, list[Any], Callable[[], Any]]] = [
        ("/v1/advertisers", adv,
         lambda: _created(client.post("/v1/advertisers", json={"name": "late"}))),
        ("/v1/campaigns", cids, lambda: _created(
            client.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": adv[1]}))),
        (f"/v1/campaigns/{cids[0]}/ads", ads,
         lambda: _created(client.post(f"/v1/campaigns/{cids[0]}/ads", json=pending))),
        ("/v1/api-keys", keys, new_key),
    ]
    for path, before, add in lists:
        listed, added = _pages_with_a_row_added(client, path, add)
        assert listed == [*before, added], path
    # the review queue: the ads pending review, the one added to the list above included
    queue = [*ads, max(ads) + 1]
    listed, added = _pages_with_a_row_added(client, "/v1/review/ads", lambda: _created(
        client.post(f"/v1/campaigns/{cids[1]}/ads", json=pending)))
    assert listed == [*queue, added]


def test_api_keys_of_one_instant_still_page_without_repeats(client: TestClient) -> None:
    """A manual clock held still: keys of one instant are listed by prefix, each once."""
    keys = sorted(_created(client.post("/v1/api-keys", json={"role": "admin"}))
                  for _ in range(5))
    body = client.get("/v1/api-keys", params={"limit": 2}).json()
    listed = [_key_of(i) for i in body["items"]]
    while body["next_cursor"] is not None:
        body = client.get("/v1/api-keys", params={"limit": 2,
                                                  "cursor": body["next_cursor"]}).json()
        listed += [_key_of(i) for i in body["items"]]
    assert listed == keys
