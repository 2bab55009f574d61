"""What a queue handle's constructor takes: the kind-only arguments and their checks.

Split from queue.py (issue 38), which re-exports every name here.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from .envelope import Envelope, Thunk
from .errors import InvalidArgument
from .types import check_name

#: The arguments only some kinds take: the kinds, and the classes that take them.
KIND_ARGUMENTS: dict[str, tuple[str, str]] = {
    "temperature": ("boltzmann", "BoltzmannQueue / SyncBoltzmannQueue, or kind='boltzmann'"),
    "anneal": ("boltzmann", "BoltzmannQueue / SyncBoltzmannQueue"),
    "priority_field": (
        "priority and boltzmann",
        "PriorityQueue / SyncPriorityQueue, BoltzmannQueue / SyncBoltzmannQueue",
    ),
}


def misplaced_argument(arg: str, cls: type, name: str, kind: str) -> InvalidArgument:
    kinds, classes = KIND_ARGUMENTS[arg]
    return InvalidArgument(
        f"{arg}= is an argument of {kinds} queues ({classes}); "
        f"{cls.__name__} {name!r} is a {kind} queue"
    )


def refuse_arguments(cls: type, name: str, kind: str, unknown: Mapping[str, object]) -> None:
    """Raise InvalidArgument for the first argument `cls` does not take, naming who takes it."""
    if not unknown:
        return
    arg = sorted(unknown)[0]
    if arg in KIND_ARGUMENTS:
        raise misplaced_argument(arg, cls, name, kind)
    takes = [
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    import difflib  # only to word this refusal: not loaded with the SDK

    close = difflib.get_close_matches(arg, takes, n=1)
    raise InvalidArgument(
        f"{cls.__name__} got an unknown argument {arg}="
        + (f"; did you mean {close[0]}=?" if close else f"; it takes {', '.join(takes)}")
    )


def wire_name(name: object) -> str:
    """A queue name as the plane knows it: one leading '/' (an absolute name) is stripped."""
    if isinstance(name, str) and name.startswith("/"):
        name = name[1:]
    return check_name(name)


def check_priority_field(field: object) -> str | None:
    if field is not None and (not isinstance(field, str) or not field):
        raise InvalidArgument(f"priority_field must be a non-empty str, got {field!r}")
    return field


def checked_elasticity(elasticity: Mapping[str, Any]) -> dict[str, Any]:
    """The store's own check, so a handle refuses what every plane refuses; imported here, not
    with the SDK, because it brings the whole store (a third of the import) to a producer."""
    from .plane.store import check_elasticity

    return check_elasticity(dict(elasticity))


ABSENT: Any = object()


def payload_field(body: Any, field: str) -> Any:
    """`field` of a dict payload, or of a udf / thunk call's arguments; `ABSENT` if none."""
    if isinstance(body, Thunk):
        body = Envelope.for_thunk(body)
    if isinstance(body, Envelope):
        if body.kind == "raw":
            return payload_field(body.value, field)
        if body.fn is None:
            return ABSENT
        try:
            bound = inspect.signature(body.fn).bind_partial(*body.args, **body.kwargs).arguments
        except (TypeError, ValueError):
            bound = dict(body.kwargs)
        if field in bound:
            return bound[field]
        first = body.args[0] if body.args else None
        return first.get(field, ABSENT) if isinstance(first, dict) else ABSENT
    if isinstance(body, Mapping):
        return body.get(field, ABSENT)
    return ABSENT
