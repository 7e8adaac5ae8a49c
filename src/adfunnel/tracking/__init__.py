"""Tracking: signed tokens that tie a beacon or click back to the decision that served it."""

from adfunnel.tracking.token import (
    BILLING_TYPES,
    MAX_TOKEN_CHARS,
    InvalidToken,
    TokenClaims,
    new_impression_id,
    sign,
    verify,
)

__all__ = [
    "BILLING_TYPES",
    "MAX_TOKEN_CHARS",
    "InvalidToken",
    "TokenClaims",
    "new_impression_id",
    "sign",
    "verify",
]
