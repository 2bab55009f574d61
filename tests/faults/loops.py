"""Clients for the fault tests that log every operation to a `History`.

`LoopWorker` is a worker loop over a plane (claim, work with renewals or stall past the lease,
settle until answered); `Submitter` submits keyed jobs until each got an id. Both treat an
unreachable plane (a killed server, a cut connection, a lost answer) as "outcome unknown" and
resend the same request, which must be idempotent. `LossyTransport` drops answers on purpose.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import httpx
import msgpack
from history import Attempt, History

from dreamlake.lakeshore.errors import DispatchError, LeaseLost
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.types import SubmitRequest
from dreamlake.lakeshore.work.retry import is_transient
from tests.support import claiming

RETRY_S = 0.05
T = TypeVar("T")


class LossyTransport(httpx.HTTPTransport):
    """Delivers every request, then loses the answer of some: the caller cannot tell it landed.

    `suffixes` picks the routes (by the path's end); `p` the share of answers lost.
    """

    def __init__(self, rng: random.Random, p: float, suffixes: Sequence[str]) -> None:
        super().__init__()
        self.rng = rng
        self.p = p
        self.suffixes = tuple(suffixes)
        self.lost = 0
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path.endswith(self.suffixes):
            with self._lock:
                lose = self.rng.random() < self.p
                self.lost += lose
            if lose:
                response.read()
                response.close()
                raise httpx.ReadError("injected fault: the answer was lost", request=request)
        return response


def settle_until_answered(
    history: History, att: Attempt, verb: str, call: Callable[[], object], tag: object = None
) -> bool:
    """Send a settle until it is answered; resends after a lost answer must be idempotent."""
    while True:
        sent = time.time()
        try:
            call()
        except LeaseLost:
            history.settle(att, verb, "refused", sent)
            return False
        except DispatchError as exc:
            if not is_transient(exc):
                raise
            history.settle(att, verb, "unknown", sent)
            time.sleep(RETRY_S)
            continue
        history.settle(att, verb, "accepted", sent, tag)
        return True


class LoopWorker(threading.Thread):
    """Claims from `queue` until `stop`; `stall_p` of its jobs stall past the lease unrenewed."""

    def __init__(
        self,
        name: str,
        plane: Plane,
        history: History,
        queue: str,
        stop: threading.Event,
        *,
        rng: random.Random,
        lease_s: float = 2.0,
        work_s: tuple[float, float] = (0.0, 0.02),
        stall_p: float = 0.0,
        stall_s: float = 0.0,
        fail_p: float = 0.0,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.plane = plane
        self.history = history
        self.queue = queue
        self.stop = stop
        self.rng = random.Random(rng.random())
        self.lease_s = lease_s
        self.work_s = work_s
        self.stall_p = stall_p
        self.stall_s = stall_s
        self.fail_p = fail_p
        self.ran = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self._once()
        except BaseException as exc:  # surfaced by the test through `error`
            self.error = exc

    def _once(self) -> None:
        try:
            claim = claiming.claim(
                self.plane, [self.queue], worker=self.name, lease_s=self.lease_s, wait_s=0.5
            )
        except DispatchError as exc:
            if not is_transient(exc):
                raise
            time.sleep(RETRY_S)
            return
        if claim is None:
            return
        att = self.history.claim(self.name, claim, self.lease_s)
        if self.rng.random() < self.stall_p:
            time.sleep(self.stall_s)  # a paused process: no renewals, then a late settle
        else:
            self._work(claim.lease, claim.id)
        self.ran += 1
        if self.rng.random() < self.fail_p:
            settle_until_answered(
                self.history,
                att,
                "fail",
                lambda: self.plane.nack(claim.id, claim.lease, error="injected", retry=False),
            )
            return
        result = msgpack.packb({"id": claim.id, "lease": claim.lease, "worker": self.name})
        settle_until_answered(
            self.history, att, "ack", lambda: self.plane.ack(claim.id, claim.lease, result), result
        )

    def _work(self, lease: str, inv_id: str) -> None:
        """Work for a while, renewing the lease every third of it, as the daemon does."""
        end = time.monotonic() + self.rng.uniform(*self.work_s)
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, self.lease_s / 3))
            if end - time.monotonic() <= 0:
                return
            sent = time.time()
            try:
                alive = self.plane.renew([lease], self.lease_s)
            except DispatchError as exc:
                if not is_transient(exc):
                    raise
                continue
            if inv_id in alive:
                self.history.renewed(lease, sent, self.lease_s)


class Submitter(threading.Thread):
    """Submits `keys` one by one, resending a key until an id comes back (or `give_up`)."""

    def __init__(
        self,
        name: str,
        plane: Plane,
        history: History,
        queue: str,
        keys: Sequence[str],
        *,
        give_up: threading.Event | None = None,
        payload: bytes = b"\x90",
        max_attempts: int = 3,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.plane = plane
        self.history = history
        self.queue = queue
        self.keys = list(keys)
        self.give_up = give_up or threading.Event()
        self.payload = payload
        self.max_attempts = max_attempts
        self.errors = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for key in self.keys:
                self._submit(key)
        except BaseException as exc:
            self.error = exc

    def _submit(self, key: str) -> None:
        request = SubmitRequest(self.payload, key=key, max_attempts=self.max_attempts)
        while not self.give_up.is_set():
            try:
                (inv_id,) = self.plane.submit(self.queue, [request])
            except DispatchError as exc:
                if not is_transient(exc):
                    raise
                self.errors += 1
                self.history.submit(key, None)
                time.sleep(RETRY_S)
                continue
            self.history.submit(key, inv_id)
            return


def join_all(threads: Sequence[threading.Thread], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"threads still running after {timeout}s: {alive}"
    for t in threads:
        err = getattr(t, "error", None)
        if err is not None:
            raise AssertionError(f"{t.name} failed: {err!r}") from err


def drain(plane: Plane, ids: Sequence[str], timeout: float) -> None:
    """Wait until every id is terminal (the workers keep running meanwhile)."""
    pending = set(ids)
    deadline = time.monotonic() + timeout
    while pending:
        for inv_id in list(pending):
            try:
                if plane.invocation(inv_id).terminal:
                    pending.discard(inv_id)
            except DispatchError as exc:
                if not is_transient(exc):
                    pending.discard(inv_id)  # NotFound: the checker reports it as lost
        if pending and time.monotonic() > deadline:
            return  # the checker names what is still live
        if pending:
            time.sleep(0.05)


def rows_in_queue(plane: Plane, queue: str) -> int:
    states = ("queued", "running", "succeeded", "failed", "cancelled", "killed", "timeout")
    return sum(plane.count(queue, s) for s in states)


def submit_keys(
    urls: Sequence[str], token: str, queue: str, keys: Sequence[str], seed: int
) -> tuple[dict[str, str], list[str]]:
    """In a child process: submit `keys` shuffled, in batches, spread over the replicas at
    `urls`, resending a batch refused as transient; returns key -> id and the refusals."""
    from dreamlake.lakeshore.plane import HttpDispatch

    rng = random.Random(seed)
    order = list(keys)
    rng.shuffle(order)
    planes = [HttpDispatch(url, token=token, timeout_s=30) for url in urls]
    got: dict[str, str] = {}
    retried: list[str] = []
    try:
        for start in range(0, len(order), 25):
            batch = order[start : start + 25]
            requests = [SubmitRequest(b"\x90", key=k) for k in batch]
            while True:
                plane = rng.choice(planes)
                try:
                    ids = plane.submit(queue, requests)
                    break
                except DispatchError as exc:
                    if not is_transient(exc):
                        raise
                    retried.append(str(exc))
                    time.sleep(RETRY_S)
            got.update(zip(batch, ids, strict=True))
    finally:
        for plane in planes:
            plane.close()
    return got, retried


class TopicWriter(threading.Thread):
    """Posts the values 0..total-1 to a topic, resending one until a seq comes back."""

    def __init__(self, plane: Plane, channel: str, total: int) -> None:
        super().__init__(name="writer", daemon=True)
        self.plane = plane
        self.channel = channel
        self.total = total
        self.posted: dict[int, int] = {}  # value -> the seq the writer was told
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for value in range(self.total):
                self.posted[value] = _until_answered(
                    lambda v=value: self.plane.post(self.channel, "VALUE", v.to_bytes(4, "big"))
                )
                time.sleep(0.01)
        except BaseException as exc:
            self.error = exc


class TopicReader(threading.Thread):
    """Long-polls a topic from its cursor until `stop`, reconnecting with the last seq seen."""

    def __init__(self, name: str, plane: Plane, channel: str, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.plane = plane
        self.channel = channel
        self.stop = stop
        self.got: list[tuple[int, int]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        cursor = -1
        try:
            while not self.stop.is_set():
                frames = _until_answered(
                    lambda c=cursor: self.plane.frames(self.channel, since=c, wait_s=2.0)
                )
                for f in frames:
                    self.got.append((f.seq, int.from_bytes(f.value or b"", "big")))
                    cursor = f.seq
        except BaseException as exc:
            self.error = exc


def _until_answered(call: Callable[[], T]) -> T:
    while True:
        try:
            return call()
        except DispatchError as exc:
            if not is_transient(exc):
                raise
            time.sleep(RETRY_S)
