"""Validation of what a caller sends, and rows turned into records."""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Sequence
from dataclasses import MISSING, fields
from typing import Any, TypeVar

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.ids import ulid_time
from dreamlake.lakeshore.plane.connector import Row
from dreamlake.lakeshore.plane.dependencies import check_after
from dreamlake.lakeshore.plane.elasticity import check_scaling
from dreamlake.lakeshore.plane.locality import MAX_WAIT_S
from dreamlake.lakeshore.plane.queries import INT64_MAX
from dreamlake.lakeshore.resources import check_optional
from dreamlake.lakeshore.storage import StorageRef
from dreamlake.lakeshore.types import (
    DEFAULT_MAX_PREEMPTIONS,
    MAX_HANG_TIMEOUT_S,
    MAX_NODES,
    MAX_PREEMPTIONS_LIMIT,
    Claim,
    Invocation,
    QueueInfo,
    SubmitRequest,
    WorkerInfo,
    check_host,
)

from .base import ELASTICITY_KINDS, ON_FULL
from .runtimes import check_runtime_spec

#: A producer's id is a ULID minted this long ago at most (or ahead, for clock skew): its time
#: orders the queue among equal priorities, so an old one must not jump the line.
CLIENT_ID_SKEW_S = 600.0
_ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
R = TypeVar("R")


def check_client_id(value: object, now: float) -> None:
    """A submit's own id: a fresh ULID (see SubmitRequest.id)."""
    if not isinstance(value, str) or not _ULID.fullmatch(value):
        raise InvalidArgument(
            f"id must be a ULID (26 characters of Crockford base32, upper case), got {value!r}"
        )
    minted = ulid_time(value)
    assert minted is not None  # matched the pattern
    if abs(minted - now) > CLIENT_ID_SKEW_S:
        raise InvalidArgument(
            f"id {value} was minted at {minted:.0f} (unix time), more than "
            f"{CLIENT_ID_SKEW_S:.0f} s from now: mint a new one for each submit (a retry "
            "repeats it within seconds)"
        )


def check_submit(req: SubmitRequest) -> None:
    if not isinstance(req.payload, (bytes, bytearray, memoryview)):
        raise InvalidArgument("payload must be encoded bytes")
    if req.id is not None:
        check_client_id(req.id, time.time())
    if req.key is not None and (not isinstance(req.key, str) or not 0 < len(req.key) <= 512):
        raise InvalidArgument("key must be a non-empty string of at most 512 characters")
    if (
        isinstance(req.priority, bool)
        or not isinstance(req.priority, (int, float))
        or not (math.isfinite(req.priority))
    ):
        raise InvalidArgument(f"priority must be a finite number, got {req.priority!r}")
    if not isinstance(req.max_attempts, int) or not 1 <= req.max_attempts <= 1000:
        raise InvalidArgument(f"max_attempts must be an integer 1..1000, got {req.max_attempts!r}")
    check_max_preemptions(req.max_preemptions, "max_preemptions")
    if req.timeout_s is not None and (
        isinstance(req.timeout_s, bool)
        or not isinstance(req.timeout_s, (int, float))
        or not 0 < req.timeout_s < math.inf
    ):
        raise InvalidArgument(
            f"timeout_s must be a finite positive number of seconds (leave it out for no "
            f"limit), got {req.timeout_s!r}"
        )
    check_host(req.host)
    check_optional(req.resources)
    check_runtime_spec(req.runtime)
    if req.map_id is not None:
        check_map_id(req.map_id)
    check_due(req.delay_s, req.at)
    if req.after or req.inputs or req.after_failure != "cancel":
        check_after(list(req.after), req.after_failure, list(req.inputs))
    check_nodes(req.nodes)
    check_hang_timeout(req.hang_timeout_s)


