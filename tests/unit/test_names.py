"""Names (queues, namespaces, orgs, workers, providers) are matched whole: no look-alikes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.types import check_name

HOSTILE = {
    "trailing newline": "evil\n",
    "leading newline": "\nevil",
    "trailing space": "evil ",
    "leading space": " evil",
    "tab inside": "ev\til",
    "carriage return": "evil\r",
    "NUL": "ev\x00il",
    "escape": "evil\x1b[31m",
    "cyrillic a": "tr\u0430ining",
    "fullwidth digit": "gpu\uff11",
    "zero-width space": "gpu\u200b",
    "300 characters": "a" * 300,
    "empty": "",
    "uppercase": "Evil",
    "underscore": "ev_il",
    "leading dash": "-evil",
}


@pytest.fixture
def d() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as plane:
        yield plane


@pytest.mark.parametrize("name", list(HOSTILE.values()), ids=list(HOSTILE))
@pytest.mark.parametrize("what", ["queue", "namespace", "org", "worker", "provider"])
def test_a_hostile_name_is_refused_naming_the_rule(name: str, what: str) -> None:
    with pytest.raises(InvalidArgument, match=r"names match \^\[a-z0-9\]\[a-z0-9-\]\*\$"):
        check_name(name, what)


@pytest.mark.parametrize("name", list(HOSTILE.values()), ids=list(HOSTILE))
def test_no_verb_creates_a_queue_with_a_hostile_name(d: dls.Dispatch, name: str) -> None:
    with pytest.raises(InvalidArgument):
        d.create_queue(name)
    with pytest.raises(InvalidArgument):
        d.submit(name, [dls.types.SubmitRequest(payload=dls.encode(1))])
    with pytest.raises(InvalidArgument):
        d.register_worker(name, queues=["ok"])
    with pytest.raises(InvalidArgument):
        d.add_provider(name, "fake", {})
    assert [q.name for q in d.queues()] == ["default"]


def test_a_plain_name_still_passes() -> None:
    assert check_name("training-h100") == "training-h100"
    assert check_name("a" * 128) == "a" * 128
