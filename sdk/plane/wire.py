"""The HTTP plane's wire form: request bodies packed, answers decoded, refusals turned back
into the SDK's own exceptions, response maps turned into records.

Its own module (issue 38) so that whoever reads a server's answer (`HttpPlane`, the object
tier's streamed transfers in objects/plane.py) decodes it the same way without reaching into
`HttpPlane`'s private methods. It imports only msgpack and the SDK's errors and types.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any, TypeVar

import msgpack

from dreamlake.lakeshore.errors import (
    ERRORS_BY_CODE,
    DispatchError,
    InvalidArgument,
    QueueFullError,
    ServerBusy,
    Unavailable,
)
from dreamlake.lakeshore.types import ClaimArgs, SubmitRequest, unsendable

R = TypeVar("R")


def record(cls: type[R], data: dict[str, Any]) -> R:
    """A record from a response map; fields a newer server adds are ignored."""
    names = _FIELD_NAMES.get(cls)
    if names is None:  # once per class: every claim and every row read passes through here
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def pack_body(body: dict[str, Any]) -> bytes:
    """The request body as msgpack; a value msgpack cannot carry is refused, naming its field."""
    try:
        return msgpack.packb(body, use_bin_type=True)  # type: ignore[no-any-return]
    except (OverflowError, UnicodeEncodeError, ValueError, TypeError) as exc:
        where, why = unsendable(body, "") or ("the request body", f"{type(exc).__name__}: {exc}")
        raise InvalidArgument(f"{where} {why}") from None


def decode_answer(status: int, content_type: str, raw: bytes) -> Any:
    try:
        if "json" in content_type:
            return json.loads(raw)
        return msgpack.unpackb(raw, raw=False)
    except Exception:
        if status >= 400:
            return None
        raise DispatchError(
            f"undecodable response from the control plane (HTTP {status})"
        ) from None


def error_of(status: int, data: Any) -> DispatchError:
    err = data.get("error") if isinstance(data, dict) else None
    if not isinstance(err, dict):  # a proxy's error page: a 502/503 is an outage
        cls = Unavailable if status >= 500 else ServerBusy if status == 429 else DispatchError
        return cls(f"control plane answered HTTP {status}")
    message = str(err.get("message", f"HTTP {status}"))
    cls = ERRORS_BY_CODE.get(str(err.get("code")), DispatchError)
    if cls is DispatchError:  # a code this client does not know: keep the HTTP status,
        unknown = DispatchError(message)  # so a 5xx still reads as transient
        unknown.status = status
        return unknown
    retry = err.get("retry_after_s")
    retry_after_s = float(retry) if isinstance(retry, (int, float)) else None
    if cls is QueueFullError:
        return QueueFullError(message, retry_after_s=retry_after_s, block=bool(err.get("block")))
    if cls is ServerBusy:
        return ServerBusy(message, retry_after_s=retry_after_s)
    return cls(message)


def item_error(err: dict[str, Any]) -> DispatchError:
    """One refusal inside a batch answer, as the error a single call would have raised."""
    status = ERRORS_BY_CODE.get(str(err.get("code")), DispatchError).status
    return error_of(status, {"error": err})


#: A submit item's fields sent only when set: a server older than a field refuses it, so a
#: producer that does not use one stays understood by any server.
_OPTIONAL_ITEM_FIELDS = (
    "host",  # locality
    "id",
    "resources",
    "max_preemptions",  # issue 35
    "map_id",
    "runtime",  # issue 46
    "hang_timeout_s",  # issue 47
    "delay_s",
    "at",
)


def submit_item(r: SubmitRequest) -> dict[str, Any]:
    item: dict[str, Any] = {
        "payload": r.payload,
        "key": r.key,
        "priority": r.priority,
        "max_attempts": r.max_attempts,
        "timeout_s": r.timeout_s,
    }
    for name in _OPTIONAL_ITEM_FIELDS:
        if (value := getattr(r, name)) is not None:
            item[name] = value
    if r.objects:
        item["objects"] = [{"url": o.url, "key": o.key, "size": o.size} for o in r.objects]
    if r.after:  # dependencies: only when there are some
        item["after"] = list(r.after)
    if r.after_failure != "cancel":
        item["after_failure"] = r.after_failure
    if r.inputs:
        item["inputs"] = list(r.inputs)
    if not (type(r.nodes) is int and r.nodes == 1):  # a gang's, or a bad one to refuse
        item["nodes"] = r.nodes
    return item


def claim_body(args: ClaimArgs, wait: float) -> dict[str, Any]:
    """`POST /claims`'s body: every field of the claim, and how long the server may hold it."""
    body: dict[str, Any] = {
        "queues": list(args.queues),
        "worker": args.worker,
        "limit": args.limit,
        "lease_s": args.lease_s,
        "wait": wait,
        "kind": args.kind,
        "temperature": args.temperature,
    }
    if args.host is not None:  # only when there is one: a server before locality takes it
        body["host"] = args.host
    if args.free is not None:  # only when sent: a server before resources refuses it
        body["free"] = args.free
    if args.addr is not None:  # likewise, before issue 47
        body["addr"] = args.addr
    return body
