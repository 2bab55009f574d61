"""The schemas of the OpenAPI document: every request and response body, written by hand.

The paths, methods and status codes come from the route table (openapi.py builds them); what a
body holds cannot, so it is written here, one schema per name an `Api` refers to. Kept apart
from the builder so that adding a route's body is an edit to this table alone. Bytes fields are
`format: byte`: msgpack bin on the wire, base64 strings in JSON. A route module may register
its own schemas here when it loads (routes_retention.py, routes_objects.py, routes_admin.py).
The types and rules they are made of are in openapi_parts.py.
"""

from __future__ import annotations

from typing import Any

from dreamlake.lakeshore.plane.store.base import MAX_BATCH
from dreamlake.lakeshore.plane.store.frames import POST_ID
from dreamlake.lakeshore.plane.store.leader import MAX_LEADER_TTL_S
from dreamlake.lakeshore.plane.store.views import EVENT_KIND
from dreamlake.lakeshore.resources import FREE_KEYS
from dreamlake.lakeshore.types import (
    END_CAUSES,
    END_STATE_CAUSES,
    GANG_STATES,
    MAX_HANG_TIMEOUT_S,
    MAX_NODES,
    QUEUE_STATES,
    STATES,
    Claim,
    Frame,
    GangState,
    Invocation,
    QueueInfo,
    WorkerInfo,
)

from .openapi_parts import (
    ALNUM_ID,
    AMOUNT,
    BOOL,
    BYTES,
    HOST,
    INT,
    KIND,
    LEASE_S,
    NAME,
    NAMES,
    NUM,
    OBJ,
    SECONDS,
    STR,
    STRS,
    TIMEOUT_S,
    _full,
    _nullable,
    _obj,
    _record,
    _ref,
)

