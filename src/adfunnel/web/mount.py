"""Puts the web routes on a server's app: ``/tag.js`` and ``/f`` always, the demo's
pages while the demo is on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adfunnel.settings import Settings
from adfunnel.web.demo import demo_routes
from adfunnel.web.demo_seed import demo_enabled
from adfunnel.web.frame import frame_route
from adfunnel.web.tag import tag_route


def install_web(app: Any, settings: Settings, *, ad_of: Callable[[int], Any], tracker: Any,
                clock: Any) -> None:
    """Add the routes to ``app`` (a Starlette or FastAPI app). ``ad_of(ad_id)``: the
    serving catalogue's ad, or None (read per frame, so edits show); ``tracker``: holds the token
    keys; ``clock``: the domain clock (token expiry)."""
    routes = [tag_route(),
              frame_route(ad_of, lambda: (tracker.token_key, tracker.previous_keys),
                          lambda: clock.now().timestamp(), settings.public_base_url)]
    if demo_enabled(settings):
        routes += demo_routes()
    app.router.routes.extend(routes)
