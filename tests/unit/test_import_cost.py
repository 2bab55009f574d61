"""`import dreamlake.lakeshore` loads what a producer script needs, and none of the heavy parts.

What a module costs is measured with `python -X importtime` (the numbers are in the change
note); this checks the cause instead of a time, which no shared machine could assert: the
modules that made the import slow stay unloaded until used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls

#: Loaded on first use only. httpx loads its command line (click, rich, pygments) whenever those
#: are installed; python-ulid reads its version through importlib.metadata; the object store,
#: the worker core and asyncio are for workers and async callers; the SQL store, SQLite and the
#: wake-up sockets for the embedded plane (`Dispatch`), which an HTTP producer never opens.
HEAVY = (
    "httpx",
    "httpx._main",
    "click",
    "rich",
    "pygments",
    "numpy",
    "torch",
    "PIL",
    "psycopg",
    "boto3",
    "botocore",
    "cloudpickle",
    "ulid",
    "asyncio",
    "dreamlake.lakeshore.plane.http",
    "dreamlake.lakeshore.objects",
    "dreamlake.lakeshore.spill",
    "dreamlake.lakeshore.worker",
    "dreamlake.lakeshore.work.core",
    "sqlite3",
    "socket",
    "dreamlake.lakeshore.plane.store",
    "dreamlake.lakeshore.plane.dispatch",
    "dreamlake.lakeshore.plane.sqlite",
    "dreamlake.lakeshore.plane.postgres",
    "dreamlake.lakeshore.plane.wakeup",
    "dreamlake.lakeshore.run",
)
#: What the embedded plane brings, and an HTTP producer's plane does not.
EMBEDDED = ("sqlite3", "dreamlake.lakeshore.plane.store", "dreamlake.lakeshore.plane.dispatch")


def modules_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    script = f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=None if env is None else {**os.environ, **env},
    )
    return set(json.loads(out.stdout))


def test_importing_the_sdk_loads_none_of_the_heavy_modules() -> None:
    loaded = modules_after("import dreamlake.lakeshore")

    assert "dreamlake.lakeshore" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_building_a_queue_and_udf_loads_none_either() -> None:
    code = (
        "import dreamlake.lakeshore as dls\n"
        "q = dls.SyncQueue('gpu')\n"
        "@dls.udf(queue=q)\n"
        "def add(a: int, b: int) -> int:\n"
        "    return a + b\n"
    )

    loaded = modules_after(code)

    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("Dispatch", "dreamlake.lakeshore.plane.dispatch"),
        ("HttpDispatch", "dreamlake.lakeshore.plane.http"),
        ("LocalPlane", "dreamlake.lakeshore.plane.dispatch"),
        ("HttpPlane", "dreamlake.lakeshore.plane.http"),
        ("get", "dreamlake.lakeshore.objects"),
        ("put", "dreamlake.lakeshore.objects"),
        ("run_worker", "dreamlake.lakeshore.worker"),
        ("scope", "dreamlake.lakeshore.run"),
    ],
)
def test_a_lazy_name_is_the_object_its_module_defines(name: str, module: str) -> None:
    assert getattr(dls, name) is getattr(sys.modules[module], name)
    assert name in dir(dls) and name in dls.__all__


def test_every_public_name_resolves_and_an_unknown_one_is_an_attribute_error() -> None:
    from dreamlake.lakeshore import Dispatch, HttpDispatch, run, spill
    from dreamlake.lakeshore import plane as plane_package
    from dreamlake.lakeshore.plane import Dispatch as PlaneDispatch
    from dreamlake.lakeshore.plane import HttpDispatch as PlaneHttpDispatch

    assert [name for name in dls.__all__ if getattr(dls, name, None) is None] == []
    assert HttpDispatch is PlaneHttpDispatch and spill is sys.modules["dreamlake.lakeshore.spill"]
    assert Dispatch is PlaneDispatch and run is sys.modules["dreamlake.lakeshore.run"]
    assert {"Dispatch", "HttpDispatch", "LocalPlane", "HttpPlane"} <= set(dir(plane_package))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = dls.nope  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = plane_package.nope  # type: ignore[attr-defined]


def test_an_http_producers_plane_loads_neither_the_store_nor_httpx() -> None:
    """Plain http with no proxy goes over the lean HTTP/1.1 path: httpx is for the rest."""
    code = (
        "import dreamlake.lakeshore as dls\n"
        "plane = dls.plane.default_plane()\n"
        "assert type(plane).__name__ == 'HttpPlane', plane\n"
    )
    no_proxy = {k: "" for k in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")}

    loaded = modules_after(code, {**no_proxy, "LAKESHORE_URL": "http://127.0.0.1:9"})

    assert "dreamlake.lakeshore.plane.http" in loaded
    assert not loaded & {*EMBEDDED, "httpx"}, sorted(loaded & {*EMBEDDED, "httpx"})


def test_the_box_plane_loads_the_store_when_it_is_opened(tmp_path: Path) -> None:
    code = "import dreamlake.lakeshore as dls\ndls.plane.default_plane()\n"

    loaded = modules_after(code, {"LAKESHORE_HOME": str(tmp_path), "LAKESHORE_URL": ""})

    assert set(EMBEDDED) <= loaded


def test_the_first_submit_and_result_load_what_they_need() -> None:
    code = (
        "import dreamlake.lakeshore as dls\n"
        "q = dls.SyncQueue('gpu', dispatch=dls.Dispatch(':memory:'))\n"
        "inv = q.submit(dls.thunk(sum, [1, 2, 3]))\n"
        "dls.run_worker(q, once=True)\n"
        "assert q.result(inv, timeout=10) == 6\n"
    )

    loaded = modules_after(code)

    assert {"ulid", "cloudpickle", "dreamlake.lakeshore.worker"} <= loaded
    assert not loaded & {"httpx", "numpy", "psycopg", "boto3"}
