"""Security: the auth matrix on every served route, tokens at rest and in logs, the server never
unpickling, workers refusing foreign namespaces and unsigned or tampered payloads."""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import fault_jobs
import httpx
import pytest
from procs import DaemonProcess, ServerProcess, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.daemon.worker import Daemon, DaemonConfig
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.types import Claim, SubmitRequest
from tests.support import claiming
from tests.support.client import Api, decode
from tests.support.server import LAUNCH

pytestmark = pytest.mark.slow


@dataclasses.dataclass
class Tenants:
    server: ServerProcess
    tokens: dict[str, str]  # name -> token: own (ns acme-a), sibling (acme-b), outsider, revoked


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    home = tmp_path_factory.mktemp("security")
    with ServerProcess(home, args=["--log-level", "debug"]) as srv:
        store = open_store(home / "lakeshore.db")
        try:
            tokens = {
                "own": store.create_token("acme-a", org="acme", label="own"),
                "sibling": store.create_token("acme-b", org="acme", label="sibling"),
                "outsider": store.create_token("other", label="outsider"),
                "revoked": store.create_token("acme-a", label="to-revoke"),
            }
        finally:
            store.close()
        yield Tenants(srv, tokens)


def routes(url: str) -> list[tuple[str, str]]:
    """(method, path) of every namespaced route the server documents, params filled in."""
    doc = httpx.get(f"{url}/openapi.json").json()
    fill = {
        "{queue}": "q",
        "{name}": "q",
        "{id}": "01J0000000000000000000000Z",
        "{ref}": "w",
        "{topic}": "t",
        "{channel}": "c",
    }
    out = []
    for path, item in doc["paths"].items():
        if "{ns}" not in path:
            continue
        for key, value in fill.items():
            path = path.replace(key, value)
        out += [
            (method.upper(), path)
            for method in item
            if method in ("get", "post", "patch", "delete", "put")
        ]
    assert len(out) >= 25, out
    return out


def expect(api: Api, method: str, path: str, token: str | None, statuses: set[int]) -> int:
    response = api.request(method, path, {} if method in ("POST", "PATCH") else None, token=token)
    body = decode(response)
    assert response.status_code in statuses, (method, path, response.status_code, body)
    if response.status_code >= 400:
        assert body["error"]["message"], (method, path, body)
    return response.status_code


def test_the_auth_matrix_on_every_route(tenants: Tenants) -> None:
    srv, tok = tenants.server, tenants.tokens
    api = Api(srv.url, None)
    try:
        # The token to revoke works first, so the revocation has a cached grant to outlive.
        assert api.request("GET", "/v1/namespaces/acme-a/queues", token=tok["revoked"]).is_success
        revoke = [
            sys.executable,
            "-c",
            LAUNCH,
            "tokens",
            "revoke",
            hashlib.sha256(tok["revoked"].encode()).hexdigest()[:12],
            "--store",
            str(srv.home / "lakeshore.db"),
        ]
        out = subprocess.run(revoke, capture_output=True, text=True, check=True)
        assert "revoked" in out.stdout
        wait_until(
            lambda: (
                api.request("GET", "/v1/namespaces/acme-a/queues", token=tok["revoked"]).status_code
                == 401
            ),
            timeout=10,
            what="the revocation to outlive the grant cache",
        )
        checked = 0
        for method, path in routes(srv.url):
            own = path.replace("{ns}", "acme-a")
            expect(api, method, own, None, {401})
            expect(api, method, own, "lks_not-a-token", {401})
            expect(api, method, own, "garbage with spaces", {401})
            expect(api, method, own, tok["revoked"], {401})
            expect(api, method, own, tok["outsider"], {403})
            expect(api, method, path.replace("{ns}", "nobody-here"), tok["own"], {404})
            # An org sibling's token is let in (whatever the route then says about the body).
            code = expect(api, method, own, tok["sibling"], set(range(200, 500)) - {401, 403})
            assert code < 500
            checked += 1
        print(f"auth matrix: routes={checked} requests={checked * 7}")
    finally:
        api.close()


def test_tokens_are_hashed_at_rest_and_never_logged(tenants: Tenants, tmp_path: Path) -> None:
    srv, tok = tenants.server, tenants.tokens
    with HttpDispatch(srv.url, token=tok["own"], namespace="acme-a") as plane:
        plane.submit("logged", [SubmitRequest(b"\x90")])
        bad = HttpDispatch(srv.url, token=tok["own"] + "x", namespace="acme-a")
        with pytest.raises(dls.DispatchError):
            bad.count("logged")
        bad.close()
    daemon = DaemonProcess(
        tmp_path,
        "logger",
        ["-q", "logged", "--burst", "--log-level", "debug"],
        url=srv.url,
        token=tok["own"],
        namespace="acme-a",
    )
    try:
        daemon.proc.wait(60)
    finally:
        daemon.stop()
    at_rest = b"".join(p.read_bytes() for p in srv.home.glob("lakeshore.db*") if p.is_file())
    for name, secret in tok.items():
        assert secret.encode() not in at_rest, f"token {name} stored in clear"
        assert secret not in srv.logs(), f"token {name} in the server log"
        assert secret not in daemon.log_path.read_text(), f"token {name} in the daemon log"
    assert hashlib.sha256(tok["own"].encode()).hexdigest().encode() in at_rest
    store = open_store(srv.home / "lakeshore.db")
    try:
        assert all(len(str(r["hash"])) == 12 for r in store.list_tokens())
    finally:
        store.close()


