"""The plane tier: objects through the control plane, between hosts that share nothing else.

Two hosts are simulated on this box: each has its own host id, its own host tier
(`LAKESHORE_OBJECTS`) and its own `LAKESHORE_HOME` (so its own default storage), and neither has
`LAKESHORE_STORAGE`. Host A is this test process (its environment patched), host B a subprocess
(a reader script, or a `lakeshore-daemon`). All they share is a `lakeshore server` and a token.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jobs
import numpy as np
import psutil
import pytest
from daemon_harness import DaemonProcess, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec, objects, retention
from dreamlake.lakeshore.errors import Conflict, PayloadTooLarge
from dreamlake.lakeshore.objects import layout
from dreamlake.lakeshore.objects.arena import close_arena
from dreamlake.lakeshore.objects.plane import NoPlaneAccess
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.storage import reset_storage_cache
from tests.support.client import Api
from tests.support.raw_http import connect, head
from tests.support.server import server_env, server_process

pytestmark = pytest.mark.slow

MIB = 2**20


@dataclass(frozen=True)
class Host:
    """One simulated box: its id, host tier and home (hence default storage)."""

    name: str
    objects: Path
    home: Path

    def env(self) -> dict[str, str]:
        return {
            "LAKESHORE_HOST_ID": self.name,
            "LAKESHORE_OBJECTS": str(self.objects),
            "LAKESHORE_HOME": str(self.home),
        }


def make_host(root: Path, name: str) -> Host:
    host = Host(name, root / name / "objects", root / name / "home")
    host.objects.mkdir(parents=True)
    host.home.mkdir(parents=True)
    return host


@pytest.fixture
def host_a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    """This process becomes host A: no storage configured, no default plane."""
    host = make_host(tmp_path, "host-a")
    for name, value in host.env().items():
        monkeypatch.setenv(name, value)
    for name in ("LAKESHORE_STORAGE", "LAKESHORE_URL", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    reset_storage_cache()
    yield host
    close_arena(host.objects)
    reset_storage_cache()


@pytest.fixture
def host_b(tmp_path: Path) -> Host:
    return make_host(tmp_path, "host-b")


def array(nbytes: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(nbytes // 4, dtype=np.float32)


def stored_files(home: Path, ns: str) -> list[str]:
    """Every file the server keeps for `ns` in the plane tier, temp files included."""
    folder = home / "storage" / "_objects" / "plane" / ns
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def read_on(
    host: Host, ref: dls.Ref, url: str, token: str, ns: str, seed: int
) -> dict[str, object]:
    """`dls.get(ref)` in a process that is `host`, its plane from the environment."""
    script = f"""
