"""`HttpPlane` (also named `HttpDispatch`): the plane as seen through a `lakeshore server`.

Every `Plane` method is one request over one keep-alive connection (so a submit is one round
trip): the lean HTTP/1.1 path (http11.py) where it can carry it, else an `httpx.Client`, made
and imported only then (httpx loads its command line, click and rich, when they are installed:
more than the rest of the SDK). Bodies are msgpack, and the records and error classes are the
ones the embedded plane returns and raises: callers never ask which plane they hold. Waits are
long-polls: the server holds the request on its wake-up for up to its cap, and a longer wait
simply asks again. This module imports only msgpack (and httpx when it needs it), so a producer
never pulls in the server stack.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from dreamlake.lakeshore.errors import (
    DispatchError,
    InvalidArgument,
    QueueFullError,
)
from dreamlake.lakeshore.ids import new_id
from dreamlake.lakeshore.types import (
    Ack,
    Claim,
    ClaimArgs,
    Frame,
    GangState,
    Invocation,
    QueueInfo,
    SubmitRequest,
    WorkerInfo,
    storable_text,
    topic_channel,
)

from . import routes
from .env import env_namespace, env_token, env_url
from .providers import ProviderInfo
from .retention import Trimmed
from .schedules import ScheduleInfo
from .tls import Verify, tls_context
from .transport import (
    BUSY_RETRY_S,
    MSGPACK,
    REQUEST_TIMEOUT_S,
    SERVER_WAIT_CAP_S,
    WAIT_MARGIN_S,
    ChannelMode,
    HttpTransport,
    Replica,
    check_token,
    check_url,
    split_urls,
)
from .transport import segment as _segment
from .waiting import Deadline, DrainingWorkers, room_wait, through_outages
from .wire import claim_body as _claim_body
from .wire import item_error
from .wire import record as _record
from .wire import submit_item as _submit_item

if TYPE_CHECKING:
    import httpx

    from dreamlake.lakeshore.objects.plane import PlaneTier

#: Names callers import from here; the transport's moved to transport.py and wire.py (issue 38).
__all__ = [
    "BUSY_RETRY_S",
    "MSGPACK",
    "REQUEST_TIMEOUT_S",
    "SERVER_WAIT_CAP_S",
    "WAIT_MARGIN_S",
    "HttpDispatch",
    "HttpFleet",
    "HttpPlane",
    "check_token",
    "check_url",
    "split_urls",
]


def _mint_id() -> str:
    """A job's id, as the plane would mint it: a ULID (python-ulid, imported at the first)."""
    from ulid import ULID

    return str(ULID())


