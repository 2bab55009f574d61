"""Cron slots across DST (issue 36, items 3 and 5): table-driven over two zones, 2020-2030.

croniter alone, walking aware datetimes, fires a daily slot in the repeated autumn hour twice
(Berlin 2021-10-31 "30 2 * * *": 00:30Z and 01:30Z); the walk of naive wall times in
sdk/plane/cron.py fires it once. A wall time skipped in spring fires once, an hour later.
"""

from __future__ import annotations

import datetime as dt
import itertools
from zoneinfo import ZoneInfo

import pytest

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane.cron import Cron, check_cron, check_tz, slot_key

ZONES = ("Europe/Berlin", "America/New_York")
YEARS = range(2020, 2031)
UTC = dt.timezone.utc


def _transitions(tz: str, year: int) -> list[tuple[float, dt.timedelta, dt.timedelta]]:
    """(instant, offset before, offset after) of each of `year`'s DST transitions in `tz`."""
    zone = ZoneInfo(tz)
    out = []
    t = dt.datetime(year, 1, 1, tzinfo=UTC)
    step = dt.timedelta(hours=1)
    before = t.astimezone(zone).utcoffset()
    while t.year == year:
        after = (t + step).astimezone(zone).utcoffset()
        if after != before:
            assert before is not None and after is not None
            out.append(((t + step).timestamp(), before, after))
            before = after
        t += step
    return out


def _cases() -> list[tuple[str, int, float, dt.timedelta, dt.timedelta]]:
    return [(tz, year, *tr) for tz in ZONES for year in YEARS for tr in _transitions(tz, year)]


CASES = _cases()


def test_the_table_covers_two_transitions_a_year_in_each_zone() -> None:
    assert len(CASES) == len(ZONES) * len(YEARS) * 2


def _local_day(cron: Cron, t: float) -> dt.date:
    return dt.datetime.fromtimestamp(t, cron.zone).date()


def _slots_around(cron: Cron, instant: float, days: int = 2) -> list[float]:
    return cron.slots(instant - days * 86400, instant + days * 86400, 10_000)


@pytest.mark.parametrize(("tz", "year", "instant", "before", "after"), CASES)
def test_a_daily_slot_in_the_changing_hour_fires_once_that_day(
    tz: str, year: int, instant: float, before: dt.timedelta, after: dt.timedelta
) -> None:
    # Given the wall hour that is skipped (spring) or repeated (autumn) that day
    spring = after > before
    hour = dt.datetime.fromtimestamp(instant, UTC) + (before if spring else after)
    cron = Cron(f"30 {hour.hour} * * *", tz)
    # When the slots of the days around it are listed
    slots = _slots_around(cron, instant)
    days = [_local_day(cron, s) for s in slots]
    # Then each local day has exactly one, in order, and the changing day's is where a cron
    # user expects it: an hour late when skipped, the first pass when repeated
    assert len(days) >= 3 and all((b - a).days == 1 for a, b in itertools.pairwise(days))
    (changing,) = [s for s in slots if abs(s - instant) < 2 * 3600]
    wall = hour.replace(minute=30, tzinfo=None)
    if spring:
        assert changing == (wall - before).replace(tzinfo=UTC).timestamp()
        assert changing > instant  # after the jump: 02:30 did not exist, 03:30 does
    else:
        assert changing == (wall - before).replace(tzinfo=UTC).timestamp()  # first pass
        assert changing < instant


@pytest.mark.parametrize(("tz", "year", "instant", "before", "after"), CASES)
def test_an_hourly_cron_fires_once_per_existing_wall_hour(
    tz: str, year: int, instant: float, before: dt.timedelta, after: dt.timedelta
) -> None:
    cron = Cron("0 * * * *", tz)
    day = _local_day(cron, instant)
    slots = [s for s in _slots_around(cron, instant) if _local_day(cron, s) == day]
    walls = [dt.datetime.fromtimestamp(s, cron.zone).replace(tzinfo=None) for s in slots]
    # 23 hours exist on the spring day; the autumn day's repeated hour fires once, so 24
    assert len(slots) == (23 if after > before else 24)
    assert len(set(walls)) == len(walls)
    assert all(s % 3600 == 0 for s in slots)


@pytest.mark.parametrize(("tz", "year", "instant", "before", "after"), CASES)
def test_next_after_from_inside_the_changing_hour_never_goes_back(
    tz: str, year: int, instant: float, before: dt.timedelta, after: dt.timedelta
) -> None:
    cron = Cron("* * * * *", tz)
    # From every 7th minute of the two hours around the change, the next slot is later, and
    # stepping slot to slot never lands in the second pass of a repeated hour
    for t in range(int(instant) - 3600, int(instant) + 3600, 420):
        nxt = cron.next_after(t + 1)
        assert nxt > t + 1
        latest = cron.latest_at_or_before(t + 1)
        assert latest is not None and latest <= t + 1 < nxt
    if after < before:  # autumn: the repeated hour's second pass fires nothing
        assert cron.next_after(instant - 1) >= instant + (before - after).total_seconds()


def test_slot_keys_name_the_utc_minute() -> None:
    slot = dt.datetime(2030, 1, 1, 2, 0, tzinfo=UTC).timestamp()
    assert slot_key("nightly", slot) == "schedule:nightly:2030-01-01T02:00:00Z"


@pytest.mark.parametrize(
    ("expr", "normal"),
    [("0  3 * * *", "0 3 * * *"), ("@DAILY", "@daily"), ("*/15 * * * 1-5", "*/15 * * * 1-5")],
)
def test_good_expressions_are_normalised(expr: str, normal: str) -> None:
    assert check_cron(expr) == normal


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("0 3 * *", "five fields"),
        ("0 3 * * * *", "five fields"),  # seconds: a slot is a minute
        ("61 * * * *", "five fields"),
        ("@reboot", "@hourly"),
        (3, "a string"),
        ("", "five fields"),
    ],
)
def test_bad_expressions_are_refused_naming_what_is_allowed(expr: object, says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        check_cron(expr)


@pytest.mark.parametrize("tz", ["Mars/Base", "", None, "../../etc/passwd", "x" * 100])
def test_unknown_zones_are_refused(tz: object) -> None:
    with pytest.raises(InvalidArgument, match="time zone"):
        check_tz(tz)


def test_an_expression_that_matches_no_date_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="never fires"):
        Cron("0 0 31 2 *", "UTC").check_fires(dt.datetime(2030, 1, 1, tzinfo=UTC).timestamp())
