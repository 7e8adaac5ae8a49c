"""An ad server's budget client for remote shards: reports once a second over HTTP."""

from __future__ import annotations

import uuid

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.http import HttpReportTransport
from adfunnel.clock import Clock
from adfunnel.periodic import Job, Ticker


class ReportingBudgetClient(BudgetClient):
    """A :class:`BudgetClient` over HTTP that reports once a second from a thread."""

    def __init__(self, clock: Clock, service_urls: list[str], *, token: str,
                 report_every_s: float = 1.0, server_id: str | None = None) -> None:
        """``service_urls[shard]`` serves that shard; reports every ``report_every_s`` s
        with the internal ``token``."""
        self.http_transport = HttpReportTransport(service_urls, token=token)
        super().__init__(server_id or f"ads-{uuid.uuid4().hex[:12]}", clock, self.http_transport,
                         shards=len(service_urls))
        self._reporter = Ticker(clock, [Job("report", report_every_s, self.report)],
                                name="budget-report", poll_s=min(0.1, report_every_s))

    def start(self) -> None:
        self._reporter.run_due()  # learn states and p before the first decision
        self._reporter.start()

    def stop(self) -> None:
        self._reporter.stop()
        self.http_transport.close()
