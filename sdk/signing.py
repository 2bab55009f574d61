"""Payload signatures: the control plane vouches for each payload, workers check before unpickling.

A payload is a cloudpickle, so whoever can write a row into the store could run code on every
worker that claims it. The server therefore signs each payload when it accepts the submit, with
an HMAC-SHA256 keyed by a secret kept *outside* the store (`$LAKESHORE_HOME/signing.key`, mode
0600, or LAKESHORE_SIGNING_KEY), over the namespace, queue, invocation id and payload bytes, and
stores the signature beside the payload. A worker holding the key refuses a claim whose
signature does not verify, before anything is decoded: a row forged in the database, or one
moved to another queue, namespace or id, cannot run code on it.

The fields are length-prefixed so no two different (namespace, queue, id, payload) tuples
produce the same message. Signatures read `v1:<hex>`, so the scheme can change later.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from .errors import DispatchError

KEY_ENV = "LAKESHORE_SIGNING_KEY"
KEY_FILE = "signing.key"
VERSION = "v1"
#: Fewer bytes than this is no key at all (a typo'd env var, an empty file).
MIN_KEY_BYTES = 16
_DOMAIN = b"lakeshore-payload\x00"


class BadSignature(DispatchError):
    """A claimed payload whose signature is missing or wrong: it is never unpickled."""

    code = "bad_signature"
    status = 400


def _message(namespace: str, queue: str, inv_id: str, payload: bytes) -> bytes:
    parts = [VERSION.encode(), namespace.encode(), queue.encode(), inv_id.encode(), bytes(payload)]
    return _DOMAIN + b"".join(len(p).to_bytes(8, "big") + p for p in parts)


def sign(key: bytes, namespace: str, queue: str, inv_id: str, payload: bytes) -> str:
    digest = hmac.new(key, _message(namespace, queue, inv_id, payload), hashlib.sha256)
    return f"{VERSION}:{digest.hexdigest()}"


def verify(
    key: bytes, namespace: str, queue: str, inv_id: str, payload: bytes, signature: str | None
) -> None:
    """Raise `BadSignature` unless `signature` is this key's for exactly these fields."""
    if not signature:
        raise BadSignature(
            f"invocation '{inv_id}' carries no payload signature: refusing to unpickle it "
            "(it was not accepted by a control plane holding the signing key)"
        )
    expected = sign(key, namespace, queue, inv_id, payload)
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise BadSignature(
            f"invocation '{inv_id}' has a payload signature that does not verify: refusing to "
            "unpickle it (the row was written or changed by someone without the signing key)"
        )


def _decode_key(text: str, where: str) -> bytes:
    raw = text.strip()
    try:
        key = bytes.fromhex(raw)
    except ValueError:
        key = raw.encode()
    if len(key) < MIN_KEY_BYTES:
        raise DispatchError(f"the signing key in {where} is shorter than {MIN_KEY_BYTES} bytes")
    return key


def read_key_file(path: Path) -> bytes:
    return _decode_key(path.read_text(), str(path))


def load_key(home: Path | None = None, *, create: bool = False) -> bytes | None:
    """The signing key: LAKESHORE_SIGNING_KEY, else `home/signing.key`.

    `create=True` (the server) writes a fresh key file, mode 0600, when neither exists; without
    it a missing key is None (an embedded plane or a worker with no key does not sign/verify).
    """
    text = os.environ.get(KEY_ENV)
    if text:
        return _decode_key(text, KEY_ENV)
    if home is None:
        return None
    path = home / KEY_FILE
    if path.exists():
        return read_key_file(path)
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written whole under a temporary name, then linked into place: a concurrent first start
    # never reads a half-written key, and the loser of the race uses the winner's.
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (os.urandom(32).hex() + "\n").encode())
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return read_key_file(path)
