"""Job runtimes on the plane (issue 46): bundles stored per namespace, and a submit's runtime.

A bundle is a manifest (the tree's paths, modes, sizes and content hashes, as JSON) over
content-addressed blobs. The plane stores both and never unpacks either: it checks that a blob's
bytes hash to its name, that a manifest's paths stay inside its tree (manifest.py's rules, the
same the producer and the daemon apply), and that every blob a manifest names is already here, so
a manifest it accepted can always be laid out. A submit whose runtime names a bundle must name one
of its own namespace's: a digest read off another tenant's job gives nothing.

The producer asks which blobs are missing in one round trip and sends only those (sdk/runtime/
upload.py), in batches that commit as one transaction each: 2,000 small files cost one fsync, not
2,000. Retention removes manifests no invocation names once a grace has passed (a producer puts a
bundle before the submit that names it), then blobs no kept manifest names.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.plane.connector import Transaction

from .base import StoreBase

__all__ = [
    "MAX_MISSING_ASKED",
    "RUNTIME_GRACE_S",
    "RuntimeStore",
    "absent",
    "check_runtime_spec",
    "runtime_column",
    "write_runtime",
]

#: The most blob names one `runtime_missing` asks about (a 2,000-file tree is one ask).
MAX_MISSING_ASKED: Final = 100_000
#: How long a bundle no invocation names is kept: the producer's window between putting a
#: bundle and the submit that names it, with room for a slow upload of the rest.
RUNTIME_GRACE_S: Final = 24 * 3600.0
#: The most a runtime object may hold, as JSON (its requirement lines and variables).
MAX_RUNTIME_TEXT: Final = 256 * 1024
_SHA256: Final = re.compile(r"[0-9a-f]{64}")
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPEC_KEYS: Final = ("bundle", "requirements", "env", "workdir", "sources", "files", "bytes")


def check_sha256(value: object, what: str = "a blob's name") -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise InvalidArgument(
            f"{what} is the sha256 of its bytes, 64 lowercase hex digits, got {str(value)[:80]!r}"
        )
    return value


def check_digest(value: object) -> str:
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise InvalidArgument(
            "a bundle's digest is 'sha256:' and 64 lowercase hex digits (a manifest's digest), "
            f"got {str(value)[:80]!r}"
        )
    return value


def check_runtime_spec(spec: object) -> dict[str, Any] | None:
    """A submit's `runtime` object, checked field by field (docs/runtime.md has its shape):
    what a producer other than the SDK sends must be as plain as what the SDK sends."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise InvalidArgument(f"runtime must be an object of {', '.join(_SPEC_KEYS)}")
    unknown = sorted(set(spec) - set(_SPEC_KEYS))
    if unknown:
        raise InvalidArgument(
            f"runtime has unknown fields {unknown}; allowed: {', '.join(_SPEC_KEYS)}"
        )
    bundle = spec.get("bundle")
    if bundle is not None:
        check_digest(bundle)
    requirements = _requirements(spec.get("requirements") or [])
    env = _env(spec.get("env") or {})
    workdir = spec.get("workdir", False)
    if not isinstance(workdir, bool):
        raise InvalidArgument("runtime.workdir must be true or false")
    sources = spec.get("sources") or []
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise InvalidArgument("runtime.sources must be a list of module names")
    _counts(spec)
    if bundle is None and (workdir or sources):
        raise InvalidArgument("runtime.workdir and runtime.sources need a bundle that holds them")
    if bundle is None and not requirements and not env:
        raise InvalidArgument(
            "runtime brings nothing (no bundle, requirements or env): leave it out instead"
        )
    checked = {
        "bundle": bundle,
        "requirements": requirements,
        "env": env,
        "workdir": workdir,
        "sources": list(sources),
        "files": int(spec.get("files", 0)),
        "bytes": int(spec.get("bytes", 0)),
    }
    if len(runtime_column(checked)) > MAX_RUNTIME_TEXT:
        raise InvalidArgument(
            f"runtime is over {MAX_RUNTIME_TEXT // 1024} KiB as JSON: ship long requirement "
            "lists and data as files in its workdir"
        )
    return checked


def _requirements(requirements: object) -> list[str]:
    if not isinstance(requirements, list) or not all(
        isinstance(r, str) and r.strip() and "\n" not in r and "\0" not in r for r in requirements
    ):
        raise InvalidArgument(
            "runtime.requirements must be a list of requirement strings, one per entry "
            "(as a line of requirements.txt)"
        )
    return list(requirements)


def _env(env: object) -> dict[str, str]:
    if not isinstance(env, Mapping):
        raise InvalidArgument("runtime.env must be an object of variable names to strings")
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise InvalidArgument(
                f"runtime.env: {str(name)[:80]!r} is not a variable name "
                "(letters, digits and _, not starting with a digit)"
            )
        if not isinstance(value, str) or "\0" in value:
            raise InvalidArgument(f"runtime.env[{name!r}] must be a string, got {value!r:.80}")
    return dict(env)


def _counts(spec: Mapping[str, Any]) -> None:
    for key in ("files", "bytes"):
        value = spec.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(f"runtime.{key} must be a whole number >= 0")


def runtime_column(spec: Mapping[str, Any]) -> str:
    return json.dumps(spec, separators=(",", ":"), sort_keys=True)


