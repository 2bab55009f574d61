"""Lakeshore providers."""
