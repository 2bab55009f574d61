"""The other side of a conformance test: producer or worker verbs run against a plane.

`PeerOps` runs named operations (claim, ack, post, run_worker, ...) on one plane. The test
process drives it either in-process (`LocalPeer`, for planes that only live in one process) or,
through `python peer.py`, in a second process (`RemotePeer`) that opens the same plane from its
own spec (a SQLite file, later an HTTP url or a Postgres dsn) and answers one request per line on
stdin/stdout. A line is base64 of `dls.encode(message)`, so payloads keep their types.
"""

from __future__ import annotations

import base64
import contextlib
import os
import queue as queue_mod
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import ERRORS_BY_CODE, DispatchError
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.types import Ack, ClaimArgs

#: How long the test process waits for a peer's answer before calling the peer stuck.
ANSWER_TIMEOUT_S = 30.0


# -- what a peer does -------------------------------------------------------------------------


def open_plane(spec: dict[str, Any]) -> Plane:
    """The hook for new planes: how a peer process opens the plane the test process uses."""
    kind = spec["kind"]
    if kind in ("sqlite", "postgres"):
        return dls.Dispatch(spec["target"], namespace=spec.get("namespace", "default"))
    if kind == "http":
        return dls.HttpDispatch(
            spec["url"], token=spec.get("token"), namespace=spec.get("namespace", "default")
        )
    raise ValueError(f"unknown plane spec kind {kind!r}")


def job_dict(job: dls.Job | None) -> dict[str, Any] | None:
    if job is None:
        return None
    return {
        "id": job.id,
        "payload": job.payload,
        "attempt": job.attempt,
        "queue": job.queue,
        "lease": job.lease,
    }


def to_job(d: dict[str, Any] | None) -> dls.Job | None:
    return None if d is None else dls.Job(**d)


