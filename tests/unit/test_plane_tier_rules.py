"""The plane tier's rules, without a server: which durable tier a copy goes to, how a plane-tier
Ref looks on the wire, and whose token reads it (the transfers themselves are in
tests/e2e/test_objects_plane.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec, spill
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.objects import plane as tiers
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.server.routes_objects import ObjectTier, delete_owned
from dreamlake.lakeshore.storage import LocalStorage, StorageRef, reset_storage_cache, sniff_ref

URL = "http://control.example:8765"
PLANE_URL = f"lakeshore+{URL}/v1/namespaces/team-a"


@pytest.fixture(autouse=True)
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path / "home"))
    for name in ("LAKESHORE_STORAGE", "LAKESHORE_URL", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    reset_storage_cache()
    yield tmp_path
    reset_storage_cache()


@pytest.fixture
def remote() -> Iterator[HttpDispatch]:
    """A plane over HTTP; nothing here sends it a request."""
    with HttpDispatch(URL, token="lks_secret", namespace="team-a") as plane:
        yield plane


def test_without_storage_an_http_callers_durable_copies_go_through_its_plane(
    remote: HttpDispatch, box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tiers.using(remote):
        target = tiers.durable_target(None)
    assert isinstance(target, tiers.PlaneTier) and target.url == PLANE_URL

    monkeypatch.setenv("LAKESHORE_STORAGE", (box / "shared").as_uri())
    with tiers.using(remote):
        configured = tiers.durable_target(None)
    assert isinstance(configured, LocalStorage) and configured.url == (box / "shared").as_uri()


def test_an_embedded_plane_keeps_the_box_storage_even_with_lakeshore_url_set(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESHORE_URL", URL)
    with dls.Dispatch(":memory:") as local, tiers.using(local):
        target = tiers.durable_target(None)
    assert isinstance(target, LocalStorage) and target.root == box / "home" / "storage"


def test_via_needs_a_plane_over_http_and_names_what_it_got() -> None:
    with (
        dls.Dispatch(":memory:") as local,
        pytest.raises(InvalidArgument, match="HttpDispatch"),
    ):
        dls.put(b"x" * 10, via=local)


def test_a_spill_inside_a_job_with_its_own_storage_keeps_it(
    remote: HttpDispatch, box: Path
) -> None:
    from dreamlake.lakeshore import run

    with (
        tiers.using(remote),
        run.job("01j00000000000000000000000", post=print, storage=str(box / "job")),
    ):
        target = spill.spill_storage()
    assert isinstance(target, LocalStorage) and target.root == box / "job"


def test_a_plane_tier_ref_is_an_ordinary_ref_on_the_wire() -> None:
    """Same fields as before (the URL says the tier), so old and new SDKs decode each other;
    spilled, it is found by retention like any spilled object, and a client's trim leaves it to
    the server that holds it."""
    ref = dls.Ref(id="0" * 26, size=8, digest="0" * 32, host="host-a", storage=PLANE_URL)
    old = msgpack.packb({"id": "1" * 26, "size": 3, "digest": "f" * 32}, use_bin_type=True)

    assert codec.decode(codec.encode(ref)) == ref and ref.durable
    assert dls.Ref.from_wire(old).storage is None
    spilled = sniff_ref(codec.encode(dataclasses.replace(ref, spilled=True)))
    assert spilled == StorageRef(PLANE_URL, f"_objects/{ref.id}", 8)
    assert spill.delete_refs([spilled]) == [
        f"{PLANE_URL}/_objects/{ref.id}: kept (a plane-tier copy of another plane)"
    ]


def test_retention_deletes_only_the_trimmed_namespaces_plane_copies(box: Path) -> None:
    """A row of team-a can carry a Ref naming team-b's object (copied or forged): trimming team-a
    deletes team-a's copies, keeps team-b's, and hands other tiers' refs back to the caller."""
    storage = LocalStorage(box / "server-storage")
    tier = ObjectTier(storage)
    ours, theirs = "1" * 26, "2" * 26
    storage.write(tier.key("team-a", ours), b"a")
    storage.write(tier.key("team-b", theirs), b"b")
    elsewhere = StorageRef("file:///data", f"_objects/{'3' * 26}", 1)
    refs = [
        StorageRef(PLANE_URL, f"_objects/{ours}", 1),
        StorageRef(PLANE_URL.replace("team-a", "team-b"), f"_objects/{theirs}", 1),
        StorageRef(PLANE_URL, "_objects/not-an-object-id", 1),
        elsewhere,
    ]

    left, deleted, problems = delete_owned(tier, "team-a", refs)

    assert (left, deleted) == ([elsewhere], 1)
    assert not storage.exists(tier.key("team-a", ours))
    assert storage.exists(tier.key("team-b", theirs))
    assert len(problems) == 2 and all("not an object of namespace team-a" in p for p in problems)
    assert delete_owned(tier, "team-a", refs[:1]) == ([], 1, [])  # a second trim: still fine


@pytest.mark.parametrize(
    "url",
    [
        "lakeshore+ftp://x/v1/namespaces/a",
        "lakeshore+http://x/v2/a",
        "lakeshore+http://x/v1/namespaces/",
        "lakeshore+http://x/v1/namespaces/a/b",
    ],
)
def test_a_malformed_plane_url_names_the_form(url: str) -> None:
    with pytest.raises(InvalidArgument, match="lakeshore"):
        tiers.split(url) if tiers.is_plane_url(url) else tiers.tier_for(url)


def test_a_token_goes_only_to_a_plane_the_process_uses(remote: HttpDispatch) -> None:
    """A Ref naming an unknown URL is asked of the caller's own plane, never of that URL; with
    no plane over HTTP at all, the read is refused naming the ways to give it one."""
    elsewhere = "lakeshore+http://attacker.example:80/v1/namespaces/team-b"

    with tiers.using(remote):
        asked = tiers.tier_for(elsewhere)
    assert (asked.base, asked.namespace) == (URL, "team-b")
    assert tiers.tier_for(PLANE_URL, via=remote).base == URL
    with pytest.raises(tiers.NoPlaneAccess, match="LAKESHORE_URL"):
        tiers.tier_for(elsewhere)


def test_a_daemon_hands_its_plane_to_its_jobs_but_not_its_token(remote: HttpDispatch) -> None:
    """Each job brings a token of its own (daemon/credentials.py): the worker's would let any
    job claim and settle the queue's other jobs."""
    assert tiers.child_environment(remote) == {
        "LAKESHORE_URL": URL,
        "LAKESHORE_NAMESPACE": "team-a",
    }
    with dls.Dispatch(":memory:") as local:
        assert tiers.child_environment(local) == {}
