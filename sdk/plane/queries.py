"""Named SQL statements from `sql/*.sql`, rendered once per dialect.

The statements are the plane's semantics; a dialect only fills in its few words ({blob},
{skip_locked}, ...) and its parameter style, so SQLite and Postgres run the same text.

A condition several statements must share word for word is a `-- fragment: <name>` section,
which a statement of the same file names as `{<name>}`, as it names a dialect word: every claim
says what a claimable job is through `{claimable}`, so no claim can drift from the others.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument

_SECTION = re.compile(r"^-- (name|migration|fragment): *(\S+)[ \t]*$", re.MULTILINE)
#: Where the files are: beside this module, in the wheel as in a checkout. Read with open(), not
#: importlib.resources, which brought zipfile, tempfile and shutil into every embedded process
#: (about 10 ms of a CLI read's start, issue 45).
_SQL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql")
_WORD = re.compile(r"\{([a-z_]+)\}")
_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


@dataclass(frozen=True, eq=False)
class Dialect:
    """The words that differ between SQL engines, and nothing else."""

    name: str
    words: Mapping[str, str]
    #: How a named parameter is written: ":{}" for sqlite3, "%({})s" for psycopg.
    param_style: str

    def render(self, sql: str) -> str:
        return _WORD.sub(lambda m: self.words.get(m.group(1), m.group(0)), sql)


SQLITE = Dialect(
    name="sqlite",
    words={
        "blob": "BLOB",
        "real": "REAL",
        "serial": "INTEGER PRIMARY KEY",
        "skip_locked": "",
        "for_update": "",
        # A line that starts with {postgres_only} is a comment here: storage tuning (fillfactor,
        # autovacuum) that SQLite has no equivalent of.
        "postgres_only": "--",
        # ... and one that starts with {sqlite_only} is SQLite's: its trigger syntax, say.
        "sqlite_only": "",
        # `text REGEXP pattern`: the connector registers the function (sqlite.py).
        "regexp": "REGEXP",
        # NULL-safe (in)equality.
        "is": "IS",
        "is_not": "IS NOT",
        # The queued gangs' index (migration 38), named: without statistics SQLite's planner
        # took the queue's listing index and walked every queued job to find no gang.
        "gangs_index": "INDEXED BY invocations_gangs",
    },
    param_style=":{}",
)
POSTGRES = Dialect(
    name="postgres",
    words={
        "blob": "BYTEA",
        "real": "DOUBLE PRECISION",
        "serial": "BIGSERIAL PRIMARY KEY",
        "skip_locked": "FOR UPDATE SKIP LOCKED",
        "for_update": "FOR UPDATE",
        "postgres_only": "",
        "sqlite_only": "--",
        "regexp": "~",
        "is": "IS NOT DISTINCT FROM",
        "is_not": "IS DISTINCT FROM",
        "gangs_index": "",
    },
    param_style="%({})s",
)


#: A statement holding `{fits}` is two: as written without the fragment (a claim from a worker
#: that sends no free resources: its plan unchanged), and `<name>_fit` with it. So `{fits}` is
#: left in place when the other fragments are expanded, for `queries` to make the two.
FITS = "fits"


@cache
def _text(filename: str) -> str:
    with open(os.path.join(_SQL_DIR, filename), encoding="utf-8") as f:
        return f.read()


def _sections(filename: str) -> dict[str, str]:
    """The statements (or migrations) of `filename` by name, its fragments but `{fits}` expanded."""
    return expand_fragments(_text(filename))


def _fragments(text: str) -> dict[str, str]:
    parts = _SECTION.split(text)
    # parts = [preamble, kind, name, body, kind, name, body, ...]
    return {
        parts[i + 1]: _uncommented(parts[i + 2].strip())
        for i in range(1, len(parts), 3)
        if parts[i] == "fragment"
    }


def expand_fragments(text: str, keep: tuple[str, ...] = (FITS,)) -> dict[str, str]:
    """The `name` and `migration` sections of `text`, each `{fragment}` they name replaced by
    that `fragment` section's body (its own leading comment lines dropped: they explain the
    fragment, not the statement it lands in). A fragment may name the fragments above it."""
    parts = _SECTION.split(text)
    # parts = [preamble, kind, name, body, kind, name, body, ...]
    sections = [(parts[i], parts[i + 1], parts[i + 2].strip()) for i in range(1, len(parts), 3)]
    names = {name for kind, name, _ in sections if kind == "fragment"}
    clashes = names & (SQLITE.words.keys() | POSTGRES.words.keys())
    if clashes:
        raise ValueError(f"fragment names {sorted(clashes)} are dialect words; rename them")
    fragments: dict[str, str] = {}

    def expand(match: re.Match[str]) -> str:
        name = match.group(1)
        return match.group(0) if name in keep else fragments.get(name, match.group(0))

    for kind, name, body in sections:
        if kind == "fragment":
            fragments[name] = _WORD.sub(expand, _uncommented(body))
    return {name: _WORD.sub(expand, body) for kind, name, body in sections if kind != "fragment"}


def _uncommented(body: str) -> str:
    lines = body.splitlines()
    while lines and lines[0].lstrip().startswith("--"):
        lines.pop(0)
    return "\n".join(lines).strip()


@cache
def queries(dialect: Dialect) -> dict[str, str]:
    fragments = _fragments(_text("queries.sql"))
    out: dict[str, str] = {}
    for name, sql in _sections("queries.sql").items():
        text = dialect.render(sql)
        marker = "{" + FITS + "}"
        if marker in text:
            out[f"{name}_fit"] = text.replace(marker, dialect.render(fragments[FITS]))
            text = text.replace(marker + "\n", "").replace(marker, "")
        out[name] = text
    return out


@cache
def engine_queries(dialect: Dialect) -> dict[str, str]:
    """Statements only one engine runs (`sql/<dialect>.sql`): Postgres's locks and NOTIFY.

    They are plumbing around the shared statements, never semantics: the store does not know
    they exist.
    """
    return {name: dialect.render(sql) for name, sql in _sections(f"{dialect.name}.sql").items()}


@cache
def migrations(dialect: Dialect) -> list[tuple[int, str]]:
    return sorted(
        (int(version), dialect.render(sql)) for version, sql in _sections("schema.sql").items()
    )


_MIGRATION = re.compile(r"^-- migration: *(\d+)[ \t]*$", re.MULTILINE)


@cache
def migration_versions() -> frozenset[int]:
    """The versions `migrations` holds, read from the section headers alone: opening a plane
    that has them all renders none (sqlite.py, `_migrate`)."""
    return frozenset(int(v) for v in _MIGRATION.findall(_text("schema.sql")))


#: How a parameter is called in an error: the words a caller knows, not the statement's.
_FIELD = {"ns": "namespace", "namespaces": "namespace", "queues": "queue", "ids": "id"}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _refuse(name: str, problem: str) -> InvalidArgument:
    return InvalidArgument(f"{_FIELD.get(name, name)} {problem}")


def _check_text(name: str, value: str) -> None:
    if "\x00" in value:
        raise _refuse(
            name, "contains a NUL character (\\x00): a text field holds any character but NUL"
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = value[exc.start]
            raise _refuse(
                name, f"contains a lone surrogate ({bad!r}), which is not Unicode text"
            ) from None


def check_params(params: Mapping[str, Any]) -> None:
    """Refuse what neither database can hold, naming the field, before any statement runs.

    The one check every text and integer reaching either engine passes through, so both planes
    refuse the same input the same way: Postgres text cannot hold NUL (SQLite would store it),
    neither engine stores a lone surrogate, and both hold integers in 64 bits (a 30-digit
    number would be an OverflowError on one and a DataError on the other).
    """
    for name, value in params.items():
        kind = type(value)
        if kind is list or kind is tuple:
            for item in value:
                _check_value(name, item)
        elif kind is str or kind is int:
            _check_value(name, value)


def _check_value(name: str, value: Any) -> None:
    if type(value) is str:
        _check_text(name, value)
    elif type(value) is int and not INT64_MIN <= value <= INT64_MAX:
        shown = value if value.bit_length() <= 128 else f"a {value.bit_length()}-bit number"
        raise _refuse(name, f"is {shown}, outside the 64-bit integer range -2**63..2**63-1")


def bind(dialect: Dialect, sql: str, params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Expand list parameters into one placeholder each and write the dialect's style.

    Every value is checked first (`check_params`): this is where the store's input meets SQL.
    """
    check_params(params)
    lists = tuple(
        (name, len(value)) for name, value in params.items() if isinstance(value, (list, tuple))
    )
    if not lists:
        return _compile(dialect, sql, ()), dict(params)
    flat = {k: v for k, v in params.items() if not isinstance(v, (list, tuple))}
    for name, _ in lists:
        flat.update((f"{name}__{i}", v) for i, v in enumerate(params[name]))
    return _compile(dialect, sql, lists), flat