def check_nodes(value: object) -> int:
    """A submit's `nodes` (issue 47): how many workers run it at once, a whole number."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NODES:
        raise InvalidArgument(
            f"nodes must be a whole number 1..{MAX_NODES} (how many daemons run the job at "
            f"once, one part each; 1 is one box's job), got {value!r}"
        )
    return value


def check_hang_timeout(value: object) -> float | None:
    """A submit's `hang_timeout_s` (issue 47): None (no hang is looked for), or the seconds
    of silence from every part that make a hang, bounded so a typo in units is refused."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value <= MAX_HANG_TIMEOUT_S
    ):
        raise InvalidArgument(
            f"hang_timeout_s must be a number of seconds above 0, at most "
            f"{MAX_HANG_TIMEOUT_S:g} (7 days), or left out for no hang detection, "
            f"got {_shown(value)}"
        )
    return float(value)


def check_rank(value: object) -> int:
    """A gang part's rank a reader names (its output, issue 47): 0..MAX_NODES-1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_NODES:
        raise InvalidArgument(
            f"rank must be a whole number 0..{MAX_NODES - 1} (a gang's part; 0 is the job's "
            f"own output), got {value!r}"
        )
    return value


#: What an address a gang's part advertises may hold: a host name, IPv4 or IPv6 (with a zone).
_ADDR = re.compile(r"[A-Za-z0-9._:%-]{1,253}")


def check_addr(value: object, what: str = "addr") -> str | None:
    """The address a gang's part is reached at (ClaimArgs.addr, `gang_ready`): None, or a
    host name or IP address."""
    if value is not None and not (isinstance(value, str) and _ADDR.fullmatch(value)):
        raise InvalidArgument(
            f"{what} must be a host name or an IP address (1 to 253 of letters, digits and "
            f"'.:-_%'), got {value!r}"
        )
    return value


def check_port(value: object) -> int | None:
    """The port a gang's part listens on (`gang_ready`): None, or 1..65535."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535
    ):
        raise InvalidArgument(f"port must be a whole number 1..65535, got {value!r}")
    return value


def check_max_preemptions(value: object, what: str) -> None:
    """None (the default) or a whole number of preemptions a job survives, 0 to the limit."""
    if value is not None and (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_PREEMPTIONS_LIMIT
    ):
        raise InvalidArgument(
            f"{what} must be an integer 0..{MAX_PREEMPTIONS_LIMIT} (how many preemptions a job "
            f"survives; leave it out for {DEFAULT_MAX_PREEMPTIONS}), got {value!r}"
        )


#: The longest delay a submit may ask for (a year): further is a mistake of units.
MAX_DELAY_S = 366 * 86400.0


def check_due(delay_s: object, at: object) -> None:
    """A delayed submit's `delay_s` or `at`: finite seconds from now (0..a year), or an epoch
    time; not both."""
    if delay_s is not None and at is not None:
        raise InvalidArgument("give delay_s or at, not both")
    if delay_s is not None and (
        isinstance(delay_s, bool)
        or not isinstance(delay_s, (int, float))
        or not 0 <= delay_s <= MAX_DELAY_S
    ):
        raise InvalidArgument(
            f"delay_s must be a number of seconds from 0 to {MAX_DELAY_S:.0f} (a year), "
            f"got {delay_s!r}"
        )
    if at is not None and (
        isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 <= at < 2**40
    ):
        raise InvalidArgument(
            f"at must be a time as epoch seconds (or, over HTTP, an ISO 8601 string), got {at!r}"
        )
    if at is not None and at > time.time() + MAX_DELAY_S:
        raise InvalidArgument(f"at is more than a year ahead ({at!r}): at most {MAX_DELAY_S:.0f} s")


def due_time(req: SubmitRequest, now: float) -> float | None:
    """When a delayed submit becomes claimable, or None when it is claimable at once."""
    due = now + req.delay_s if req.delay_s is not None else req.at
    return due if due is not None and due > now else None


def check_map_id(value: object) -> str:
    """A map's id (sdk/mapping.py mints a ULID): letters and digits, at most 64."""
    if not (isinstance(value, str) and 0 < len(value) <= 64 and value.isascii()) or not (
        value.isalnum()
    ):
        raise InvalidArgument(f"map id must be 1 to 64 ASCII letters or digits, got {value!r}")
    return value


