"""`lakeshore server` fixes glibc's mmap threshold unless its operator did (server/memory.py)."""

from __future__ import annotations

import platform

import pytest

from dreamlake.lakeshore.server.memory import ENV, return_big_blocks


def test_an_operators_own_threshold_is_left_as_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "4194304")

    assert return_big_blocks() is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_on_glibc_the_threshold_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)

    assert return_big_blocks() is True
