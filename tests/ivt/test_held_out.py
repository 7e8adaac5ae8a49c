"""Lists held out of the filter (``ivt_held_out_lists``): the replay measures the filter's
recall on addresses from lists it did not load, so the filter must really not load them."""

from __future__ import annotations

import pytest

from adfunnel.ivt.rules import EventFacts
from adfunnel.runtime.embedded import make_ivt_rules
from adfunnel.settings import SettingsError, load_settings
from adfunnel.settings.ivt import IP_SOURCES, held_in
from adfunnel.sim.invalid import HELD_OUT_PROVIDERS, bot_user_agents
from tests.ivt.conftest import CHROME_UA

#: In lord-alfred's amazon list and in no other list the filter loads.
ONLY_AMAZON = "1.178.16.1"


def _facts(ip: str) -> EventFacts:
    return EventFacts(event_type="impression", client_ip=ip, user_agent=CHROME_UA,
                      served_at_ms=0, event_at_ms=0, impression_id="i")


def test_held_in_drops_the_named_lists_and_names_an_unknown_one() -> None:
    kept = held_in(["amazon", "x4bnet-vpn"])
    assert {s.name for s in kept} == {s.name for s in IP_SOURCES} - {"amazon", "x4bnet-vpn"}
    assert held_in([]) == IP_SOURCES
    with pytest.raises(ValueError, match="no-such-list"):
        held_in(["no-such-list"])


def test_the_replays_held_out_providers_are_lists_the_filter_can_hold_out() -> None:
    kept = {s.name for s in held_in(HELD_OUT_PROVIDERS)}
    assert kept and not kept & set(HELD_OUT_PROVIDERS)


def test_settings_refuse_an_unknown_list() -> None:
    with pytest.raises(SettingsError, match="ivt_held_out_lists"):
        load_settings(ivt_held_out_lists=["amazon", "no-such-list"])


@pytest.mark.slow  # loads the IP lists twice (0.5-4 s each, by the machine's load)
def test_a_held_out_list_is_not_loaded_by_the_filter() -> None:
    full = make_ivt_rules(load_settings())
    held = make_ivt_rules(load_settings(ivt_held_out_lists=["amazon"]))
    assert full is not None and held is not None
    assert not full.check(_facts(ONLY_AMAZON)).valid
    assert held.check(_facts(ONLY_AMAZON)).valid


def test_the_injected_bots_are_user_agents_a_header_can_carry() -> None:
    """httpx refuses a header it cannot encode: one such bot stopped a whole replay."""
    agents = bot_user_agents()
    assert len(agents) > 1_000
    assert all(ua.isascii() and ua.isprintable() for ua in agents)
