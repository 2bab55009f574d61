"""Wake-ups: the generation counter in one process, and datagrams between processes."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dreamlake.lakeshore.plane import wakeup
from dreamlake.lakeshore.plane.wakeup import (
    MAX_DATAGRAM,
    READERS,
    CrossProcessWaker,
    Waker,
    pack_keys,
    reading,
    unpack_keys,
)


@pytest.fixture
def waker() -> Iterator[Waker]:
    w = Waker()
    yield w
    w.close()


def notify_soon(waker: Waker, delay: float = 0.05) -> threading.Thread:
    t = threading.Timer(delay, waker.notify)
    t.start()
    return t


def test_notify_moves_the_generation(waker: Waker) -> None:
    before = waker.generation

    waker.notify()

    assert waker.generation == before + 1


def test_wait_returns_true_when_another_thread_notifies(waker: Waker) -> None:
    gen = waker.generation
    timer = notify_soon(waker)

    assert waker.wait(gen, timeout=10.0) is True
    timer.join()


def test_wait_returns_at_once_when_the_generation_already_moved(waker: Waker) -> None:
    gen = waker.generation
    waker.notify()
    started = time.monotonic()

    assert waker.wait(gen, timeout=10.0) is True
    assert time.monotonic() - started < 1.0


def test_wait_returns_false_on_timeout(waker: Waker) -> None:
    started = time.monotonic()

    assert waker.wait(waker.generation, timeout=0.1) is False
    assert time.monotonic() - started >= 0.09


def test_wait_async_is_woken_from_another_thread(waker: Waker) -> None:
    async def main() -> bool:
        gen = waker.generation
        timer = notify_soon(waker)
        try:
            return await waker.wait_async(gen, timeout=10.0)
        finally:
            timer.join()

    assert asyncio.run(main()) is True


def test_wait_async_times_out_and_forgets_its_waiter(waker: Waker) -> None:
    async def main() -> bool:
        return await waker.wait_async(waker.generation, timeout=0.05)

    assert asyncio.run(main()) is False
    assert waker._async_waiters == set()
    waker.notify()  # nothing left to resolve on a closed loop


def test_wait_async_returns_at_once_when_already_moved(waker: Waker) -> None:
    async def main() -> bool:
        gen = waker.generation
        waker.notify()
        return await waker.wait_async(gen, timeout=10.0)

    assert asyncio.run(main()) is True


def test_a_wake_up_on_the_loop_reaches_its_waiter_on_the_next_turn(waker: Waker) -> None:
    """A commit on the server's loop wakes a held wait there with a plain callback, and the
    waiting task runs on the loop's next turn: no self-pipe, no second future in between (on
    a `q.call`, each extra turn was one more on the call's path)."""

    async def main() -> tuple[bool, bool]:
        gen = waker.generation
        wait = asyncio.create_task(waker.wait_async(gen, timeout=10.0))
        await asyncio.sleep(0)  # it registers and sleeps
        waker.notify()
        await asyncio.sleep(0)  # the wake-up's callback resolves the future...
        await asyncio.sleep(0)  # ...and the task has run by the next turn
        return wait.done(), await wait

    assert asyncio.run(main()) == (True, True)


def test_a_callers_own_future_ends_the_wait_and_a_timeout_leaves_it_usable(
    waker: Waker,
) -> None:
    """`wake`: the handed-over claim or result ends the wait without any notify; a wait that
    runs out says so (False) and resolves that future, which its owner replaces (`armed`)."""

    async def main() -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        wake: asyncio.Future[None] = loop.create_future()
        wait = asyncio.create_task(waker.wait_async(waker.generation, timeout=10.0, wake=wake))
        await asyncio.sleep(0)
        wake.set_result(None)
        handed = await wait
        other: asyncio.Future[None] = loop.create_future()
        timed_out = await waker.wait_async(waker.generation, timeout=0.01, wake=other)
        return handed, timed_out, other.done()

    assert asyncio.run(main()) == (True, False, True)
    assert waker._async_waiters == set()


def test_many_async_waiters_wake_on_one_notify(waker: Waker) -> None:
    async def main() -> list[bool]:
        gen = waker.generation
        waits = [asyncio.create_task(waker.wait_async(gen, timeout=10.0)) for _ in range(5)]
        await asyncio.sleep(0)  # let them register
        waker.notify()
        return await asyncio.gather(*waits)

    assert asyncio.run(main()) == [True] * 5


