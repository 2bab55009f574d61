"""Lakeshore cli."""
