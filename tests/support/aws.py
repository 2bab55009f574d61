"""AWS for tests: moto's EC2 (`mock_aws`), the one fake this project allows, with the
credentials and region a client needs set for the test alone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

REGION = "us-east-1"


@contextmanager
def mocked_ec2(monkeypatch: pytest.MonkeyPatch, region: str = REGION) -> Iterator[Any]:
    """An EC2 client on moto's EC2; skips the test where boto3 or moto is not installed."""
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": region,
    }.items():
        monkeypatch.setenv(key, value)
    with moto.mock_aws():
        yield boto3.client("ec2", region_name=region)
