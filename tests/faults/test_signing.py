"""sdk/signing.py on its own: what a signature covers, and how the key is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamlake.lakeshore import signing
from dreamlake.lakeshore.plane.dispatch import Dispatch
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming

KEY = bytes(range(32))
FIELDS = ("ns", "queue", "01J0000000000000000000000Z", b"payload")


def test_a_signature_covers_every_field() -> None:
    good = signing.sign(KEY, *FIELDS)
    signing.verify(KEY, *FIELDS, good)
    for i in range(4):
        changed = list(FIELDS)
        changed[i] = changed[i] + (b"x" if isinstance(changed[i], bytes) else "x")  # type: ignore[operator]
        with pytest.raises(signing.BadSignature):
            signing.verify(KEY, *changed, good)  # type: ignore[arg-type]
    # Length prefixes: moving a byte from one field to the next is a different message.
    assert signing.sign(KEY, "ab", "c", "i", b"p") != signing.sign(KEY, "a", "bc", "i", b"p")
    for forged in (None, "", "v1:" + "0" * 64, good.upper()):
        with pytest.raises(signing.BadSignature):
            signing.verify(KEY, *FIELDS, forged)
    with pytest.raises(signing.BadSignature):
        signing.verify(bytes(32), *FIELDS, good)


def test_the_key_file_is_made_once_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(signing.KEY_ENV, raising=False)
    assert signing.load_key(tmp_path) is None  # nothing made unless asked
    key = signing.load_key(tmp_path, create=True)
    path = tmp_path / signing.KEY_FILE
    assert key is not None and len(key) == 32
    assert path.stat().st_mode & 0o777 == 0o600
    assert signing.load_key(tmp_path, create=True) == key == signing.load_key(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [signing.KEY_FILE]
    monkeypatch.setenv(signing.KEY_ENV, "short")
    with pytest.raises(signing.DispatchError):
        signing.load_key(tmp_path)


def test_an_embedded_plane_with_a_key_signs_what_it_enqueues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(signing.KEY_ENV, KEY.hex())
    with Dispatch(tmp_path / "plane.db") as plane:
        (inv,) = plane.submit("q", [SubmitRequest(b"body")])
        claim = claiming.claim(plane, ["q"], worker="w")
        assert claim is not None and claim.id == inv
        signing.verify(KEY, plane.namespace, "q", inv, b"body", claim.signature)
    monkeypatch.delenv(signing.KEY_ENV)
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path / "keyless-home"))
    with Dispatch(":memory:") as bare:  # no key anywhere: nothing signed
        bare.submit("q", [SubmitRequest(b"body")])
        claim = claiming.claim(bare, ["q"], worker="w")
        assert claim is not None and claim.signature is None
