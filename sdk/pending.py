"""Why a queued job waits, in words: the one wording `lakeshore jobs show` and the dashboard share.

The store keeps two fields on a queued job (store/schedulable.py, migration 35): the reason, for
machines (`resources`, `reserved_for:<id>`, `waiting_for_capacity`, `unschedulable`), and the
words the sweep or a reserving worker wrote. A reader shows both, so a person sees at once
whether the job can never run here or only waits for room, and a script can match the reason.
Kept here, not in the CLI, so that the server can say it the same way without importing the CLI.
"""

from __future__ import annotations

#: A few words per reason, for a place too narrow for the whole sentence (a row's tag).
LABELS = {
    "unschedulable": "can never run",
    "waiting_for_capacity": "waiting for capacity",
    "resources": "waiting for room",
}
#: The label of `reserved_for:<id>`: a job a live daemon could run that the head holds back.
HELD_BACK = "held back"
#: The reasons a queue counts (the dashboard's, `lakeshore status`'s columns), in that order.
COUNTED = ("unschedulable", "waiting_for_capacity")


def pending_text(reason: str | None, words: str | None) -> str | None:
    """`reason: words` as `lakeshore jobs show` prints it on its `pending` row; None when the
    store has nothing to say (a live daemon could run the job: it waits for its turn)."""
    if not reason and not words:
        return None
    return f"{reason or '-'}" + (f": {words}" if words else "")


def pending_label(reason: str | None) -> str | None:
    """A reason in a few words; None for none (an unknown reason is shown as itself)."""
    if not reason:
        return None
    if reason.startswith("reserved_for:"):
        return HELD_BACK
    return LABELS.get(reason, reason)
