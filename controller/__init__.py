"""Lakeshore controller."""
