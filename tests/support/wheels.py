"""Wheels a test writes itself, so an environment build needs no registry.

A wheel is a zip with the package's files and a `.dist-info` folder (METADATA, WHEEL, RECORD)
as the binary distribution format spec lays out; that is all `uv pip install` reads. A test
points `UV_FIND_LINKS` at the folder and sets `UV_OFFLINE=1`, and uv resolves from it alone.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["write_wheel"]


def write_wheel(
    folder: Path,
    name: str,
    version: str = "1.0",
    *,
    requires: Sequence[str] = (),
    files: Mapping[str, str] | None = None,
    scripts: Mapping[str, str] | None = None,
) -> Path:
    """Write `<name>-<version>-py3-none-any.whl` into `folder` and return its path.

    `files` maps paths inside the wheel to their text; by default one module named after the
    distribution (`-` as `_`) whose `VALUE` is `"<name> <version>"`, for a test to import.
    `requires` become the wheel's `Requires-Dist` lines; `scripts` its console scripts
    (`{"tinycli": "tinypkg:main"}`), which an installer writes into the environment's bin/.
    """
    module = name.replace("-", "_").lower()
    if files is None:
        files = {f"{module}/__init__.py": f"VALUE = {f'{name} {version}'!r}\n"}
    dist_info = f"{module}-{version}.dist-info"
    metadata = "".join(
        [
            "Metadata-Version: 2.1\n",
            f"Name: {name}\n",
            f"Version: {version}\n",
            *(f"Requires-Dist: {req}\n" for req in requires),
        ]
    )
    wheel = (
        "Wheel-Version: 1.0\nGenerator: lakeshore-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    contents = {
        **files,
        f"{dist_info}/METADATA": metadata,
        f"{dist_info}/WHEEL": wheel,
    }
    if scripts:
        lines = "".join(f"{name} = {target}\n" for name, target in scripts.items())
        contents[f"{dist_info}/entry_points.txt"] = f"[console_scripts]\n{lines}"
    record = [f"{path},{_digest(text)},{len(text.encode())}" for path, text in contents.items()]
    record.append(f"{dist_info}/RECORD,,")
    contents[f"{dist_info}/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for inner, text in contents.items():
            archive.writestr(inner, text)
    return path


def _digest(text: str) -> str:
    raw = hashlib.sha256(text.encode()).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