class PeerOps:
    """Operations on one plane, by name; queue objects are kept so `post` sees their claims."""

    def __init__(self, plane: Plane) -> None:
        self.plane = plane
        self._queues: dict[tuple[str, str, float], dls.SyncQueue] = {}

    def close(self) -> None:
        self.plane.close()

    def q(self, name: str, kind: str = "fifo", temperature: float = 1.0) -> dls.SyncQueue:
        k = (name, kind, temperature)
        if k not in self._queues:
            self._queues[k] = dls.SyncQueue(
                name, dispatch=self.plane, kind=kind, temperature=temperature
            )
        return self._queues[k]

    def run(self, op: str, args: dict[str, Any]) -> Any:
        fn: Callable[..., Any] | None = getattr(self, f"op_{op}", None)
        if fn is None:
            raise ValueError(f"unknown peer op {op!r}")
        return fn(**args)

    # producer side
    def op_pid(self) -> int:
        return os.getpid()

    def op_submit(self, queue: str, payload: Any = None, **kw: Any) -> str:
        return self.q(queue).submit(payload, **kw)

    def op_submit_repeat(self, queue: str, key: str, n: int) -> list[str]:
        return [self.q(queue).submit({"i": i}, key=key) for i in range(n)]

    def op_result(self, id: str, timeout: float = 10.0) -> Any:
        return self.q("default").result(id, timeout=timeout)

    def op_status(self, id: str) -> dict[str, Any]:
        inv = self.plane.invocation(id)
        return {k: v for k, v in inv.public().items() if k != "result"}

    def op_stream(self, id: str, since: int = -1, timeout: float = 10.0) -> list[Any]:
        return list(self.q("default").stream(id, since=since, timeout=timeout))

    def op_count(self, queue: str, state: str = "queued") -> int:
        return self.q(queue).count(state)

    def op_cancel(self, id: str, kill: bool = False) -> bool:
        return self.plane.cancel(id, kill=kill)

    # worker side
    def op_claim(
        self,
        queue: str,
        kind: str = "fifo",
        temperature: float = 1.0,
        wait: float = 0.0,
        lease_s: float = 60.0,
    ) -> dict[str, Any] | None:
        return job_dict(self.q(queue, kind, temperature).claim(wait=wait, lease_s=lease_s))

    def op_claim_on_host(
        self, queue: str, host: str | None, wait: float = 0.0, limit: int = 1
    ) -> list[str]:
        """Ids claimed by a worker that names `host` (locality), in claim order."""
        args = ClaimArgs([queue], f"peer-{os.getpid()}", limit=limit, host=host)
        claims = self.plane.claim_many(args, wait_s=wait)
        return [c.id for c in claims]

    def op_claim_many(self, queues: list[str], limit: int = 1, wait: float = 0.0) -> list[str]:
        """Ids claimed by a worker of `queues` (its first is its primary), in claim order."""
        args = ClaimArgs(queues, f"peer-{os.getpid()}", limit=limit)
        claims = self.plane.claim_many(args, wait_s=wait)
        return [c.id for c in claims]

    def op_ack_and_claim(
        self, acks: list[dict[str, Any]], queues: list[str], limit: int = 1, wait: float = 0.0
    ) -> list[str]:
        """Settle `acks` ({id, lease}) and claim as `op_claim_many`, as a daemon's worker
        does when a job ends; a refused ack raises."""
        settled = [Ack(a["id"], a["lease"], dls.encode(None)) for a in acks]
        args = ClaimArgs(queues, f"peer-{os.getpid()}", limit=limit)
        errors, claims = self.plane.ack_and_claim(settled, args, wait_s=wait)
        for error in errors:
            if error is not None:
                raise error
        return [c.id for c in claims]

    def op_ack(self, queue: str, job: dict[str, Any], result: Any = None) -> None:
        self.q(queue).ack(dls.Job(**job), result)

    def op_nack(self, queue: str, job: dict[str, Any], error: str, retry: bool = True) -> None:
        self.q(queue).nack(dls.Job(**job), error=error, retry=retry)

    def op_post(self, queue: str, id: str, value: Any = None, final: bool = False) -> int:
        return self.q(queue).post(id, value, final=final)

    def op_working(self, queue: str, fail: bool = False) -> dict[str, Any]:
        seen: dict[str, Any] = {"job": None, "raised": False}
        try:
            with self.q(queue).working() as job:
                seen["job"] = job_dict(job)
                if job is not None and fail:
                    raise RuntimeError("boom in working()")
        except RuntimeError:
            seen["raised"] = True
        return seen

    def op_run_worker(self, queue: str, once: bool = False, burst: bool = False) -> int:
        return dls.run_worker(self.q(queue), once=once, burst=burst, handler=self.handler)

    def op_serve(self, queue: str, n: int = 1, wait: float = 20.0) -> int:
        """Wait for and run `n` jobs of `queue` (a worker that blocks on the plane's wake-up),
        giving up once none arrives for `wait` seconds."""
        from dreamlake.lakeshore.worker import inline_worker

        core = inline_worker(
            self.plane, [queue], burst=True, burst_wait_s=wait, max_jobs=n, handler=self.handler
        )
        core.run()
        if core.fatal is not None:
            raise core.fatal
        return core.started_jobs

    def op_churn(self, queue: str, n: int) -> int:
        """Submit `n` jobs one by one, each followed by a claim that is acked, nacked (with and
        without a retry), released or left running, and a cancel of an older job: every kind
        of state change, as fast as this process can go. Returns how many it submitted."""
        q = self.q(queue)
        submitted: list[str] = []
        for i in range(n):
            submitted.append(q.submit({"i": i}))
            job = q.claim(lease_s=60.0)
            if job is not None:
                step = i % 5
                if step == 0:
                    q.ack(job, i)
                elif step in (1, 2):
                    q.nack(job, error="churn", retry=step == 1)
                elif step == 3:
                    self.plane.release(job.id, job.lease)
            if i % 7 == 6:
                self.plane.cancel(submitted[i - 3])
        return len(submitted)

    def op_release(
        self, id: str, lease: str, outcome: str = "unrun", cause: str = "notice"
    ) -> bool:
        return self.plane.release(id, lease, outcome=outcome, cause=cause)

    def op_renew(self, leases: list[str], lease_s: float) -> dict[str, bool]:
        return self.plane.renew(leases, lease_s)

    def op_topic_post(self, queue: str, topic: str, value: Any = None, final: bool = False) -> int:
        return self.q(queue).topic(topic).post(value, final=final)

    def op_topic_stream(self, queue: str, topic: str, since: int = -1) -> list[Any]:
        return list(self.q(queue).topic(topic).stream(since=since, timeout=10.0))

    def handler(self, payload: Any) -> Any:
        """What `run_worker` in a peer does with a plain payload {"op": ...}."""
        op = payload["op"]
        if op == "double":
            return payload["x"] * 2
        if op == "fail":
            raise ValueError(payload.get("msg", "handler failed"))
        if op == "stream":
            return _count_to(payload["n"])
        if op == "gate":
            return _gated(self.q(payload["queue"]).topic(payload["topic"]))
        if op == "ref_double":  # an object in by its Ref, a new one out by its Ref
            return dls.put(dls.get(payload["ref"]) * 2, storage=payload["storage"])
        raise ValueError(f"unknown handler op {op!r}")


def _count_to(n: int) -> Iterator[int]:
    yield from range(n)
    return n


def _gated(gate: dls.Topic) -> Iterator[str]:
    """Yield, then hold the job running until the test posts to the gate topic."""
    yield "before"
    if gate.listen(since=-1, timeout=20.0) is None:
        raise TimeoutError("the gate topic was never opened")
    yield "after"


# -- the wire between test process and peer process -------------------------------------------


def pack(message: Any) -> bytes:
    return base64.b64encode(dls.encode(message)) + b"\n"


def unpack(line: bytes) -> Any:
    return dls.decode(base64.b64decode(line.strip()))


def error_dict(exc: BaseException) -> dict[str, Any]:
    code = exc.code if isinstance(exc, DispatchError) else None
    return {"code": code, "type": type(exc).__name__, "message": str(exc)}


