"""Cron slots in a time zone, as instants: what a schedule fires at (issue 36, item 3).

The expression is croniter's; the time zone is zoneinfo's. croniter walks *wall-clock* times
here, naive, where it is plain calendar arithmetic with no DST in it; each wall time it yields
is then placed on the time line by zoneinfo with `fold=0`. That one rule is what a cron user
expects of the two DST transitions:

- a wall time that does not exist (the hour skipped in spring: 02:30 in Berlin on the last
  Sunday of March) is read with the offset before the jump, so it fires once, an hour later
  (03:30 CEST); where that lands on a slot that exists (`0 * * * *`: 02:00 -> 03:00), the two
  are one instant and fire once;
- a wall time that occurs twice (the hour repeated in autumn) is its first occurrence: it fires
  once, and the second pass through that hour fires nothing.

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
import os
import time
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dreamlake.lakeshore.errors import InvalidArgument

if TYPE_CHECKING:
    from croniter import croniter as Croniter

#: The environment variable naming a file whose content is the firing clock (epoch seconds).
CLOCK_ENV = "LAKESHORE_SCHEDULE_CLOCK"
#: Macros croniter takes that mean a time of day (`@reboot` means none, and is refused).
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
#: Steps a walk takes to leave a repeated hour or cross a gap before giving up (a minute cron
#: through a repeated hour needs 60).
_MAX_STEPS = 100_000
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

    def instant(self, wall: dt.datetime) -> float:
        """A naive wall time on the time line (fold=0: see the module's docstring)."""
        return wall.replace(tzinfo=self.zone, fold=0).timestamp()

    def wall(self, t: float) -> dt.datetime:
        """The naive wall time at instant `t`, in whole seconds."""
        return dt.datetime.fromtimestamp(int(t), self.zone).replace(tzinfo=None)

    def _iter(self, start: dt.datetime) -> Croniter:
        from croniter import croniter

        return croniter(self.expr, start)

    def next_after(self, t: float) -> float:
        """The first slot strictly after instant `t`."""
        it = self._iter(self.wall(t))
        for _ in range(_MAX_STEPS):
            at = self.instant(_next(it))
            if at > t:
                return at
        raise InvalidArgument(f"cron {self.expr!r} in {self.tz} has no slot after {t}")

    def latest_at_or_before(self, t: float) -> float | None:
        """The last slot at or before instant `t` (None: none in the walk's reach)."""
        it = self._iter(self.wall(t) + dt.timedelta(seconds=1))
        for _ in range(_MAX_STEPS):
            try:
                wall = it.get_prev(dt.datetime)
            except (ValueError, KeyError):  # croniter's "no earlier date"
                return None
            at = self.instant(wall)
            if at <= t:
                return at
        return None

    def slots(self, after: float, until: float, limit: int) -> list[float]:
        """Up to `limit` slots in (after, until], in order."""
        out: list[float] = []
        it = self._iter(self.wall(after))
        last = after
        for _ in range(_MAX_STEPS):
            if len(out) >= limit:
                break
            at = self.instant(_next(it))
            if at > until:
                break
            if at > last:  # a wall time of a repeated hour, or a gap's twin: once
                out.append(at)
                last = at
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
    return ZoneInfo(tz)
