"""The runtime a submit attaches to its job: asked for, or the default of shipping own code.

A job whose body is code (a udf call, a thunk, a map's function) ships the producer's own
modules that the code reaches unless `Runtime(include_source=False)` says not to; a job whose
body is data, or a command, ships only what a `runtime=` asks for. Nothing is scanned or sent
for a job that ships nothing, so a plain-data producer pays nothing for this.
"""

from __future__ import annotations

from typing import Any, Final

from dreamlake.lakeshore.envelope import Envelope, Thunk
from dreamlake.lakeshore.errors import InvalidArgument

from .bundle import bundle_of, spec_of
from .spec import Runtime
from .upload import BlobPlane, upload

__all__ = ["DEFAULT_RUNTIME", "check_runtime", "runtime_for"]

#: What a code job ships when its submit names no runtime: its own modules.
DEFAULT_RUNTIME: Final = Runtime()


def check_runtime(runtime: object, where: str = "runtime") -> Runtime | None:
    if runtime is None or isinstance(runtime, Runtime):
        return runtime
    raise InvalidArgument(
        f"{where} must be a dls.Runtime(...) or None, not {type(runtime).__name__} {runtime!r}"
    )


def runtime_for(plane: BlobPlane, runtime: Runtime | None, body: Any) -> dict[str, Any] | None:
    """The invocation's `runtime` object for a job of `body`, its bundle put on `plane`
    first; None when the job brings nothing."""
    code = code_of(body)
    if runtime is None:
        if not code:
            return None
        runtime = DEFAULT_RUNTIME
    bundle = bundle_of(runtime, code)
    if bundle is not None:
        upload(plane, bundle)
    return spec_of(runtime, bundle)


def code_of(body: Any) -> tuple[Any, ...]:
    """The callable and arguments a code body runs (a Thunk or an Envelope of a call), whose
    modules the worker must import; () for data and commands."""
    if not isinstance(body, (Envelope, Thunk)) or body.fn is None:
        return ()
    return (body.fn, body.args, body.kwargs)
