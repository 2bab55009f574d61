"""A gang's part on this daemon (issue 47): where it listens, when it starts, when it must stop.

The plane hands a gang out as N held parts and starts them together once all are held
(sdk/plane/store/gangs.py). A daemon holding a part says where it listens (`gang_ready`: its
address, and for rank 0 a port it found free on its host for this attempt, so two gangs on one
host never collide), waits for the start, and hands its child the rendezvous torch and friends
read: `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` and the rest (`rendezvous`).

While the part runs, one thread follows the gang with `Plane.gang(..., wait_s=)`, which wakes on
the plane's change rather than at a poll: when any other part ends the attempt (its child
failed, its daemon's lease ran out), this part's child is stopped within the wake-up's latency,
not at gloo's 30-minute timeout. A gang's part always runs in a fresh child, retired after it:
a process group and its rendezvous variables must not outlive their attempt.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from dreamlake.lakeshore.errors import DispatchError, LeaseLost, NotFound
from dreamlake.lakeshore.types import Claim, GangState
from dreamlake.lakeshore.work.slot import AbortReason

from . import hangs

__all__ = ["GangPart", "advertise_addr", "free_port", "rendezvous"]

#: Longest single wait on the plane for a gang to change (a long-poll; a change wakes it).
WAIT_S: Final = 20.0
#: How long past the plane's own let-go deadline a part waits for a start before giving up.
START_SLACK_S: Final = 30.0


def advertise_addr(given: str | None = None) -> str:
    """The address other boxes reach this daemon at: `--advertise-addr`, else the host's own
    (its name resolved), else loopback."""
    if given:
        return given
    with contextlib.suppress(OSError):
        return socket.gethostbyname(socket.gethostname())
    return "127.0.0.1"


def free_port(addr: str) -> int:
    """A TCP port free on `addr` now, for rank 0's rendezvous (its process binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, 0))
        except OSError:
            s.bind(("", 0))
        return int(s.getsockname()[1])


def rendezvous(state: GangState) -> dict[str, str]:
    """The variables a started gang's part runs with, one process per node."""
    parts = sorted(state.parts, key=lambda p: p["rank"])
    addrs = [str(p.get("addr") or "") for p in parts]
    return {
        "NODE_RANK": str(state.rank),
        "RANK": str(state.rank),
        "WORLD_SIZE": str(state.nodes),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": addrs[0],
        "MASTER_PORT": str(parts[0]["port"]),
        "LAKESHORE_NODE_RANK": str(state.rank),
        "LAKESHORE_NUM_NODES": str(state.nodes),
        "LAKESHORE_NODE_ADDRS": ",".join(addrs),
    }


def _complete(state: GangState) -> bool:
    parts = {p["rank"]: p for p in state.parts}
    return (
        state.state == "started"
        and len(parts) == state.nodes
        and all(p.get("addr") for p in parts.values())
        and parts.get(0, {}).get("port") is not None
    )


