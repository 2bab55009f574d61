"""Stages of the three-stage pipeline test (test_pipeline_daemons.py), importable by reference
in the daemons' child processes. Each stage appends "<stage> <attempt>" to a log, so the test
counts how many times each ran, per attempt."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

import dreamlake.lakeshore as dls


def _note(log: str, stage: str) -> None:
    with Path(log).open("a") as f:
        f.write(f"{stage} {dls.run.attempt}\n")


def prepare(log: str, n: int) -> dls.Ref:
    _note(log, "prepare")
    return dls.put(np.arange(n, dtype=np.float64))  # the data stays in the object store


def train(data: dls.Ref, log: str, lr: float) -> dict[str, float]:
    """Attempt 1 never finishes: the test kills its daemon mid-train (kill -9)."""
    if not isinstance(data, dls.Ref):
        raise TypeError(f"train expected the Ref prepare returned, got {type(data).__name__}")
    _note(log, "train")
    if dls.run.attempt == 1:
        threading.Event().wait()  # until the daemon is killed under it
    return {"w": float(dls.get(data).sum()) * lr}


def evaluate(model: dict[str, float], log: str) -> float:
    _note(log, "evaluate")
    return round(model["w"], 3)


def broken_train(data: dls.Ref, log: str) -> None:
    _note(log, "broken_train")
    raise RuntimeError("diverged")


def runs(log: str) -> list[str]:
    path = Path(log)
    return path.read_text().splitlines() if path.exists() else []
