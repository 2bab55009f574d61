"""docs/objects.md runs as written: each python block, in order, in a fresh namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "objects.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", range(len(BLOCKS)))
def test_each_example_runs(block: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAKESHORE_OBJECTS", str(tmp_path / "objects"))
    monkeypatch.delenv("LAKESHORE_STORAGE", raising=False)
    module = type(pytest)("docs_objects_example")  # a module, so the job pickles by value
    exec(compile(BLOCKS[block], f"{DOC}:block{block}", "exec"), module.__dict__)
