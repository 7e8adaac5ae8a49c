"""Tracking: signed tokens that tie a beacon or click back to the decision that served it."""

from adfunnel.tracking.token import InvalidToken, TokenClaims, sign, verify
from adfunnel.tracking.token_claims import BILLING_TYPES, new_impression_id
from adfunnel.tracking.token_wire import MAX_TOKEN_CHARS

__all__ = [
    "BILLING_TYPES",
    "MAX_TOKEN_CHARS",
    "InvalidToken",
    "TokenClaims",
    "new_impression_id",
    "sign",
    "verify",
]
