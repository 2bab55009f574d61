"""Cron schedules: the rows, and firing them (the rules are in ../schedules.py and ../cron.py).

Every process that sweeps fires: the server's sweeper, an embedded plane's reads, and every
claim on its way (at most every SWEEP_EVERY_S), so an idle daemon's safety poll is enough on a
box with no server. The due schedules of one queue fire in one transaction, which for each

1. reads the row only if it is still due, locked (Postgres `FOR UPDATE SKIP LOCKED`; SQLite's
   `BEGIN IMMEDIATE` holds the database): a second firer skips it instead of queueing on it;
2. decides the slot (`plan`: catchup, and `overlap: skip` against the last job's state);
3. submits the job through the submit path itself, keyed `schedule:<name>:<slot>`;
4. moves `next_fire_at` on by compare-and-set from the value it read; a firer that lost the
   race rolls its whole transaction back, jobs included, and fires the batch one by one.

So a slot fires once however many processes fire, and a crash between any two steps leaves
either nothing or all of it.
"""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any

from dreamlake.lakeshore.errors import Conflict, InvalidArgument, NotFound, QueueFullError
from dreamlake.lakeshore.plane.connector import Row, Transaction
from dreamlake.lakeshore.plane.cron import Cron, clock, real_clock, slot_key
from dreamlake.lakeshore.plane.schedules import (
    Firing,
    ScheduleInfo,
    check_choice,
    check_run_id,
    check_schedule,
    manual_key,
    plan,
    schedule_info,
    template_of,
)
from dreamlake.lakeshore.plane.wakeup import work_key
from dreamlake.lakeshore.types import LIVE_STATES, SubmitRequest, check_name

from .base import SWEEP_EVERY_S, new_id
from .invocations import InvocationStore
from .namespaces import NamespaceStore

if TYPE_CHECKING:
    import logging


def _log() -> logging.Logger:
    """The schedules' logger, imported at its first line: a CLI read that opens the store logs
    nothing, and logging is 4 ms of its start."""
    import logging

    return logging.getLogger("dreamlake.lakeshore.schedules")


#: Due schedules one probe reads, and firings one `fire_schedules` call runs at most (a
#: catchup of `all` after a long outage goes on at the next sweep).
DUE_BATCH = 100
MAX_FIRINGS = 1000


class _LostRace(Exception):
    """Another firer moved the row on first: this transaction's job must not commit."""


