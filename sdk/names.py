"""The names a person or a box chooses (queues, namespaces, host ids): what each may be.

Below every other module that checks one: `types.py` (the wire records) and `ref.py` (a Ref
names the host whose tier holds its copy) both import it, and it imports neither.
"""

from __future__ import annotations

import re

from .errors import InvalidArgument

#: Always `fullmatch`ed: with `match`, the `$` also accepts a trailing newline, and a queue
#: "training-h100\n" would look like "training-h100" in every table.
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*$")
MAX_NAME_LENGTH = 128
#: A host id as Refs, worker rows and locality hints carry it (`objects.host_id()`: the
#: `LAKESHORE_HOST_ID`, else the hostname folded into this alphabet). Always `fullmatch`ed.
HOST_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_name(name: object, what: str = "queue") -> str:
    if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH or not NAME_PATTERN.fullmatch(name):
        raise InvalidArgument(
            f"invalid {what} name {name!r}: names match ^[a-z0-9][a-z0-9-]*$ "
            f"(lowercase letters, digits and '-', at most {MAX_NAME_LENGTH} characters)"
        )
    return name


def check_host(host: object, what: str = "host") -> str | None:
    """A host id, or None; anything else is refused naming `what` and the alphabet allowed."""
    if host is None or (isinstance(host, str) and HOST_PATTERN.fullmatch(host)):
        return host
    raise InvalidArgument(
        f"{what} must be a host id: a letter or digit, then up to 127 letters, digits, '.', "
        f"'_' or '-' (the LAKESHORE_HOST_ID of a box, else its hostname); got {host!r}"
    )
