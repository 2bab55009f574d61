"""What each HTTP route of the control plane is, declared once (issue 38).

A `Route` says a verb's method and path, whether a request that got no answer may be sent to
another replica (`repeatable`), what /metrics counts it as (`counts`) and whether it lives under
a namespace. The server's route table (server/endpoint.py `Api`) serves these, and the HTTP
plane (http.py) sends them: neither writes a path, a retry rule or a counter name of its own, so
the two cannot drift apart. Standard library only: the producer install imports this module,
and it must not bring the server stack with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import quote

from dreamlake.lakeshore.errors import InvalidArgument

#: Methods that do the same thing when sent twice (RFC 9110), whatever the route.
IDEMPOTENT: Final = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
#: Where a namespaced route's path starts; `{ns}` is the namespace.
NS_PREFIX: Final = "/v1/namespaces/{ns}"

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def segment(value: str) -> str:
    """One path segment, escaped: a name holding `/`, `?` or `%` stays one segment."""
    try:
        return quote(value, safe="")
    except UnicodeEncodeError:  # a lone surrogate (a shell argument that was not UTF-8)
        raise InvalidArgument(
            f"{value[:200]!r} holds a lone surrogate, which is not Unicode text"
        ) from None


@dataclass(frozen=True)
class Route:
    """One verb of the HTTP API."""

    method: str
    #: The path, after `NS_PREFIX` when `namespaced`; `{name}` marks a segment.
    path: str
    #: Sending it twice does the same as once, so a request a replica did not answer may be
    #: sent to the next one too. True for every method in `IDEMPOTENT`; a POST says so itself.
    repeatable: bool = False
    #: What /metrics counts an answer of this route as (server/metrics.py `RECORDERS`).
    counts: str | None = None
    namespaced: bool = True
    #: The segments the path names, `ns` included when namespaced (derived).
    params: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.method in IDEMPOTENT:
            object.__setattr__(self, "repeatable", True)
        object.__setattr__(self, "params", frozenset(_PLACEHOLDER.findall(self.full_path)))

    @property
    def full_path(self) -> str:
        return NS_PREFIX + self.path if self.namespaced else self.path

    def matches(self, path: str) -> bool:
        """Whether a request path (escaped, as it arrives) is this route's."""
        pattern = _PATTERNS.get(self)
        if pattern is None:
            parts = _PLACEHOLDER.split(self.full_path)  # text, name, text, name, ..., text
            pattern = _PATTERNS[self] = re.compile(
                "".join(re.escape(p) if i % 2 == 0 else "[^/]+" for i, p in enumerate(parts))
            )
        return pattern.fullmatch(path) is not None

    def at(self, **values: str) -> Target:
        """This route with its segments' values (all but `ns`, which the sender may fill)."""
        names = set(values)
        wanted = self.params - {"ns"}
        if not wanted <= names <= self.params:
            raise TypeError(
                f"{self.method} {self.path} takes segments {sorted(wanted)}, got {sorted(names)}"
            )
        return Target(self, values)


_PATTERNS: dict[Route, re.Pattern[str]] = {}


@dataclass(frozen=True)
class Target:
    """A route and the values of its segments: what a client sends a request to."""

    route: Route
    values: Mapping[str, str]

    def url_path(self, ns: str) -> str:
        """The path, each segment escaped; `ns` fills the namespace unless the values name one."""
        values = {"ns": ns, **self.values}
        return _PLACEHOLDER.sub(lambda m: segment(values[m.group(1)]), self.route.full_path)


# -- the routes, one constant per verb ---------------------------------------------------------

HELLO = Route("GET", "/v1/hello", namespaced=False)
WHOAMI = Route("GET", "/v1/whoami", namespaced=False)
DASHBOARD = Route("GET", "/dashboard")

# jobs: producers
SUBMIT = Route("POST", "/queues/{queue}/invocations", repeatable=True, counts="submit")
COUNT = Route("GET", "/queues/{queue}/count")
INVOCATION = Route("GET", "/invocations/{id}")
INVOCATIONS = Route("GET", "/invocations")
CANCEL = Route("POST", "/invocations/{id}/cancel", repeatable=True, counts="cancel")
RETRY = Route("POST", "/invocations/{id}/retry", counts="retry")
# jobs: workers. A claim, a nack or a release is not sent twice: its caller retries, and a lost
# claim only returns its job at the lease's end. Acks, ends and the rest are keyed by a lease.
CLAIM = Route("POST", "/claims", counts="claim")
ACKS = Route("POST", "/acks", repeatable=True, counts="acks")
ACK = Route("POST", "/invocations/{id}/ack", repeatable=True, counts="ack")
NACK = Route("POST", "/invocations/{id}/nack", counts="nack")
END = Route("POST", "/invocations/{id}/end", repeatable=True, counts="end")
RELEASE = Route("POST", "/invocations/{id}/release")
PLACE = Route("POST", "/invocations/{id}/placement")
CAUSE = Route("POST", "/invocations/{id}/cause", repeatable=True)
CHECKPOINT = Route("POST", "/invocations/{id}/checkpoint", repeatable=True)
RENEW = Route("POST", "/leases/renew", repeatable=True)
# gangs (issue 47): a part reads its gang (a POST, so its lease stays out of the URL) and says
# where it listens
GANG = Route("POST", "/invocations/{id}/gang", repeatable=True)
GANG_READY = Route("POST", "/invocations/{id}/gang/ready", repeatable=True)
GANG_NOTICE = Route("POST", "/invocations/{id}/gang/notice", repeatable=True)
GANG_PROGRESS = Route("POST", "/invocations/{id}/gang/progress", repeatable=True)
# frames: a post carries an id (minted by the client), so it is sent again safely
FRAMES = Route("GET", "/invocations/{id}/frames")
POST_FRAME = Route("POST", "/invocations/{id}/frames", repeatable=True)
TOPIC_FRAMES = Route("GET", "/topics/{queue}/{topic}/frames")
POST_TOPIC_FRAME = Route("POST", "/topics/{queue}/{topic}/frames", repeatable=True)

