"""Credentials in a service URL never reach a log line: the start-up line, the one line of
an unreachable event log, the event log's own warnings (README "Running the server")."""

from __future__ import annotations

import logging
import socket

import pytest
import typer

from adfunnel.cli.processes import _reachable_or_exit
from adfunnel.events.jetstream_log import JetStreamEventLog
from adfunnel.events.log import EventLogUnavailable
from adfunnel.observability.logs import log_start, shown_url
from adfunnel.settings import load_settings

#: Two NATS servers: a user with a password, and a bare token (nats-py's auth token).
NATS = "nats://ops:n4ts-s3cret@127.0.0.1:4222,tls://t0ken-s3cret@nats2.internal:4222"


def test_shown_url_hides_passwords_and_tokens() -> None:
    assert shown_url(NATS) == "nats://ops:***@127.0.0.1:4222,tls://***@nats2.internal:4222"
    assert shown_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"
    assert shown_url("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"


def test_the_start_line_names_the_event_log_without_its_credentials(
        caplog: pytest.LogCaptureFixture) -> None:
    """Red when the start-up line prints ``event_log_url`` as given."""
    s = load_settings(database_url="sqlite://", event_log_url=NATS)
    with caplog.at_level(logging.INFO, logger="adfunnel.start"):
        message = log_start(s, "http://127.0.0.1:1")
    assert "s3cret" not in caplog.text + message
    assert "event log nats://ops:***@127.0.0.1:4222,tls://***@nats2.internal:4222" in message
    assert caplog.records[-1].event_log == shown_url(NATS)  # type: ignore[attr-defined]


def test_an_unreachable_event_log_is_named_without_its_credentials(
        capsys: pytest.CaptureFixture[str]) -> None:
    s = load_settings(database_url="sqlite://", event_log_url=NATS)
    with pytest.raises(typer.Exit), _reachable_or_exit(s):
        raise EventLogUnavailable("cannot connect")
    err = capsys.readouterr().err
    assert "s3cret" not in err and "nats://ops:***@127.0.0.1:4222" in err


def test_the_event_logs_warnings_hide_credentials(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"nats://ops:n4ts-s3cret@127.0.0.1:{port}"
    with caplog.at_level(logging.WARNING):
        log = JetStreamEventLog(url, timeout_s=1.0, reconnect_wait_s=0.1)
        try:
            with pytest.raises(EventLogUnavailable) as err:
                log.publish_many([])
                log.last_seq()
        finally:
            log.close()
    assert "not reachable yet" in caplog.text
    assert "s3cret" not in caplog.text + str(err.value)


@pytest.fixture
def aggregator_stubbed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``adfunnel aggregator`` with its event log's probe and its aggregator stubbed out:
    the event log URL each run would have used is appended to the returned list."""
    import adfunnel.cli.processes as processes
    import adfunnel.runtime.standalone as standalone

    used: list[str] = []

    class _Plane:
        aggregator = None

    def run(settings: object, chosen: object, stop: object) -> _Plane:
        used.append(str(settings.event_log_url))  # type: ignore[attr-defined]
        return _Plane()

    monkeypatch.setattr(processes, "_event_log_or_raise", lambda settings: None)
    monkeypatch.setattr(standalone, "run_aggregator", run)
    monkeypatch.setenv("ADFUNNEL_DATABASE_URL", "sqlite://")
    return used


def test_the_aggregators_own_line_hides_the_event_logs_credentials(
        aggregator_stubbed: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Red when ``aggregating partitions … of <url>`` prints the URL as given."""
    from typer.testing import CliRunner

    from adfunnel.cli import app

    done = CliRunner().invoke(app, ["aggregator", "--event-log", NATS, "--partitions", "1"])
    assert done.exit_code == 0, done.output
    assert aggregator_stubbed == [NATS]
    assert "s3cret" not in done.output + capsys.readouterr().err
    assert "aggregating partitions [1] of nats://ops:***@127.0.0.1:4222" in " ".join(
        done.output.split())  # rich wraps the line at the runner's width


def test_the_aggregator_reads_the_event_log_url_setting(
        aggregator_stubbed: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Red when ``--event-log``'s default (nats://127.0.0.1:4222) hides
    ``ADFUNNEL_EVENT_LOG_URL``: the aggregator read another NATS than the one set."""
    from typer.testing import CliRunner

    from adfunnel.cli import app

    monkeypatch.setenv("ADFUNNEL_EVENT_LOG_URL", "nats://nats.internal:4222")
    assert CliRunner().invoke(app, ["aggregator"]).exit_code == 0
    monkeypatch.delenv("ADFUNNEL_EVENT_LOG_URL")
    assert CliRunner().invoke(app, ["aggregator"]).exit_code == 0
    assert aggregator_stubbed == ["nats://nats.internal:4222", "nats://127.0.0.1:4222"]
