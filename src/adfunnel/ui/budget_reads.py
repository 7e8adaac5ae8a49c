"""Where the dashboard reads the budget service's days from: the embedded service under
its lock (:class:`LocalBudgetReads`), or a fleet's ``adfunnel budget-service`` shards
over HTTP (:class:`RemoteBudgetReads`, ``GET /v1/days``: :mod:`adfunnel.budget.days`).

Both answer the fields of :func:`adfunnel.budget.days.day_view`; :func:`budget_reads`
picks the one of a runtime (the dashboard's, and the campaign report's ``period.today``,
:mod:`adfunnel.api.period_today`). A shard that does not
answer in time leaves its campaigns out (the page shows them without budget facts) and
is logged; the page never fails for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import httpx

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.days import day_view
from adfunnel.budget.embedded import InProcessBudget
from adfunnel.budget.process import BudgetServiceProcess
from adfunnel.clock import Clock
from adfunnel.internal_auth import internal_headers

log = logging.getLogger(__name__)

#: Seconds a dashboard page waits for a budget shard.
REMOTE_TIMEOUT_S = 1.0


class BudgetReads(Protocol):
    async def days(self, campaign_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """campaign id -> its day fields (campaigns the service does not hold: absent)."""
        ...

    async def plan(self, campaign_id: int, step_s: int) -> dict[str, Any] | None:
        """Its day fields with the plan on a grid of ``step_s`` seconds; None if absent."""
        ...

    async def aclose(self) -> None:
        ...


def budget_reads(rt: Any) -> tuple[BudgetReads | None, BudgetClient | None]:
    """The budget reads of an embedded runtime (``rt``: its ``gate``, ``clock`` and
    ``settings``) and the budget client whose refusals it counted: the embedded service
    (the ``in_process`` gate), the fleet's shards (``budget_service_url``), or neither
    (the ``local`` gate)."""
    gate = rt.gate
    if isinstance(gate, InProcessBudget):
        return LocalBudgetReads(gate.process, rt.clock), gate.client
    if isinstance(gate, BudgetClient) and rt.settings.budget_service_url:
        token = rt.settings.internal_token
        assert token is not None  # settings require it with budget_service_url
        return RemoteBudgetReads(rt.settings.budget_service_url.split(","), token=token), gate
    return None, None


class LocalBudgetReads:
    """The embedded budget service of this process."""

    def __init__(self, process: BudgetServiceProcess, clock: Clock) -> None:
        self.process = process
        self.clock = clock

    async def days(self, campaign_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        now = self.clock.now().timestamp()
        with self.process.lock:  # a page's campaigns only: a catalogue holds millions
            found = [day_view(self.process.service, int(c), now) for c in campaign_ids]
        return {d["campaign_id"]: d for d in found if d is not None}

    async def plan(self, campaign_id: int, step_s: int) -> dict[str, Any] | None:
        now = self.clock.now().timestamp()
        with self.process.lock:
            return day_view(self.process.service, campaign_id, now, step_s)

    async def aclose(self) -> None:
        return None


class RemoteBudgetReads:
    """A fleet's budget shards: ``urls[campaign_id % len(urls)]`` holds a campaign (the
    budget client's routing). Every read sends the internal ``token``."""

    def __init__(self, urls: Sequence[str], *, token: str,
                 timeout_s: float = REMOTE_TIMEOUT_S,
                 clients: Sequence[httpx.AsyncClient] | None = None) -> None:
        self._headers = internal_headers(token)
        self.clients = list(clients) if clients is not None else [
            httpx.AsyncClient(base_url=u.rstrip("/"), timeout=timeout_s) for u in urls]

    async def days(self, campaign_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        by_shard: dict[int, list[int]] = {}
        for cid in campaign_ids:
            by_shard.setdefault(int(cid) % len(self.clients), []).append(int(cid))
        bodies = await asyncio.gather(*(  # the shards at once: a silent one costs 1 s
            self._get(shard, "/v1/days", {"campaign_ids": ",".join(map(str, ids))})
            for shard, ids in by_shard.items()))
        return {int(d["campaign_id"]): d for body in bodies for d in (body or {}).get("days", [])}

    async def plan(self, campaign_id: int, step_s: int) -> dict[str, Any] | None:
        return await self._get(campaign_id % len(self.clients), f"/v1/days/{campaign_id}",
                               {"plan_step_s": str(step_s)})

    async def _get(self, shard: int, path: str, params: dict[str, str]
                   ) -> dict[str, Any] | None:
        client = self.clients[shard]
        try:
            r = await client.get(path, params=params, headers=self._headers)
        except httpx.HTTPError as exc:
            log.warning("budget shard %s did not answer %s: %s", client.base_url, path, exc)
            return None
        if r.status_code != 200:
            if r.status_code != 404:
                log.warning("budget shard %s answered %s %d", client.base_url, path,
                            r.status_code)
            return None
        return r.json()

    async def aclose(self) -> None:
        for c in self.clients:
            await c.aclose()
