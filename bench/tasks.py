"""What Lakeshore's daemons run in the bench: the no-op handler and the Ref echo."""

from __future__ import annotations


def noop(x: object) -> object:
    return x


def echo_ref(ref: object, durable: bool = False) -> object:
    """The payload suite's Ref echo: read the array by its Ref, hand back a Ref to a new copy
    (the worker writes its result once, as Ray's worker does into its object store; `[:]` is a
    new view, so put copies it instead of recognising the object it came from)."""
    import dreamlake.lakeshore as dls

    assert isinstance(ref, dls.Ref)
    return dls.put(dls.get(ref)[:], durable=durable)


def pass_on(ref: object) -> object:
    """One link of the payload suite's chain: read the array (a view, its hash checked) and hand
    the same object on to the next job; the bytes stay where the first put wrote them."""
    import dreamlake.lakeshore as dls

    assert isinstance(ref, dls.Ref)
    return dls.put(dls.get(ref), durable=ref.durable)


def anon_growth_reading(ref: object) -> int:
    """Bytes of anonymous memory this worker gained reading the array `ref` holds and summing it
    (a copy would show as the array's size)."""
    import dreamlake.lakeshore as dls

    assert isinstance(ref, dls.Ref)
    before = _rss_anon()
    total = float(dls.get(ref).sum(dtype="float64"))
    grew = _rss_anon() - before
    assert total >= 0
    return grew


def _rss_anon() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")
