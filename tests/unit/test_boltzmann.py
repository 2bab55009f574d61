"""`boltzmann_level`: an exact draw over priority levels weighted count * exp(level / T)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from dreamlake.lakeshore.plane.store import boltzmann_level, records


def draw(levels: list[tuple[float, int]], temperature: float, n: int) -> Counter[float]:
    random.seed(1234)
    return Counter(boltzmann_level(levels, temperature) for _ in range(n))


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_zero_or_negative_temperature_returns_the_top_level(temperature: float) -> None:
    assert boltzmann_level([(0.0, 100), (3.0, 1), (-2.0, 5)], temperature) == 3.0


def test_zero_temperature_does_not_touch_the_random_stream() -> None:
    random.seed(5)
    expected = random.random()
    random.seed(5)

    boltzmann_level([(1.0, 1), (2.0, 1)], 0.0)

    assert random.random() == expected


def test_a_single_level_is_always_chosen() -> None:
    assert set(draw([(7.0, 3)], 1.0, 100)) == {7.0}


def test_weights_are_count_times_exp_level_over_t(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, list[float]] = {}

    def fake_choices(population: list[float], weights: list[float]) -> list[float]:
        seen["population"], seen["weights"] = list(population), list(weights)
        return [population[0]]

    monkeypatch.setattr(records.random, "choices", fake_choices)

    boltzmann_level([(0.0, 4), (2.0, 1), (1.0, 2)], 2.0)

    assert seen["population"] == [0.0, 2.0, 1.0]
    # relative to the top level, so large priorities never overflow
    expected = [4 * math.exp(-1.0), 1.0, 2 * math.exp(-0.5)]
    assert seen["weights"] == pytest.approx(expected)


def test_huge_priorities_do_not_overflow() -> None:
    assert boltzmann_level([(1e6, 1), (1e6 - 1e5, 1000)], 1.0) == 1e6


def test_the_draw_matches_the_exact_distribution() -> None:
    levels = [(0.0, 3), (1.0, 2), (2.0, 1)]
    n = 20_000
    counts = draw(levels, 1.0, n)

    z = sum(c * math.exp(p) for p, c in levels)
    chi2 = 0.0
    for p, c in levels:
        expected = n * c * math.exp(p) / z
        chi2 += (counts[p] - expected) ** 2 / expected
    assert chi2 < 20.0  # 2 degrees of freedom: p < 5e-5 even for a fresh seed


def test_a_large_temperature_is_uniform_over_jobs() -> None:
    counts = draw([(0.0, 1), (5.0, 1), (10.0, 2)], 1e9, 8000)

    assert counts[0.0] / 8000 == pytest.approx(0.25, abs=0.03)
    assert counts[5.0] / 8000 == pytest.approx(0.25, abs=0.03)
    assert counts[10.0] / 8000 == pytest.approx(0.50, abs=0.03)
