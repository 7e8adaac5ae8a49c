"""The served log is fed by the serving path: every committed decision, no-fills too,
never a shed or late one; ``adfunnel events query`` reads it back."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from adfunnel.cli import app as cli_app
from adfunnel.clock import ManualClock
from adfunnel.events.compactor import compact
from adfunnel.learn.query import query
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS
from tests.serving.conftest import START
from tests.serving.helpers import ad_request, make_campaign


@pytest.mark.slow
def test_committed_decisions_reach_the_served_log(tmp_path: Path) -> None:
    directory = tmp_path / "served"
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="local", served_log_dir=str(directory))
    rt = build_runtime(settings, ManualClock(START), seed=1)
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
        cid = make_campaign(client)["campaign"]["id"]
        filled = client.post("/v1/ads:select", json=ad_request(request_id="r1"))
        assert filled.status_code == 200
        unmatched = ad_request(request_id="r2",
                               slots=[{"id": "s1", "position": 1, "width": 1, "height": 1}])
        assert client.post("/v1/ads:select", json=unmatched).status_code == 204
    # leaving the client shut the server down: the log's queue is written out
    compact(directory, START + timedelta(hours=2))
    rows = query(directory, "select request_id, len(winners), winners[1].campaign_id, "
                            "user_hash from served order by request_id")
    assert [r[:2] for r in rows] == [("r1", 1), ("r2", 0)]
    assert rows[0][2] == cid
    assert rows[0][3] and rows[0][3] != "u1"  # a keyed hash, never the key
    result = CliRunner().invoke(cli_app, ["events", "query", "select count(*) as n from served",
                                          "--dir", str(directory), "--output", "json"])
    assert result.exit_code == 0, result.output
    assert '"n": 2' in result.output


@pytest.mark.slow
def test_events_query_reports_bad_sql_and_a_missing_directory(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(cli_app, ["events", "query", "select 1", "--dir",
                                      str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no served log" in missing.output
    (tmp_path / "log").mkdir()
    bad = runner.invoke(cli_app, ["events", "query", "selec nonsense", "--dir",
                                  str(tmp_path / "log")])
    assert bad.exit_code == 2
