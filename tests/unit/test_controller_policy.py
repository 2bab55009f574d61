"""The controller's arithmetic, table-driven: numbers in, numbers (and a reason) out."""

from __future__ import annotations

import pytest

from dreamlake.lakeshore.controller.policy import (
    MIN_SURGE,
    Policy,
    Step,
    Want,
    apply_cap,
    desired_workers,
    merge_pool,
    stabilized,
    step,
    surge_limit,
)

FIXED = Policy(kind="fixed", max=3)
ELASTIC = Policy(kind="elastic", min=1, max=10, target_per_worker=4)
FULLY = Policy(kind="fully_elastic", max=8, idle_s=60)


@pytest.mark.parametrize(
    ("policy", "demand", "current", "quiet_s", "want", "why"),
    [
        (Policy(), 50, 2, 0, 2, "unmanaged"),
        (FIXED, 0, 0, 999, 3, "fixed at max=3"),
        (FIXED, 100, 3, 0, 3, "fixed"),
        (ELASTIC, 0, 5, 999, 1, "within [1, 10]"),  # the floor
        (ELASTIC, 9, 1, 0, 3, "demand 9 / target 4 -> 3"),  # ceil(9 / 4)
        (ELASTIC, 400, 3, 0, 10, "within [1, 10]"),  # the ceiling
        (FULLY, 1, 0, 0, 1, "activation"),  # 0 -> 1 on the first job
        (FULLY, 50, 0, 0, 8, "activation"),
        (FULLY, 5, 2, 0, 5, "demand 5"),
        (FULLY, 0, 4, 59.9, 4, "hold"),  # quiet, but not for idle_s yet
        (FULLY, 0, 4, 60, 0, "scale to zero"),
        (FULLY, 0, 0, 0, 0, "hold"),
    ],
)
def test_desired_workers(
    policy: Policy, demand: int, current: int, quiet_s: float, want: int, why: str
) -> None:
    got, reason = desired_workers(policy, demand, current, quiet_s)
    assert got == want
    assert why in reason


@pytest.mark.parametrize(
    ("desired", "current", "recent", "watched", "want"),
    [
        (7, 3, [], False, 7),  # up is never damped
        (2, 5, [], False, 5),  # no scale-down before a whole window was watched
        (2, 5, [4, 3], True, 4),  # the window's highest recommendation
        (2, 5, [9], True, 5),  # ... never above the current size
        (2, 5, [1, 2], True, 2),
    ],
)
def test_stabilized(
    desired: int, current: int, recent: list[int], watched: bool, want: int
) -> None:
    assert stabilized(desired, current, recent, watched_whole_window=watched) == want


@pytest.mark.parametrize(
    ("current", "target", "idle", "surge", "want"),
    [
        (0, 3, 0, 5, Step(launch=3)),
        (0, 50, 0, 5, Step(launch=5)),  # bounded surge
        (5, 2, 1, 5, Step(drain=1)),  # only idle workers are drained
        (5, 2, 4, 5, Step(drain=3)),
        (4, 4, 4, 5, Step()),
    ],
)
def test_step(current: int, target: int, idle: int, surge: int, want: Step) -> None:
    assert step(current, target, idle, surge) == want


def test_surge_grows_with_the_fleet() -> None:
    assert surge_limit(0) == MIN_SURGE
    assert surge_limit(20) == 20
    assert surge_limit(20, upscaling_speed=0.5) == 10


def test_pool_takes_the_least_elastic_kind_and_widest_bounds() -> None:
    merged = merge_pool(
        [
            Policy(kind="fully_elastic", max=4, idle_s=30, target_per_worker=2, pool="p"),
            Policy(kind="elastic", min=1, max=6, idle_s=10, target_per_worker=5, pool="p"),
            Policy(),  # none never counts
        ]
    )
    assert (merged.kind, merged.min, merged.max) == ("elastic", 1, 6)
    assert merged.target_per_worker == 2 and merged.idle_s == 30


def test_pool_of_fully_elastic_members_scales_to_zero() -> None:
    merged = merge_pool([FULLY, Policy(kind="fully_elastic", max=2, idle_s=5)])
    assert merged.kind == "fully_elastic" and merged.min == 0 and merged.max == 8


@pytest.mark.parametrize(
    ("cap", "want"),
    [
        (None, {"cheap": 4, "dear": 4, "mid": 4}),
        (12, {"cheap": 4, "dear": 4, "mid": 4}),
        (6, {"cheap": 4, "mid": 2, "dear": 0}),  # cheapest cost_weight first
        (0, {"cheap": 0, "mid": 0, "dear": 0}),
    ],
)
def test_global_cap_goes_to_the_cheapest_first(cap: int | None, want: dict[str, int]) -> None:
    wants = [Want("dear", 4, 3.0), Want("cheap", 4, 0.5), Want("mid", 4, 1.0)]
    assert apply_cap(wants, cap) == want


def test_parse_fills_defaults_and_ignores_min_on_fully_elastic() -> None:
    p = Policy.parse({"kind": "fully_elastic", "max": 3})
    assert (p.min, p.max, p.target_per_worker, p.cost_weight) == (0, 3, 1.0, 1.0)
