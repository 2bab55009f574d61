"""Spill: payloads and results above the inline limit travel as a `Ref`, not as bytes.

Why: the invocation row (and every HTTP hop, and Postgres's TOAST) should carry small values. A
value whose encoding exceeds the inline limit (256 KiB by default; `LAKESHORE_INLINE_LIMIT`, or
`configure(inline_limit=...)`) is put in the object store (objects/) and the wire carries only
its encoded `Ref`, flagged `spilled`: a few hundred bytes. A numpy array or torch tensor is put
as its raw buffer without being encoded at all, and a worker on the same box reads it as a view
over the host tier's memory. The control plane stores and forwards the Ref like any payload; it
never sees the data.

Both directions are transparent: `SyncQueue.submit` and `ack`, the worker loop and the daemon's
children spill on the way out (`dumps`); `result()`, `claim()` and `run_body` resolve on the way
in (`loads`/`resolve`). Only spilled Refs are resolved and, with the invocation's retention,
deleted (`is_spilled`): a Ref or `StorageRef` that user code passes on purpose (a dataset in a
bucket, an object from `dls.put`) is a value like any other and is never touched. Refs under the
old `_spill/` storage prefix (rows written before objects existed) still resolve.

Durable by default: the object is written through to the storage tier and fsynced before the
submit or ack that carries it returns. `configure(durable=False)` (or `LAKESHORE_SPILL_DURABLE=0`)
keeps spilled objects in the host tier only, for work that never leaves the box and need not
survive a reboot (Ray's model).

Where durable copies go: the storage given to the call, else `configure(storage=...)`, else the
job's storage when inside a running job that was given one (`dls.run`), else
`$LAKESHORE_STORAGE`; with none of those, the plane tier when the caller's plane is a control
plane over HTTP (objects/plane.py: hosts that share only the control plane), else
`$LAKESHORE_HOME/storage`. A Ref names its durable copy's URL, so a reader needs access (or a
token for that plane), not config.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from typing import Any, Final

from . import codec, locality, objects
from .envelope import Envelope, Thunk
from .errors import InvalidArgument
from .job_context import current as current_job
from .ref import Ref
from .storage import (
    MAX_REF_BYTES,
    SPILL_PREFIX,
    Storage,
    StorageRef,
    default_storage_url,
    is_spilled,
    sniff_ref,
)

__all__ = [
    "DEFAULT_INLINE_LIMIT",
    "SPILL_PREFIX",
    "configure",
    "dumps",
    "dumps_located",
    "inline_limit",
    "is_spilled",
    "loads",
    "resolve",
    "spill",
]

#: Encoded values up to this many bytes stay inline on the invocation.
DEFAULT_INLINE_LIMIT: Final = 256 * 1024

_lock = threading.Lock()
_settings: dict[str, Any] = {"inline_limit": None, "storage": None, "durable": None}


def configure(
    *,
    inline_limit: int | None = None,
    storage: str | Storage | None = None,
    durable: bool | None = None,
) -> None:
    """Set this process's inline limit, spill storage and durability (None: the environment's)."""
    if inline_limit is not None:
        _check_limit(inline_limit)
    if durable is not None and not isinstance(durable, bool):
        raise InvalidArgument(f"durable is True, False or None, got {durable!r}")
    with _lock:
        _settings["inline_limit"] = inline_limit
        _settings["storage"] = storage
        _settings["durable"] = durable


def durable() -> bool:
    """Whether spills are durable: `configure()`, else `$LAKESHORE_SPILL_DURABLE`, else yes."""
    configured = _settings["durable"]
    if configured is not None:
        return bool(configured)
    text = os.environ.get("LAKESHORE_SPILL_DURABLE", "1").strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise InvalidArgument(f"LAKESHORE_SPILL_DURABLE is 1 or 0, got {text!r}")


def _check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidArgument(f"the inline limit is a byte count >= 0, got {limit!r}")
    return limit


def inline_limit() -> int:
    """The limit in force: `configure()`, else `$LAKESHORE_INLINE_LIMIT`, else 256 KiB."""
    configured = _settings["inline_limit"]
    if configured is not None:
        return int(configured)
    text = os.environ.get("LAKESHORE_INLINE_LIMIT")
    if text:
        try:
            return _check_limit(int(text))
        except ValueError:
            raise InvalidArgument(
                f"LAKESHORE_INLINE_LIMIT must be a byte count, got {text!r}"
            ) from None
    return DEFAULT_INLINE_LIMIT


def spill_storage(storage: str | Storage | None = None) -> Storage | objects.PlaneTier:
    """Where a spill's durable copy goes (see the module docstring for the order)."""
    if storage is not None:
        return objects.durable_target(storage)
    configured = _settings["storage"]
    if configured is not None:
        return objects.durable_target(configured)
    job = current_job()
    if job is not None and job.storage.url != default_storage_url():  # a job's own storage
        return job.storage
    return objects.durable_target(None)  # the plane tier over HTTP, unless storage is set