class HttpPlane(HttpTransport):
    """A plane behind `lakeshore server`: `HttpPlane("http://127.0.0.1:8765")`.

    `token` defaults to LAKESHORE_TOKEN, then the file `$LAKESHORE_HOME/token` (written by the
    server's first start) when every URL reaches the server that wrote it (home_token.py);
    `namespace` defaults to LAKESHORE_NAMESPACE, then `default`. For an https URL, `verify`
    says which certificates to trust (tls.py): None reads LAKESHORE_CA_BUNDLE, else the public
    roots.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        namespace: str | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        verify: Verify = None,
        channel: ChannelMode = "off",
    ) -> None:
        base = url or env_url()
        if not base:
            raise InvalidArgument("HttpPlane needs a URL (or LAKESHORE_URL)")
        #: The control plane's replicas, in the order given: requests go to one until it cannot
        #: be reached, then to the next (`url` is the one in use).
        self.urls = tuple(check_url(u).rstrip("/") for u in split_urls(base))
        self._at = 0
        self._switch = threading.Lock()
        self._draining = DrainingWorkers()
        self.namespace = namespace or env_namespace()
        token = token or env_token()
        if not token:
            from .home_token import home_token  # the token file, its record: only when needed

            token = home_token(self.urls)
        headers = {"accept": MSGPACK, "user-agent": "lakeshore-sdk"}
        if token:
            headers["authorization"] = f"Bearer {check_token(token)}"
        _segment(self.namespace)  # a name no path can carry is refused here, not at a first call
        self._timeout_s = timeout_s
        self._headers = headers  # also the object tier's (object_tier)
        # One TLS context for both paths, so they trust the same certificates (tls.py).
        https = any(u.startswith("https:") for u in self.urls)
        tls = tls_context(verify) if https else None
        self._replicas = [
            Replica(u, headers, timeout_s, transport, tls, channel) for u in self.urls
        ]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({','.join(self.urls)!r}, namespace={self.namespace!r})"

    def on_push(self, worker: str, push: Callable[[str], None]) -> None:
        """Have `push(kind)` called when the server has news for `worker` ("renew": a kill was
        asked for a job it runs), over each replica's channel; no channel, no pushes."""
        for replica in self._replicas:
            if replica.channel is not None:
                replica.channel.start(self.namespace, worker, lambda kind, _detail: push(kind))

    def object_tier(self) -> PlaneTier:
        """This plane's objects (the plane tier, objects/plane.py): streamed up and down with
        this client's token, over the same transport choice as its other requests."""
        from dreamlake.lakeshore.objects.plane import (
            PlaneTier,  # the object store: not imported with the SDK
        )

        # Plain http with no proxy: straight from and into the caller's buffers (http.client);
        # TLS, proxies and test transports: this client, which holds their settings.
        direct = self._fast is not None and self.url.startswith("http:")
        return PlaneTier(
            self.url,
            self.namespace,
            self._headers,
            client=None if direct else self._client,
            timeout_s=self._timeout_s,
        )

    # -- producers ----------------------------------------------------------------------------

    def submit(
        self, queue: str, requests: Sequence[SubmitRequest], *, wait_s: float = 0.0
    ) -> list[str]:
        """One request; on a full `on_full: block` queue the server waits up to wait_s for room."""
        return list(self._post_submit(queue, requests, wait_s)["ids"])

    def submit_and_wait(
        self, queue: str, request: SubmitRequest, *, wait_s: float, block_s: float = 0.0
    ) -> Invocation:
        """One request that submits and then holds until the job ends (`?result_wait=`)."""
        deadline = Deadline(wait_s)
        data = self._post_submit(
            queue, [request], block_s, result_wait=min(max(wait_s, 0.0), SERVER_WAIT_CAP_S)
        )
        answer = data.get("invocation")
        if answer is not None and (inv := _record(Invocation, answer)).terminal:
            return inv
        return self.invocation(data["ids"][0], wait_s=deadline.remaining())

    def _post_submit(
        self,
        queue: str,
        requests: Sequence[SubmitRequest],
        block_s: float,
        *,
        result_wait: float = 0.0,
    ) -> dict[str, Any]:
        # Every job gets its id here, so a submit whose answer was lost (the connection dropped,
        # the server restarted) can be sent again: the plane answers with the jobs it made.
        items = [_submit_item(r if r.id else replace(r, id=_mint_id())) for r in requests]
        to = routes.SUBMIT.at(queue=queue)
        deadline = Deadline(block_s)
        while True:
            wait = min(deadline.remaining(), SERVER_WAIT_CAP_S)
            params: dict[str, Any] = {"wait": wait} if wait > 0 else {}
            if result_wait > 0:
                params["result_wait"] = result_wait
            try:
                data: dict[str, Any] = through_outages(
                    partial(
                        self._request,
                        to,
                        {"items": items},
                        params=params or None,
                        wait_s=wait + result_wait,
                    ),
                    self._timeout_s,
                    what="submit",
                    why="is sent again with the ids minted here: the job is neither lost nor made "
                    "twice",
                )
                return data
            except QueueFullError as full:
                room_wait(full, deadline)  # raises unless the queue blocks and time is left

    def invocation(self, inv_id: str, *, wait_s: float = 0.0) -> Invocation:
        def once(wait: float) -> Invocation:
            data = self._request(
                routes.INVOCATION.at(id=inv_id),
                params={"wait": wait} if wait > 0 else None,
                wait_s=wait,
            )
            return _record(Invocation, data)

        return self._long_poll(wait_s, once, lambda inv: inv.terminal)

    def count(self, queue: str, state: str = "queued") -> int:
        data = self._request(routes.COUNT.at(queue=queue), params={"state": state})
        return int(data["count"])

    def cancel(self, inv_id: str, *, kill: bool = False) -> bool:
        data = self._request(routes.CANCEL.at(id=inv_id), {"kill": kill})
        return bool(data["cancelled"])

    def _frames_at(self, channel: str, *, post: bool) -> routes.Target:
        """A topic channel names its own namespace; an invocation's is this plane's."""
        if channel.startswith("topic:"):
            ns, _, rest = channel[len("topic:") :].partition("/")
            queue, _, name = rest.partition("/")
            if not (ns and queue and name):
                raise InvalidArgument(f"malformed topic channel {channel!r}")
            topic = routes.POST_TOPIC_FRAME if post else routes.TOPIC_FRAMES
            return topic.at(ns=ns, queue=queue, topic=name)
        return (routes.POST_FRAME if post else routes.FRAMES).at(id=channel)

    def frames(
        self, channel: str, *, since: int = -1, wait_s: float = 0.0, rank: int = 0
    ) -> list[Frame]:
        to = self._frames_at(channel, post=False)

        def once(wait: float) -> tuple[list[Frame], bool]:
            params: dict[str, Any] = {"since": since}
            if rank:
                params["rank"] = rank
            if wait > 0:
                params["wait"] = wait
            data = self._request(to, params=params, wait_s=wait)
            frames = [_record(Frame, f) for f in data["frames"]]
            return frames, bool(data.get("ended"))

        # `ended`: the invocation finished with nothing after `since`; waiting more is pointless.
        frames, _ = self._long_poll(wait_s, once, lambda r: bool(r[0]) or r[1])
        return frames

    def post(
        self,
        channel: str,
        kind: str,
        value: bytes | None,
        *,
        lease: str | None = None,
        post_id: str | None = None,
    ) -> int:
        """Append a frame; the post carries an id (minted here if the caller has none), so it
        is sent again safely after a lost answer or to the next replica."""
        body = {"kind": kind, "value": value, "lease": lease, "id": post_id or _mint_id()}
        data = self._request(self._frames_at(channel, post=True), body)
        return int(data["seq"])

    def topic_channel(self, queue: str, name: str) -> str:
        return topic_channel(self.namespace, queue, name)

    # -- workers ------------------------------------------------------------------------------

    def claim_many(self, args: ClaimArgs, *, wait_s: float = 0.0) -> list[Claim]:
        def once(wait: float) -> list[Claim]:
            data = self._request(routes.CLAIM, _claim_body(args, wait), wait_s=wait)
            return [_record(Claim, c) for c in data["claims"]]

        # A draining worker's claim the server let go does not ask again.
        return self._long_poll(wait_s, once, self._draining.claim_done(args.worker))

    def ack_and_claim(
        self, acks: Sequence[Ack], args: ClaimArgs, *, wait_s: float = 0.0
    ) -> tuple[list[DispatchError | None], list[Claim]]:
        """One request: the server commits the acks (with the claim when a job is there)
        before it waits; a wait past its cap goes on as plain claims."""
        wait = min(wait_s, SERVER_WAIT_CAP_S)
        body = _claim_body(args, wait)
        body["acks"] = [{"id": a.id, "lease": a.lease, "result": a.result} for a in acks]
        data = self._request(routes.CLAIM, body, wait_s=wait)
        errors = [None if e is None else item_error(e) for e in data["ack_errors"]]
        got = [_record(Claim, c) for c in data["claims"]]
        if not got and wait_s > wait and args.worker not in self._draining:
            got = self.claim_many(args, wait_s=wait_s - wait)
        return errors, got

    def ack(self, inv_id: str, lease: str, result: bytes | None) -> None:
        self._request(routes.ACK.at(id=inv_id), {"lease": lease, "result": result})

    def ack_many(self, acks: Sequence[Ack]) -> list[DispatchError | None]:
        items = [{"id": a.id, "lease": a.lease, "result": a.result} for a in acks]
        data = self._request(routes.ACKS, {"acks": items})
        return [None if e is None else item_error(e) for e in data["errors"]]

    def nack(self, inv_id: str, lease: str, *, error: str, retry: bool = True) -> str:
        data = self._request(
            routes.NACK.at(id=inv_id),
            {"lease": lease, "error": storable_text(error), "retry": retry},
        )
        return str(data["state"])

    def end(
        self, inv_id: str, lease: str, *, state: str, error: str, cause: str | None = None
    ) -> None:
        body: dict[str, Any] = {"lease": lease, "state": state, "error": storable_text(error)}
        if cause is not None:  # only then: a server before it refuses the field
            body["cause"] = cause
        self._request(routes.END.at(id=inv_id), body)

    def release(
        self, inv_id: str, lease: str, *, outcome: str = "unrun", cause: str = "notice"
    ) -> bool:
        body: dict[str, Any] = {"lease": lease}
        if outcome != "unrun":  # only then: a server before issue 35 refuses the fields
            body |= {"outcome": outcome, "cause": cause}
        data = self._request(routes.RELEASE.at(id=inv_id), body)
        return bool(data["released"])

    def place(self, inv_id: str, lease: str, placement: dict[str, Any]) -> None:
        self._request(routes.PLACE.at(id=inv_id), {"lease": lease, "placement": placement})

    def note_cause(self, inv_id: str, lease: str, cause: str) -> bool:
        data = self._request(routes.CAUSE.at(id=inv_id), {"lease": lease, "cause": cause})
        return bool(data["noted"])

    def checkpoint(self, inv_id: str, lease: str, checkpoint: bytes) -> bytes | None:
        data = self._request(
            routes.CHECKPOINT.at(id=inv_id),
            {"lease": lease, "checkpoint": checkpoint},
        )
        previous = data.get("previous")
        return None if previous is None else bytes(previous)

    def gang(
        self, inv_id: str, lease: str, *, wait_s: float = 0.0, since: int | None = None
    ) -> GangState:
        def once(wait: float, seen: int | None) -> GangState:
            body: dict[str, Any] = {"lease": lease}
            if wait > 0:
                body["wait"] = wait
            if seen is not None:
                body["since"] = seen
            data = self._request(routes.GANG.at(id=inv_id), body, wait_s=wait)
            return _record(GangState, data)

        if since is None:  # the version as it stands: one read, then a wait past it
            first = once(0.0, None)
            if wait_s <= 0:
                return first
            since = first.version
        seen = since
        return self._long_poll(wait_s, lambda wait: once(wait, seen), lambda g: g.version > seen)

    def gang_ready(
        self, inv_id: str, lease: str, *, addr: str | None = None, port: int | None = None
    ) -> GangState:
        body: dict[str, Any] = {"lease": lease, "addr": addr, "port": port}
        return _record(GangState, self._request(routes.GANG_READY.at(id=inv_id), body))

    def gang_progress(self, inv_id: str, lease: str, *, hung: bool = False) -> GangState:
        body = {"lease": lease, "hung": hung}
        return _record(GangState, self._request(routes.GANG_PROGRESS.at(id=inv_id), body))

    def gang_notice(self, inv_id: str, lease: str, *, until: float) -> GangState:
        body = {"lease": lease, "until": until}
        return _record(GangState, self._request(routes.GANG_NOTICE.at(id=inv_id), body))

    def renew(self, leases: Sequence[str], lease_s: float) -> dict[str, bool]:
        if not leases:
            return {}
        data = self._request(routes.RENEW, {"leases": list(leases), "lease_s": lease_s})
        return {str(k): bool(v) for k, v in data["leases"].items()}

    # -- job runtimes -------------------------------------------------------------------------

    def runtime_missing(self, shas: Sequence[str]) -> list[str]:
        data = self._request(routes.RUNTIME_MISSING, {"blobs": list(shas)})
        return [str(s) for s in data["missing"]]

    def put_runtime_blobs(self, blobs: Sequence[tuple[str, bytes]]) -> int:
        if not blobs:
            return 0
        body = {"blobs": [{"sha256": sha, "data": bytes(data)} for sha, data in blobs]}
        return int(self._request(routes.PUT_RUNTIME_BLOBS, body)["stored"])

    def put_runtime_manifest(self, manifest: dict[str, Any]) -> str:
        return str(self._request(routes.PUT_RUNTIME_MANIFEST, {"manifest": manifest})["digest"])

    def runtime_manifest(self, digest: str) -> dict[str, Any]:
        data = self._request(routes.RUNTIME_MANIFEST.at(digest=digest))
        return dict(data["manifest"])

    def runtime_blob(self, sha: str) -> bytes:
        return bytes(self._request(routes.RUNTIME_BLOB.at(sha=sha))["data"])

    # -- queues -------------------------------------------------------------------------------

    def create_queue(self, name: str, **fields: Any) -> QueueInfo:
        return _record(QueueInfo, self._request(routes.CREATE_QUEUE, {"name": name, **fields}))

    def queue(self, name: str) -> QueueInfo:
        return _record(QueueInfo, self._request(routes.QUEUE.at(name=name)))

    def queues(self, *, state: str | None = None) -> list[QueueInfo]:
        data = self._request(routes.QUEUES, params={"state": state} if state else None)
        return [_record(QueueInfo, q) for q in data["queues"]]

    def patch_queue(self, name: str, changes: dict[str, Any]) -> QueueInfo:
        data = self._request(
            routes.PATCH_QUEUE.at(name=name), dict(changes), params={"elasticity": "merge"}
        )
        return _record(QueueInfo, data)

    def set_queue_state(self, name: str, action: str) -> QueueInfo:
        route = routes.QUEUE_ACTIONS.get(action)
        if route is None:
            raise InvalidArgument(f"unknown queue action '{action}'; use archive|unarchive|drain")
        return _record(QueueInfo, self._request(route.at(name=name)))

    def delete_queue(self, name: str, *, force: bool = False) -> None:
        self._request(
            routes.DELETE_QUEUE.at(name=name), params={"force": "true"} if force else None
        )

    def events(self, name: str, *, limit: int = 50) -> list[dict[str, Any]]:
        data = self._request(
            routes.QUEUE_EVENTS.at(name=name), params={"verbose": "true", "limit": limit}
        )
        return list(data["events"])

    def stats(self, name: str) -> dict[str, Any]:
        return dict(self._request(routes.QUEUE_STATS.at(name=name)))

    # -- worker rows --------------------------------------------------------------------------

    def register_worker(self, name: str, **fields: Any) -> WorkerInfo:
        body = {"name": name, **fields}
        if "queues" in body:
            body["queues"] = list(body["queues"])
        worker = _record(WorkerInfo, self._request(routes.REGISTER_WORKER, body))
        self._draining.registered(name)
        return worker

    def heartbeat(
        self, worker_id: str, load: dict[str, Any], *, state: str = "alive"
    ) -> WorkerInfo:
        """The server lets go of the worker's claim long-poll when `state` is draining."""
        data = self._request(routes.HEARTBEAT.at(ref=worker_id), {"load": load, "state": state})
        worker = _record(WorkerInfo, data)
        self._draining.said(worker.name, state)
        return worker

    def worker(self, ref: str) -> WorkerInfo:
        return _record(WorkerInfo, self._request(routes.WORKER.at(ref=ref)))

    def workers(self) -> list[WorkerInfo]:
        data = self._request(routes.WORKERS)
        return [_record(WorkerInfo, w) for w in data["workers"]]

    def update_worker_queues(
        self, ref: str, *, add: Sequence[str] = (), remove: Sequence[str] = ()
    ) -> WorkerInfo:
        data = self._request(
            routes.WORKER_QUEUES.at(id=ref), {"add": list(add), "remove": list(remove)}
        )
        return _record(WorkerInfo, data)

    def set_worker_state(self, ref: str, state: str) -> WorkerInfo:
        data = self._request(routes.WORKER_STATE.at(ref=ref), {"state": state})
        return _record(WorkerInfo, data)

    # -- jobs ---------------------------------------------------------------------------------

    def invocations(
        self,
        *,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 50,
        before: str | None = None,
        map_id: str | None = None,
    ) -> list[Invocation]:
        """Newest first; rows carry no result bytes (`invocation(id)` reads one with it)."""
        params: dict[str, Any] = {"limit": limit}
        filters = (("queue", queue), ("state", state), ("before", before), ("map", map_id))
        for key, value in filters:
            if value is not None:
                params[key] = value
        data = self._request(routes.INVOCATIONS, params=params)
        return [_record(Invocation, row) for row in data["invocations"]]

    def retry(self, inv_id: str) -> Invocation:
        """Requeue a failed / killed / timeout invocation as a new attempt of the same id."""
        data = self._request(routes.RETRY.at(id=inv_id))
        return _record(Invocation, data)

    def replace_elasticity(self, name: str, elasticity: dict[str, Any]) -> QueueInfo:
        """Set a queue's whole elasticity object, its kind included (`lakeshore compose`).

        A PATCH whose elasticity names its kind replaces the object (the Queues page's rule);
        `patch_queue` sends `?elasticity=merge` instead, so it cannot do this.
        """
        body = {"elasticity": {**elasticity, "kind": elasticity.get("kind", "none")}}
        return _record(QueueInfo, self._request(routes.PATCH_QUEUE.at(name=name), body))

    def trim_retention(
        self,
        *,
        frames_older_than_s: float | None = None,
        invocations_older_than_s: float | None = None,
    ) -> Trimmed:
        """The server trims this namespace (POST /retention/trim); see plane/retention.py."""
        body = {
            "frames_older_than_s": frames_older_than_s,
            "invocations_older_than_s": invocations_older_than_s,
        }
        return Trimmed.from_public(self._request(routes.TRIM_RETENTION, body))

    # -- named provider configs ---------------------------------------------------------------

    def add_provider(self, name: str, kind: str, config: dict[str, Any]) -> ProviderInfo:
        body = {"name": name, "kind": kind, "config": config}
        return _record(ProviderInfo, self._request(routes.ADD_PROVIDER, body))

    def providers(self) -> list[ProviderInfo]:
        data = self._request(routes.PROVIDERS)
        return [_record(ProviderInfo, p) for p in data["providers"]]

    def provider(self, name: str) -> ProviderInfo:
        return _record(ProviderInfo, self._request(routes.PROVIDER.at(name=name)))

    def delete_provider(self, name: str) -> None:
        self._request(routes.DELETE_PROVIDER.at(name=name))

    # -- cron schedules (sdk/plane/schedules.py) ----------------------------------------------

    def put_schedule(
        self,
        name: str,
        *,
        cron: str,
        queue: str,
        template: SubmitRequest,
        tz: str = "UTC",
        catchup: str = "latest",
        overlap: str = "allow",
    ) -> ScheduleInfo:
        item = _submit_item(template)
        if item.get("key") is None:  # a template has none: each firing keys its own job
            item.pop("key", None)
        body = {"cron": cron, "queue": queue, "tz": tz, "catchup": catchup, "overlap": overlap}
        to = routes.PUT_SCHEDULE.at(name=name)
        return _record(ScheduleInfo, self._request(to, {**body, **item}))

    def schedules(self) -> list[ScheduleInfo]:
        data = self._request(routes.SCHEDULES)
        return [_record(ScheduleInfo, s) for s in data["schedules"]]

    def schedule(self, name: str) -> ScheduleInfo:
        return _record(ScheduleInfo, self._request(routes.SCHEDULE.at(name=name)))

    def set_schedule_state(self, name: str, action: str) -> ScheduleInfo:
        route = routes.SCHEDULE_ACTIONS.get(action)
        if route is None:
            raise InvalidArgument(f"action must be one of pause|resume, got {action!r}")
        return _record(ScheduleInfo, self._request(route.at(name=name)))

    def delete_schedule(self, name: str) -> None:
        self._request(routes.DELETE_SCHEDULE.at(name=name))

    def run_schedule(self, name: str, run_id: str | None = None) -> str:
        # Minted here, so a POST sent again after a lost answer returns the same job.
        body = {"run_id": new_id() if run_id is None else run_id}
        return str(self._request(routes.RUN_SCHEDULE.at(name=name), body)["id"])


