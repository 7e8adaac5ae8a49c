"""Alembic migrations of every table on ``adfunnel.db.metadata``.

Run them with ``adfunnel.campaigns.migrate.upgrade(engine_or_url)``; no
``alembic.ini`` is needed at runtime.
"""
