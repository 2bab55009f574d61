"""An independent reference for cron slots across DST (issue 45, item 11): no croniter, no
`fold`, only UTC -> local conversion and the rule docs/workflows.md states.

Every UTC minute of a span is converted to the zone's wall clock. A wall minute read for the
first time is a slot when the expression matches it (a repeated hour's second pass is read
again, and fires nothing). Between two consecutive UTC minutes whose readings jump forward, the
wall minutes never read are the skipped ones: each that matches fires at the instant whose
reading is that wall plus the gap's length. The slots are the set of those instants: a skipped
wall landing on an existing slot is one firing.

The matcher knows what the tests use: `*`, numbers, `a-b`, `,` lists and `/n` steps, and cron's
rule that a restricted day-of-month or day-of-week matches either way.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo

MINUTE = 60
UTC = dt.timezone.utc
_ONE = dt.timedelta(minutes=1)


def _field(text: str, lo: int, hi: int) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        span, _, step = part.partition("/")
        if span == "*":
            first, last = lo, hi
        elif "-" in span:
            first, last = (int(x) for x in span.split("-"))
        else:
            first = int(span)
            last = hi if step else first
        out.update(range(first, last + 1, int(step or 1)))
    return frozenset(0 if x == 7 and hi == 7 else x for x in out)  # 7 is Sunday too


@dataclass(frozen=True)
class Matcher:
    """Whether a wall minute matches a five-field expression."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday
    either_day: bool  # both day fields restricted: cron matches either

    @classmethod
    def parse(cls, expr: str) -> Matcher:
        minute, hour, day, month, weekday = expr.split()
        return cls(
            _field(minute, 0, 59),
            _field(hour, 0, 23),
            _field(day, 1, 31),
            _field(month, 1, 12),
            _field(weekday, 0, 7),
            day != "*" and weekday != "*",
        )

    def __call__(self, wall: dt.datetime) -> bool:
        if wall.minute not in self.minutes or wall.hour not in self.hours:
            return False
        if wall.month not in self.months:
            return False
        day = wall.day in self.days
        weekday = wall.isoweekday() % 7 in self.weekdays
        return (day or weekday) if self.either_day else (day and weekday)


def reading(zone: ZoneInfo, t: int) -> dt.datetime:
    """The zone's wall clock at UTC instant `t`, naive."""
    return dt.datetime.fromtimestamp(t, UTC).astimezone(zone).replace(tzinfo=None)


class Span:
    """A span's wall clock, read once for many expressions: (instant, wall) of each minute
    read first, and (instant, wall) of each skipped wall minute, placed by the rule."""

    #: How far before the span the reading starts: a repeated hour's first pass is seen
    #: first (the longest fold here is an hour).
    LEAD_S = 6 * 3600

    def __init__(self, tz: str, after: int, until: int) -> None:
        self.after, self.until = after, until
        zone = ZoneInfo(tz)
        seen: set[dt.datetime] = set()
        self.walls: list[tuple[int, dt.datetime]] = []
        previous: dt.datetime | None = None
        for t in range((after - self.LEAD_S) // MINUTE * MINUTE, until + MINUTE, MINUTE):
            wall = reading(zone, t)
            if previous is not None and wall - previous > _ONE:  # a gap: walls never read
                gap_start = skipped = previous + _ONE
                while skipped < wall:  # it fires when the clock reads skipped + gap length
                    self.walls.append((t + int((skipped - gap_start).total_seconds()), skipped))
                    skipped += _ONE
            if wall not in seen:
                self.walls.append((t, wall))
            seen.add(wall)
            previous = wall

    def slots(self, expr: str) -> list[int]:
        """The expression's slots in (after, until]: each instant once."""
        match = Matcher.parse(expr)
        at = {t for t, wall in self.walls if self.after < t <= self.until and match(wall)}
        return sorted(at)


def expected_slots(expr: str, tz: str, after: int, until: int) -> list[int]:
    """The slots in (after, until], by the documented rule."""
    return Span(tz, after, until).slots(expr)


@dataclass(frozen=True)
class Transition:
    """One change of a zone's offset: the instant, and the jump in seconds (> 0: a spring
    gap, < 0: an autumn fold); `hour` is the wall hour it skips or repeats first."""

    tz: str
    at: int
    jump: int
    hour: int


def _offset(zone: ZoneInfo, t: int) -> int:
    offset = dt.datetime.fromtimestamp(t, zone).utcoffset()
    assert offset is not None
    return int(offset.total_seconds())


def transitions(tz: str, years: range) -> list[Transition]:
    """The zone's offset changes in `years`: a day-by-day scan, then a bisection to the
    minute (no zone changes its offset twice in a day)."""
    zone = ZoneInfo(tz)
    out: list[Transition] = []
    t = int(dt.datetime(years.start, 1, 1, tzinfo=UTC).timestamp())
    end = int(dt.datetime(years.stop, 1, 1, tzinfo=UTC).timestamp())
    while t < end:
        lo, hi = t, t + 86400
        if _offset(zone, lo) != _offset(zone, hi):
            while hi - lo > MINUTE:
                mid = (lo + hi) // 2 // MINUTE * MINUTE
                lo, hi = (mid, hi) if _offset(zone, mid) == _offset(zone, lo) else (lo, mid)
            jump = _offset(zone, hi) - _offset(zone, lo)
            first = reading(zone, lo) + _ONE if jump > 0 else reading(zone, hi)
            out.append(Transition(tz, hi, jump, first.hour))
        t += 86400
    return out
