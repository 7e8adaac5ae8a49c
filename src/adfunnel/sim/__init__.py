"""Simulations: replay of real traffic and the day simulation of budgets and pacing."""
