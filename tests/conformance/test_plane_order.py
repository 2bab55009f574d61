"""Claim order: what the worker asks for at claim time (fifo / priority, filo, boltzmann).

The boltzmann draws here check that every plane samples by exp(priority / T), not the exact
distribution (tests/unit/test_boltzmann.py draws 20,000 times for that): a few hundred claims
per plane tell the right weights from the wrong ones that matter (strict priority, uniform,
T ignored, weights per level) by far more than the bounds' five or six standard deviations.
`LAKESHORE_TEST_DRAWS_SCALE` (default 1) multiplies them for a longer run.
"""

from __future__ import annotations

import math
import os
import random

import pytest
from planes import PlaneEnv


def submit_mixed(plane: PlaneEnv, name: str) -> dict[str, str]:
    """a (p0), b (p0), c (p5), d (p1), e (p5), submitted in that order."""
    q = plane.queue(name)
    return {
        tag: q.submit(tag, priority=p)
        for tag, p in [("a", 0.0), ("b", 0.0), ("c", 5.0), ("d", 1.0), ("e", 5.0)]
    }


def drain(plane: PlaneEnv, name: str, kind: str) -> list[str]:
    order = []
    while (job := plane.peer.claim(name, kind=kind)) is not None:
        order.append(job.payload)
    return order


@pytest.mark.parametrize("kind", ["fifo", "priority"])
def test_fifo_claims_highest_priority_then_oldest(plane: PlaneEnv, kind: str) -> None:
    submit_mixed(plane, "gpu")

    assert drain(plane, "gpu", kind) == ["c", "e", "d", "a", "b"]


def test_filo_claims_highest_priority_then_newest(plane: PlaneEnv) -> None:
    submit_mixed(plane, "gpu")

    assert drain(plane, "gpu", "filo") == ["e", "c", "d", "b", "a"]


def test_fifo_keeps_submit_order_within_a_batch(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    q.submit_many(list(range(50)))

    assert drain(plane, "gpu", "fifo") == list(range(50))


def test_order_is_chosen_by_the_worker_not_the_producer(plane: PlaneEnv) -> None:
    producer = plane.queue("gpu", kind="filo")
    for tag in "xyz":
        producer.submit(tag)

    assert plane.queue("gpu", kind="fifo").claim().payload == "x"  # type: ignore[union-attr]
    assert plane.queue("gpu", kind="filo").claim().payload == "z"  # type: ignore[union-attr]


#: Multiplies the boltzmann draws (each a claim and a release: ~10 ms on the HTTP planes).
DRAWS_SCALE = float(os.environ.get("LAKESHORE_TEST_DRAWS_SCALE", "1"))


def draws_of(n: int) -> int:
    return max(1, round(n * DRAWS_SCALE))


def within_sds(count: int, draws: int, p: float, sds: float) -> bool:
    """`count` of `draws` Bernoulli(p) successes is within `sds` standard deviations of its mean."""
    return abs(count - draws * p) < sds * math.sqrt(draws * p * (1 - p))


def boltzmann_draws(plane: PlaneEnv, temperature: float, draws: int) -> dict[float, int]:
    """Claim and release `draws` times from one job at each priority 0, 1, 2."""
    q = plane.queue("hot", kind="boltzmann", temperature=temperature)
    for p in (0.0, 1.0, 2.0):
        q.submit(p, priority=p)
    seen = dict.fromkeys((0.0, 1.0, 2.0), 0)
    random.seed(20260806)
    for _ in range(draws):
        job = q.claim()
        assert job is not None
        seen[job.payload] += 1
        assert plane.dispatch.release(job.id, job.lease)
    return seen


def test_boltzmann_samples_in_proportion_to_exp_priority_over_t(plane: PlaneEnv) -> None:
    draws = draws_of(400)  # the exact 20,000-draw check is in tests/unit/test_boltzmann.py
    seen = boltzmann_draws(plane, 1.0, draws)

    z = sum(math.exp(p) for p in seen)
    for p, n in seen.items():
        assert within_sds(n, draws, math.exp(p) / z, 6), (p, n, draws * math.exp(p) / z)
    # and a chi-square far below what a wrong distribution would give
    chi2 = sum(
        (n - draws * math.exp(p) / z) ** 2 / (draws * math.exp(p) / z) for p, n in seen.items()
    )
    assert chi2 < 30.0


def test_boltzmann_at_zero_temperature_is_strict_priority(plane: PlaneEnv) -> None:
    seen = boltzmann_draws(plane, 0.0, 60)

    assert seen == {0.0: 0, 1.0: 0, 2.0: 60}


def test_boltzmann_at_tiny_temperature_is_strict_priority(plane: PlaneEnv) -> None:
    seen = boltzmann_draws(plane, 1e-3, 60)

    assert seen == {0.0: 0, 1.0: 0, 2.0: 60}


def test_boltzmann_at_huge_temperature_is_near_uniform(plane: PlaneEnv) -> None:
    draws = draws_of(300)
    seen = boltzmann_draws(plane, 1e6, draws)

    for n in seen.values():
        assert within_sds(n, draws, 1 / 3, 5), seen


def test_boltzmann_weights_each_job_not_each_level(plane: PlaneEnv) -> None:
    q = plane.queue("hot", kind="boltzmann", temperature=1e6)
    for _ in range(3):
        q.submit("crowded", priority=1.0)
    q.submit("alone", priority=0.0)
    random.seed(7)
    crowded = 0
    draws = draws_of(200)
    for _ in range(draws):
        job = q.claim()
        assert job is not None
        crowded += job.payload == "crowded"
        plane.dispatch.release(job.id, job.lease)

    # 3 of 4 jobs: ~75 % (weights per level would give 50 %, eight deviations away)
    assert within_sds(crowded, draws, 0.75, 5), crowded


def test_boltzmann_takes_the_oldest_job_within_a_level(plane: PlaneEnv) -> None:
    q = plane.queue("hot", kind="boltzmann", temperature=0.0)
    for tag in ("first", "second", "third"):
        q.submit(tag, priority=1.0)

    assert drain(plane, "hot", "boltzmann") == ["first", "second", "third"]


def test_boltzmann_drains_a_queue_completely(plane: PlaneEnv) -> None:
    q = plane.queue("hot", kind="boltzmann")
    q.submit_many(list(range(30)), priority=0.0)
    for p in range(10):
        q.submit(100 + p, priority=float(p))

    got = drain(plane, "hot", "boltzmann")

    assert sorted(got) == list(range(30)) + list(range(100, 110))