class RuntimeStore(StoreBase):
    """Bundles (manifests over blobs) per namespace, and a submit's runtime on its row."""

    def runtime_missing(self, ns: str, shas: Sequence[str]) -> list[str]:
        """Which of the blobs named `shas` this namespace lacks, each once, in the order asked."""
        if not isinstance(shas, (list, tuple)) or len(shas) > MAX_MISSING_ASKED:
            raise InvalidArgument(
                f"ask about a list of at most {MAX_MISSING_ASKED} blob names at a time"
            )
        wanted = list(dict.fromkeys(check_sha256(s) for s in shas))
        with self.connector.transaction(write=False) as tx:
            return absent(tx, ns, wanted)

    def put_runtime_blobs(self, ns: str, blobs: Sequence[tuple[str, bytes]]) -> int:
        """Store blobs named by the sha256 of their bytes, in one commit; how many were new.

        A blob whose bytes do not hash to its name is refused, and the batch with it, before
        anything is written: a name is a promise about content that the daemon relies on."""
        checked: list[tuple[str, bytes]] = []
        for sha, data in blobs:
            check_sha256(sha)
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise InvalidArgument(f"blob {sha}: its content must be bytes")
            data = bytes(data)
            if hashlib.sha256(data).hexdigest() != sha:
                raise InvalidArgument(
                    f"blob {sha}: its bytes hash to {hashlib.sha256(data).hexdigest()}, "
                    "not to its name; nothing of this batch was stored"
                )
            checked.append((sha, data))
        if not checked:
            return 0
        now = time.time()
        stored = 0
        with self.connector.transaction() as tx:
            for sha, data in checked:
                row = tx.one(
                    "insert_runtime_blob", ns=ns, sha=sha, size=len(data), data=data, now=now
                )
                stored += row is not None
        return stored

    def put_runtime_manifest(self, ns: str, wire: Mapping[str, Any]) -> str:
        """Store a bundle's manifest once every blob it names is here; its digest.

        Its entries are checked as the daemon will check them (no absolute path, no `..`, no
        symlink leading out of the tree), so a manifest that would write outside a daemon's
        cache is refused here first, and nothing is stored."""
        from dreamlake.lakeshore.runtime.manifest import Manifest  # the SDK's import stays light

        manifest = Manifest.from_wire(wire)
        digest = manifest.digest
        shas = sorted(manifest.blobs())
        now = time.time()
        with self.connector.transaction() as tx:
            missing = absent(tx, ns, shas)
            if missing:
                raise InvalidArgument(
                    f"the manifest names {len(missing)} blob(s) this namespace does not hold "
                    f"(first: {missing[0]}): put them first (POST .../runtime/blobs)"
                )
            tx.one(
                "insert_runtime_manifest",
                ns=ns,
                digest=digest,
                entries=json.dumps([e.to_wire() for e in manifest.entries], separators=(",", ":")),
                files=sum(1 for e in manifest.entries if e.link is None),
                bytes=manifest.size,
                now=now,
            )
            for sha in shas:
                tx.all("insert_runtime_manifest_blob", ns=ns, digest=digest, sha=sha)
        return digest

    def runtime_manifest(self, ns: str, digest: str) -> dict[str, Any]:
        check_digest(digest)
        with self.connector.transaction(write=False) as tx:
            row = tx.one("get_runtime_manifest", ns=ns, digest=digest)
        if row is None:
            raise NotFound(f"unknown bundle '{digest}' in namespace '{ns}'")
        return {"digest": digest, "entries": json.loads(row["entries"])}

    def runtime_blob(self, ns: str, sha: str) -> bytes:
        check_sha256(sha)
        with self.connector.transaction(write=False) as tx:
            row = tx.one("get_runtime_blob", ns=ns, sha=sha)
        if row is None:
            raise NotFound(f"unknown blob '{sha}' in namespace '{ns}'")
        return bytes(row["data"])

    def _trim_runtimes(self, ns: str, cutoff: float) -> int:
        """Bundles of `ns` no invocation names, put before `cutoff`, and the blobs only they
        named; the number of blobs removed."""
        with self.connector.transaction() as tx:
            for row in tx.all("trim_runtime_manifests", ns=ns, cutoff=cutoff):
                tx.all("trim_runtime_manifest_blobs", ns=ns, digest=row["digest"])
            return len(tx.all("trim_runtime_blobs", ns=ns, cutoff=cutoff))


def absent(tx: Transaction, ns: str, shas: Sequence[str]) -> list[str]:
    """Which of `shas` (distinct) namespace `ns` holds no blob of, in their order."""
    present: set[str] = set()
    for start in range(0, len(shas), 500):
        part = list(shas[start : start + 500])
        present.update(r["sha256"] for r in tx.all("runtime_blobs_present", ns=ns, shas=part))
    return [s for s in shas if s not in present]


def write_runtime(tx: Transaction, ns: str, inv_id: str, spec: Mapping[str, Any]) -> None:
    """Record a submit's runtime on the row it just inserted; a bundle this namespace does not
    hold refuses the whole submit (its transaction rolls back)."""
    checked = check_runtime_spec(spec)
    assert checked is not None
    bundle = checked["bundle"]
    if bundle is not None and tx.one("runtime_manifest_known", ns=ns, digest=bundle) is None:
        raise InvalidArgument(
            f"runtime.bundle {bundle} is not a bundle of namespace '{ns}': put its blobs and its "
            "manifest first (sdk/runtime/upload.py does it for the SDK)"
        )
    tx.all("set_invocation_runtime", id=inv_id, runtime=runtime_column(checked), bundle=bundle)