import json, sys
import numpy as np
import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec, objects, retention
ref = codec.decode(bytes.fromhex(sys.argv[1]))
got = dls.get(ref)
want = np.random.default_rng({seed}).standard_normal(ref.size // 4, dtype=np.float32)
cached = objects.host_arena().holds(ref.id) or (objects.file_root() / ref.id).exists()
print(json.dumps({{"equal": bool(np.array_equal(got, want)), "cached": bool(cached)}}))
"""
    env = {k: v for k, v in server_env(host.home).items() if not k.startswith("LAKESHORE_")}
    env |= host.env() | {"LAKESHORE_URL": url, "LAKESHORE_TOKEN": token, "LAKESHORE_NAMESPACE": ns}
    done = subprocess.run(
        [sys.executable, "-c", script, codec.encode(ref).hex()],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    answer: dict[str, object] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return answer


# -- between two hosts ----------------------------------------------------------------------------


def test_an_array_put_on_host_a_is_read_on_host_b_through_the_plane(
    server: Any,
    tenant: Any,
    host_a: Host,
    host_b: Host,
    http_plane: Callable[..., HttpDispatch],
) -> None:
    """Given two hosts with nothing in common but the control plane, when A puts a 64 MiB array
    through it, then B reads it bit-exact and keeps a copy in its own host tier."""
    plane = http_plane(namespace=tenant.namespace, token=tenant.token)
    data = array(64 * MIB)

    ref = dls.put(data, via=plane)

    assert ref.storage == f"lakeshore+{server.url}/v1/namespaces/{tenant.namespace}"
    assert ref.host == "host-a" and ref.size == data.nbytes
    assert not (host_a.home / "storage").exists()  # nothing went to A's own storage
    answer = read_on(host_b, ref, server.url, tenant.token, tenant.namespace, seed=0)
    assert answer == {"equal": True, "cached": True}


def test_q_call_of_a_big_array_between_two_hosts_goes_through_the_plane(
    server: Any,
    tenant: Any,
    host_a: Host,
    host_b: Host,
    http_plane: Callable[..., HttpDispatch],
) -> None:
    """Given a daemon on host B started with --url/--token (no storage of any kind), when A
    `q.call`s with a 16 MiB array, then the argument and the result each travel as a Ref through
    the plane tier (the row holds a few hundred bytes) and A gets the result bit-exact."""
    url, ns, token = server.url, tenant.namespace, tenant.token
    daemon = DaemonProcess(
        host_b.home,
        "plane-b",
        ["-q", "plane-q", "--url", url, "--token", token, "--namespace", ns],
        env=host_b.env(),
    )
    try:
        daemon.ready()
        q = dls.SyncQueue("plane-q", dispatch=http_plane(namespace=ns, token=token))
        data = (np.arange(4 * MIB, dtype=np.float32) % 1000).reshape(1024, -1)

        out = q.call(dls.thunk(jobs.square, data), timeout=60)

        assert np.array_equal(out, data * data)
        (inv,) = [row.id for row in q.dispatch.invocations(queue="plane-q")]
        assert len(q.status(inv).result or b"") < 300  # the row holds the result's Ref
        result_ref = q.result(inv, ref=True)
        assert result_ref.host == "host-b"
        assert result_ref.storage == f"lakeshore+{url}/v1/namespaces/{ns}"
        assert len(stored_files(server.home, ns)) == 2
        assert not (host_b.home / "storage").exists()  # B's default storage was never used
    finally:
        daemon.stop()


def test_configured_storage_wins_over_the_plane(
    server: Any,
    tenant: Any,
    host_a: Host,
    http_plane: Callable[..., HttpDispatch],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rule: over HTTP with no storage configured a spill goes through the plane; with
    LAKESHORE_STORAGE it goes to that storage; an embedded plane never uses the plane tier."""
    big = np.ones(1 << 20, dtype=np.float32)

    def spilled_to(q: dls.SyncQueue) -> str:
        """Where the durable copy of a submitted big argument went (the claimed payload's Ref)."""
        q.submit(dls.thunk(jobs.square, big))
        claim = q.claim_raw()
        assert claim is not None
        ref = codec.decode(claim.payload or b"", allow_pickle=True).args[0]
        assert isinstance(ref, dls.Ref) and ref.spilled and ref.storage is not None
        return ref.storage

    plane = http_plane(namespace=tenant.namespace, token=tenant.token)
    over_http = dls.SyncQueue("rule-q", dispatch=plane)
    assert spilled_to(over_http).startswith("lakeshore+http://")
    monkeypatch.setenv("LAKESHORE_STORAGE", (tmp_path / "shared").as_uri())
    assert spilled_to(over_http) == (tmp_path / "shared").as_uri()

    monkeypatch.delenv("LAKESHORE_STORAGE")
    monkeypatch.setenv("LAKESHORE_URL", server.url)
    with dls.Dispatch(":memory:") as local:  # the queue's plane is embedded: no plane tier
        assert spilled_to(dls.SyncQueue("rule-q", dispatch=local)).startswith("file://")


def test_a_ref_naming_another_address_is_read_through_the_callers_own_plane(
    server: Any, tenant: Any, host_a: Host, http_plane: Callable[..., HttpDispatch]
) -> None:
    """A token goes only to a plane this process talks to: a Ref naming some other URL is asked
    of the caller's own plane (the same server under another name), and with no plane at all
    the read is refused naming how to give it one."""
    plane = http_plane(namespace=tenant.namespace, token=tenant.token)
    data = array(2 * MIB, seed=3)
    ref = dls.put(data, via=plane)
    objects.host_arena().remove(ref.id)  # only the plane tier holds it now
    assert ref.storage is not None
    # TEST-NET-1: nothing answers there, and no token may be sent there.
    elsewhere = dataclasses.replace(ref, storage=ref.storage.replace("127.0.0.1", "192.0.2.1"))

    assert np.array_equal(dls.get(elsewhere, via=plane), data)
    objects.host_arena().remove(ref.id)
    nowhere = dataclasses.replace(ref, storage="lakeshore+http://192.0.2.1:9/v1/namespaces/x")
    with pytest.raises(NoPlaneAccess, match="LAKESHORE_URL"):
        dls.get(nowhere)


def test_the_httpx_path_streams_too(server: Any, tenant: Any, host_a: Host) -> None:
    """A plane with its own transport (TLS, proxies, tests) moves objects through httpx."""
    import httpx

    with HttpDispatch(
        server.url,
        token=tenant.token,
        namespace=tenant.namespace,
        transport=httpx.HTTPTransport(),
    ) as plane:
        data = array(8 * MIB, seed=5)
        ref = dls.put(data, via=plane)
        objects.host_arena().remove(ref.id)
        assert np.array_equal(dls.get(ref, via=plane), data)


# -- the routes: bad input, each a named error, nothing stored --------------------------------


def object_bytes(data: np.ndarray) -> tuple[bytes, dict[str, str]]:
    """An object's bytes as the SDK lays them out, and the headers that declare them."""
    header, body = layout.body_of(data)
    prefix = layout.prefix_of(header)
    headers = {
        "content-type": "application/octet-stream",
        "x-lakeshore-size": str(body.nbytes),
        "x-lakeshore-digest": layout.digest_of(body),
    }
    return prefix + bytes(body), headers


ID = "01j00000000000000000000000"


def test_put_get_head_and_a_repeated_upload(
    api: Api, ns: Callable[[str], str], server: Any, tenant: Any
) -> None:
    data, headers = object_bytes(array(MIB, seed=7))
    path = ns(f"/objects/{ID}")

    first = api.request("PUT", path, content=data, headers=headers)
    again = api.request("PUT", path, content=data, headers=headers)
    got = api.request("GET", path)
    size = api.request("HEAD", path)

    assert (first.status_code, again.status_code) == (201, 200)
    assert got.status_code == 200 and got.content == data
    assert size.status_code == 200 and size.headers["content-length"] == str(len(data))
    assert stored_files(server.home, tenant.namespace) == [ID]


def test_an_id_holding_other_bytes_is_409(api: Api, ns: Callable[[str], str], tenant: Any) -> None:
    data, headers = object_bytes(array(MIB, seed=8))
    other, other_headers = object_bytes(array(MIB, seed=9))
    path = ns(f"/objects/{ID}")
    assert api.request("PUT", path, content=data, headers=headers).status_code == 201

    status, err = api.call("PUT", path, content=other, headers=other_headers)

    assert status == 409 and err["error"]["code"] == "conflict" and ID in err["error"]["message"]
    assert api.request("GET", path).content == data


@pytest.mark.parametrize(
    ("change", "status", "says"),
    [
        ("digest", 422, "hashes to"),
        ("magic", 422, "does not start with"),
        ("size", 400, "disagree"),
        ("no-digest", 400, "x-lakeshore-digest"),
        ("bad-id", 400, "26 lowercase"),
    ],
)
def test_a_forged_or_malformed_upload_is_refused_and_nothing_is_stored(
    api: Api,
    ns: Callable[[str], str],
    server: Any,
    tenant: Any,
    change: str,
    status: int,
    says: str,
) -> None:
    data, headers = object_bytes(array(2 * MIB, seed=10))
    ref_id = ID
    if change == "digest":
        headers["x-lakeshore-digest"] = "0" * 32
    elif change == "magic":
        data = b"NOTANOBJ" + data[8:]
    elif change == "size":
        headers["x-lakeshore-size"] = str(len(data) - 100)
    elif change == "no-digest":
        del headers["x-lakeshore-digest"]
    else:
        ref_id = "NOT-AN-ID"

    answer, err = api.call("PUT", ns(f"/objects/{ref_id}"), content=data, headers=headers)

    assert answer == status and says in err["error"]["message"], err
    assert "nothing was stored" in err["error"]["message"] or status == 400
    assert stored_files(server.home, tenant.namespace) == []


def test_a_truncated_upload_leaves_nothing_behind(
    server: Any, tenant: Any, ns: Callable[[str], str], api: Api
) -> None:
    """A client that stops half way and hangs up: no object, no temp file, the server fine."""
    data, headers = object_bytes(array(8 * MIB, seed=11))
    headers |= {
        "authorization": f"Bearer {tenant.token}",
        "content-length": str(len(data)),
    }
    sock = connect(server.url)
    sock.sendall(head("PUT", ns(f"/objects/{ID}"), headers) + data[: len(data) // 2])
    wait_until(
        lambda: stored_files(server.home, tenant.namespace),
        what="the upload to start",
    )
    sock.close()

    wait_until(
        lambda: stored_files(server.home, tenant.namespace) == [],
        what="the partial upload to be dropped",
    )
    status, err = api.call("GET", ns(f"/objects/{ID}"))
    assert status == 404 and ID in err["error"]["message"]


def test_an_object_over_the_limit_is_413_before_a_byte_is_read(
    server: Any, tenant: Any, ns: Callable[[str], str]
) -> None:
    """A 5 GiB upload is refused from its headers alone: the client sends no body at all."""
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    conn.putrequest("PUT", ns(f"/objects/{ID}"))
    for name, value in {
        "authorization": f"Bearer {tenant.token}",
        "accept": "application/json",
        "content-length": str(5 << 30),
        "x-lakeshore-size": str((5 << 30) - 64),
        "x-lakeshore-digest": "0" * 32,
    }.items():
        conn.putheader(name, value)
    conn.endheaders()
    answer = conn.getresponse()
    error = json.loads(answer.read())["error"]
    conn.close()

    assert answer.status == 413 and error["code"] == "payload_too_large"
    assert "--max-object-mb" in error["message"] and ID in error["message"]
    assert stored_files(server.home, tenant.namespace) == []


def test_the_sdk_names_a_refused_object(tmp_path: Path, host_a: Host) -> None:
    """Through the SDK: over the server's limit is `PayloadTooLarge` naming the option; an id
    already holding other bytes is `Conflict`. Nothing is left on the server."""
    with (
        server_process(tmp_path / "small", extra_args=("--max-object-mb", "1")) as srv,
        HttpDispatch(srv.url, token=srv.token) as plane,
    ):
        with pytest.raises(PayloadTooLarge, match="--max-object-mb"):
            dls.put(array(2 * MIB), via=plane)
        assert stored_files(tmp_path / "small", "default") == []
        tier = plane.object_tier()
        header, body = layout.body_of(array(MIB // 2, seed=1))
        prefix = layout.prefix_of(header)
        tier.upload(ID, prefix, body, layout.digest_of(body))
        tier.upload(ID, prefix, body, layout.digest_of(body))  # the same bytes: idempotent
        header, other = layout.body_of(array(MIB // 2, seed=2))
        with pytest.raises(Conflict, match=ID):
            tier.upload(ID, prefix, other, layout.digest_of(other))


def test_a_missing_id_and_a_foreign_namespace_are_404(
    api: Api, ns: Callable[[str], str], make_tenant: Callable[..., Any], server: Any
) -> None:
    """An id never uploaded is 404 naming it. Another namespace's object is 404 through one's
    own namespace, and its namespace's path is 403 whether or not the id exists there: nothing
    tells a foreign token what another namespace holds."""
    data, headers = object_bytes(array(MIB, seed=12))
    assert (
        api.request("PUT", ns(f"/objects/{ID}"), content=data, headers=headers).status_code == 201
    )
    other = make_tenant()
    theirs = Api(server.url, other.token)
    try:
        missing = theirs.call("GET", f"/v1/namespaces/{other.namespace}/objects/{'0' * 26}")
        mine_in_theirs = theirs.call("GET", f"/v1/namespaces/{other.namespace}/objects/{ID}")
        path = ns(f"/objects/{ID}")
        exists, absent = theirs.call("GET", path), theirs.call("GET", ns(f"/objects/{'0' * 26}"))
    finally:
        theirs.close()

    assert missing[0] == 404 and "0" * 26 in missing[1]["error"]["message"]
    assert mine_in_theirs[0] == 404
    assert exists[0] == absent[0] == 403 and exists[1] == absent[1]


# -- memory --------------------------------------------------------------------------------------


def test_server_memory_stays_bounded_during_8_concurrent_64_mib_transfers(tmp_path: Path) -> None:
    """Eight 64 MiB uploads at once, then eight downloads: the server streams each through in
    chunks, so its RSS grows by far less than one object, let alone eight (bound: 256 MiB)."""
    data, headers = object_bytes(array(64 * MIB, seed=13))
    with server_process(tmp_path / "mem") as srv:
        proc = psutil.Process(srv.pid)
        parts = urlsplit(srv.url)
        headers |= {"authorization": f"Bearer {srv.token}", "accept": "application/json"}
        ids = [f"01j{i:023d}" for i in range(8)]

        def transfer(method: str, ref_id: str, out: list[int]) -> None:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
            path = f"/v1/namespaces/default/objects/{ref_id}"
            if method == "PUT":
                conn.request("PUT", path, body=data, headers=headers)
            else:
                conn.request("GET", path, headers={"authorization": headers["authorization"]})
            answer = conn.getresponse()
            n = 0
            while chunk := answer.read(MIB):
                n += len(chunk)
            conn.close()
            out.append(answer.status if method == "PUT" else n)

        base = proc.memory_info().rss
        peak = [base]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], proc.memory_info().rss)
                stop.wait(0.01)  # a sampling period, not a synchronisation

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            for method in ("PUT", "GET"):
                results: list[int] = []
                threads = [
                    threading.Thread(target=transfer, args=(method, i, results)) for i in ids
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                expect = 201 if method == "PUT" else len(data)
                assert results == [expect] * 8, (method, results)
        finally:
            stop.set()
            sampler.join()
        grew = (peak[0] - base) / MIB
        print(f"server RSS: {base / MIB:.0f} MiB before, peak growth {grew:.0f} MiB")
        assert grew < 256, grew


def test_retention_deletes_the_plane_tier_copies_of_the_rows_it_trims(
    server: Any, tenant: Any, host_a: Host, http_plane: Callable[..., HttpDispatch]
) -> None:
    """Given jobs whose payload, result and thunk argument were spilled to the plane tier, and
    two objects put by hand beside them, when the namespace is trimmed, then the server deletes
    the jobs' copies and the hand-put object whose time to live ran out, and keeps the other."""
    ns = tenant.namespace
    plane = http_plane(namespace=ns, token=tenant.token)
    q = dls.SyncQueue("trim-q", dispatch=plane)
    kept = dls.put(array(MIB, seed=1), via=plane)
    expired = dls.put(array(MIB, seed=2), via=plane, ttl_s=0.001)
    big_in = q.submit(dls.thunk(len, bytes(2 * MIB)))
    big_out = q.submit(dls.thunk(bytes, 2 * MIB))
    big_arg = q.submit(dls.thunk(jobs.square, array(MIB)))  # the argument, spilled alone
    assert sum(dls.run_worker(q, once=True) for _ in range(3)) == 3
    assert q.result(big_in, timeout=30) == 2 * MIB
    assert q.result(big_out, timeout=30) == bytes(2 * MIB)
    assert np.array_equal(q.result(big_arg, timeout=30), array(MIB) ** 2)
    assert len(stored_files(server.home, ns)) == 6
    assert expired.expires is not None and expired.expires < time.time()

    trimmed = retention.trim(plane, invocations_older_than_s=0)

    assert (trimmed.invocations, trimmed.problems) == (3, [])
    assert stored_files(server.home, ns) == [kept.id]


@pytest.mark.parametrize(
    ("objects", "message"),
    [
        ([{"url": "file:///data", "key": "models/weights.bin"}], "keyed _objects/<object id>"),
        ([{"url": "file:///data", "key": "../etc/passwd"}], "items[0].objects[0].key"),
        ([{"url": "file:///data", "key": "_objects/" + "0" * 26, "mode": "x"}], "mode"),
        ("_objects/x", "must be a list"),
    ],
    ids=["not-an-object-key", "traversal", "unknown-field", "not-a-list"],
)
def test_a_submits_objects_are_checked_and_a_bad_list_changes_nothing(
    api: Api, ns: Callable[[str], str], objects: object, message: str
) -> None:
    item = {"payload": codec.encode(1), "objects": objects}

    status, body = api.call("POST", ns("/queues/owned/invocations"), {"items": [item]})

    assert status == 400 and message in body["error"]["message"]
    status, body = api.call("GET", ns("/invocations?queue=owned"))
    assert status == 200 and body["invocations"] == []