def raise_error(err: dict[str, Any]) -> None:
    code = err.get("code")
    if code is not None:
        cls = ERRORS_BY_CODE.get(code, DispatchError)
        raise cls(err["message"])
    builtin = {"TimeoutError": TimeoutError, "ValueError": ValueError}.get(err["type"])
    if builtin is not None:
        raise builtin(err["message"])
    raise RuntimeError(f"peer raised {err['type']}: {err['message']}")


def serve() -> None:
    """The peer process: one request per stdin line, one answer per stdout line."""
    ops: PeerOps | None = None
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = unpack(line)
        op, args = request["op"], request.get("args", {})
        try:
            if op == "open":
                if ops is not None:
                    ops.close()
                ops = PeerOps(open_plane(args["spec"]))
                answer: Any = {"value": None}
            elif op == "close":
                if ops is not None:
                    ops.close()
                ops = None
                answer = {"value": None}
            else:
                if ops is None:
                    raise RuntimeError("no plane open in this peer")
                answer = {"value": ops.run(op, args)}
        except Exception as exc:
            answer = {"error": error_dict(exc)}
        out.write(pack(answer))
        out.flush()
    if ops is not None:
        ops.close()


# -- the test process's handles -----------------------------------------------------------------


class Pending:
    """An operation a peer is running; `.result()` waits for its answer."""

    def __init__(self, take: Callable[[float], Any]) -> None:
        self._take = take

    def result(self, timeout: float = ANSWER_TIMEOUT_S) -> Any:
        return self._take(timeout)


class PeerApi:
    """The verbs tests call on a peer, whichever side of a process boundary it is."""

    def start(self, op: str, **args: Any) -> Pending:
        raise NotImplementedError

    def call(self, op: str, **args: Any) -> Any:
        return self.start(op, **args).result()

    # conveniences that turn job dicts back into Jobs
    def claim(self, queue: str, **kw: Any) -> dls.Job | None:
        return to_job(self.call("claim", queue=queue, **kw))

    def ack(self, job: dls.Job, result: Any = None) -> None:
        self.call("ack", queue=job.queue, job=job_dict(job), result=result)

    def nack(self, job: dls.Job, *, error: str, retry: bool = True) -> None:
        self.call("nack", queue=job.queue, job=job_dict(job), error=error, retry=retry)

    def post(self, job: dls.Job, value: Any = None, *, final: bool = False) -> int:
        return int(self.call("post", queue=job.queue, id=job.id, value=value, final=final))


class LocalPeer(PeerApi):
    """A peer in this process, on the test's own plane; `start` runs the op in a thread."""

    in_process = True

    def __init__(self, plane: Plane) -> None:
        self.ops = PeerOps(plane)

    def start(self, op: str, **args: Any) -> Pending:
        box: queue_mod.Queue[tuple[bool, Any]] = queue_mod.Queue()

        def run() -> None:
            try:
                box.put((True, self.ops.run(op, args)))
            except BaseException as exc:
                box.put((False, exc))

        thread = threading.Thread(target=run, name=f"peer-{op}", daemon=True)
        thread.start()

        def take(timeout: float) -> Any:
            try:
                ok, value = box.get(timeout=timeout)
            except queue_mod.Empty:
                raise AssertionError(f"local peer op {op!r} gave no answer in {timeout}s") from None
            thread.join()
            if not ok:
                raise value
            return value

        return Pending(take)


class RemotePeer(PeerApi):
    """A second process running `serve()`; reused across tests, one plane open at a time."""

    in_process = False

    def __init__(self, log_path: Path) -> None:
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self._log_path = log_path
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self._answers: queue_mod.Queue[bytes] = queue_mod.Queue()
        self._reader = threading.Thread(target=self._read, name="peer-reader", daemon=True)
        self._reader.start()
        self._busy = threading.Lock()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._answers.put(line)
        self._answers.put(b"")  # EOF

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def start(self, op: str, **args: Any) -> Pending:
        if not self._busy.acquire(blocking=False):
            raise AssertionError("a remote peer runs one operation at a time")
        assert self.proc.stdin is not None
        self.proc.stdin.write(pack({"op": op, "args": args}))
        self.proc.stdin.flush()

        def take(timeout: float) -> Any:
            try:
                line = self._answers.get(timeout=timeout)
            except queue_mod.Empty:
                self.stop()
                raise AssertionError(
                    f"peer op {op!r} gave no answer in {timeout}s; peer log:\n{self.log_tail()}"
                ) from None
            finally:
                self._busy.release()
            if not line:
                raise AssertionError(f"peer exited during {op!r}; peer log:\n{self.log_tail()}")
            answer = unpack(line)
            if "error" in answer:
                raise_error(answer["error"])
            return answer["value"]

        return Pending(take)

    def log_tail(self) -> str:
        self._log.flush()
        return self._log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self._reader.join(timeout=5)
            self.proc.stdout.close()
        self._log.close()


if __name__ == "__main__":
    serve()