def test_the_server_stores_and_forwards_payloads_without_unpickling(
    tenants: Tenants, tmp_path: Path
) -> None:
    """A payload whose unpickling writes a marker file: the server accepts it, stores it,
    serves it to a claim, and the marker never appears; unpickling it here writes it."""
    marker = tmp_path / "unpickled"
    booby = cloudpickle.dumps(fault_jobs.Booby(str(marker)))
    broken = b"\x80\x05\x95garbage that no unpickler survives"
    with HttpDispatch(tenants.server.url, token=tenants.tokens["own"], namespace="acme-a") as p:
        ids = p.submit("booby", [SubmitRequest(booby), SubmitRequest(broken)])
        assert [p.invocation(i).state for i in ids] == ["queued", "queued"]
        claims = [claiming.claim(p, ["booby"], worker="inspector") for _ in ids]
        assert [c.payload for c in claims if c] == [booby, broken]
        for c in claims:
            assert c is not None
            p.ack(c.id, c.lease, booby)  # a result is opaque bytes too
        assert p.invocation(ids[0]).result == booby
    assert not marker.exists(), "the server unpickled a payload"
    assert httpx.get(f"{tenants.server.url}/v1/hello").status_code == 200
    pickle.loads(booby)  # the control: this payload was live
    assert marker.exists()


class ForeignPlane:
    """A plane whose claims say they come from another namespace (a confused or hostile
    server); everything else passes through."""

    def __init__(self, inner: dls.Dispatch) -> None:
        self.inner = inner
        self.namespace = inner.namespace

    def claim_many(self, *args: Any, **kw: Any) -> list[Claim]:
        got = self.inner.claim_many(*args, **kw)
        return [dataclasses.replace(c, namespace="someone-else") for c in got]

    def ack_and_claim(self, *args: Any, **kw: Any) -> tuple[list[Any], list[Claim]]:
        errors, got = self.inner.ack_and_claim(*args, **kw)
        return errors, [dataclasses.replace(c, namespace="someone-else") for c in got]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_daemon_refuses_claims_from_a_namespace_it_does_not_serve(tmp_path: Path) -> None:
    with dls.Dispatch(tmp_path / "plane.db") as plane:
        q = dls.SyncQueue("mine", dispatch=plane)
        inv = q.submit(dls.thunk(fault_jobs.work, "foreign", 0.0, str(tmp_path)))
        daemon = Daemon(
            ForeignPlane(plane),
            DaemonConfig(
                name="careful",
                queues=("mine",),  # type: ignore[arg-type]
                burst=True,
                lease_s=30,
            ),
        )
        done = threading.Thread(target=daemon.run, kwargs={"install_signals": False})
        done.start()
        done.join(60)
        assert not done.is_alive()
        assert not list(tmp_path.glob("foreign.*")), "the foreign payload ran"
        assert plane.invocation(inv).state == "running"  # unsettled: its lease will run out


def test_daemons_run_only_payloads_the_server_signed(tmp_path: Path, seed: int) -> None:
    """The server signs what it accepts; a daemon with its key runs those, and refuses a row
    written straight into the store (unsigned) or one whose payload or queue was changed."""
    srv = ServerProcess(tmp_path / "server").start()
    key = srv.home / "signing.key"
    assert key.stat().st_mode & 0o777 == 0o600
    daemon = DaemonProcess(
        tmp_path,
        "verifier",
        ["-q", "signed", "--signing-key-file", str(key)],
        url=srv.url,
        token=srv.token,
    )
    marker = tmp_path / "forged-ran"
    booby = cloudpickle.dumps(fault_jobs.Booby(str(marker)))
    try:
        daemon.ready()
        with HttpDispatch(srv.url, token=srv.token) as plane:
            q = dls.SyncQueue("signed", dispatch=plane)
            good = q.submit(dls.thunk(fault_jobs.work, "good"))
            assert q.result(good, timeout=30)["tag"] == "good"
            parked = dls.SyncQueue("parked", dispatch=plane).submit(dls.thunk(fault_jobs.work, "p"))
            # The attacker: write access to the store, not the key.
            store = open_store(srv.home / "lakeshore.db")
            try:
                (forged,) = store.submit("default", "signed", [SubmitRequest(booby)])
                with store.connector.transaction() as tx:
                    tx.all("signature_of", id=parked)  # exists, signed for queue 'parked'
                conn = store.connector._conn  # type: ignore[attr-defined]
                with store.connector.transaction():
                    conn.execute("UPDATE invocations SET queue = 'signed' WHERE id = ?", (parked,))
            finally:
                store.close()
            for inv in (forged, parked):
                row = plane.invocation(inv, wait_s=30)
                assert row.state == "failed" and "signature" in (row.error or ""), row
            assert not marker.exists(), "a forged payload ran on the worker"
            assert len(daemon.find_all("job.refused")) == 2
            print(f"signing: seed={seed} refused={len(daemon.find_all('job.refused'))}")
    finally:
        daemon.stop()
        srv.stop()


def test_a_channel_hears_only_of_its_own_namespaces_workers(tenants: Tenants) -> None:
    """A daemon's channel (issue 48) says which worker it serves; a token of one namespace
    naming a worker of another is closed (4403), and one naming its own keeps its channel."""
    import msgpack
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    url = tenants.server.url.replace("http:", "ws:") + "/v1/channel"
    auth = {"authorization": f"Bearer {tenants.tokens['outsider']}"}
    with connect(url, additional_headers=auth, proxy=None) as ws:
        ws.send(msgpack.packb([0, "hello", "acme-a", "their-worker"]))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
    with connect(url, additional_headers=auth, proxy=None) as ws:
        ws.send(msgpack.packb([0, "hello", "other", "my-worker"]))
        ws.send(msgpack.packb([1, "GET", "/v1/namespaces/other/queues/q/count?state=queued", None]))
        n, status, _, _ = msgpack.unpackb(ws.recv(timeout=10))
        assert (n, status) == (1, 200)
