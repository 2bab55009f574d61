"""What Lakeshore's daemons run in the bench: the no-op handler and the Ref echo."""

from __future__ import annotations


def noop(x: object) -> object:
    return x


def echo_ref(ref: object, durable: bool = False) -> object:
    """The payload suite's Ref echo: read the array by its Ref, hand back a Ref to a new copy
    (the worker writes its result once, as Ray's worker does into its object store)."""
    import dreamlake.lakeshore as dls

    assert isinstance(ref, dls.Ref)
    return dls.put(dls.get(ref), durable=durable)