SCHEMAS: dict[str, Any] = {
    "Error": _obj(
        {
            "error": _obj(
                {"code": STR, "message": STR, "block": BOOL, "retry_after_s": NUM},
                ("code", "message"),
            )
        },
        ("error",),
    ),
    "Hello": _obj(
        {
            "server": STR,
            "version": STR,
            "api": STR,
            "codec_version": INT,
            "pickle_protocol": INT,
            "max_body_bytes": INT,
            "max_object_bytes": INT,
            "max_wait_s": NUM,
            "bytes_in_json": STR,
        }
    ),
    "QueueCreate": _obj(
        {
            "name": NAME,
            "kind": KIND,
            "description": STR,
            "elasticity": OBJ,
            "admission": OBJ,
            "resources": _ref("Resources"),
        },
        ("name",),
    ),
    "QueuePatch": _obj(
        {
            "description": STR,
            "admission": OBJ,
            "elasticity": OBJ,
            "kind": {**KIND, "description": "the queue's own kind: another is refused"},
            "resources": _ref("Resources"),
        }
    ),
    "Resources": {
        **_obj(
            {
                "gpus": AMOUNT,
                "gpu_type": {"anyOf": [STR, STRS]},
                "gpu_memory_gb": AMOUNT,
                "cpus": AMOUNT,
                "memory_gb": AMOUNT,
            }
        ),
        "additionalProperties": False,
        "description": "what a job needs (docs/sdk.md): gpus below 1 shares one GPU, from 1 "
        "up a whole number; gpu_type a name or an ordered list matched in the GPU's name",
    },
    # What a claimer has free: the keys `resources.check_free` takes, each an amount but two.
    "Free": {
        **_obj(
            {
                **{key: AMOUNT for key in FREE_KEYS},
                "gpu_names": {"type": "array", "items": {**STR, "minLength": 1, "maxLength": 256}},
                "box": _nullable(OBJ),
            }
        ),
        "additionalProperties": False,
    },
    "Placement": _obj({"lease": STR, "placement": OBJ}, ("lease", "placement")),
    "QueueInfo": _record(
        QueueInfo,
        {
            "namespace": STR,
            "name": STR,
            "kind": STR,
            "state": {"enum": list(QUEUE_STATES)},
            "description": STR,
            "elasticity": OBJ,
            "admission": OBJ,
            "created_at": NUM,
            "updated_at": NUM,
            "resources": _ref("Resources"),
        },
    ),
    "QueueShow": {
        "allOf": [
            _ref("QueueInfo"),
            _obj({"members": {"type": "array", "items": _ref("WorkerInfo")}}),
        ]
    },
    "QueueList": _obj({"queues": {"type": "array", "items": _ref("QueueInfo")}}),
    "EventList": _obj(
        {
            "events": {
                "type": "array",
                "items": _obj({"id": INT, "at": NUM, "kind": STR, "detail": OBJ}),
            }
        }
    ),
    "QueueStats": _obj(
        {
            "queue": STR,
            "namespace": STR,
            "daemon_count": INT,
            "slots": INT,
            "running": INT,
            "pending": INT,
            "scheduled": INT,
            "waiting": INT,
            "utilization": NUM,
            "locality_wait_s": NUM,
            "unschedulable": INT,
            "waiting_for_capacity": INT,
            "gangs_waiting": {**INT, "description": "queued multi-node jobs (issue 47)"},
            "maps": {
                "type": "array",
                "description": "maps with jobs still to end here: map_id, jobs, states",
                "items": OBJ,
            },
        }
    ),
    "MembershipEdit": _obj({"add": NAMES, "remove": NAMES}),
    "SubmitItem": _obj(
        {
            "payload": BYTES,
            "json": {"description": "any JSON value, sent instead of payload (curl)"},
            "key": STR,
            "priority": NUM,
            "max_attempts": INT,
            "max_preemptions": INT,
            "timeout_s": TIMEOUT_S,
            "host": {
                **HOST,
                "description": "locality: the host id whose tier holds the payload's objects",
            },
            "resources": _ref("Resources"),
            "nodes": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_NODES,
                "description": "how many daemons run the job at once, one part each (issue "
                "47); resources are per node",
            },
            "hang_timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_HANG_TIMEOUT_S,
                "description": "seconds without progress from every part that make the job a "
                "hang (issue 47); left out: no hang is looked for",
            },
            "id": {
                "type": "string",
                "description": "the invocation id, chosen by the client (a ULID), so that a "
                "submit sent again is the same job",
            },
            "objects": {
                "type": "array",
                "description": "objects the payload names only inside a pickle (a thunk's "
                "spilled arguments), for retention to delete with the row",
                "items": _obj({"url": STR, "key": STR, "size": INT}, ("url", "key")),
            },
            "map_id": {
                "type": "string",
                "description": "the map this job is an item of (listed by ?map= on /invocations)",
            },
            "runtime": {
                **_ref("Runtime"),
                "description": "what the job brings to its worker (docs/runtime.md): a bundle "
                "put first through /runtime/blobs and /runtime/manifests, requirements, env; "
                "needs the 'submit-code' scope",
            },
            "delay_s": {
                "type": "number",
                "description": "held as 'scheduled' this many seconds, then queued",
            },
            "at": {
                "description": "held as 'scheduled' until this time: epoch seconds or ISO 8601",
            },
            "after": {
                "type": "array",
                "items": {"type": "string"},
                "description": "invocation ids (this namespace, any queue) it waits for, in "
                "state 'waiting'; each exists, or is an earlier item of the same batch",
            },
            "after_failure": {
                "type": "string",
                "enum": ["cancel", "run"],
                "description": "a parent that ends other than succeeded: cancel this job "
                "(default), or run it once every parent has ended",
            },
            "inputs": {
                "type": "array",
                "items": {"type": "string"},
                "description": "parents (in after) whose results a claim hands the worker",
            },
        },
    ),
    "SubmitBatch": {
        "oneOf": [
            _obj({"items": {"type": "array", "items": _ref("SubmitItem")}}, ("items",)),
            _ref("SubmitItem"),
        ]
    },
    "IdList": _obj({"ids": STRS, "invocation": _ref("Invocation")}),
    "Count": _obj({"count": INT}),
    "Invocation": _record(
        Invocation,
        {
            "id": STR,
            "namespace": STR,
            "queue": STR,
            "state": {"enum": list(STATES)},
            "priority": NUM,
            "key": STR,
            "attempt": INT,
            "max_attempts": INT,
            "timeout_s": NUM,
            "kill_requested": BOOL,
            "worker": STR,
            "error": STR,
            "result": BYTES,
            "created_at": NUM,
            "started_at": NUM,
            "finished_at": NUM,
            "resources": _ref("Resources"),
            "placement": OBJ,
            "pending_reason": STR,
            "unschedulable_reason": STR,
            "preemptions": INT,
            "max_preemptions": INT,
            "ended_by": {"enum": list(END_CAUSES)},
            "checkpoint": BYTES,
            "after": {**STRS, "description": "the parents it was submitted after"},
            "waiting_on": {
                **INT,
                "description": "how many of its parents have not ended; null: it has none",
            },
            "runtime": {
                **_ref("Runtime"),
                "description": "what the job brings to its worker (issue 46); null: nothing",
            },
            "nodes": INT,
            "hang_timeout_s": {
                **NUM,
                "description": "seconds without progress from every part that make the job a "
                "hang (issue 47); null: none is looked for",
            },
            "gang": _nullable(
                {
                    **OBJ,
                    "description": "a gang's newest attempt: attempt, state, outcome, held, "
                    "parts (rank, worker, addr, state), failed (issue 47); null otherwise",
                }
            ),
        },
    ),
    "Cancel": _obj({"kill": BOOL}),
    "Cancelled": _obj({"cancelled": BOOL}),
    "ClaimRequest": _obj(
        {
            "queues": NAMES,
            "worker": STR,
            "lease_s": LEASE_S,
            "kind": KIND,
            "temperature": {"type": "number", "minimum": 0},
            "wait": SECONDS,
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_BATCH},
            "host": {
                **HOST,
                "description": "the claimer's host id: jobs held for other hosts are passed by",
            },
            "acks": {
                "type": "array",
                "description": "successes to settle first, as POST /acks takes them: they "
                "commit before any wait, and the answer carries ack_errors",
                "items": _ref("AckItem"),
            },
            "free": _ref("Free"),
            "addr": {
                **STR,
                "description": "where other parts of a gang reach this claimer (issue 47)",
            },
        },
        ("worker",),
    ),
    "Claim": _record(
        Claim,
        {
            "id": STR,
            "namespace": STR,
            "queue": STR,
            "payload": BYTES,
            "attempt": INT,
            "lease": STR,
            "lease_expires_at": NUM,
            "timeout_s": NUM,
            "priority": NUM,
            "signature": STR,
            "resources": _ref("Resources"),
            "preemptions": INT,
            "checkpoint": BYTES,
            "job_token": {
                **STR,
                "description": "a token for the job's own code, in place of the worker's: its "
                "namespace, no 'work' scope, alive while this attempt runs (docs/security.md)",
            },
            "inputs": {
                "type": "object",
                "additionalProperties": _nullable(BYTES),
                "description": "the results of the parents its arguments take (dls.output), "
                "by parent id; only those that succeeded",
            },
            "runtime": {
                **_nullable(OBJ),
                "description": "what the job brings (issue 46): its bundle's digest, "
                "requirements, variables and what shipped; null: nothing",
            },
            "gang": _obj(
                {"rank": INT, "nodes": INT, "attempt": INT},
                ("rank", "nodes", "attempt"),
            ),
            "hang_timeout_s": {
                **NUM,
                "description": "seconds without progress from every part that make the job "
                "a hang, for the daemon to end (issue 47); null: none is looked for",
            },
        },
    ),
    "GangRead": _obj({"lease": STR, "wait": SECONDS, "since": INT}, ("lease",)),
    "GangProgress": _obj({"lease": STR, "hung": BOOL}, ("lease",)),
    "GangNotice": _obj(
        {"lease": STR, "until": {**NUM, "description": "when the part's grace ends, epoch s"}},
        ("lease", "until"),
    ),
    "GangReady": _obj(
        {
            "lease": STR,
            "addr": _nullable({**STR, "description": "a host name or IP address"}),
            "port": _nullable({"type": "integer", "minimum": 1, "maximum": 65535}),
        },
        ("lease",),
    ),
    "GangState": _record(
        GangState,
        {
            "id": STR,
            "attempt": INT,
            "nodes": INT,
            "state": {"enum": list(GANG_STATES)},
            "held": INT,
            "rank": INT,
            "parts": {
                "type": "array",
                "description": "every part in rank order: rank, worker, addr, port, state",
                "items": OBJ,
            },
            "wait_until": NUM,
            "outcome": STR,
            "failed": OBJ,
            "noticed": _nullable(OBJ),
            "progress_at": NUM,
            "hung": _nullable(OBJ),
            "version": INT,
        },
    ),
    "ClaimResult": _obj(
        {
            "claim": _nullable(_ref("Claim")),
            "claims": {"type": "array", "items": _ref("Claim")},
            "ack_errors": {"type": "array", "items": _nullable(_ref("ErrorItem"))},
        }
    ),
    "AckItem": _obj({"id": STR, "lease": STR, "result": _nullable(BYTES)}, ("id", "lease")),
    "Ack": _obj({"lease": STR, "result": _nullable(BYTES)}, ("lease",)),
    "AckBatch": _obj(
        {"acks": {"type": "array", "items": _ref("AckItem")}},
        ("acks",),
    ),
    "AckErrors": _obj(
        {
            "errors": {"type": "array", "items": _nullable(_ref("ErrorItem"))},
        }
    ),
    "ErrorItem": _obj({"code": STR, "message": STR}),
    "Nack": _obj({"lease": STR, "error": STR, "retry": BOOL}, ("lease",)),
    "NackResult": _obj({"state": STR}),
    "End": _obj(
        {
            "lease": STR,
            "state": {"enum": ["killed", "timeout", "failed"]},
            "error": STR,
            "cause": {"enum": sorted({c for cs in END_STATE_CAUSES.values() for c in cs})},
        },
        ("lease", "state"),
    ),
    "Release": _obj(
        {
            "lease": STR,
            "outcome": {"enum": ["unrun", "preempted"]},
            "cause": {"enum": list(END_CAUSES)},
        },
        ("lease",),
    ),
    "Checkpoint": _obj({"lease": STR, "checkpoint": BYTES}, ("lease", "checkpoint")),
    "Cause": _obj({"lease": STR, "cause": {"enum": list(END_CAUSES)}}, ("lease", "cause")),
    "Noted": _obj({"noted": BOOL}),
    "Checkpointed": _obj({"previous": _nullable(BYTES)}),
    "Released": _obj({"released": BOOL}),
    "Renew": _obj({"leases": STRS, "lease_s": LEASE_S}),
    "Renewed": _obj({"leases": {"type": "object", "additionalProperties": BOOL}}),
    "Frame": _record(
        Frame, {"seq": INT, "kind": {"enum": ["VALUE", "ERROR", "END", "RESUME"]}, "value": BYTES}
    ),
    "FrameList": _obj({"frames": {"type": "array", "items": _ref("Frame")}, "ended": BOOL}),
    "PostFrame": _obj(
        {
            "kind": {"enum": ["VALUE", "ERROR", "END"]},
            "value": _nullable(BYTES),
            "lease": STR,
            "id": {
                "type": "string",
                "pattern": _full(POST_ID.pattern),
                "description": "the post's own id: the same post sent again is stored once",
            },
        },
        ("kind",),
    ),
    "Seq": _obj({"seq": INT}),
    "WorkerRegister": _obj(
        {"name": NAME, "queues": NAMES, "host": HOST, "pid": INT, "info": OBJ}, ("name",)
    ),
    "WorkerInfo": _record(
        WorkerInfo,
        {
            "id": STR,
            "namespace": STR,
            "name": STR,
            "queues": STRS,
            "host": STR,
            "pid": INT,
            "info": OBJ,
            "load": OBJ,
            "state": STR,
            "created_at": NUM,
            "heartbeat_at": NUM,
        },
    ),
    "WorkerList": _obj({"workers": {"type": "array", "items": _ref("WorkerInfo")}}),
    "Heartbeat": _obj({"load": OBJ, "state": STR}),
    "WorkerState": _obj(
        {"state": {"enum": ["alive", "draining", "preempting", "gone"]}}, ("state",)
    ),
}

