"""Job runtimes on the plane (issue 46): bundles as manifests over content-addressed blobs, and a
submit's runtime on its row and its claim; the same on every plane."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest
from planes import PlaneEnv

from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming


def blob(text: str) -> tuple[str, bytes]:
    data = text.encode()
    return hashlib.sha256(data).hexdigest(), data


def manifest(*files: tuple[str, tuple[str, bytes]], **links: str) -> dict[str, Any]:
    entries: list[dict[str, Any]] = [
        {"path": path, "mode": 0o644, "size": len(data), "sha256": sha}
        for path, (sha, data) in files
    ]
    entries += [{"path": p, "mode": 0o777, "size": 0, "link": t} for p, t in links.items()]
    return {"entries": entries}


def bundle(plane: PlaneEnv, *texts: str) -> str:
    """A bundle of one file per text, put on the plane; its digest."""
    blobs = [blob(t) for t in texts]
    plane.dispatch.put_runtime_blobs(blobs)
    files = [(f"python/m{i}.py", b) for i, b in enumerate(blobs)]
    return plane.dispatch.put_runtime_manifest(manifest(*files))


def runtime(digest: str | None, **more: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "bundle": digest,
        "requirements": [],
        "env": {},
        "workdir": False,
        "sources": ["m0"] if digest else [],
        "files": 1 if digest else 0,
        "bytes": 1 if digest else 0,
    }
    return {**spec, **more}


def test_the_plane_names_the_blobs_it_lacks_and_stores_each_once(plane: PlaneEnv) -> None:
    a, b = blob("a = 1\n"), blob("b = 2\n")
    d = plane.dispatch
    assert d.runtime_missing([a[0], b[0], a[0]]) == [a[0], b[0]]
    assert d.put_runtime_blobs([a]) == 1
    assert d.runtime_missing([a[0], b[0]]) == [b[0]]
    assert d.put_runtime_blobs([a, b]) == 1  # a is there already
    assert d.runtime_missing([a[0], b[0]]) == []
    assert d.runtime_blob(a[0]) == b"a = 1\n"
    assert d.put_runtime_blobs([]) == 0


def test_a_blob_whose_bytes_are_not_its_name_is_refused_with_its_batch(plane: PlaneEnv) -> None:
    good, (sha, _) = blob("fine\n"), blob("claimed\n")
    with pytest.raises(InvalidArgument, match=r"hash to .* not to its name; nothing of this"):
        plane.dispatch.put_runtime_blobs([good, (sha, b"forged\n")])
    assert plane.dispatch.runtime_missing([good[0], sha]) == [good[0], sha]


@pytest.mark.parametrize(
    "name",
    ["", "A" * 64, "a" * 63, "g" * 64, "../" + "a" * 61],
)
def test_a_blob_name_must_be_a_sha256(plane: PlaneEnv, name: str) -> None:
    with pytest.raises(InvalidArgument, match="64 lowercase hex digits"):
        plane.dispatch.runtime_missing([name])
    with pytest.raises(InvalidArgument, match="64 lowercase hex digits"):
        plane.dispatch.put_runtime_blobs([(name, b"x")])


def test_a_manifest_reads_back_and_its_blobs_must_be_there_first(plane: PlaneEnv) -> None:
    a, b = blob("x = 1\n"), blob("y = 2\n")
    wanted = manifest(("python/x.py", a), ("python/y.py", b), **{"python/z.py": "x.py"})
    plane.dispatch.put_runtime_blobs([a])
    with pytest.raises(InvalidArgument, match=r"names 1 blob\(s\) this namespace does not hold"):
        plane.dispatch.put_runtime_manifest(wanted)
    plane.dispatch.put_runtime_blobs([b])
    digest = plane.dispatch.put_runtime_manifest(wanted)
    assert digest.startswith("sha256:") and len(digest) == 71
    assert plane.dispatch.put_runtime_manifest(wanted) == digest  # the same tree, the same name
    read = plane.dispatch.runtime_manifest(digest)
    assert read["digest"] == digest
    assert sorted(e["path"] for e in read["entries"]) == [
        "python/x.py",
        "python/y.py",
        "python/z.py",
    ]


ESCAPES = [
    ({"path": "../x", "mode": 0o644, "size": 1}, "holds '..'"),
    ({"path": "/etc/cron.d/x", "mode": 0o644, "size": 1}, "is absolute"),
    ({"path": "a/./b", "mode": 0o644, "size": 1}, "not a plain relative path"),
    ({"path": "python/evil", "mode": 0o777, "size": 0, "link": "../../x"}, "leads out of the tree"),
    ({"path": "python/evil", "mode": 0o777, "size": 0, "link": "/etc/passwd"}, "is absolute"),
]


@pytest.mark.parametrize(("entry", "message"), ESCAPES)
def test_a_manifest_that_would_write_outside_its_tree_is_refused(
    plane: PlaneEnv, entry: dict[str, Any], message: str
) -> None:
    sha, data = blob("payload\n")
    plane.dispatch.put_runtime_blobs([(sha, data)])
    if "link" not in entry:
        entry = {**entry, "sha256": sha}
    with pytest.raises(InvalidArgument, match=message):
        plane.dispatch.put_runtime_manifest({"entries": [entry]})


def test_a_runtime_travels_on_the_row_and_the_claim(plane: PlaneEnv) -> None:
    digest = bundle(plane, "def scale(x):\n    return 3 * x\n")
    spec = runtime(digest, requirements=["tiny==1.0"], env={"MODE": "fast"})
    [job] = plane.dispatch.submit("rt-row", [SubmitRequest(b"\x01", runtime=spec)])
    [plain] = plane.dispatch.submit("rt-row", [SubmitRequest(b"\x02")])
    assert plane.dispatch.invocation(job).runtime == spec
    assert plane.dispatch.invocation(plain).runtime is None
    first = claiming.claim(plane.dispatch, ["rt-row"], worker="w1")
    second = claiming.claim(plane.dispatch, ["rt-row"], worker="w1")
    assert first is not None and second is not None
    assert {first.id: first.runtime, second.id: second.runtime} == {job: spec, plain: None}


def test_requirements_alone_need_no_bundle(plane: PlaneEnv) -> None:
    spec = runtime(None, requirements=["tiny>=1"])
    [job] = plane.dispatch.submit("rt-reqs", [SubmitRequest(b"\x01", runtime=spec)])
    assert plane.dispatch.invocation(job).runtime == spec


def test_a_bundle_the_namespace_does_not_hold_refuses_the_whole_submit(plane: PlaneEnv) -> None:
    ghost = "sha256:" + "0" * 64
    batch = [SubmitRequest(b"\x01"), SubmitRequest(b"\x02", runtime=runtime(ghost))]
    with pytest.raises(InvalidArgument, match="is not a bundle of namespace"):
        plane.dispatch.submit("rt-ghost", batch)
    assert plane.dispatch.count("rt-ghost") == 0


BAD_RUNTIMES = [
    ("not a map", "runtime must be an object"),
    ({"bundle": None, "requirements": ["x"], "surprise": 1}, "unknown fields \\['surprise'\\]"),
    ({"bundle": "md5:abc", "requirements": []}, "'sha256:' and 64 lowercase hex digits"),
    ({"requirements": "numpy"}, "must be a list of requirement strings"),
    ({"requirements": ["numpy\nevil"]}, "must be a list of requirement strings"),
    ({"requirements": ["x"], "env": {"1BAD": "v"}}, "is not a variable name"),
    ({"requirements": ["x"], "env": {"OK": 3}}, "must be a string, got 3"),
    ({"requirements": ["x"], "workdir": "yes"}, "workdir must be true or false"),
    ({"requirements": ["x"], "workdir": True}, "need a bundle that holds them"),
    ({"requirements": ["x"], "files": -1}, "files must be a whole number"),
    ({"bundle": None}, "brings nothing"),
]


@pytest.mark.parametrize(("spec", "message"), BAD_RUNTIMES)
def test_a_bad_runtime_is_refused_naming_it(plane: PlaneEnv, spec: Any, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        plane.dispatch.submit("rt-bad", [SubmitRequest(b"\x01", runtime=spec)])
    assert plane.dispatch.count("rt-bad") == 0


def test_unknown_bundles_and_blobs_are_not_found(plane: PlaneEnv) -> None:
    with pytest.raises(NotFound, match="unknown bundle"):
        plane.dispatch.runtime_manifest("sha256:" + "1" * 64)
    with pytest.raises(NotFound, match="unknown blob"):
        plane.dispatch.runtime_blob("1" * 64)


def test_retention_keeps_bundles_a_job_names_and_removes_the_rest(plane: PlaneEnv) -> None:
    shared, kept_only, dropped_only = blob("shared\n"), blob("kept\n"), blob("dropped\n")
    plane.dispatch.put_runtime_blobs([shared, kept_only, dropped_only])
    kept = plane.dispatch.put_runtime_manifest(
        manifest(("python/a.py", shared), ("python/b.py", kept_only))
    )
    dropped = plane.dispatch.put_runtime_manifest(
        manifest(("python/a.py", shared), ("python/c.py", dropped_only))
    )
    plane.dispatch.submit("rt-keep", [SubmitRequest(b"\x01", runtime=runtime(kept))])
    ns = plane.dispatch.namespace  # type: ignore[attr-defined]
    later = time.time() + 2 * 24 * 3600  # past the grace a producer has to submit
    trimmed = plane.on_store(
        lambda store: store.trim_retention(invocations_older_than_s=1e9, ns=ns, now=later)
    )
    assert trimmed.runtime_blobs == 1
    assert plane.dispatch.runtime_missing([shared[0], kept_only[0], dropped_only[0]]) == [
        dropped_only[0]
    ]
    assert plane.dispatch.runtime_manifest(kept)["digest"] == kept
    with pytest.raises(NotFound):
        plane.dispatch.runtime_manifest(dropped)
