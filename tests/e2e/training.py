"""A deterministic "training" job for the preemption tests (issue 35), importable by the daemons'
children: linear regression by SGD in numpy, its state (weights, step, generator) checkpointed.

`train` checkpoints every `every` steps and, on a preemption notice, checkpoints where it is and
raises `dls.Preempted`; resumed, it goes on from `dls.run.last_checkpoint()`. Each step run is a
line in `log` (attempt, step), so a test counts the steps run across attempts. `plain` is the
same computation uninterrupted, outside any job: the result a resumed run must equal, bit for bit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import dreamlake.lakeshore as dls

DIM = 8
BATCH = 32
LR = 0.01


def _fresh(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {"step": 0, "w": np.zeros(DIM), "rng": rng.bit_generator.state}


def _step(state: dict[str, Any], true_w: np.ndarray) -> dict[str, Any]:
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    x = rng.standard_normal((BATCH, DIM))
    y = x @ true_w + 0.1 * rng.standard_normal(BATCH)
    grad = 2.0 * x.T @ (x @ state["w"] - y) / BATCH
    return {"step": state["step"] + 1, "w": state["w"] - LR * grad, "rng": rng.bit_generator.state}


def _true_w() -> np.ndarray:
    return np.arange(1.0, DIM + 1.0)


def plain(steps: int, seed: int = 7) -> np.ndarray:
    state = _fresh(seed)
    for _ in range(steps):
        state = _step(state, _true_w())
    return np.asarray(state["w"])


def train(
    steps: int, every: int, log: str, pace_s: float = 0.0, seed: int = 7
) -> Iterator[dict[str, Any]]:
    state = dls.run.last_checkpoint() or _fresh(seed)
    with Path(log).open("a") as out:
        while state["step"] < steps:
            if dls.run.preempting.is_set():
                dls.run.checkpoint(state)
                raise dls.Preempted(f"stopped at step {state['step']} for a notice")
            state = _step(state, _true_w())
            out.write(f"{dls.run.attempt} {state['step']}\n")
            out.flush()
            os.fsync(out.fileno())
            if state["step"] % every == 0:
                dls.run.checkpoint(state)
                yield {"step": state["step"], "attempt": dls.run.attempt}
            time.sleep(pace_s)
    return state["w"]


def steps_run(log: str) -> list[tuple[int, int]]:
    """(attempt, step) of every step run, in order."""
    path = Path(log)
    if not path.exists():
        return []
    return [
        (int(a), int(s))
        for a, s in (line.split() for line in path.read_text().splitlines() if line)
    ]


def checkpoint_too_big(size: int) -> dict[str, Any]:
    """Checkpoint a small state, then one of `size` bytes the storage refuses: what it said,
    and the checkpoint that stayed."""
    dls.run.checkpoint({"step": 1})
    try:
        dls.run.checkpoint({"step": 2, "blob": np.zeros(size, dtype=np.uint8)})
    except dls.DispatchError as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "last": dls.run.last_checkpoint()}
    return {"error": None, "last": dls.run.last_checkpoint()}
