"""Lakeshore server."""
