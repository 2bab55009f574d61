"""Reading and forging the pickle inside a submitted thunk, for the protocol tests.

A submitted thunk rides as an envelope (ext 33): a msgpack map whose ``pickle`` holds the
cloudpickle bytes and ``pickled_by`` the producer's versions (sdk/protocols.py). These helpers
open that map without unpickling anything, and write one back as another Python would have.
"""

from __future__ import annotations

from typing import Any

import msgpack

EXT_ENVELOPE = 33


def envelope_wire(payload: bytes) -> dict[str, Any]:
    """The envelope map of an encoded payload (its pickle left as bytes)."""

    def hook(code: int, data: bytes) -> Any:
        if code != EXT_ENVELOPE:
            raise AssertionError(f"expected an envelope (ext 33), got ext {code}")
        return msgpack.unpackb(data, raw=False)

    wire = msgpack.unpackb(payload, ext_hook=hook, raw=False)
    assert isinstance(wire, dict), f"payload is a {type(wire).__name__}, not an envelope"
    return wire


def pickle_protocol_of(payload: bytes) -> int:
    """The protocol a payload's thunk was pickled with: a protocol 2+ pickle opens 0x80, N."""
    pickled = envelope_wire(payload)["pickle"]
    assert pickled[0] == 0x80, f"not a protocol 2+ pickle: {pickled[:4]!r}"
    return int(pickled[1])


def repacked(wire: dict[str, Any]) -> bytes:
    inner = msgpack.packb(wire, use_bin_type=True)
    return bytes(msgpack.packb(msgpack.ExtType(EXT_ENVELOPE, inner), use_bin_type=True))


def as_if_pickled_by(payload: bytes, python: str, *, protocol: int | None = None) -> bytes:
    """The same envelope, its header saying `python` wrote it; with `protocol`, the pickle's
    own protocol byte says so too (protocol 6 is what a Python newer than this one would write,
    and what no Python of today loads)."""
    wire = envelope_wire(payload)
    wire["pickled_by"] = {**wire["pickled_by"], "python": python}
    if protocol is not None:
        pickled = bytearray(wire["pickle"])
        pickled[1] = protocol
        wire["pickle"] = bytes(pickled)
        wire["pickled_by"]["protocol"] = protocol
    return repacked(wire)
