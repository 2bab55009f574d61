"""Opening our Postgres connections: a URL to a libpq conninfo and the schema it selects, the
name each role connects under, and the defaults that make a dead server an error, never a hang.

Shared by the connector (postgres.py) and its wake-up relay (postgres_notify.py), which open
connections of their own for their own roles; kept in one module so that every connection to a
plane is opened the same way, and pg_stat_activity tells them apart.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dreamlake.lakeshore.errors import InvalidArgument

from .queries import POSTGRES, bind, engine_queries

#: Defaults for every connection we open (the URL overrides them): a blackholed host fails the
#: connect in 10 s, and keepalives make the kernel give up on a silent server after about
#: idle + interval * count seconds, so a dead peer surfaces as an error, never a hang.
CONNECTION_DEFAULTS = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def parse_url(url: str, schema: str | None = None) -> tuple[str, str | None]:
    """A libpq conninfo for `url` and the schema it selects (`schema=` wins over `?schema=`).

    libpq rejects parameters it does not know, so `?schema=` is taken out of the URL and turned
    into `options=-c search_path=<schema>` (appended to any options the URL already has);
    `?pool_size=` is ours too (see `url_pool_size`).
    """
    parts = urlsplit(url)
    kept: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "schema":
            schema = schema or value
        elif name != "pool_size":
            kept.append((name, value))
    # quote, not quote_plus: libpq reads '+' literally, only %XX is decoded
    params = conninfo_to_dict(urlunsplit(parts._replace(query=urlencode(kept, quote_via=quote))))
    if schema is not None:
        if not _SCHEMA.fullmatch(schema):
            raise InvalidArgument(
                f"schema must match {_SCHEMA.pattern} (it also names the NOTIFY channel), "
                f"got {schema!r}"
            )
        params["options"] = f"{params.get('options') or ''} -c search_path={schema}".strip()
    return make_conninfo("", **params), schema


def url_pool_size(url: str) -> int | None:
    """`?pool_size=N` in the URL: how `lakeshore server --store URL` sizes its pool."""
    for name, value in parse_qsl(urlsplit(url).query):
        if name == "pool_size":
            if not value.isdigit() or int(value) < 1:
                raise InvalidArgument(f"pool_size must be a positive integer, got {value!r}")
            return int(value)
    return None


def channel_name(schema: str) -> str:
    """The NOTIFY channel of one schema: at most 63 bytes, as Postgres identifiers are."""
    name = f"lakeshore_{schema}"
    if len(name.encode()) > 63:
        name = "lakeshore_" + hashlib.sha256(schema.encode()).hexdigest()[:32]
    return name


def for_role(conninfo: str, role: str, schema: str | None, options: str = "") -> str:
    """`conninfo` for one of our connections: CONNECTION_DEFAULTS, and `application_name`
    "lakeshore-<role> <schema>" for pg_stat_activity; what the URL sets wins."""
    name = f"lakeshore-{role} {schema}" if schema else f"lakeshore-{role}"
    params = {**CONNECTION_DEFAULTS, "application_name": name[:63], **conninfo_to_dict(conninfo)}
    if options:
        params["options"] = f"{params.get('options') or ''} {options}".strip()
    return make_conninfo("", **params)


def engine(name: str, **params: Any) -> tuple[str, dict[str, Any]]:
    """A statement of `sql/postgres.sql`, bound."""
    return bind(POSTGRES, engine_queries(POSTGRES)[name], params)


def close_quietly(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error):
            conn.close()
