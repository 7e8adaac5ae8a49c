"""Alembic revision scripts, applied in order by ``adfunnel.campaigns.migrate``."""