class ScheduleStore(InvocationStore, NamespaceStore):
    """Schedule rows, and the firing every sweep and claim runs."""

    #: When this process last looked for due schedules from a claim (time.monotonic()), and
    #: the earliest slot it then saw to come (wall clock; 0: look at every claim until known).
    _fired_at = 0.0
    _upcoming = 0.0

    def put_schedule(
        self,
        ns: str,
        name: str,
        *,
        cron: str,
        queue: str,
        template: SubmitRequest,
        tz: str = "UTC",
        catchup: str = "latest",
        overlap: str = "allow",
    ) -> ScheduleInfo:
        """Create the schedule, or replace its cron, queue and job (a deploy that runs
        `dls.schedule` again). A replaced schedule keeps its state (paused stays paused), its
        history and counts, and its next slot unless the cron or zone changed."""
        now = time.time()
        checked = check_schedule(name, cron, tz, queue, catchup, overlap, template, now)
        self.ensure_namespace(ns)
        fields: dict[str, Any] = {
            "ns": ns,
            "name": name,
            "queue": queue,
            "cron": checked.expr,
            "tz": checked.tz,
            "catchup": catchup,
            "overlap": overlap,
            "payload": bytes(template.payload),
            "priority": float(template.priority),
            "max_attempts": template.max_attempts,
            "timeout_s": template.timeout_s,
            "resources": None if template.resources is None else json.dumps(template.resources),
            "max_preemptions": template.max_preemptions,
            "now": now,
        }
        with self.connector.transaction() as tx:
            first = checked.next_after(clock())
            if tx.one("schedule_insert", next_fire_at=first, **fields) is None:
                old = tx.one("schedule_get", ns=ns, name=name)
                assert old is not None  # the row that refused the insert
                same = (old["cron"], old["tz"]) == (checked.expr, checked.tz)
                tx.all(
                    "schedule_update",
                    next_fire_at=float(old["next_fire_at"]) if same else first,
                    **fields,
                )
            row = tx.one("schedule_get", ns=ns, name=name)
        assert row is not None
        return schedule_info(row)

    def schedule(self, ns: str, name: str) -> ScheduleInfo:
        return self._named("schedule_get", "schedule", schedule_info, ns, name=name)

    def schedules(self, ns: str) -> list[ScheduleInfo]:
        with self.connector.transaction(write=False) as tx:
            return [schedule_info(r) for r in tx.all("schedule_list", ns=ns)]

    def delete_schedule(self, ns: str, name: str) -> None:
        """Remove the schedule; the jobs it fired stay (they are jobs like any other)."""
        with self.connector.transaction() as tx:
            if tx.one("schedule_delete", ns=ns, name=name) is None:
                raise NotFound(f"unknown schedule '{name}' in namespace '{ns}'")

    def set_schedule_state(self, ns: str, name: str, action: str) -> ScheduleInfo:
        """`pause` stops firing; `resume` fires again from the next slot after now, or, with
        catchup `all`, from the first slot the pause held back."""
        check_choice(action, "action", ("pause", "resume"))
        check_name(name, "schedule")
        with self.connector.transaction() as tx:
            row = tx.one("schedule_get", ns=ns, name=name)
            if row is None:
                raise NotFound(f"unknown schedule '{name}' in namespace '{ns}'")
            due = float(row["next_fire_at"])
            if action == "resume" and row["state"] == "paused" and row["catchup"] != "all":
                due = Cron(row["cron"], row["tz"]).next_after(clock())
            state = "paused" if action == "pause" else "active"
            tx.one(
                "schedule_set_state",
                ns=ns,
                name=name,
                state=state,
                next_fire_at=due,
                now=time.time(),
            )
            row = tx.one("schedule_get", ns=ns, name=name)
        assert row is not None
        return schedule_info(row)

    def run_schedule(self, ns: str, name: str, run_id: str | None = None) -> str:
        """Submit the schedule's job now, outside its cron (`lakeshore schedules run-now`): the
        id of the job. Keyed `schedule:<name>:manual:<run_id>`, so a request sent again with
        its `run_id` returns the same job; the schedule's row is not touched (its next slot,
        counts and last firing are its cron's), and a paused schedule runs too."""
        check_name(name, "schedule")
        run_id = new_id() if run_id is None else check_run_id(run_id)
        with self.connector.transaction(write=False) as tx:
            row = tx.one("schedule_get", ns=ns, name=name)
        if row is None:
            raise NotFound(f"unknown schedule '{name}' in namespace '{ns}'")
        (job,) = self.submit(ns, row["queue"], [template_of(row, manual_key(name, run_id))])
        return job

    # -- firing -------------------------------------------------------------------------------

    def fire_schedules(self, now: float | None = None) -> int:
        """Fire every due slot of every namespace's schedules (at most MAX_FIRINGS); how many
        jobs were submitted. `now`: the firing clock (default `cron.clock()`)."""
        at = clock() if now is None else now
        fired = 0
        for _ in range(MAX_FIRINGS // DUE_BATCH):
            with self.connector.transaction(write=False) as tx:
                due = tx.all("schedules_due", now=at, limit=DUE_BATCH)
                upcoming = None if due else tx.one("schedules_next", now=at)
            if not due:
                if now is None:  # on a test's clock, no wake-up: it is not the wall clock
                    self._expect(upcoming if real_clock() else None)
                break
            moved = 0
            for (ns, queue), names in _by_queue(due).items():
                done = self._fire_queue(ns, queue, names, at)
                moved += done[0]
                fired += done[1]
            if not moved:  # every one was another firer's: it goes on with them
                break
        return fired

    def _expect(self, upcoming: Row | None) -> None:
        """Remember the next slot, and wake this process's claims on its queue then: an idle
        claim fires it and takes the job, late by a wake-up, not by a safety poll."""
        if upcoming is None:
            self._upcoming = math.inf
            return
        self._upcoming = float(upcoming["next_fire_at"])
        ns, queue = upcoming["namespace"], upcoming["queue"]
        self.waker.notify_at(self._upcoming, work=[work_key(ns, queue)])

    def _fire_queue(self, ns: str, queue: str, names: list[str], now: float) -> tuple[int, int]:
        """Fire the due schedules of one queue in one transaction (one commit, one fsync, for
        a hundred schedules due at 03:00); (rows moved on, jobs submitted). One queue's only:
        a transaction that locked one queue's counter rows must not go on to lock another's
        (Postgres would deadlock it against a claim across both). A lost race rolls the batch
        back, and each one is fired alone."""
        moved = fired = 0
        try:
            with self.connector.transaction() as tx:
                for name in names:
                    row = tx.one("schedule_for_fire", ns=ns, name=name, now=now)
                    firing = None if row is None else _planned(row, now)
                    if row is None or firing is None:
                        continue
                    moved += 1
                    fired += self._fire_in(tx, row, firing, now)
        except _LostRace:
            moved = fired = 0
            for name in names:
                outcome = self._fire(ns, name, now)
                moved += outcome is not None
                fired += bool(outcome)
            return moved, fired
        if fired:
            self.waker.notify(work=[work_key(ns, queue)], reads=False)
        return moved, fired

    def _fire(self, ns: str, name: str, now: float) -> bool | None:
        """Fire one due schedule's next slot: True if a job was submitted, False if the slot
        passed unfired (catchup, overlap, a refused submit), None if another firer had it."""
        queue = ""
        try:
            with self.connector.transaction() as tx:
                row = tx.one("schedule_for_fire", ns=ns, name=name, now=now)
                firing = None if row is None else _planned(row, now)
                if row is None or firing is None:
                    return None
                queue = row["queue"]
                job = self._fire_in(tx, row, firing, now)
        except _LostRace:
            return None
        if job:
            self.waker.notify(work=[work_key(ns, queue)], reads=False)
        return job

    def _fire_in(self, tx: Transaction, row: Row, firing: Firing, now: float) -> bool:
        job: str | None = None
        error: str | None = None
        if firing.slot is not None:
            error = self._overlapping(tx, row)
            if error is None:
                try:
                    job = self._submit_slot(tx, row, firing.slot, now)
                except (QueueFullError, Conflict) as exc:
                    error = f"slot not fired: {exc}"
        submitted = job is not None
        moved = tx.one(
            "schedule_fired",
            ns=row["namespace"],
            name=row["name"],
            due=row["next_fire_at"],
            next_fire_at=firing.next_fire_at,
            slot=firing.slot if submitted else None,
            fired_at=now if submitted else None,
            job=job,
            fired=int(submitted),
            missed=firing.missed + int(firing.slot is not None and not submitted),
            error=error,
        )
        if moved is None:
            raise _LostRace
        return submitted

    def _overlapping(self, tx: Transaction, row: Row) -> str | None:
        """Under `overlap: skip`, why this slot is skipped (its last job still live)."""
        last = row["last_job"]
        if row["overlap"] != "skip" or last is None:
            return None
        state = tx.one("schedule_job_state", id=last)
        if state is None or state["state"] not in LIVE_STATES:
            return None
        return f"slot skipped: job {last} is still {state['state']} (overlap: skip)"

    def _submit_slot(self, tx: Transaction, row: Row, slot: float, now: float) -> str:
        ns, queue = row["namespace"], row["queue"]
        request = template_of(row, slot_key(row["name"], slot))
        ids = [new_id()]
        self._insert(
            tx, ns, queue, [request], ids, [0], now, tx.one("get_queue", ns=ns, name=queue)
        )
        return ids[0]

    # -- every sweep fires --------------------------------------------------------------------

    def sweep(self) -> int:
        return super().sweep() + self._fire_due()

    def _claiming(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Every claim (claim_many, ack_and_claim, a submit's hand-off) fires what is due
        first, before its transaction: a job fired now can be the one it takes."""
        self._fire_due(throttled=True)
        return super()._claiming(*args, **kwargs)

    def _fire_due(self, *, throttled: bool = False) -> int:
        """Fire what is due; `throttled` (a claim's), at most every SWEEP_EVERY_S unless a slot
        it expects has come. A failed firing is retried at the next sweep: it never fails the
        claim or sweep it rides on."""
        if throttled:
            tick = time.monotonic()
            # Throttled until the slot it expects: the claim its wake-up brings fires at once
            if tick - self._fired_at < SWEEP_EVERY_S and time.time() < self._upcoming:
                return 0
            self._fired_at = tick
            self._upcoming = 0.0  # until this pass says what comes next
        try:
            return self.fire_schedules()
        except Exception:  # a database hiccup: the next sweep fires it
            _log().exception("schedules: firing failed; the next sweep retries")
            return 0


def _planned(row: Row, now: float) -> Firing | None:
    """The row's firing, if this process can plan it (its cron and zone, with this box's
    tzdata); a row it cannot is left to a process that can, and logged."""
    try:
        return plan(row, now)
    except InvalidArgument as exc:
        _log().error("schedules: %s/%s cannot fire here: %s", row["namespace"], row["name"], exc)
        return None


def _by_queue(due: list[Row]) -> dict[tuple[str, str], list[str]]:
    """Due schedules' names by (namespace, queue), in a fixed order."""
    out: dict[tuple[str, str], list[str]] = {}
    for row in sorted(due, key=lambda r: (r["namespace"], r["queue"], r["name"])):
        out.setdefault((row["namespace"], row["queue"]), []).append(row["name"])
    return out
