"""Issue 7 on a real `lakeshore-daemon`: data UDFs write files under a scope and return keys;
payloads and results above the inline limit spill both ways. Once with `--storage file://...`,
once with `--storage s3://...` against moto's S3 server (the daemon's children reach it through
AWS_ENDPOINT_URL, as they would reach MinIO).

The bodies live in this module: the daemon's children import it by name (its folder is on their
PYTHONPATH, see daemon_harness), which is how cloudpickle sends module-level functions.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import spill
from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.storage import Storage, reset_storage_cache

pytestmark = pytest.mark.slow

QUEUE = "data"
BUCKET = "lakeshore-e2e"
#: Small, so that spills need no big test values; the daemon gets the same limit.
LIMIT = 2048


# -- bodies (run in the daemon's children) ------------------------------------------------------


def render(scene: str, frames: int) -> list[str]:
    """A data UDF: writes each frame under the scene's scope and returns the keys."""
    with dls.scope("renders"), dls.scope(scene):
        dls.run.post({"id": dls.run.id, "attempt": dls.run.attempt})
        keys = [dls.run.write(f"frame-{i:03d}.bin", bytes([i]) * 64) for i in range(frames)]
        with dls.run.open("index.txt", "w") as index:
            index.write("\n".join(keys))
    return keys


def checksum(blob: bytes) -> dict[str, int]:
    """Reads a spilled payload (transparently), returns a spilled result."""
    return {"size": len(blob), "sum": sum(blob) % 65521, "echo_len": len(blob * 2)} | {
        f"k{i}": i for i in range(400)
    }


# -- fixtures -------------------------------------------------------------------------------------


@dataclass
class Setup:
    kind: str
    url: str
    storage: Storage
    q: dls.SyncQueue


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def aws_env() -> Iterator[dict[str, str]]:
    """moto's S3 server and the AWS environment pointing at it (here and in the daemon)."""
    boto3 = pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        reset_storage_cache()
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        try:
            yield env
        finally:
            reset_storage_cache()
            server.stop()


@pytest.fixture(scope="module", params=["file", "s3"])
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    home = tmp_path_factory.mktemp(f"data-{request.param}")
    env = {"LAKESHORE_INLINE_LIMIT": str(LIMIT)}
    if request.param == "s3":
        env.update(request.getfixturevalue("aws_env"))
        url = f"s3://{BUCKET}/e2e"
    else:
        url = (home / "storage").as_uri()
    storage = dls.storage(url)
    with Dispatch(home / "lakeshore.db") as plane:
        args = ["--queue", QUEUE, "--storage", url]
        daemon = DaemonProcess(home, f"data-{request.param}", args, env=env)
        try:
            daemon.ready()
            spill.configure(inline_limit=LIMIT, storage=storage)
            yield Setup(request.param, url, storage, dls.SyncQueue(QUEUE, dispatch=plane))
        finally:
            spill.configure()
            daemon.stop()


# -- tests ----------------------------------------------------------------------------------------


def test_a_data_udf_writes_under_its_scope_and_returns_keys(setup: Setup) -> None:
    inv = setup.q.submit(dls.thunk(render, "scene7", 3))

    keys = setup.q.result(inv, timeout=30)

    assert keys == [f"renders/scene7/frame-{i:03d}.bin" for i in range(3)]
    reader = dls.storage(setup.url)  # what a producer does with the keys
    assert [reader.read(k) for k in keys] == [bytes([i]) * 64 for i in range(3)]
    assert reader.read("renders/scene7/index.txt").decode().splitlines() == keys
    assert list(setup.q.stream(inv, timeout=5)) == [{"id": inv, "attempt": 1}]


def test_the_daemons_storage_is_where_files_land(setup: Setup) -> None:
    inv = setup.q.submit(dls.thunk(render, "scene8", 1))
    (key,) = setup.q.result(inv, timeout=30)

    if setup.kind == "file":
        root = Path(setup.storage.url.removeprefix("file://"))
        assert (root / "renders" / "scene8" / "frame-000.bin").read_bytes() == b"\x00" * 64
    else:
        import boto3

        body = boto3.client("s3").get_object(Bucket=BUCKET, Key=f"e2e/{key}")["Body"].read()
        assert body == b"\x00" * 64


def test_big_payloads_and_results_spill_through_the_daemon(setup: Setup) -> None:
    blob = os.urandom(50_000)
    before = set(setup.storage.list("_objects/"))

    inv = setup.q.submit(dls.thunk(checksum, blob))
    result = setup.q.result(inv, timeout=30)

    assert result["size"] == 50_000 and result["sum"] == sum(blob) % 65521
    assert len(result) == 403
    row = setup.q.status(inv)
    assert row.result is not None and len(row.result) < 200  # a ref rode the wire, not bytes
    spilled = set(setup.storage.list("_objects/")) - before
    assert len(spilled) == 2  # the payload (written here) and the result (by the daemon's child)


def test_a_udf_envelope_runs_the_same_data_body(setup: Setup) -> None:
    inv = setup.q.submit(envelope=dls.Envelope.for_udf(render, ("scene9", 2)))

    keys = setup.q.result(inv, timeout=30)

    assert keys == ["renders/scene9/frame-000.bin", "renders/scene9/frame-001.bin"]
    assert dls.storage(setup.url).read(keys[1]) == b"\x01" * 64
