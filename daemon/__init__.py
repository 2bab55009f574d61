"""Lakeshore daemon."""