def check_elasticity(value: dict[str, Any]) -> dict[str, Any]:
    kind = value.get("kind", "none")
    if kind not in ELASTICITY_KINDS:
        raise InvalidArgument(f"unknown elasticity kind '{kind}'; use {'|'.join(ELASTICITY_KINDS)}")
    for field in ("min", "max", "target_per_worker", "idle_s", "steal_delay_s", "cost_weight"):
        if field in value and not _in_range(value[field], 0, low_open=False):
            raise InvalidArgument(
                f"elasticity.{field} must be a non-negative number up to 2**63-1, "
                f"got {_shown(value[field])}"
            )
    # `fixed` without `max` is the Queues page's worked example: a fleet launched by hand
    # (`daemon launch`), which the controller leaves alone (it holds 0 of its own).
    if kind in ("elastic", "fully_elastic") and "max" not in value:
        raise InvalidArgument(f"elasticity kind '{kind}' needs 'max'")
    if "min" in value and "max" in value and value["min"] > value["max"]:
        raise InvalidArgument("elasticity.min must not exceed elasticity.max")
    check_scaling(value)  # the controller's fields: sdk/plane/elasticity.py
    return {**value, "kind": kind}


def check_admission(value: dict[str, Any]) -> dict[str, Any]:
    known = {
        "max_depth",
        "on_full",
        "rate_limit",
        "deadline_cutoff_s",
        "locality_wait_s",
        "unschedulable_fail_after_s",
        "max_preemptions",
        "gang_wait_s",
    }
    unknown = set(value) - known
    if unknown:
        raise InvalidArgument(
            f"unknown admission field(s) {', '.join(sorted(unknown))}; "
            f"use {', '.join(sorted(known))}"
        )
    if value.get("on_full", "reject") not in ON_FULL:
        raise InvalidArgument(f"admission.on_full must be reject|block, got {value['on_full']!r}")
    for field in ("max_depth", "rate_limit", "deadline_cutoff_s", "unschedulable_fail_after_s"):
        v = value.get(field)
        if v is not None and not _in_range(v, 0, low_open=True):
            raise InvalidArgument(
                f"admission.{field} must be a positive number up to 2**63-1, got {_shown(v)}"
            )
    check_max_preemptions(value.get("max_preemptions"), "admission.max_preemptions")
    wait = value.get("locality_wait_s")
    if wait is not None and not (_in_range(wait, 0, low_open=False) and wait <= MAX_WAIT_S):
        raise InvalidArgument(
            f"admission.locality_wait_s must be a number of seconds from 0 (no wait) to "
            f"{MAX_WAIT_S:g}, got {_shown(wait)}"
        )
    gang_wait = value.get("gang_wait_s")
    if gang_wait is not None and not (
        _in_range(gang_wait, 0, low_open=True) and gang_wait <= MAX_GANG_WAIT_S
    ):
        raise InvalidArgument(
            f"admission.gang_wait_s must be a number of seconds above 0, at most "
            f"{MAX_GANG_WAIT_S:g} (how long a gang's parts are held before all are), "
            f"got {_shown(gang_wait)}"
        )
    return value


#: How long a gang's held parts may wait for the rest, at most (a day) and by default.
MAX_GANG_WAIT_S = 86400.0
DEFAULT_GANG_WAIT_S = 60.0


def gang_wait_s(admission: dict[str, Any]) -> float:
    """A queue's `admission.gang_wait_s`, or the default."""
    return float(admission.get("gang_wait_s", DEFAULT_GANG_WAIT_S))


