"""Where a process may count frequency caps: the cap policy without a shared store.

A cap is never silently exceeded. Cap records count exactly when every serving process
reads and writes the same records: on Redis (``redis_url``), or in this process's
memory when it is the only process that serves. A process is **one of several serving
processes** when any of these holds (each names a deployment that runs more than one):

- ``workers`` > 1 (``serve --workers N``: N processes share the port);
- ``budget_service_url`` is set (the ad servers of a fleet share a remote budget
  service);
- ``event_log_url`` is set and ``aggregate`` is off (the ad servers of a fleet share
  one event log, read by separate ``adfunnel aggregator`` processes; one server that
  aggregates its own log is not a fleet by this sign).

A fleet that shows none of these signs (single-worker servers behind a balancer, each
with its own in-process budget service and memory event log) cannot be told from one
server: its operator must set ``ADFUNNEL_REDIS_URL`` (README, the cap policy).

Such a process without Redis does not serve capped campaigns (their candidates drop
out with reason ``cap_unavailable``, the detail naming why) unless the operator chose
``caps = "per-process"`` (``--caps per-process``, ``ADFUNNEL_CAPS``): then each process
counts on its own, and a user may see a capped ad up to N × cap times over N serving
processes.
"""

from __future__ import annotations

from adfunnel.settings import Settings

#: The rejection detail of a capped candidate refused for want of a shared cap store.
NO_SHARED_STORE = ("no shared cap store: several serving processes without "
                   "ADFUNNEL_REDIS_URL (or start with --caps per-process)")


def fleet_signals(settings: Settings) -> list[str]:
    """Why this process is one of several serving processes (empty: it serves alone)."""
    why = []
    if settings.workers > 1:
        why.append(f"workers={settings.workers}")
    if settings.budget_service_url:
        why.append("a remote budget service (ADFUNNEL_BUDGET_SERVICE_URL)")
    if settings.event_log_url and not settings.aggregate:
        why.append("a shared event log (ADFUNNEL_EVENT_LOG_URL, ADFUNNEL_AGGREGATE=false)")
    return why


def caps_refused(settings: Settings) -> bool:
    """True when capped campaigns must not be served: several serving processes, no
    Redis, and no explicit ``caps = "per-process"`` (module docstring)."""
    return (not settings.redis_url and settings.caps == "strict"
            and bool(fleet_signals(settings)))


def cap_policy_warning(settings: Settings) -> str | None:
    """The start-up line that states how caps are counted when it is not exact; None
    when they are (Redis, or the only serving process)."""
    why = fleet_signals(settings)
    if settings.redis_url or not why:
        return None
    if settings.caps == "per-process":
        return (f"frequency caps are counted per process ({', '.join(why)}; no --redis-url, "
                "--caps per-process): a user may see a capped ad up to N x cap times "
                "over N serving processes")
    return (f"capped campaigns are not served ({', '.join(why)} without --redis-url): "
            "their candidates drop out as cap_unavailable; use --redis-url, or "
            "--caps per-process to count per process (up to N x cap)")