#: The seeds' name for `HttpPlane`, kept: the same class.
HttpDispatch = HttpPlane


class HttpFleet:
    """The fleet routes of a server (`/v1/fleet`): what `lakeshore-controller --url` runs on.

    The same calls `SqlStore` answers on the database (`fleet`, `fleet_view`, `all_providers`,
    `set_worker_state`, `record_events`, leadership leases), across every namespace, so it needs
    an admin token.
    """

    def __init__(self, url: str, *, token: str | None = None) -> None:
        self._plane = HttpPlane(url, token=token)

    def __repr__(self) -> str:
        return f"HttpFleet({self._plane.url!r})"

    def close(self) -> None:
        self._plane.close()

    def _fleet(self) -> dict[str, Any]:
        data: dict[str, Any] = self._plane._request(routes.FLEET)
        return data

    def fleet(self) -> tuple[dict[str, list[dict[str, Any]]], list[ProviderInfo]]:
        """Rows and provider configs in one request (a controller tick's one read)."""
        data = self._fleet()
        rows = {k: list(data[k]) for k in ("queues", "counts", "running", "workers")}
        rows["shapes"] = list(data.get("shapes", []))  # a server before issue 34 sends none
        return rows, [_record(ProviderInfo, p) for p in data["providers"]]

    def fleet_view(self) -> dict[str, list[dict[str, Any]]]:
        return self.fleet()[0]

    def all_providers(self) -> list[ProviderInfo]:
        return self.fleet()[1]

    def set_worker_state(self, ns: str, ref: str, state: str) -> WorkerInfo:
        body = {"namespace": ns, "ref": ref, "state": state}
        data = self._plane._request(routes.FLEET_WORKER_STATE, body)
        return _record(WorkerInfo, data)

    def record_events(
        self, events: Sequence[tuple[str, str, str, dict[str, Any]]], now: float
    ) -> None:
        items = [{"namespace": n, "queue": q, "kind": k, "detail": d} for n, q, k, d in events]
        body = {"events": items, "now": now}
        self._plane._request(routes.FLEET_EVENTS, body)

    def acquire_leadership(self, name: str, holder: str, ttl_s: float) -> bool:
        body = {"name": name, "holder": holder, "ttl_s": ttl_s}
        data = self._plane._request(routes.FLEET_LEADER, body)
        return bool(data["leading"])

    def release_leadership(self, name: str, holder: str) -> None:
        body = {"name": name, "holder": holder, "release": True}
        self._plane._request(routes.FLEET_LEADER, body)
