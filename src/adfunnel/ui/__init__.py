"""The dashboard at ``/ui``: server-rendered pages for advertisers, reviewers and
operators.

Jinja2 templates with htmx for the forms and uPlot for the pacing chart, both vendored
under ``static/vendor`` (nothing is fetched from a CDN). Mount it with
:func:`install_ui`; routes in :mod:`adfunnel.ui.routes`, the delivery status rules in
:mod:`adfunnel.ui.delivery`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from adfunnel.ui.routes import STATIC_URL, make_ui_router
from adfunnel.ui.session import Sessions

__all__ = ["install_ui"]


def install_ui(app: FastAPI, rt: Any, sessions: Sessions) -> None:
    """Add the ``/ui`` pages and their static files to ``app`` over the embedded runtime
    ``rt``; ``sessions`` opens and resolves the dashboard's server-side sessions
    (``ApiKeys``)."""
    app.include_router(make_ui_router(rt, sessions))
    app.mount(STATIC_URL, StaticFiles(directory=Path(__file__).parent / "static"),
              name="ui-static")
