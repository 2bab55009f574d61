"""The no-op that Lakeshore's daemons run in the bench (`--handler bench.tasks:noop`)."""

from __future__ import annotations


def noop(x: object) -> object:
    return x