def spill(data: bytes, *, limit: int | None = None, storage: str | Storage | None = None) -> bytes:
    """`data` itself when it fits the inline limit, else the encoded Ref of a spilled copy."""
    return _spill(data, inline_limit() if limit is None else _check_limit(limit), storage, [])


def _spill(data: bytes, cap: int, storage: str | Storage | None, made: list[Ref]) -> bytes:
    if len(data) <= cap:
        return data
    keep = durable()
    ref = objects.put_encoded(
        data, durable=keep, storage=spill_storage(storage) if keep else None, spilled=True
    )
    made.append(ref)
    return codec.encode(ref)


def dumps(value: Any, *, limit: int | None = None, storage: str | Storage | None = None) -> bytes:
    """`codec.encode(value)`, spilled when too big.

    A big array is put raw, never encoded; so is each big array argument of a thunk or udf call,
    which the worker gets back as a view (`resolve_call`) while the rest of the call is pickled.
    """
    cap = inline_limit() if limit is None else _check_limit(limit)
    return _dumps(value, cap, storage, [])


def dumps_located(
    value: Any, *, limit: int | None = None, storage: str | Storage | None = None
) -> tuple[bytes, str | None, tuple[StorageRef, ...]]:
    """`dumps(value)`, the host a job carrying it should run on, and the objects it owns.

    The host is the one whose tier holds the most bytes of the objects it refers to, its spills
    included (`locality.host_of`), or None when those are no more than the inline limit (a
    submit's locality hint). The objects are the durable copies of the spills `data` names only
    from inside a pickle (a thunk's big arguments), which retention could not find in it: the
    submit lists them for retention to delete with its row.
    """
    cap = inline_limit() if limit is None else _check_limit(limit)
    made: list[Ref] = []
    data = _dumps(value, cap, storage, made)
    itself = sniff_ref(data)
    owned = tuple(
        StorageRef(ref.storage, f"{objects.STORAGE_PREFIX}/{ref.id}", ref.size)
        for ref in made
        if ref.storage is not None and (itself is None or not itself.key.endswith(ref.id))
    )
    return data, locality.host_of([*made, *locality.refs_in(value)], least=cap), owned


def _dumps(value: Any, cap: int, storage: str | Storage | None, made: list[Ref]) -> bytes:
    """`dumps`, appending each object it puts to `made`."""

    def put(array: Any) -> Ref:
        made.append(_put(array, storage))
        return made[-1]

    if _big_array(value, cap):
        return codec.encode(put(value))
    if isinstance(value, Thunk | Envelope) and (value.args or value.kwargs):
        args = tuple(put(a) if _big_array(a, cap) else a for a in value.args)
        kwargs = {k: put(v) if _big_array(v, cap) else v for k, v in value.kwargs.items()}
        value = dataclasses.replace(value, args=args, kwargs=kwargs)
    return _spill(codec.encode(value), cap, storage, made)


