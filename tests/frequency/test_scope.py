"""The cap policy without a shared store: when a process is one of several serving
processes, and what it says at start-up (adfunnel.frequency.scope)."""

from __future__ import annotations

import pytest

from adfunnel.frequency.scope import cap_policy_warning, caps_refused, fleet_signals
from adfunnel.settings import load_settings
from tests.internal_token import INTERNAL_TOKEN

SECRET = "k" * 32


@pytest.mark.parametrize(("given", "several"), [
    ({}, False),
    ({"workers": 2}, True),
    # a fleet's single worker
    ({"budget_service_url": "http://127.0.0.1:8090", "internal_token": INTERNAL_TOKEN}, True),
    ({"event_log_url": "nats://127.0.0.1:4222", "aggregate": False}, True),
    ({"event_log_url": "nats://127.0.0.1:4222"}, False),  # aggregates its own log
])
def test_one_of_several_serving_processes(given: dict, several: bool) -> None:
    s = load_settings(token_secret=SECRET, **given)
    assert bool(fleet_signals(s)) is several
    assert caps_refused(s) is several
    assert (cap_policy_warning(s) is not None) is several


def test_redis_or_per_process_lets_capped_campaigns_serve() -> None:
    fleet = {"token_secret": SECRET, "budget_service_url": "http://b:8090", "workers": 4,
             "internal_token": INTERNAL_TOKEN}
    assert not caps_refused(load_settings(redis_url="redis://127.0.0.1:6379", **fleet))
    assert cap_policy_warning(load_settings(redis_url="redis://127.0.0.1:6379", **fleet)) is None
    per_process = load_settings(caps="per-process", **fleet)
    assert not caps_refused(per_process)
    assert "N x cap" in (cap_policy_warning(per_process) or "")


def test_the_strict_warning_says_capped_campaigns_are_not_served() -> None:
    line = cap_policy_warning(load_settings(token_secret=SECRET, workers=3))
    assert line is not None and "not served" in line and "workers=3" in line


def test_the_cap_policy_is_an_environment_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADFUNNEL_CAPS", "per-process")
    monkeypatch.setenv("ADFUNNEL_WORKERS", "2")
    s = load_settings(token_secret=SECRET)
    assert (s.caps, s.workers) == ("per-process", 2)
    monkeypatch.setenv("ADFUNNEL_CAPS", "sometimes")
    with pytest.raises(ValueError, match="caps"):
        load_settings(token_secret=SECRET)
