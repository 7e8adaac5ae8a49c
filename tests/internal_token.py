"""The internal token the tests' budget services and their clients share
(``ADFUNNEL_INTERNAL_TOKEN``, adfunnel.internal_auth)."""

INTERNAL_TOKEN = "internal-token-for-tests-" + "0" * 16
INTERNAL_HEADERS = {"authorization": f"Bearer {INTERNAL_TOKEN}"}