# A job's body is its payload: msgpack bytes, or a JSON value the server encodes; one of the two.
SCHEMAS["SubmitItem"]["oneOf"] = [{"required": ["payload"]}, {"required": ["json"]}]

# -- jobs and the dashboard (routes_jobs.py, routes_dashboard.py) ------------------------------

SCHEMAS.update(
    {
        "InvocationList": _obj({"invocations": {"type": "array", "items": _ref("Invocation")}}),
        "WhoAmI": _obj({"namespace": STR, "org": _nullable(STR), "label": STR, "scopes": STRS}),
        "Dashboard": _obj(
            {
                "namespace": STR,
                "now": NUM,
                "window": OBJ,
                "queues": {"type": "array", "items": OBJ},
                "workers": {"type": "array", "items": OBJ},
                "recent": {"type": "array", "items": OBJ},
                "events": {"type": "array", "items": OBJ},
                "schedules": {"type": "array", "items": OBJ},
                "sampled": BOOL,
            }
        ),
    }
)


# -- the fleet (routes_fleet.py): the controller over HTTP, admin tokens only ------------------

_ROWS = {"type": "array", "items": OBJ}
SCHEMAS.update(
    {
        "Fleet": _obj(
            {
                "queues": _ROWS,
                "counts": _ROWS,
                "running": _ROWS,
                "workers": _ROWS,
                "shapes": _ROWS,
                "providers": _ROWS,
            }
        ),
        "FleetEvents": _obj(
            {
                "events": {
                    "type": "array",
                    "items": _obj(
                        {
                            "namespace": NAME,
                            "queue": NAME,
                            "kind": {"type": "string", "pattern": _full(EVENT_KIND.pattern)},
                            "detail": OBJ,
                        },
                        ("namespace", "queue", "kind"),
                    ),
                },
                "now": NUM,
            },
            ("events", "now"),
        ),
        "FleetWorkerState": _obj(
            {
                "namespace": STR,
                "ref": STR,
                "state": {"enum": ["alive", "draining", "preempting", "gone"]},
            },
            ("namespace", "ref", "state"),
        ),
        "FleetLeader": {
            **_obj(
                {
                    "name": NAME,
                    "holder": {"type": "string", "minLength": 1, "maxLength": 200},
                    "ttl_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_LEADER_TTL_S},
                    "release": BOOL,
                },
                ("name", "holder"),
            ),
            # ttl_s is needed to take or keep the lead, not to give it up
            "anyOf": [
                {"required": ["ttl_s"]},
                {"required": ["release"], "properties": {"release": {"const": True}}},
            ],
        },
        "FleetLeading": _obj({"leading": BOOL}),
    }
)


