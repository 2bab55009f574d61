"""`Ref`: a handle on an object in the object store, small enough to ride in any message.

A Ref is a value: it can be a payload, sit inside one, be a result, be posted in a frame, and be
handed from one job to the next; only `dls.get(ref)` moves the bytes. It says what it holds (for
an array, its dtype and shape, so a reader can plan before fetching), how big it is, the hash
that proves a copy intact, and where copies live: the host tier of the box that put it, and,
once durable, the storage tier any box with access can read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from .errors import InvalidArgument
from .names import HOST_PATTERN

#: The codec's ext type for a Ref (beside 48, a StorageRef).
EXT_OBJECT_REF: Final = 49

KINDS: Final = ("ndarray", "tensor", "value")
_ID = re.compile(r"[0-9a-z]{26}")
_HOST = HOST_PATTERN
_DIGEST = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Ref:
    id: str
    size: int
    digest: str
    kind: str = "value"
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    #: The host whose host tier holds a copy (None: none does).
    host: str | None = None
    #: The storage URL holding the durable copy (None: the object is not durable); a
    #: `lakeshore+http(s)://HOST/v1/namespaces/NS` URL is a control plane's (the plane tier).
    storage: str | None = None
    #: Stands in for a payload, result or frame too big to ride inline (spill.py): readers get
    #: the value, not the Ref, and retention deletes the object with what carried it.
    spilled: bool = False
    #: When the object's durable copies go (epoch seconds; None: never by time). An object `put`
    #: by hand is owned by no invocation, so it expires (`dls.put(..., ttl_s=)`); a spilled one
    #: lives as long as what carries it.
    expires: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID.fullmatch(self.id):
            raise InvalidArgument(f"a ref's id is 26 lowercase letters and digits, got {self.id!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise InvalidArgument(f"a ref's size is an int >= 0, got {self.size!r}")
        if not isinstance(self.digest, str) or not _DIGEST.fullmatch(self.digest):
            raise InvalidArgument("a ref's digest is 32 lowercase hex digits (xxh3-128)")
        if self.kind not in KINDS:
            raise InvalidArgument(f"a ref's kind is one of {'|'.join(KINDS)}, got {self.kind!r}")
        if self.host is not None and not (
            isinstance(self.host, str) and _HOST.fullmatch(self.host)
        ):
            raise InvalidArgument(f"a ref's host must match {_HOST.pattern}, got {self.host!r}")
        if self.storage is not None and not (isinstance(self.storage, str) and self.storage):
            raise InvalidArgument("a ref's storage is a non-empty URL")
        if not isinstance(self.spilled, bool):
            raise InvalidArgument(f"a ref's spilled flag is a bool, got {self.spilled!r}")
        if self.expires is not None and (
            isinstance(self.expires, bool)
            or not isinstance(self.expires, int | float)
            or not 0 <= self.expires < 1e11
        ):
            raise InvalidArgument(f"a ref's expiry is epoch seconds, got {self.expires!r}")

    @property
    def durable(self) -> bool:
        return self.storage is not None

    def to_wire(self) -> bytes:
        fields: dict[str, Any] = {"id": self.id, "size": self.size, "digest": self.digest}
        fields["kind"] = self.kind
        if self.dtype is not None:
            fields["dtype"], fields["shape"] = self.dtype, list(self.shape or ())
        if self.host is not None:
            fields["host"] = self.host
        if self.storage is not None:
            fields["storage"] = self.storage
        if self.spilled:
            fields["spilled"] = True
        if self.expires is not None:
            fields["expires"] = self.expires
        data: bytes = msgpack.packb(fields, use_bin_type=True)
        return data

    @classmethod
    def from_wire(cls, data: bytes) -> Ref:
        """Parse an ext payload; plain msgpack only (no ext types, so nothing to unpickle)."""
        fields = msgpack.unpackb(data, raw=False, strict_map_key=True)
        if not isinstance(fields, dict) or not {"id", "size", "digest"} <= set(fields):
            raise InvalidArgument("a ref is a map with 'id', 'size' and 'digest'")
        shape = fields.get("shape")
        if shape is not None and not (
            isinstance(shape, list) and all(isinstance(n, int) and n >= 0 for n in shape)
        ):
            raise InvalidArgument("a ref's shape is a list of ints >= 0")
        dtype = fields.get("dtype")
        if dtype is not None and not (isinstance(dtype, str) and len(dtype) <= 32):
            raise InvalidArgument("a ref's dtype is a short string")
        return cls(
            id=fields["id"],
            size=fields["size"],
            digest=fields["digest"],
            kind=fields.get("kind", "value"),
            dtype=dtype,
            shape=tuple(shape) if shape is not None else None,
            host=fields.get("host"),
            storage=fields.get("storage"),
            spilled=fields.get("spilled", False),
            expires=fields.get("expires"),
        )
