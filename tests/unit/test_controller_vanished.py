"""Instances that end behind the controller's back, and orphans that never left the queue.

A Slurm job cancelled by hand, preempted or timed out stops being listed while its daemon's
row may still read `alive`: the controller marks that row gone on its next tick and records
why. On the in-memory plane with the recording fake provider; the clock is the test's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from dreamlake.lakeshore.controller.loop import Controller, Settings
from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.providers.fake import FakeProvider


class Clock:
    """Starts at the plane's time (heartbeats are stamped with it), then moves as told."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def d() -> Iterator[Dispatch]:
    plane = Dispatch(":memory:")
    plane.store.add_provider("default", "sim", "fake", {})
    plane.create_queue("q", elasticity={"kind": "fixed", "max": 1, "provider": "sim"})
    yield plane
    plane.close()


@pytest.fixture
def fake() -> FakeProvider:
    return FakeProvider("sim")


def controller(d: Dispatch, fake: FakeProvider, clock: Clock) -> Controller:
    fake.clock = clock
    settings = Settings(scale_down_window_s=0.0, boot_timeout_s=60.0)
    return Controller(d.store, settings, provider_factory=lambda _: fake, clock=clock)


def terminated(d: Dispatch) -> list[dict[str, object]]:
    return [e["detail"] for e in reversed(d.events("q", limit=100)) if e["kind"] == "terminated"]


def test_a_vanished_instance_marks_its_alive_row_gone_and_says_why(
    d: Dispatch, fake: FakeProvider
) -> None:
    clock = Clock()
    c = controller(d, fake, clock)
    c.tick()
    [name] = fake.register_all(d.store)
    row = d.worker(name)
    [inst] = fake.list()

    # the job is cancelled outside the controller: the provider lists it no more
    fake.instances.pop(inst.id)
    clock.now += 1
    c.tick()

    assert d.worker(row.id).state == "gone"
    [detail] = terminated(d)
    assert detail["instance"] == inst.id and detail["daemon"] == name
    assert "vanished" in str(detail["reason"]) and "marked gone" in str(detail["reason"])


def test_an_instance_the_controller_terminated_is_recorded_once(
    d: Dispatch, fake: FakeProvider
) -> None:
    clock = Clock()
    c = controller(d, fake, clock)
    c.tick()
    [name] = fake.register_all(d.store)
    row = d.worker(name)
    clock.now += 3600  # its heartbeat is stale: an orphan, terminated
    c.tick()
    assert len(terminated(d)) == 1

    clock.now += 1
    c.tick()  # the instance is no longer listed: its row goes, and no second event

    assert d.worker(row.id).state == "gone"
    assert len(terminated(d)) == 1


def test_an_unlisted_provider_is_not_taken_for_vanished_instances(
    d: Dispatch, fake: FakeProvider
) -> None:
    clock = Clock()
    c = controller(d, fake, clock)
    c.tick()
    [name] = fake.register_all(d.store)

    d.store.delete_provider("default", "sim")  # "running daemons are left alone"
    clock.now += 1
    c.tick()

    assert d.worker(name).state == "alive"
    assert terminated(d) == []


def test_a_job_pending_past_the_boot_timeout_is_cancelled_with_the_reason_it_waited(
    d: Dispatch, fake: FakeProvider
) -> None:
    clock = Clock()
    c = controller(d, fake, clock)
    c.tick()
    [inst] = fake.list()
    fake.instances[inst.id] = replace(inst, note="PartitionConfig")
    clock.now += 61
    fake.age(61)

    c.tick()

    assert inst.id in fake.terminated()
    [detail] = terminated(d)
    assert detail["reason"] == "orphan: still pending 60s after launch (PartitionConfig)"