# -- cron schedules (routes_schedules.py, issue 36) --------------------------------------------

_TIME = _nullable(NUM)
SCHEDULES = {"enum": ["none", "latest", "all"]}
SCHEMAS.update(
    {
        "ScheduleInfo": _obj(
            {
                "namespace": STR,
                "name": STR,
                "queue": STR,
                "cron": STR,
                "tz": STR,
                "catchup": SCHEDULES,
                "overlap": {"enum": ["allow", "skip"]},
                "state": {"enum": ["active", "paused"]},
                "next_fire_at": _TIME,
                "last_fired_at": _TIME,
                "last_slot": _TIME,
                "last_job": _nullable(STR),
                "fired": INT,
                "missed": INT,
                "last_error": _nullable(STR),
                "priority": NUM,
                "max_attempts": INT,
                "timeout_s": _TIME,
                "resources": _nullable(_ref("Resources")),
                "max_preemptions": _nullable(INT),
                "created_at": NUM,
                "updated_at": NUM,
            },
            ("namespace", "name", "queue", "cron", "tz", "state"),
        ),
        "ScheduleList": _obj({"schedules": {"type": "array", "items": _ref("ScheduleInfo")}}),
        "ScheduleRun": _obj(
            {"run_id": {**ALNUM_ID, "description": "a ULID: the same one, the same job"}}
        ),
        "ScheduleRunId": _obj({"id": STR}, ("id",)),
        "SchedulePut": _obj(
            {
                "cron": STR,
                "tz": STR,
                "queue": NAME,
                "catchup": SCHEDULES,
                "overlap": {"enum": ["allow", "skip"]},
                "payload": BYTES,
                "json": {"description": "any JSON value, encoded by the server as the payload"},
                "priority": NUM,
                "max_attempts": INT,
                "timeout_s": TIMEOUT_S,
                "resources": _ref("Resources"),
                "max_preemptions": INT,
            },
            ("cron", "queue"),
        ),
    }
)