def _big_array(value: Any, cap: int) -> bool:
    """A numpy array or torch tensor over the inline limit, of a kind the store lays out raw."""
    np = sys.modules.get("numpy")
    if np is not None and type(value) is np.ndarray:
        return value.nbytes > cap and objects.layout.raw_dtype(value.dtype)
    torch = sys.modules.get("torch")
    return (
        torch is not None
        and isinstance(value, torch.Tensor)
        and value.numel() * value.element_size() > cap
        and objects.layout.raw_tensor(value, torch)
    )


def _put(value: Any, storage: str | Storage | None) -> Ref:
    keep = durable()
    return objects.put(
        value, durable=keep, storage=spill_storage(storage) if keep else None, spilled=True
    )


def resolve_call(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call's arguments with spilled ones read back (`dumps` put them aside)."""
    if not any(isinstance(a, Ref) for a in (*args, *kwargs.values())):
        return args, kwargs
    return (
        tuple(resolve(a) for a in args),
        {k: resolve(v) for k, v in kwargs.items()},
    )


def resolve(value: Any, *, allow_pickle: bool = True) -> Any:
    """The value a spilled ref stands for (read and decoded); any other value unchanged."""
    if isinstance(value, Ref):
        return objects.get(value, allow_pickle=allow_pickle) if value.spilled else value
    if is_spilled(value):
        return codec.decode(value.read(), allow_pickle=allow_pickle)
    return value


def ref_of(data: bytes | None) -> Ref:
    """A `Ref` to the value `data` encodes, without unpickling it: a spilled value's own object
    (handed out as a plain Ref, which readers do not resolve), the Ref itself when the value is
    one, else a new object holding `data`."""
    found = sniff_ref(data)
    if found is not None and found.key.startswith(f"{objects.STORAGE_PREFIX}/"):
        ref = codec.decode(data or b"", allow_pickle=False)
        assert isinstance(ref, Ref)
        return dataclasses.replace(ref, spilled=False)
    if data is not None and found is None:
        ref = _ref_itself(data)
        if ref is not None:  # a spill with no durable copy, or a result that is a Ref already
            return dataclasses.replace(ref, spilled=False)
    if found is not None and found.key.startswith(SPILL_PREFIX):
        data = found.read()  # a row from before objects: its bytes become an object
    encoded = codec.encode(None) if data is None else data
    keep = durable()
    return objects.put_encoded(
        encoded, durable=keep, storage=spill_storage() if keep else None, spilled=False
    )


def _ref_itself(data: bytes) -> Ref | None:
    """The Ref `data` consists of, if it is one (decoded as plain data, never unpickled)."""
    if len(data) > MAX_REF_BYTES:
        return None
    try:
        value = codec.decode(data, allow_pickle=False)
    except Exception:
        return None
    return value if isinstance(value, Ref) else None


def loads(data: bytes | bytearray | memoryview, *, allow_pickle: bool = True) -> Any:
    """`codec.decode(data)`, following a spilled ref to the value it stands for."""
    return resolve(codec.decode(data, allow_pickle=allow_pickle), allow_pickle=allow_pickle)


def delete_refs(refs: list[StorageRef]) -> list[str]:
    """Delete spilled objects (retention); returns a line per ref that could not be deleted.

    Best effort by design: the rows are already gone, a failure here only leaves an orphan
    object behind, and storage may be unreachable from where the trim ran.
    """
    problems: list[str] = []
    for ref in refs:
        if not is_spilled(ref):
            continue
        if objects.plane.is_plane_url(ref.url):
            # The server that holds it deletes a plane-tier copy when it trims the row's
            # namespace; one still named here belongs to another plane, out of reach.
            problems.append(f"{ref.url}/{ref.key}: kept (a plane-tier copy of another plane)")
            continue
        try:
            ref.delete()
        except Exception as exc:
            problems.append(f"{ref.url}/{ref.key}: {exc}")
    return problems
