"""Request and response bodies: msgpack by default, JSON when asked, errors in one shape.

Everything a client sends is checked here before it reaches the store, so a malformed body,
a wrong type or a missing field is a 400 that names the field, never a 500. Payload bytes
(`payload`, `result`, `value`, `checkpoint`) ride as msgpack bin, or as base64 strings in JSON,
since JSON has no bytes. The server never decodes those bytes beyond that transport layer.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any

import msgpack
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from dreamlake.lakeshore.errors import DispatchError, InvalidArgument, QueueFullError, ServerBusy

MSGPACK = "application/msgpack"
JSON = "application/json"
#: Request bodies above this are refused with 413 (a big payload belongs in storage).
MAX_BODY_BYTES = 64 * 1024 * 1024
#: What all request bodies in flight together may hold (429 beyond it): see body_budget.py.
BODY_BUDGET_BYTES = 1024 * 1024 * 1024
#: Fields whose values are opaque bytes: base64 strings when the body is JSON.
BYTES_FIELDS = frozenset({"payload", "result", "value", "checkpoint"})


class UnsupportedMediaType(DispatchError):
    code = "unsupported_media_type"
    status = 415


class MethodNotAllowed(DispatchError):
    code = "method_not_allowed"
    status = 405


def wants_json(request: Request) -> bool:
    """JSON when the Accept header asks for it, or the request itself was JSON; else msgpack."""
    accept = request.headers.get("accept", "")
    if "msgpack" in accept:
        return False
    if "json" in accept:
        return True
    return _is_json(request.headers.get("content-type", ""))


def _is_json(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower().endswith("json")


async def read_body(request: Request) -> bytearray:
    """The raw body, its size bounded before a byte was read (`body_budget.py`).

    Grown in place rather than joined from chunks: a big body then costs its size once, not
    twice, and the decoder reads a bytearray as it reads bytes.
    """
    body = bytearray()
    if "content-length" in request.headers or "transfer-encoding" in request.headers:
        async for chunk in request.stream():
            body += chunk
    return body


def decode_body(raw: bytes | bytearray, content_type: str) -> dict[str, Any]:
    """A request body as a map; an empty body is an empty map."""
    if not raw:
        return {}
    media = content_type.split(";")[0].strip().lower()
    if _is_json(media):
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise InvalidArgument(f"malformed JSON body: {exc}") from None
        if isinstance(data, dict):
            return _unbase64(data, "")
    elif media in ("", MSGPACK, "application/x-msgpack", "application/vnd.msgpack"):
        try:
            data = msgpack.unpackb(raw, raw=False, strict_map_key=True)
        except Exception as exc:  # msgpack raises many types for bad input: all are the client's
            raise InvalidArgument(f"malformed msgpack body: {type(exc).__name__}: {exc}") from None
    else:
        raise UnsupportedMediaType(
            f"unsupported Content-Type '{media}': send application/msgpack or application/json"
        )
    if not isinstance(data, dict):
        raise InvalidArgument(f"the body must be a map/object, got {type(data).__name__}")
    return data


def _unbase64(data: dict[str, Any], path: str) -> dict[str, Any]:
    """Turn the base64 strings of known bytes fields back into bytes, recursively."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}{key}"
        if key in BYTES_FIELDS and isinstance(value, str):
            try:
                out[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidArgument(f"field '{where}' must be base64 in JSON") from None
        elif isinstance(value, dict):
            out[key] = _unbase64(value, f"{where}.")
        elif isinstance(value, list):
            out[key] = [
                _unbase64(v, f"{where}[{i}].") if isinstance(v, dict) else v
                for i, v in enumerate(value)
            ]
        else:
            out[key] = value
    return out


def to_wire(value: Any) -> Any:
    """Records (dataclasses) as maps; everything else as is.

    Not `dataclasses.asdict`: it deep-copies every field, which made encoding a batch of claims
    cost more than claiming them. Records here hold plain values, lists and dicts.
    """
    if isinstance(value, (str, bytes, int, float)) or value is None:
        return value  # most of a batch's values: settle them before the dataclass check
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_wire(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list):
        return [to_wire(v) for v in value]
    if isinstance(value, dict):
        return {k: to_wire(v) for k, v in value.items()}
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _with_plain_values(value: Any) -> Any:
    """For JSON readers: beside each bytes field, its value when it is plain msgpack.

    `result_json` spares curl users a base64 + msgpack step. Anything holding an ext type
    (a tensor, a pickled thunk) is left as bytes: the server never interprets those.
    """
    if isinstance(value, list):
        return [_with_plain_values(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _with_plain_values(v) for k, v in value.items()}
    for key in BYTES_FIELDS & out.keys():
        raw = value[key]
        if isinstance(raw, (bytes, bytearray)):
            try:
                out[f"{key}_json"] = msgpack.unpackb(raw, ext_hook=_refuse_ext, raw=False)
            except Exception:  # not plain msgpack: stays bytes only
                continue
    return out


def _refuse_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"ext type {code}")


def respond(data: Any, *, status: int = 200, as_json: bool = False) -> Response:
    if status == 204:
        return Response(status_code=204)
    body = to_wire(data)
    if as_json:
        body = _with_plain_values(body)
        text = json.dumps(body, default=_json_default, separators=(",", ":"))
        return Response(text.encode("utf-8"), status_code=status, media_type=JSON)
    return Response(msgpack.packb(body, use_bin_type=True), status_code=status, media_type=MSGPACK)


def error_response(exc: DispatchError, *, as_json: bool) -> Response:
    """`{error: {code, message}}`; a full queue adds `block`, and a refusal that says when to
    come back (full queue, busy server) `retry_after_s` and Retry-After."""
    status = exc.status if 400 <= exc.status < 600 else 400
    error: dict[str, Any] = {"code": exc.code, "message": str(exc)}
    retry_after_s: float | None = None
    if isinstance(exc, (QueueFullError, ServerBusy)):
        retry_after_s = exc.retry_after_s
        error["retry_after_s"] = retry_after_s
    if isinstance(exc, QueueFullError):
        error["block"] = exc.block
    response = respond({"error": error}, status=status, as_json=as_json)
    if retry_after_s is not None:
        response.headers["retry-after"] = str(max(1, math.ceil(retry_after_s)))
    return response


# -- typed access to body fields and query parameters, with messages naming the field ---------


def out_of_range(
    name: str, got: object, low: float, high: float, *, unit: str = "", hint: str = ""
) -> str:
    """What a number must be, in words a caller can act on: "0 or more" for an open end, never
    a range "between 0.0 and inf" that the refused `inf` seems to satisfy."""
    what = f"a finite number of {unit}" if unit else "a finite number"
    allowed = f"{what}, {low:g} or more" if math.isinf(high) else f"{what} from {low:g} to {high:g}"
    shown = got[:40] if isinstance(got, str) else got
    return f"{name} must be {allowed}{f' ({hint})' if hint else ''}; got {shown!r}"


def _int64(value: int) -> bool:
    """What a database column (and msgpack) can hold: a client's 30-digit number is a 400."""
    return -(2**63) <= value < 2**63


class Fields:
    """A decoded map whose getters check types and name the offending field on a 400."""

    def __init__(self, data: Mapping[str, Any], path: str = "", index: int | None = None) -> None:
        self.data = data
        self.path = path
        #: The position in the list `path` names (an item of a batch); its name is only
        #: spelled out for an error, not built for each of a thousand items.
        self.index = index

    def where(self, key: str) -> str:
        """The field's name as an error should show it (`items[2].json`)."""
        return self._name(key)

    def _name(self, key: str) -> str:
        if self.index is not None:
            return f"{self.path}[{self.index}].{key}"
        return f"{self.path}{key}"

    def _get(self, key: str, required: bool) -> Any:
        if key not in self.data or self.data[key] is None:
            if required:
                raise InvalidArgument(f"missing field '{self._name(key)}'")
            return None
        return self.data[key]

    def text(self, key: str, *, required: bool = False) -> str | None:
        value = self._get(key, required)
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(f"field '{self._name(key)}' must be a string")
        return value

    def req_text(self, key: str) -> str:
        value = self._get(key, True)
        if not isinstance(value, str):
            raise InvalidArgument(f"field '{self._name(key)}' must be a string")
        return value

    def number(self, key: str, default: float | None = None) -> float | None:
        value = self._get(key, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidArgument(f"field '{self._name(key)}' must be a number")
        if not math.isfinite(value):
            raise InvalidArgument(f"field '{self._name(key)}' must be a finite number; got {value}")
        return float(value)

    def integer(self, key: str, default: int) -> int:
        value = self._get(key, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not _int64(value):
            raise InvalidArgument(f"field '{self._name(key)}' must be a 64-bit integer")
        return value

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InvalidArgument(f"field '{self._name(key)}' must be true or false")
        return value

    def blob(self, key: str, *, required: bool = False) -> bytes | None:
        value = self._get(key, required)
        if value is not None and not isinstance(value, (bytes, bytearray)):
            raise InvalidArgument(
                f"field '{self._name(key)}' must be bytes (msgpack bin, or base64 in JSON)"
            )
        return bytes(value) if value is not None else None

    def req_blob(self, key: str) -> bytes:
        value = self.blob(key, required=True)
        if value is None:  # unreachable: required=True raised; keeps the type exact
            raise InvalidArgument(f"missing field '{self._name(key)}'")
        return value

    def str_list(self, key: str) -> list[str]:
        value = self._get(key, False)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidArgument(f"field '{self._name(key)}' must be a list of strings")
        return value

    def mapping(self, key: str) -> dict[str, Any] | None:
        value = self._get(key, False)
        if value is not None and not (
            isinstance(value, dict) and all(isinstance(k, str) for k in value)
        ):
            raise InvalidArgument(f"field '{self._name(key)}' must be a map/object")
        return value

    def items(self, key: str) -> list[Fields]:
        value = self._get(key, True)
        if not isinstance(value, list):
            raise InvalidArgument(f"field '{self._name(key)}' must be a list")
        name = self._name(key)
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise InvalidArgument(f"field '{name}[{i}]' must be a map/object")
            out.append(Fields(item, name, i))
        return out

    def only(self, *allowed: str) -> None:
        """Refuse unknown fields: a typo should fail loudly, not be ignored."""
        if all(k in allowed for k in self.data):
            return
        unknown = sorted(set(self.data) - set(allowed))
        if unknown:
            raise InvalidArgument(
                f"unknown field(s) {', '.join(repr(self._name(k)) for k in unknown)}; "
                f"allowed: {', '.join(allowed)}"
            )


class Query:
    """Query-string parameters, checked like body fields."""

    def __init__(self, request: Request) -> None:
        self._request = request

    @functools.cached_property
    def params(self) -> QueryParams:
        """Parsed on first use: the hot routes (a claim, an ack) have no query string."""
        return self._request.query_params

    def text(self, key: str) -> str | None:
        return self.params.get(key)

    def choice(self, key: str, allowed: tuple[str, ...]) -> str | None:
        """One of `allowed`, or None when absent or empty: a misspelt mode is refused, not
        read as the default (issue 45: `?elasticity=bogus` replaced a queue's policy)."""
        raw = self.params.get(key)
        if raw is None or raw == "":
            return None
        if raw not in allowed:
            raise InvalidArgument(
                f"query parameter '{key}' must be one of {', '.join(allowed)}; got {raw[:40]!r}"
            )
        return raw

    def number(
        self,
        key: str,
        default: float,
        *,
        low: float = 0.0,
        high: float = math.inf,
        unit: str = "",
        hint: str = "",
    ) -> float:
        """A finite number from `low` to `high`; `unit` and `hint` go into the refusal."""
        raw = self.params.get(key)
        if raw is None or raw == "":
            return default
        try:
            value = float(raw)
        except ValueError:
            raise InvalidArgument(
                out_of_range(f"query parameter '{key}'", raw, low, high, unit=unit, hint=hint)
            ) from None
        if not (math.isfinite(value) and low <= value <= high):
            raise InvalidArgument(
                out_of_range(f"query parameter '{key}'", raw, low, high, unit=unit, hint=hint)
            )
        return value

    def integer(self, key: str, default: int) -> int:
        raw = self.params.get(key)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            value = None
        if value is None or not _int64(value):
            raise InvalidArgument(
                f"query parameter '{key}' must be a 64-bit integer, got {raw[:40]!r}"
            ) from None
        return value

    def boolean(self, key: str) -> bool:
        raw = (self.params.get(key) or "false").lower()
        if raw in ("true", "1", "yes"):
            return True
        if raw in ("false", "0", "no", ""):
            return False
        raise InvalidArgument(f"query parameter '{key}' must be true or false, got {raw!r}")
