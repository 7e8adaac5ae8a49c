"""Budgets: the ad server's spend gate, the budget & pacing service, slices."""