class GangPart:
    """One held part: `start()` gives its rendezvous (None: the gang ended or was let go);
    `watching(stop)` stops the part's run when the gang ends under it."""

    def __init__(
        self, plane: Any, claim: Claim, addr: str, log: Any, *, grace_s: float = 30.0
    ) -> None:
        self.plane = plane
        self.claim = claim
        self.addr = addr
        self._log = log
        #: The grace this part's child gets when another part's box is preempted.
        self.grace_s = grace_s
        self.version = 0
        self.state: GangState | None = None
        #: When the child last moved, with hang_timeout_s (hangs.py); None: not watched.
        self.progress = hangs.Progress(claim.hang_timeout_s) if claim.hang_timeout_s else None
        self.rank = int((claim.gang or {}).get("rank", 0))
        self._pid: int | None = None
        self._post: Callable[[list[bytes]], object] = lambda frames: None
        self._dumped = False  # this child's stacks, in its output at a hang
        self._sent = False  # this box's notice, sent to the gang
        self._told = False  # this child, told of a notice

    def start(self) -> dict[str, str] | None:
        claim = self.claim
        port = free_port(self.addr) if (claim.gang or {}).get("rank") == 0 else None
        try:
            state = self.plane.gang_ready(claim.id, claim.lease, addr=self.addr, port=port)
            deadline = state.wait_until + START_SLACK_S
            while not _complete(state):
                if state.state == "ended" or time.time() > deadline:
                    self._log.info(
                        "gang.not_started",
                        invocation=claim.id,
                        state=state.state,
                        outcome=state.outcome,
                        held=state.held,
                        nodes=state.nodes,
                    )
                    return None
                state = self.plane.gang(claim.id, claim.lease, wait_s=WAIT_S, since=state.version)
        except (LeaseLost, NotFound) as exc:
            self._log.info("gang.not_started", invocation=claim.id, error=str(exc))
            return None
        self.state, self.version = state, state.version
        env = rendezvous(state)
        if self.progress is not None:  # the child registers its stack dump (hangs.py)
            env[hangs.WATCHED] = f"{self.progress.timeout_s:g}"
        self._log.info(
            "gang.started",
            invocation=claim.id,
            attempt=state.attempt,
            rank=state.rank,
            nodes=state.nodes,
            master=f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}",
        )
        return env

    def notice(self, until: float | None) -> None:
        """This part's box got a preemption notice, its grace ending at `until`: the gang is
        told (in a thread of its own: the notice reaches every slot without waiting on the
        plane), and every other part's child gets the notice and the same grace."""
        self._told = True  # the slot tells its own child
        if self._sent:
            return
        self._sent = True
        claim = self.claim
        when = time.time() + self.grace_s if until is None else until

        def tell() -> None:
            try:
                self.plane.gang_notice(claim.id, claim.lease, until=when)
            except DispatchError as exc:  # the attempt is over, or the plane is away
                self._log.warning("gang.notice_unsent", invocation=claim.id, error=str(exc))
            else:
                self._log.info("gang.notice_sent", invocation=claim.id, until=when)

        threading.Thread(target=tell, name="lakeshore-gang-notice", daemon=True).start()

    @contextlib.contextmanager
    def running(
        self,
        pid: int | None,
        *,
        stop: Callable[[AbortReason, str], object],
        tell: Callable[[float | None], object],
        post: Callable[[list[bytes]], object],
    ) -> Iterator[None]:
        """While the part's child (`pid`) runs, one thread follows the gang: `tell(until)` when
        another part's box got a preemption notice (this child checkpoints in the grace), and
        `stop(reason, why)` once the gang's attempt ends other than by this part's own end: at
        once when another part failed or was lost, at the end of the grace when one was
        preempted, after `post`ing this child's stacks when it hung. With hang_timeout_s a
        second thread watches for the hang (hangs.py)."""
        done = threading.Event()
        self._pid, self._post = pid, post
        threads = [threading.Thread(target=self._watch, args=(stop, tell, done), daemon=True)]
        if self.progress is not None:
            threads.append(threading.Thread(target=self._hangs, args=(stop, done), daemon=True))
        for thread in threads:
            thread.name = "lakeshore-gang"
            thread.start()
        try:
            yield
        finally:
            done.set()

    def moved(self) -> None:
        """The child moved (a frame, a checkpoint, dls.run.progress()): the plane hears of it
        every few seconds, from a thread of its own."""
        if self.progress is None or not self.progress.moved():
            return
        claim = self.claim

        def report() -> None:
            with contextlib.suppress(DispatchError):  # the attempt is over, or an outage
                self.plane.gang_progress(claim.id, claim.lease)

        threading.Thread(target=report, name="lakeshore-gang-progress", daemon=True).start()

    def _hangs(self, stop: Callable[[AbortReason, str], object], done: threading.Event) -> None:
        """Once this child has been still for T, the gang hangs if no part moved for T either
        (the plane's `progress_at`): stacks into the output, then the attempt fails."""
        progress, claim = self.progress, self.claim
        assert progress is not None
        while not done.wait(min(1.0, max(0.05, progress.still_until() - time.monotonic()))):
            if time.monotonic() < progress.still_until():
                continue  # it moved meanwhile
            try:
                state = self.plane.gang(claim.id, claim.lease)
            except DispatchError:
                done.wait(1.0)  # an outage, or the attempt is over: the other watcher decides
                continue
            still = time.time() - (state.progress_at or 0.0)
            if still < progress.timeout_s:
                progress.rearm(still)  # another part moved: not a hang yet
                continue
            why = (
                f"hung: no part of the gang moved for {progress.timeout_s:g} s (hang_timeout_s);"
                f" each part's Python stacks are in its output (jobs logs --rank N)"
            )
            self._log.warning("gang.hung", invocation=claim.id, rank=self.rank, still_s=still)
            with contextlib.suppress(DispatchError):  # every other part dumps its stacks now
                self.plane.gang_progress(claim.id, claim.lease, hung=True)
            self._dump(why)
            done.wait(hangs.PEERS_DUMP_S)  # while the attempt lives, their stacks are taken
            stop("hung", why)
            return

    def _dump(self, why: str) -> None:
        """This child's stacks, as a frame of its rank's output (once)."""
        if self._dumped:
            return
        self._dumped = True
        text = hangs.dump_stacks(self._pid)
        with contextlib.suppress(Exception):  # the output is best effort: the stop is not
            self._post([hangs.stacks_frame(self.rank, why, text)])

    def _watch(
        self,
        stop: Callable[[AbortReason, str], object],
        tell: Callable[[float | None], object],
        done: threading.Event,
    ) -> None:
        claim, since = self.claim, self.version
        while not done.is_set():
            try:
                state = self.plane.gang(claim.id, claim.lease, wait_s=WAIT_S, since=since)
            except (LeaseLost, NotFound) as exc:
                why = f"the gang's attempt is over: {exc}"
            except DispatchError:
                done.wait(1.0)  # an outage: the lease renewal decides what it means
                continue
            else:
                since = state.version
                if state.noticed is not None or state.outcome == "preempted":
                    self._noticed(state, tell)
                if state.hung is not None and state.state == "started":
                    hung = state.hung["rank"]
                    self._dump(f"hung: rank {hung}'s daemon found the gang hung (hang_timeout_s)")
                if state.state != "ended" or state.outcome == "succeeded":
                    continue
                failed = state.failed or {}
                why = (
                    f"the gang's attempt ended {state.outcome}: rank {failed.get('rank', '?')} "
                    f"on {failed.get('worker', '?')} {failed.get('why', 'ended')}"
                )
                if state.outcome == "preempted":  # the grace first: the child may checkpoint
                    until = (state.noticed or {}).get("until") or time.time() + self.grace_s
                    if done.wait(max(0.0, float(until) - time.time())):
                        return
                elif "hung:" in str(failed.get("why")) and not done.is_set():
                    self._dump(why)  # another part found the hang, and it missed the word
            if not done.is_set():
                self._log.warning("gang.stopping", invocation=claim.id, why=why)
                stop("lost", why)
            return

    def _noticed(self, state: GangState, tell: Callable[[float | None], object]) -> None:
        """Another part's box is going away: this child hears the notice once, with that
        part's grace (this box is not going away, so its own grace does not apply)."""
        if self._told:
            return
        self._told = True
        noticed = state.noticed or {}
        until = noticed.get("until") or time.time() + self.grace_s
        self._log.warning(
            "gang.noticed", invocation=self.claim.id, rank=noticed.get("rank"), until=until
        )
        tell(float(until))