@cache
def _compile(dialect: Dialect, sql: str, lists: tuple[tuple[str, int], ...]) -> str:
    sizes = dict(lists)

    def placeholder(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in sizes:
            return dialect.param_style.format(name)
        names = [f"{name}__{i}" for i in range(sizes[name])]
        return ", ".join(dialect.param_style.format(n) for n in names) or "NULL"

    return _PARAM.sub(placeholder, sql)


def split_statements(sql: str) -> list[str]:
    """Split a migration into statements at each ';' that ends one.

    The schema has no ';' inside literals, but two bodies hold statements of their own and
    stay whole: a Postgres function's `$$ ... $$` and a SQLite trigger's `BEGIN ... END`.
    """
    code = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    out: list[str] = []
    pending = ""
    for piece in code.split(";"):
        pending = f"{pending};{piece}" if pending else piece
        if not _inside_body(pending):
            if pending.strip():
                out.append(pending.strip())
            pending = ""
    if pending.strip():
        out.append(pending.strip())
    return out


_TRIGGER_BODY = re.compile(r"^\s*CREATE\s+TRIGGER\b.*\bBEGIN\b", re.IGNORECASE | re.DOTALL)
_BODY_END = re.compile(r"\bEND\s*$", re.IGNORECASE)


def _inside_body(text: str) -> bool:
    """Whether `text` stops inside a `$$` body or a trigger's BEGIN ... END."""
    if text.count("$$") % 2:
        return True
    return bool(_TRIGGER_BODY.match(text)) and not _BODY_END.search(text)
