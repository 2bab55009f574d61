"""Topics and streams: reading a frame journal from a cursor.

An invocation's stream and a topic are the same journal; only the channel name differs. The
cursor is the seq of the last frame seen, so a reader that reconnects with it loses nothing and
repeats nothing.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

from . import codec
from .errors import DispatchError
from .ids import new_id
from .plane.base import Plane
from .plane.waiting import through_outages
from .types import Frame, check_name

TOPIC_TIMEOUT_S = 5.0


def iter_frames(
    plane: Plane,
    channel: str,
    *,
    since: int = -1,
    timeout: float = 30.0,
    allow_pickle: bool = False,
    rank: int = 0,
) -> Iterator[Any]:
    """Decoded VALUE frames after `since`; END stops, ERROR raises, silence raises TimeoutError.

    An invocation's journal needs no END frame: once the row is terminal and no frame is left
    after the cursor, the stream ends as the row did (returns on success, raises otherwise).
    This is also how a trimmed journal degrades: to the terminal result, never to wrong state.
    A plane that is briefly unreachable (a restart, a dropped connection) is asked again from
    the last seq read, for up to `timeout`: the stream resumes where it was, nothing repeated.
    """
    cursor = since
    is_topic = channel.startswith("topic:")
    while True:
        frames = through_outages(
            functools.partial(plane.frames, channel, since=cursor, wait_s=timeout, rank=rank),
            timeout,
        )
        if not frames and not is_topic:
            inv = through_outages(functools.partial(plane.invocation, channel), timeout)
            if inv.terminal:
                # Frames posted just before the row ended are still ours: read once more.
                frames = through_outages(
                    functools.partial(plane.frames, channel, since=cursor, rank=rank), timeout
                )
                if not frames:
                    if inv.state == "succeeded":
                        return
                    raise DispatchError(
                        f"invocation {channel} {inv.state}"
                        + (f": {inv.error}" if inv.error else "")
                    )
        if not frames:
            raise TimeoutError(f"no frame on '{channel}' after seq {cursor} for {timeout}s")
        for frame in frames:
            cursor = frame.seq
            value = _value(frame, allow_pickle)
            if value is _END:
                return
            if value is not _RESUME:
                yield value


_END = object()
#: A RESUME frame (issue 35): where a later attempt took the job up again, in the raw journal
#: (`plane.frames`); a stream of values passes over it.
_RESUME = object()


def _value(frame: Frame, allow_pickle: bool = False) -> Any:
    """A frame's value; plain values only unless the reader trusts the writer with code."""
    if frame.kind == "VALUE":
        if frame.value is None:
            return None
        from . import spill  # the object store, imported at the first frame (not with the SDK)

        return spill.loads(frame.value, allow_pickle=allow_pickle)  # a big frame rides as a Ref
    if frame.kind == "ERROR":
        message = (
            codec.decode(frame.value, allow_pickle=False)
            if frame.value is not None
            else "job failed"
        )
        raise DispatchError(str(message))
    if frame.kind == "RESUME":
        return _RESUME
    return _END


class Topic:
    """Pub/sub over the journal: post values, listen or stream from a cursor."""

    def __init__(
        self, plane: Plane, queue: str, name: str | None = None, *, allow_pickle: bool = False
    ) -> None:
        self.name = check_name(name or f"topic-{new_id().lower()}", "topic")
        self.queue = queue
        #: Anyone holding the namespace's token can post: values are plain unless you opt in.
        self.allow_pickle = allow_pickle
        self._plane = plane
        self.channel = plane.topic_channel(queue, self.name)
        #: seq of the last frame `listen` returned; pass it as `since` to resume elsewhere.
        self.cursor = -1

    def __repr__(self) -> str:
        return f"Topic({self.name!r}, queue={self.queue!r})"

    def post(self, value: Any = None, *, final: bool = False) -> int:
        """Append a value (or the END frame that closes the topic); returns its seq."""
        return self._plane.post(self.channel, "END" if final else "VALUE", codec.encode(value))

    def listen(self, since: int | None = -1, timeout: float = TOPIC_TIMEOUT_S) -> Any:
        """The next value after `since` (None: after the last one listened to); None on timeout."""
        cursor = self.cursor if since is None else since
        deadline = time.monotonic() + timeout
        while True:
            frames = self._plane.frames(
                self.channel, since=cursor, wait_s=max(0.0, deadline - time.monotonic())
            )
            if not frames:
                return None
            frame = frames[0]
            self.cursor = frame.seq
            value = _value(frame, self.allow_pickle)
            return None if value is _END else value

    def stream(self, since: int = -1, timeout: float = TOPIC_TIMEOUT_S) -> Iterator[Any]:
        """Values until END; `timeout` seconds of silence raises TimeoutError."""
        yield from iter_frames(
            self._plane, self.channel, since=since, timeout=timeout, allow_pickle=self.allow_pickle
        )
