"""A real spend gate made slow on purpose, so that lateness in a test is deterministic."""

from __future__ import annotations

import time
from datetime import datetime

from adfunnel.budget.gate import LocalSpendGate, Served
from adfunnel.campaigns.model import Campaign


class SlowGate:
    """The real :class:`LocalSpendGate`; each ``admit`` first sleeps the next of ``delays``
    (seconds), then ``every_s`` once they are used up (a slow budget lookup)."""

    def __init__(self, gate: LocalSpendGate, delays: list[float] | None = None,
                 every_s: float = 0.0) -> None:
        self.gate = gate
        self.delays = list(delays or [])
        self.every_s = every_s

    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        time.sleep(self.delays.pop(0) if self.delays else self.every_s)
        return self.gate.admit(campaign, now, max_charge_micros)

    def pacing_rate(self, campaign_id: int) -> float:
        return self.gate.pacing_rate(campaign_id)

    def record_served(self, served: Served) -> None:
        self.gate.record_served(served)
