"""The building blocks of the OpenAPI schemas: types, rules and the record builder.

Apart from the table (openapi_schemas.py) so that each rule a request must keep (a name's
pattern, a lease's bound) is written once, from the constant the server checks it with, and a
route module can use them for the schemas it registers itself.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from dreamlake.lakeshore.resources import MAX_AMOUNT
from dreamlake.lakeshore.types import (
    HOST_PATTERN,
    KIND_ALIASES,
    MAX_LEASE_S,
    MAX_NAME_LENGTH,
    NAME_PATTERN,
)

BYTES = {"type": "string", "format": "byte", "description": "msgpack bin; base64 in JSON"}
NUM = {"type": "number"}
#: What a database column (and msgpack) holds: a 30-digit number is refused (wire._int64).
INT = {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
OBJ = {"type": "object", "additionalProperties": True}
STRS = {"type": "array", "items": STR}


def _full(pattern: str) -> str:
    """A `fullmatch` pattern as JSON Schema reads one (a search): anchored at both ends."""
    return "^" + pattern.removeprefix("^").removesuffix("$") + "$"


#: A name (queue, topic, namespace, worker, schedule): `types.check_name`'s pattern and length.
NAME = {"type": "string", "pattern": _full(NAME_PATTERN.pattern), "maxLength": MAX_NAME_LENGTH}
NAMES = {"type": "array", "items": NAME}
HOST = {
    "type": "string",
    "pattern": _full(HOST_PATTERN.pattern),
    "description": "a host id: the LAKESHORE_HOST_ID of a box, else its hostname",
}
SECONDS = {"type": "number", "minimum": 0}
#: A quantity of GPUs, CPUs or GB (`resources`): from 0 to 2**30.
AMOUNT = {"type": "number", "minimum": 0, "maximum": MAX_AMOUNT}
#: A job's time limit: above 0 (left out: none).
TIMEOUT_S = {"type": "number", "exclusiveMinimum": 0}
KIND = {"enum": sorted(KIND_ALIASES), "description": "the claim order; priority is fifo"}
#: A manual run's id, or a list read's page marker: what the store accepts (ASCII here).
ALNUM_ID = {"type": "string", "pattern": "^[A-Za-z0-9]{1,64}$"}
LEASE_S = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_LEASE_S}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = list(required)
    return schema


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


_OPTIONAL = re.compile(r"\|\s*None\b|\bNone\s*\||Optional\[")


def _record(cls: type, props: dict[str, Any]) -> dict[str, Any]:
    """The schema of a record the server sends whole (`wire.to_wire`: every field, always).

    Which fields there are, and which may be null, are read from the dataclass itself, so a
    field made optional there is nullable here without a second edit; `props` gives each
    field's type, and naming a field the record lacks (or leaving one out) fails at import.
    """
    names = [f.name for f in dataclasses.fields(cls)]
    if set(names) != set(props):
        raise TypeError(
            f"the schema of {cls.__name__} must name its fields: "
            f"missing {sorted(set(names) - set(props))}, extra {sorted(set(props) - set(names))}"
        )
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        optional = isinstance(f.type, str) and _OPTIONAL.search(f.type) is not None
        out[f.name] = _nullable(props[f.name]) if optional else props[f.name]
    return _obj(out, tuple(names))