def _in_range(value: object, low: float, *, low_open: bool) -> bool:
    """A real number above `low` (or at it) and finite, at most what 64 bits hold: the policy
    objects are JSON in the store, but every plane must refuse the same numbers, and msgpack
    (the HTTP planes' wire) carries no integer past 64 bits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if not (value > low if low_open else value >= low):
        return False
    return value <= INT64_MAX if isinstance(value, int) else value < 2.0**63


def _shown(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 128:
        return f"a {value.bit_length()}-bit number"
    return repr(value)


def boltzmann_level(levels: Sequence[tuple[float, int]], temperature: float) -> float:
    """Pick a priority level with weight count * exp(level / T), exactly.

    Every queued job has probability exp(p/T) / sum(exp(p_i/T)); grouping by level keeps the
    draw exact while reading only one row per distinct priority. T <= 0 is strict priority.
    """
    top = max(p for p, _ in levels)
    if temperature <= 0:
        return top
    weights = [n * math.exp((p - top) / temperature) for p, n in levels]
    return random.choices([p for p, _ in levels], weights=weights)[0]


def record_of(cls: type[R], row: Row, **converted: Any) -> R:
    """A record from a row, field by field: each field is the column of its name, except the
    ones `converted` gives (JSON, bytes, a column named otherwise). A field with a default may
    be missing from the row (a statement that does not select it); one without may not."""
    spec = _SPECS.get(cls)
    if spec is None:  # once per class: every row read passes through here
        spec = _SPECS[cls] = tuple(
            (f.name, f.default is MISSING and f.default_factory is MISSING)
            for f in fields(cls)  # type: ignore[arg-type]
        )
    values = dict(converted)
    for name, required in spec:
        if name not in values and (required or name in row):
            values[name] = row[name]
    return cls(**values)


_SPECS: dict[type[Any], tuple[tuple[str, bool], ...]] = {}


def invocation_of(row: Row) -> Invocation:
    return record_of(
        Invocation,
        row,
        kill_requested=bool(row["kill_requested"]),
        result=_blob(row["result"]),
        resources=json_object(row.get("resources")),
        placement=json_object(row.get("placement")) or None,
        checkpoint=_blob(row["checkpoint"]),
        waiting_on=row.get("open_parents"),
        runtime=json_object(row.get("runtime")) or None,
    )


def json_object(text: str | None) -> dict[str, Any]:
    """A JSON object column (resources, placement); NULL reads as {}."""
    return json.loads(text) if text else {}


def claim_of(row: Row) -> Claim:
    return record_of(
        Claim,
        row,
        payload=bytes(row["payload"]),
        resources=json_object(row.get("resources")),
        checkpoint=_blob(row["checkpoint"]),
        inputs=row.get("input_results"),
        runtime=json_object(row.get("runtime")) or None,
    )


def _blob(value: Any) -> bytes | None:
    """Stored bytes as bytes (Postgres hands back memoryview), None as None."""
    return None if value is None else bytes(value)


def queue_info_of(row: Row) -> QueueInfo:
    return record_of(
        QueueInfo,
        row,
        elasticity=json.loads(row["elasticity"]),
        admission=json.loads(row["admission"]),
        resources=json_object(row.get("resources")),
    )


def worker_info_of(row: Row) -> WorkerInfo:
    return record_of(
        WorkerInfo,
        row,
        queues=json.loads(row["queues"]),
        info=json.loads(row["info"]),
        load=json.loads(row["load"]),
    )


#: The most objects one submit may list as its own (a thunk's spilled arguments).
MAX_OWNED_OBJECTS = 256
_OWNED_KEY = re.compile(r"_objects/[0-9a-z]{26}")


def owned_objects(refs: Sequence[StorageRef]) -> str | None:
    """The `objects` column for a submit's own objects (JSON), None when it has none.

    Only durable copies of objects (`_objects/<id>`) may be listed: retention deletes what a
    row lists, so a producer must not be able to point it at any other key of a storage.
    """
    if not refs:
        return None
    if len(refs) > MAX_OWNED_OBJECTS:
        raise InvalidArgument(
            f"a submit lists at most {MAX_OWNED_OBJECTS} objects of its own, got {len(refs)}"
        )
    for ref in refs:
        if not isinstance(ref, StorageRef) or not _OWNED_KEY.fullmatch(ref.key):
            raise InvalidArgument(
                "a submit's objects are the durable copies it made, keyed _objects/<object id>,"
                f" got {ref!r}"
            )
    return json.dumps([{"url": r.url, "key": r.key, "size": r.size} for r in refs])


def listed_objects(text: str | None) -> list[StorageRef]:
    """The objects a row lists as its own (`owned_objects`), for retention to delete."""
    if not text:
        return []
    return [StorageRef(o["url"], o["key"], int(o.get("size", 0))) for o in json.loads(text)]
