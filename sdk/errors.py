"""The errors a user of Lakeshore can catch.

Every error a plane raises is a `DispatchError`, so a caller can catch one type; the subclasses
exist where a caller reacts differently (back off on a full queue, fix the name on a bad one).
The HTTP transport maps each to a status code and back, so the same class is raised whichever
plane the caller talks to.
"""

from __future__ import annotations


class DispatchError(Exception):
    """The plane refused or could not complete an operation."""

    #: Stable machine-readable code, carried in the HTTP error body.
    code = "dispatch_error"
    #: HTTP status the control plane answers with.
    status = 400


class InvalidArgument(DispatchError):
    """A caller passed a value outside what is allowed; nothing was changed."""

    code = "invalid_argument"
    status = 400


class NotFound(DispatchError):
    """An unknown namespace, queue, invocation or worker."""

    code = "not_found"
    status = 404


class Conflict(DispatchError):
    """The operation conflicts with the current state (rm with members, archive default)."""

    code = "conflict"
    status = 409


class LeaseLost(DispatchError):
    """A settle or post from a worker that no longer holds the job's lease."""

    code = "lease_lost"
    status = 409


class QueueFullError(DispatchError):
    """Admission refused the submit: the queue is at `max_depth` or over its rate limit."""

    code = "queue_full"
    status = 429

    def __init__(
        self, message: str, *, retry_after_s: float | None = None, block: bool = False
    ) -> None:
        super().__init__(message)
        #: When trying again may succeed (the HTTP Retry-After header).
        self.retry_after_s = retry_after_s
        #: The queue says on_full: block, so a submit may wait for room instead of failing.
        self.block = block


class Unauthorized(DispatchError):
    """No token, or a token the control plane does not know."""

    code = "unauthorized"
    status = 401


class Forbidden(DispatchError):
    """A valid token used against a namespace outside its org, or without the scope the
    operation (or the payload: code needs `submit-code`) needs (docs/security.md)."""

    code = "forbidden"
    status = 403


class PayloadTooLarge(DispatchError):
    """A request body above the control plane's limit."""

    code = "payload_too_large"
    status = 413


class DecodeError(DispatchError):
    """Bytes that are not a valid Lakeshore wire frame."""

    code = "decode_error"
    status = 400


class Unavailable(DispatchError):
    """The plane's own backing store could not be reached (a cut connection): retry."""

    code = "unavailable"
    status = 503


class ServerBusy(Unavailable):
    """The control plane holds as many request bodies as its memory budget allows.

    The request was refused before its body was read, so nothing changed and sending it again
    is safe whatever it was: the HTTP client does so itself, after `retry_after_s`, within the
    call's timeout. An `Unavailable`, so a worker's retry loop treats it as the outage it is.
    """

    code = "server_busy"
    status = 429

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        #: When trying again may succeed (the HTTP Retry-After header).
        self.retry_after_s = retry_after_s


class StoreDamaged(DispatchError):
    """The plane's database file is damaged or is not a Lakeshore database: not the client's
    fault, and not fixed by retrying; the message names the file and the way to recover."""

    code = "store_damaged"
    status = 503


ERRORS_BY_CODE: dict[str, type[DispatchError]] = {
    cls.code: cls
    for cls in (
        DispatchError,
        InvalidArgument,
        NotFound,
        Conflict,
        LeaseLost,
        QueueFullError,
        Unauthorized,
        Forbidden,
        PayloadTooLarge,
        DecodeError,
        Unavailable,
        ServerBusy,
        StoreDamaged,
    )
}
