"""Cron slots in a time zone, as instants: what a schedule fires at (issue 36, item 3).

The expression is croniter's; the time zone is zoneinfo's. croniter walks *wall-clock* times
here, naive, where it is plain calendar arithmetic with no DST in it; each wall time it yields
is then placed on the time line by zoneinfo with `fold=0`. That one rule is what a cron user
expects of the two DST transitions:

- a wall time that does not exist (the hour skipped in spring: 02:30 in Berlin on the last
  Sunday of March) is read with the offset before the jump, so it fires once, at the wall time
  plus the gap's length (03:30 CEST; in Lord Howe's 30-minute gap, 02:10 fires at 02:40). Each
  skipped wall time fires (`*/15 2 * * *` fires at 03:00, 03:15, 03:30 and 03:45 CEST that
  day); where one lands on a slot that exists (`0 * * * *`: 02:00 -> 03:00), the two are one
  instant and fire once;
- a wall time that occurs twice (the hour repeated in autumn) is its first occurrence: it fires
  once, and the second pass through that hour fires nothing.

The slots are the set of those instants. Placing wall times with `fold=0` is not monotone: the
walls of a gap land on the same instants as the walls just after it (02:30 and 03:30 are both
01:30Z in Berlin), so a walk in wall order yields a gap's slots ahead of later walls' earlier
ones. `_forward` and `_backward` therefore start the walk early enough to see every wall a jump
moved (`_around`), and hold each slot back until no wall still to come can land before it
(ahead) or after it (back): listing, chained firing and a late firing's latest slot all read
the same set, in time order.

croniter's own time-zone handling is not used: it walks aware datetimes across the transition
and has mis-stepped there in several releases (its issue tracker); walking naive wall times
leaves it nothing to get wrong. A slot is an instant (epoch seconds); slots are strictly
increasing, and a schedule's idempotency key names one by its UTC time (`slot_key`).

`clock()` is the time firing reads: the system clock, or the epoch seconds written in the file
LAKESHORE_SCHEDULE_CLOCK names, so a test (or a drill) can run many processes' firing logic
over hours of slots in seconds.
"""

from __future__ import annotations

import datetime as dt
import heapq
import os
import time
from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from dreamlake.lakeshore.errors import InvalidArgument

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from croniter import croniter as Croniter

#: The environment variable naming a file whose content is the firing clock (epoch seconds).
CLOCK_ENV = "LAKESHORE_SCHEDULE_CLOCK"
#: Macros croniter takes that mean a time of day (`@reboot` means none, and is refused).
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
#: Steps a walk takes between two slots before giving up (a minute cron through a repeated
#: hour needs 60).
_MAX_STEPS = 100_000
#: How far a wall clock's jump reaches: a walk looks this far back for a change of offset that
#: moved the walls it must see (a DST hour; the longest in tzdata is Samoa's skipped day, 2011).
_JUMP_S = 26 * 3600
_SECOND = dt.timedelta(seconds=1)
_UTC = dt.timezone.utc


def clock() -> float:
    """Now, for firing: LAKESHORE_SCHEDULE_CLOCK's file when set (a test's clock), else the
    system's. An unreadable clock file is the system clock: firing never stops on it."""
    path = os.environ.get(CLOCK_ENV)
    if path:
        try:
            with open(path, encoding="ascii") as f:
                return float(f.read().strip())
        except (OSError, ValueError):
            pass
    return time.time()


def real_clock() -> bool:
    """Whether firing reads the system clock (no LAKESHORE_SCHEDULE_CLOCK): only then may a
    process set a wake-up for a slot's time."""
    return not os.environ.get(CLOCK_ENV)


