"""Pacing: target curves and the participation-probability controller. Pure."""