def test_a_claim_waiter_sleeps_through_wake_ups_that_bring_no_work_to_its_queues(
    waker: Waker,
) -> None:
    """500 idle claim long-polls must not all re-read the store on every commit."""

    async def main() -> list[bool]:
        gen = waker.generation
        mine = asyncio.create_task(waker.wait_async(gen, timeout=0.3, work=["ns/a"]))
        other = asyncio.create_task(waker.wait_async(gen, timeout=10.0, work=["ns/b"]))
        plain = asyncio.create_task(waker.wait_async(gen, timeout=10.0))
        await asyncio.sleep(0)
        waker.notify(work=())  # an ack: no new work anywhere
        waker.notify(work=["ns/b"])  # a submit to another queue
        results = [await other, await plain, await mine]  # mine times out: False
        gen = waker.generation
        again = asyncio.create_task(waker.wait_async(gen, timeout=10.0, work=["ns/a"]))
        await asyncio.sleep(0)
        waker.notify()  # unknown (a requeue, another process): everyone looks
        results.append(await again)
        # Work that came before the wait started counts at once.
        results.append(await waker.wait_async(gen, timeout=10.0, work=["ns/a"]))
        return results

    assert asyncio.run(main()) == [True, True, False, True, True]
    assert waker.work_since(0, ["ns/b"]) and not waker._interest


def test_a_result_waiter_sleeps_through_submits_and_claims(waker: Waker) -> None:
    """A `q.call` waiting for its result is woken by the ack, not by the claim before it."""

    async def main() -> list[bool]:
        gen = waker.generation
        reader = asyncio.create_task(waker.wait_async(gen, timeout=0.3, work=[READERS]))
        admission = asyncio.create_task(waker.wait_async(gen, timeout=10.0))
        await asyncio.sleep(0)
        waker.notify(work=["ns/a"], reads=False)  # a submit
        waker.notify(work=(), reads=False)  # a claim: room for a blocked submit
        results = [await admission, await reader]  # the reader times out: False
        gen = waker.generation
        reader = asyncio.create_task(waker.wait_async(gen, timeout=10.0, work=[READERS]))
        await asyncio.sleep(0)
        waker.notify(work=())  # an ack or a frame
        results.append(await reader)
        # A read-worthy change before the wait started counts at once; a claim does not.
        results.append(await waker.wait_async(gen, timeout=10.0, work=[READERS]))
        gen = waker.generation
        waker.notify(work=(), reads=False)
        results.append(await waker.wait_async(gen, timeout=0.2, work=[READERS]))
        return results

    assert asyncio.run(main()) == [True, False, True, True, False]


def test_an_ack_wakes_only_the_readers_of_what_it_ended(waker: Waker) -> None:
    """Sixteen `q.call`s waiting on one server each read their row again on every ack: on
    Postgres a thread hop and a round trip apiece, most of the plane's work under load."""

    async def main() -> list[bool]:
        gen = waker.generation
        mine = asyncio.create_task(waker.wait_async(gen, timeout=10.0, work=reading("a")))
        theirs = asyncio.create_task(waker.wait_async(gen, timeout=0.3, work=reading("b")))
        await asyncio.sleep(0)
        waker.notify(work=(), reads=False, ended=["a"])  # the ack of a
        results = [await mine, await theirs]
        # Whatever may end any invocation or post to any journal still wakes every reader.
        gen = waker.generation
        theirs = asyncio.create_task(waker.wait_async(gen, timeout=10.0, work=reading("b")))
        await asyncio.sleep(0)
        waker.notify(work=())
        results.append(await theirs)
        return results

    assert asyncio.run(main()) == [True, False, True]
    gen = waker.generation
    waker.notify(work=(), reads=False, ended=["c"])  # before the wait: it counts at once
    assert waker.wait(gen, timeout=10.0, work=reading("c")) is True
    assert waker.wait(gen, timeout=0.1, work=reading("a")) is False


