"""Billing: the ledger (unique per impression id and event type) and its totals."""
