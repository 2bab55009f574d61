"""The codec's pickles: which protocol a thunk is written in, and who may unpickle one.

Everything else the codec carries is data any msgpack reader can decode; a thunk or a udf call
is code, written by cloudpickle and run by whoever loads it. Kept apart so that the two rules
that make that safe sit together: the writer pickles with a protocol the queue's workers load
(`pickle_protocol`, negotiated in protocols.py), and a reader that did not opt in
(`allow_pickle=False`) refuses before any byte is unpickled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from typing import Any, Final

from . import protocols
from .errors import DecodeError, InvalidArgument

#: What thunks are pickled with unless the caller says otherwise (`pickle_protocol`): a worker
#: on any supported Python can unpickle it. The submit path negotiates with the queue's workers.
PICKLE_PROTOCOL: Final = protocols.DEFAULT_PROTOCOL


def pickled(obj: Any, what: str, protocol: int) -> bytes:
    import cloudpickle

    try:
        data: bytes = cloudpickle.dumps(obj, protocol=protocol)
    except Exception as e:
        raise InvalidArgument(f"cannot pickle {what}: {type(e).__name__}: {e}") from e
    return data


#: The protocol thunks are pickled with in this context, or a function that picks it (asked only
#: when something is pickled, so a plain-data submit never pays for the choice).
_PROTOCOL: ContextVar[int | Callable[[], int]] = ContextVar(
    "lakeshore_pickle_protocol", default=PICKLE_PROTOCOL
)


class pickle_protocol:  # lower case: it reads as a function, `with codec.pickle_protocol(4):`
    """Pickle the thunks encoded inside this block with protocol `choose`, or with what
    `choose()` returns at the first pickle (the submit path passes its queue's negotiation).

    The codec never asks the plane itself: whoever knows the target queue decides. A class
    rather than a generator: it sits on every submit, and costs a fifth as much.
    """

    __slots__ = ("_choose", "_token")
    _token: Token[int | Callable[[], int]]

    def __init__(self, choose: int | Callable[[], int]) -> None:
        if not callable(choose):
            _check_protocol(choose)
        self._choose = choose

    def __enter__(self) -> None:
        self._token = _PROTOCOL.set(self._choose)

    def __exit__(self, *exc: object) -> None:
        _PROTOCOL.reset(self._token)


def chosen_protocol() -> int:
    choose = _PROTOCOL.get()
    return _check_protocol(choose() if callable(choose) else choose)


def _check_protocol(protocol: object) -> int:
    highest = protocols.highest_protocol()
    if (
        isinstance(protocol, bool)
        or not isinstance(protocol, int)
        or not protocols.MIN_PROTOCOL <= protocol <= highest
    ):
        raise InvalidArgument(
            f"pickle protocol must be an int from {protocols.MIN_PROTOCOL} to {highest} "
            f"(this Python's highest), got {protocol!r}"
        )
    return protocol


def unpickled(
    data: bytes, allow_pickle: bool, what: str, producer: Mapping[str, Any] | None = None
) -> Any:
    """`pickle.loads`, failing as `protocols.ThunkLoadError` naming the producer's Python,
    protocol and cloudpickle (`producer`: the envelope's ``pickled_by``) and this worker's."""
    if not allow_pickle:
        raise DecodeError(
            f"refusing to unpickle a {what}: this reader decodes plain values only (a pickle "
            "runs its writer's code; pass allow_pickle=True for a writer you trust)"
        )
    protocols.check_loadable(what, producer, data)
    import pickle

    try:
        return pickle.loads(data)
    except Exception as e:
        raise protocols.load_failure(what, producer, data, e) from e