def test_reader_keys_are_bounded_and_a_waiter_past_the_bound_looks_again(
    waker: Waker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wakeup, "MAX_READER_KEYS", 2)
    gen = waker.generation
    for inv_id in ("a", "b", "c"):
        waker.notify(work=(), reads=False, ended=[inv_id])

    assert len(waker._readers) == 2  # "a" let go: the oldest
    # A wait that began before "a" was let go may have missed it, or anything else: it checks.
    assert waker.work_since(gen, reading("a")) and waker.work_since(gen, reading("z"))
    late = waker.generation
    assert not waker.work_since(late, reading("a"))


def test_a_thread_waiting_for_work_sleeps_through_changes_elsewhere(waker: Waker) -> None:
    """The embedded daemon's claim is not woken by its own ack, nor a `q.call`'s result wait
    by the claim of its job: each such wake-up was a store transaction for nothing."""
    gen = waker.generation
    waker.notify(work=())  # an ack
    waker.notify(work=["ns/b"], reads=False)  # a submit to another queue
    assert waker.wait(gen, timeout=0.2, work=["ns/a"]) is False
    assert waker.wait(gen, timeout=10.0, work=["ns/b"]) is True
    assert waker.wait(gen, timeout=10.0, work=[READERS]) is True  # the ack
    assert waker.wait(gen, timeout=10.0) is True  # no keys: any change

    gen = waker.generation
    waker.notify(work=(), reads=False)  # a claim
    assert waker.wait(gen, timeout=0.2, work=[READERS]) is False

    box: dict[str, bool] = {}
    waiter = threading.Thread(target=lambda: box.update(woke=waker.wait(gen, 20.0, work=["ns/a"])))
    waiter.start()
    waker.notify(work=["ns/b"], reads=False)
    waker.notify()  # unknown (a requeue, another process's commit): everyone looks
    waiter.join(timeout=30)
    assert box == {"woke": True}


@pytest.mark.parametrize(
    "keys",
    [None, frozenset(), frozenset({READERS}), frozenset({"ns/a", "ns-2/queue-b", READERS})],
)
def test_a_datagram_carries_the_keys_it_was_given(keys: frozenset[str] | None) -> None:
    assert unpack_keys(pack_keys(keys)) == keys