def check_tz(tz: object) -> str:
    """An IANA time zone name zoneinfo knows (`Europe/Berlin`, `UTC`)."""
    if not isinstance(tz, str) or not tz or len(tz) > 64:
        raise InvalidArgument(f"tz must be an IANA time zone name like 'Europe/Berlin', got {tz!r}")
    from zoneinfo import ZoneInfoNotFoundError  # at use: a CLI read never places a slot

    try:
        _zone(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(
            f"unknown time zone {tz!r}: use an IANA name like 'Europe/Berlin', "
            "'America/New_York' or 'UTC'"
        ) from None
    return tz


def check_cron(expr: object) -> str:
    """Five fields (minute hour day-of-month month day-of-week) or a macro; seconds and years
    fields are refused, since a slot is a minute."""
    from croniter import croniter

    shown = repr(expr)[:80]
    if not isinstance(expr, str) or len(expr) > 256:
        raise InvalidArgument(f"cron must be a string like '0 3 * * *', got {shown}")
    text = " ".join(expr.split())
    fields = text.split(" ")
    macro = text.lower() in MACROS
    if not macro and (len(fields) != 5 or not croniter.is_valid(text)):
        raise InvalidArgument(
            f"invalid cron expression {shown}: use five fields, minute hour day-of-month month "
            f"day-of-week (e.g. '0 3 * * *', '*/15 * * * 1-5'), or one of {', '.join(MACROS)}"
        )
    return text.lower() if macro else text


class Cron:
    """A checked expression in a zone: the slots it names, as instants."""

    def __init__(self, expr: str, tz: str) -> None:
        self.expr = check_cron(expr)
        self.tz = check_tz(tz)
        self.zone = _zone(self.tz)
        self._walker: Croniter | None = None

    def instant(self, wall: dt.datetime) -> float:
        """A naive wall time on the time line (fold=0: see the module's docstring)."""
        return wall.replace(tzinfo=self.zone, fold=0).timestamp()

    def wall(self, t: float) -> dt.datetime:
        """The naive wall time at instant `t`, in whole seconds."""
        return dt.datetime.fromtimestamp(int(t), self.zone).replace(tzinfo=None)

    def _iter(self, start: dt.datetime) -> Croniter:
        """The expression's walker, set at `start`: one per Cron, since croniter's parse costs
        more than a walk's steps (one walk at a time: `_forward` and `_backward` share it)."""
        if self._walker is None:
            from croniter import croniter

            self._walker = croniter(self.expr, start)
        else:
            self._walker.set_current(start, force=True)
        return self._walker

    def _offset(self, t: float) -> float:
        offset = dt.datetime.fromtimestamp(int(t), self.zone).utcoffset()
        return 0.0 if offset is None else offset.total_seconds()

    def _around(self, t: float) -> tuple[dt.datetime, dt.datetime]:
        """The earliest and the latest wall time whose slot can be instant `t`. Both are the
        clock's reading at `t` but just after a jump: within a spring gap's length after it,
        the gap's walls land after `t` (the earliest is the reading less the gap); within an
        autumn fold's length after it, the repeated walls' first pass lands before `t` (the
        latest is the reading plus the fold)."""
        reading = self.wall(t)
        now = self._offset(t)
        jump = now - self._offset(t - _JUMP_S)  # > 0: a gap in reach, < 0: a fold
        if jump and self._offset(t - abs(jump)) != now:  # `t` is within its length
            moved = reading - dt.timedelta(seconds=jump)
            return min(reading, moved), max(reading, moved)
        return reading, reading

    def _forward(self, t: float) -> Iterator[float]:
        """The slots after instant `t`, in order, each once. A slot is held until the walk
        reaches its wall clock's reading: no wall from there on lands before it."""
        it = self._iter(self._around(t)[0])
        pending: list[float] = []
        last = t
        steps = 0
        while True:
            try:
                wall = _next(it)
            except ValueError:  # croniter's "no later date": what is held is all there is
                yield from sorted(s for s in set(pending) if s > last)
                raise
            at = self.instant(wall)
            if at > last:
                heapq.heappush(pending, at)
            while pending and wall >= self.wall(pending[0]):
                slot = heapq.heappop(pending)
                if slot > last:
                    yield slot
                    last, steps = slot, 0
            steps += 1
            if steps > _MAX_STEPS:
                raise InvalidArgument(f"cron {self.expr!r} in {self.tz} has no slot after {t}")

    def _backward(self, t: float) -> Iterator[float]:
        """The slots at or before instant `t`, latest first, each once, as far back as croniter
        walks. A slot is held until the walk is back at the earliest wall that could be it:
        no wall before that lands after it."""
        it = self._iter(self._around(t)[1] + _SECOND)
        pending: list[float] = []  # negated: a max-heap
        last = t + 1
        for _ in range(_MAX_STEPS):
            try:
                wall = it.get_prev(dt.datetime)
            except (ValueError, KeyError):  # croniter's "no earlier date"
                break
            at = self.instant(wall)
            if at <= t:
                heapq.heappush(pending, -at)
            while pending and wall <= self._around(-pending[0])[0]:
                slot = -heapq.heappop(pending)
                if slot < last:
                    yield slot
                    last = slot
        yield from sorted((s for s in {-p for p in pending} if s < last), reverse=True)

    def next_after(self, t: float) -> float:
        """The first slot strictly after instant `t`."""
        return next(self._forward(t))

    def latest_at_or_before(self, t: float) -> float | None:
        """The last slot at or before instant `t` (None: none in the walk's reach)."""
        return next(self._backward(t), None)

    def slots(self, after: float, until: float, limit: int) -> list[float]:
        """Up to `limit` slots in (after, until], in order."""
        out: list[float] = []
        if limit <= 0 or until <= after:
            return out
        try:
            for at in self._forward(after):
                if at > until:
                    break
                out.append(at)
                if len(out) >= limit:
                    break
        except ValueError:  # no later date: the list ends
            pass
        return out

    def check_fires(self, now: float) -> None:
        """Refuse an expression that never matches a date (`0 0 31 2 *`)."""
        from croniter import CroniterBadDateError

        try:
            self.next_after(now)
        except CroniterBadDateError:
            raise InvalidArgument(
                f"cron {self.expr!r} never fires: no date matches it (check day and month)"
            ) from None


def slot_key(name: str, slot: float) -> str:
    """The idempotency key of a schedule's slot: `schedule:<name>:<UTC time>`."""
    stamp = dt.datetime.fromtimestamp(slot, _UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"schedule:{name}:{stamp}"


def _next(it: Any) -> dt.datetime:
    wall: dt.datetime = it.get_next(dt.datetime)
    return wall


@lru_cache(maxsize=64)
def _zone(tz: str) -> ZoneInfo:
    from zoneinfo import ZoneInfo

    return ZoneInfo(tz)
