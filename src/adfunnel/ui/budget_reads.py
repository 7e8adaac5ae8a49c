"""Where the dashboard reads the budget service's days from: the embedded service under
its lock (:class:`LocalBudgetReads`), or a fleet's ``adfunnel budget-service`` shards
over HTTP (:class:`RemoteBudgetReads`, ``GET /v1/days``: :mod:`adfunnel.budget.days`).

Both answer the fields of :func:`adfunnel.budget.days.day_view`. A shard that does not
answer in time leaves its campaigns out (the page shows them without budget facts) and
is logged; the page never fails for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import httpx

from adfunnel.budget.days import day_view
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
