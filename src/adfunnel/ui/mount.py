"""Mounting the dashboard on an app: the ``/ui`` router and its static files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from adfunnel.ui.pages import STATIC_URL
from adfunnel.ui.routes import make_ui_router
from adfunnel.ui.session import Sessions


def install_ui(app: FastAPI, rt: Any, sessions: Sessions) -> None:
    """Add the ``/ui`` pages and their static files to ``app`` over the embedded runtime
    ``rt``; ``sessions`` opens and resolves the dashboard's server-side sessions
    (``ApiKeys``)."""
    app.include_router(make_ui_router(rt, sessions))
    app.mount(STATIC_URL, StaticFiles(directory=Path(__file__).parent / "static"),
              name="ui-static")
