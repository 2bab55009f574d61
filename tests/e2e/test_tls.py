"""`lakeshore server --ssl-certfile/--ssl-keyfile` and the SDK, the CLI and the daemon over
https, with a private CA trusted through LAKESHORE_CA_BUNDLE (or `verify=`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument, Unavailable
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.plane.dispatch import open_store
from tests.support.daemons import DaemonProcess
from tests.support.server import LAUNCH, server_env, server_process
from tests.support.tls import Certs, make_certs

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class TlsServer:
    url: str
    token: str  # the admin token of `default`
    home: Path
    certs: Certs
    namespace: str
    ns_token: str  # a default-scoped token of `namespace`


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    home = tmp_path_factory.mktemp("tls-home")
    certs = make_certs(home / "certs")
    args = ("--ssl-certfile", str(certs.cert), "--ssl-keyfile", str(certs.key))
    with server_process(home, extra_args=args, ca_bundle=certs.ca) as srv:
        store = open_store(home / "lakeshore.db")  # after the first start made the admin token
        try:
            ns_token = store.create_token("tls-team", label="tls")
        finally:
            store.close()
        yield TlsServer(srv.url, srv.token, home, certs, "tls-team", ns_token)


def test_the_sdk_over_https_with_the_ca_bundle(tls_server, monkeypatch):
    """Given LAKESHORE_CA_BUNDLE naming the CA, an HttpDispatch to https:// takes the fast
    client (not httpx) and runs a job end to end: submit, claim, ack, result."""
    assert tls_server.url.startswith("https://")
    monkeypatch.setenv("LAKESHORE_CA_BUNDLE", str(tls_server.certs.ca))
    with HttpDispatch(
        tls_server.url, token=tls_server.ns_token, namespace=tls_server.namespace
    ) as plane:
        assert plane._fast is not None  # https rides the lean client, as http does
        q = dls.SyncQueue("tls", dispatch=plane)
        inv = q.submit({"x": 1})
        assert dls.run_worker(plane, ["tls"], once=True, handler=lambda p: p["x"] + 1) == 1
        assert q.result(inv, timeout=20) == 2


def test_verify_takes_a_path_or_a_context(tls_server, monkeypatch):
    import ssl

    monkeypatch.delenv("LAKESHORE_CA_BUNDLE", raising=False)
    context = ssl.create_default_context(cafile=str(tls_server.certs.ca))
    for verify in (str(tls_server.certs.ca), context):
        with HttpDispatch(
            tls_server.url, token=tls_server.ns_token, namespace="tls-team", verify=verify
        ) as plane:
            assert dls.SyncQueue("tls-verify", dispatch=plane).count("queued") >= 0


def test_an_untrusted_certificate_is_refused_naming_the_setting(tls_server, tmp_path, monkeypatch):
    """Given a CA bundle of another CA (or none: the system store), every call fails with
    Unavailable saying the certificate is not trusted and naming LAKESHORE_CA_BUNDLE."""
    other = make_certs(tmp_path / "other", name="other")
    for bundle in (str(other.ca), None):
        if bundle is None:
            monkeypatch.delenv("LAKESHORE_CA_BUNDLE", raising=False)
        else:
            monkeypatch.setenv("LAKESHORE_CA_BUNDLE", bundle)
        with (
            HttpDispatch(tls_server.url, token=tls_server.ns_token) as plane,
            pytest.raises(Unavailable) as caught,
        ):
            plane.queues()
        message = str(caught.value)
        assert "presented a TLS certificate this client does not trust" in message
        assert "unable to get local issuer certificate" in message, message
        assert "set LAKESHORE_CA_BUNDLE to the PEM file" in message
        assert tls_server.token not in message and tls_server.ns_token not in message


def test_an_unreadable_ca_bundle_is_one_line(tls_server, tmp_path, monkeypatch):
    monkeypatch.setenv("LAKESHORE_CA_BUNDLE", str(tmp_path / "missing.pem"))
    with pytest.raises(InvalidArgument, match=r"cannot read the CA bundle .* LAKESHORE_CA_BUNDLE"):
        HttpDispatch(tls_server.url, token=tls_server.ns_token)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(InvalidArgument, match="verify="):
        HttpDispatch(tls_server.url, token=tls_server.ns_token, verify=str(junk))


def _lakeshore(home: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LAUNCH, *args],
        env={**server_env(home), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_over_https(tls_server, tmp_path):
    """`lakeshore tokens ls --url https://...` with the CA bundle works; without it, one line
    naming the setting and exit 1."""
    url = ["--url", tls_server.url, "--token", tls_server.token]
    ca = {"LAKESHORE_CA_BUNDLE": str(tls_server.certs.ca)}
    listed = _lakeshore(tmp_path, "tokens", "ls", "--json", *url, env=ca)
    assert listed.returncode == 0, listed.stderr
    assert "tls-team" in [r["namespace"] for r in json.loads(listed.stdout)]
    untrusted = _lakeshore(tmp_path, "tokens", "ls", *url, env={})
    assert untrusted.returncode == 1 and "LAKESHORE_CA_BUNDLE" in untrusted.stderr
    assert "Traceback" not in untrusted.stderr


def test_the_daemon_over_https(tls_server, tmp_path):
    """A daemon given the https URL and the CA bundle registers, claims and runs a shell job
    whose lines come back as frames."""
    env = {
        "LAKESHORE_URL": tls_server.url,
        "LAKESHORE_TOKEN": tls_server.ns_token,
        "LAKESHORE_NAMESPACE": tls_server.namespace,
        "LAKESHORE_CA_BUNDLE": str(tls_server.certs.ca),
    }
    daemon = DaemonProcess(tmp_path, "tls-daemon", ["-q", "tls-daemon"], env=env)
    try:
        daemon.ready()
        with HttpDispatch(
            tls_server.url,
            token=tls_server.ns_token,
            namespace=tls_server.namespace,
            verify=str(tls_server.certs.ca),
        ) as plane:
            q = dls.SyncQueue("tls-daemon", dispatch=plane)
            inv = q.submit(envelope=dls.Envelope.for_exec("echo over; echo tls"))
            assert list(q.stream(inv, timeout=30)) == ["over", "tls"]
    finally:
        daemon.stop()


def test_server_tls_options_are_checked_before_start(tmp_path):
    """A missing certificate, a key without a certificate, or a key that is not the
    certificate's is a usage error naming the option; the store is never opened."""
    certs = make_certs(tmp_path / "c")
    other = make_certs(tmp_path / "o", name="o")
    cases = [
        (["--ssl-certfile", str(tmp_path / "nope.pem")], "--ssl-certfile"),
        (["--ssl-keyfile", str(certs.key)], "a key without a certificate"),
        (["--ssl-certfile", str(certs.cert), "--ssl-keyfile", str(other.key)], "--ssl-certfile"),
    ]
    for args, words in cases:
        out = _lakeshore(tmp_path / "home", "server", "--port", "0", *args, env={})
        assert out.returncode == 2 and words in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr
    assert not (tmp_path / "home" / "lakeshore.db").exists()