def test_a_datagram_too_long_for_its_keys_says_anything_changed() -> None:
    keys = frozenset(f"ns/queue-{i:05d}" for i in range(MAX_DATAGRAM // 10))

    assert pack_keys(keys) == b"!"


@pytest.mark.parametrize("garbage", [b"!", b"?", b"\x00\xff", b"k\xff\xfe", b"hello"])
def test_a_datagram_no_sender_writes_wakes_every_waiter(garbage: bytes) -> None:
    """Any local process can send to the socket: what it sends must never fail the receiver."""
    assert unpack_keys(garbage) is None


# -- across processes -------------------------------------------------------------------------

SENDER = """
import sys
from pathlib import Path
from dreamlake.lakeshore.plane.wakeup import CrossProcessWaker
relay = CrossProcessWaker(Path(sys.argv[1]))
relay.send()
relay.close()
"""


def send_from_another_process(directory: Path) -> None:
    subprocess.run([sys.executable, "-c", SENDER, str(directory)], check=True, timeout=30)


def test_another_process_wakes_a_blocked_waiter(tmp_path: Path) -> None:
    directory = tmp_path / "db.sqlite.wake"
    waker = Waker()
    relay = CrossProcessWaker(directory)
    waker.relay_through(relay)
    try:
        relay.listen(waker)  # what a first wait does
        assert len(list(directory.glob("*.peer"))) == 1
        gen = waker.generation
        box: dict[str, object] = {}

        def wait() -> None:
            started = time.monotonic()
            box["woke"] = waker.wait(gen, timeout=20.0)
            box["after"] = time.monotonic() - started

        waiter = threading.Thread(target=wait)
        waiter.start()
        send_from_another_process(directory)
        waiter.join(timeout=30)

        assert box["woke"] is True
        assert box["after"] < 10.0
    finally:
        waker.close()
    assert list(directory.glob("*.peer")) == []  # close removes its marker


@pytest.fixture
def two_ends(tmp_path: Path) -> Iterator[tuple[CrossProcessWaker, Waker, CrossProcessWaker]]:
    """(sender, waker, the waker's receiving relay, not listening yet) on one directory: two
    processes' ends of the datagram wake-ups, in one."""
    directory = tmp_path / "wake"
    sender = CrossProcessWaker(directory)
    waker = Waker()
    receiver = CrossProcessWaker(directory)
    waker.relay_through(receiver)
    yield sender, waker, receiver
    sender.close()
    waker.close()


def test_a_datagram_wakes_only_the_waiters_its_keys_concern(
    two_ends: tuple[CrossProcessWaker, Waker, CrossProcessWaker],
) -> None:
    sender, waker, receiver = two_ends
    receiver.listen(waker)
    gen = waker.generation
    sender.send(frozenset())  # a claim in the other process
    sender.send(frozenset({"ns/b"}))  # a submit to another queue
    sender.send(frozenset({"ns/a"}))  # the one the waiter wants

    assert waker.wait(gen, timeout=10.0, work=["ns/a"]) is True
    assert not waker.work_since(gen, [READERS])
    assert waker.work_since(gen, ["ns/b"])


def test_an_empty_datagram_wakes_the_receiver_and_does_not_stop_it(
    two_ends: tuple[CrossProcessWaker, Waker, CrossProcessWaker],
) -> None:
    """Any local user can send a zero-length datagram: it read as the socket's shutdown, and
    the process heard no other process's commit after it (only its safety polls)."""
    sender, waker, receiver = two_ends
    receiver.listen(waker)
    assert receiver._own is not None
    before = waker.generation
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stranger:
        stranger.sendto(b"", receiver._own)

    assert waker.wait(before, timeout=10.0) is True  # garbage wakes, as any garbage does
    after = waker.generation
    sender.send(frozenset({"ns/a"}))
    assert waker.wait(after, timeout=10.0, work=["ns/a"]) is True


def test_a_process_does_not_wake_itself_through_the_socket(tmp_path: Path) -> None:
    waker = Waker()
    relay = CrossProcessWaker(tmp_path / "wake")
    waker.relay_through(relay)
    try:
        relay.listen(waker)
        gen = waker.generation

        waker.notify()  # one local bump; no echo from our own datagram

        assert waker.generation == gen + 1
        assert waker.wait(gen + 1, timeout=0.2) is False
    finally:
        waker.close()


def test_a_stale_marker_is_removed_by_the_next_sender(tmp_path: Path) -> None:
    directory = tmp_path / "wake"
    relay = CrossProcessWaker(directory)
    stale = directory / f"{os.getpid() + 100000}-deadbeef.peer"
    stale.touch()
    try:
        relay.send()
    finally:
        relay.close()

    assert not stale.exists()


def test_a_dead_process_marker_is_removed(tmp_path: Path) -> None:
    directory = tmp_path / "wake"
    code = (
        "import sys, os\nfrom pathlib import Path\n"
        "from dreamlake.lakeshore.plane.wakeup import READERS, CrossProcessWaker, Waker\n"
        "w = Waker(); r = CrossProcessWaker(Path(sys.argv[1])); r.listen(w)\n"
        "os._exit(0)  # dies without closing: its marker stays behind\n"
    )
    subprocess.run([sys.executable, "-c", code, str(directory)], check=True, timeout=30)
    markers = list(directory.glob("*.peer"))
    assert len(markers) == 1

    relay = CrossProcessWaker(directory)
    try:
        relay.send()
    finally:
        relay.close()

    assert not markers[0].exists()


def test_a_new_waiter_is_found_by_a_sender_that_already_scanned(
    two_ends: tuple[CrossProcessWaker, Waker, CrossProcessWaker],
) -> None:
    sender, waker, receiver = two_ends
    sender.send()  # scans: nobody listens yet
    receiver.listen(waker)
    gen = waker.generation

    sender.send()

    assert waker.wait(gen, timeout=10.0) is True


def test_close_stops_listening_and_is_safe_twice(tmp_path: Path) -> None:
    waker = Waker()
    relay = CrossProcessWaker(tmp_path / "wake")
    waker.relay_through(relay)
    relay.listen(waker)

    waker.close()
    relay.close()
    relay.listen(waker)  # a closed relay never listens again

    assert list((tmp_path / "wake").glob("*.peer")) == []