# queues
CREATE_QUEUE = Route("POST", "/queues")
QUEUES = Route("GET", "/queues")
QUEUE = Route("GET", "/queues/{name}")
PATCH_QUEUE = Route("PATCH", "/queues/{name}")
DELETE_QUEUE = Route("DELETE", "/queues/{name}")
ARCHIVE_QUEUE = Route("POST", "/queues/{name}/archive")
UNARCHIVE_QUEUE = Route("POST", "/queues/{name}/unarchive")
DRAIN_QUEUE = Route("POST", "/queues/{name}/drain")
QUEUE_EVENTS = Route("GET", "/queues/{name}/events")
QUEUE_STATS = Route("GET", "/queues/{name}/stats")
#: A queue's lifecycle actions by name (`Plane.set_queue_state`).
QUEUE_ACTIONS: Final = {
    "archive": ARCHIVE_QUEUE,
    "unarchive": UNARCHIVE_QUEUE,
    "drain": DRAIN_QUEUE,
}

# cron schedules
SCHEDULES = Route("GET", "/schedules")
SCHEDULE = Route("GET", "/schedules/{name}")
PUT_SCHEDULE = Route("PUT", "/schedules/{name}")
DELETE_SCHEDULE = Route("DELETE", "/schedules/{name}")
PAUSE_SCHEDULE = Route("POST", "/schedules/{name}/pause")
RESUME_SCHEDULE = Route("POST", "/schedules/{name}/resume")
#: Carries a run id the client mints, so it could be sent again; not marked repeatable, as the
#: client's URL regex did not mark it when it came.
RUN_SCHEDULE = Route("POST", "/schedules/{name}/run")
#: A schedule's state actions by name (`Plane.set_schedule_state`).
SCHEDULE_ACTIONS: Final = {"pause": PAUSE_SCHEDULE, "resume": RESUME_SCHEDULE}

# worker rows
REGISTER_WORKER = Route("POST", "/workers")
WORKERS = Route("GET", "/workers")
WORKER = Route("GET", "/workers/{ref}")
HEARTBEAT = Route("POST", "/workers/{ref}/heartbeat", repeatable=True)
WORKER_STATE = Route("POST", "/workers/{ref}/state")
WORKER_QUEUES = Route("POST", "/workers/{id}/queues")

# named provider configs, retention, objects
ADD_PROVIDER = Route("POST", "/providers")
PROVIDERS = Route("GET", "/providers")
PROVIDER = Route("GET", "/providers/{name}")
DELETE_PROVIDER = Route("DELETE", "/providers/{name}")
TRIM_RETENTION = Route("POST", "/retention/trim")
PUT_OBJECT = Route("PUT", "/objects/{id}")
# job runtimes (issue 46): a bundle's blobs and manifest, content-addressed, per namespace
RUNTIME_MISSING = Route("POST", "/runtime/missing", repeatable=True)
PUT_RUNTIME_BLOBS = Route("POST", "/runtime/blobs", repeatable=True)
RUNTIME_BLOB = Route("GET", "/runtime/blobs/{sha}")
PUT_RUNTIME_MANIFEST = Route("POST", "/runtime/manifests", repeatable=True)
RUNTIME_MANIFEST = Route("GET", "/runtime/manifests/{digest}")
GET_OBJECT = Route("GET", "/objects/{id}")

# the fleet (the controller's, across namespaces: an admin token)
FLEET = Route("GET", "/v1/fleet", namespaced=False)
FLEET_EVENTS = Route("POST", "/v1/fleet/events", namespaced=False)
FLEET_WORKER_STATE = Route("POST", "/v1/fleet/workers", namespaced=False)
FLEET_LEADER = Route("POST", "/v1/fleet/leader", namespaced=False)

# administration
NAMESPACES = Route("GET", "/v1/admin/namespaces", namespaced=False)
ADD_NAMESPACE = Route("POST", "/v1/admin/namespaces", namespaced=False)
ORGS = Route("GET", "/v1/admin/orgs", namespaced=False)
TOKENS = Route("GET", "/v1/admin/tokens", namespaced=False)
CREATE_TOKEN = Route("POST", "/v1/admin/tokens", namespaced=False)
REVOKE_TOKEN = Route("DELETE", "/v1/admin/tokens/{digest}", namespaced=False)

#: Every route declared here, in declaration order (the server serves each one).
ALL: Final = tuple(value for value in list(globals().values()) if isinstance(value, Route))
