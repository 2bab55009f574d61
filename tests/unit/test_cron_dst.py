"""Cron slots across DST against an independent reference (issue 45, item 11): multi-slot and
minute-step expressions, six zones, every transition 2020-2030.

The reference (tests/support/cron_reference.py) reads the zone's clock minute by minute, with
no croniter. Around each transition the listing (`slots`), chained firing (`next_after` from
each slot), a schedule made or resumed at any time (`next_after` from there) and a late firing
(`plan`: `latest_at_or_before` and the missed count) must all give the reference's slots.
Before the fix the walk in wall order lost gap slots (02:30 in Berlin never fired for
`0,30 2 * * *`), skipped the day from 03:00-03:29, fired an older slot in the repeated hour,
and dropped Lord Howe's real 02:35-02:56 slots behind the gap's shifted ones.
"""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from dreamlake.lakeshore.plane.cron import Cron
from dreamlake.lakeshore.plane.schedules import plan
from tests.support.cron_reference import Span, Transition, expected_slots, transitions

ZONES = (
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",
    "Australia/Lord_Howe",  # a 30-minute shift
    "America/Santiago",  # midnight skipped and repeated
    "Asia/Tehran",  # midnight too; no DST since 2023
)
YEARS = range(2020, 2031)
MINUTE = 60
#: The span checked around each transition, each side.
AROUND_S = 75 * MINUTE
#: Expressions every transition checks; `{h}` is the hour it skips or repeats.
EVERYWHERE = ("*/7 * * * *", "0 * * * *")
AT_THE_HOUR = ("30 {h} * * *", "0,30 {h} * * *", "*/15 {h} * * *", "15,20 {h} * * *")
UTC = dt.timezone.utc


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return int(dt.datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp())


def _local(cron: Cron, t: float) -> str:
    return dt.datetime.fromtimestamp(t, cron.zone).strftime("%Y-%m-%d %H:%M %Z")


def _chain(cron: Cron, after: int, until: int) -> list[float]:
    out: list[float] = []
    t: float = after
    while (t := cron.next_after(t)) <= until:
        out.append(t)
    return out


def _probes(tr: Transition) -> list[int]:
    """Times a schedule is made, resumed or fires late: every quarter hour and a half from
    45 minutes before the change to 75 after it, off any slot."""
    return [tr.at + k * 15 * MINUTE + 30 for k in range(-3, 6)]


def _check(tr: Transition, span: Span, expr: str) -> None:
    cron = Cron(expr, tr.tz)
    want = span.slots(expr)
    say = (
        f"{expr!r} in {tr.tz} around {_local(cron, tr.at)}: want {[_local(cron, s) for s in want]}"
    )
    assert cron.slots(span.after, span.until, 10_000) == want, "listing: " + say
    assert _chain(cron, span.after, span.until) == want, "chained firing: " + say
    for t in _probes(tr):
        later = [s for s in want if s > t]
        if tr.jump > 0 and later:  # made or resumed at t: the first slot after it
            assert cron.next_after(t) == later[0], f"next_after {_local(cron, t)}: {say}"
        earlier = [s for s in want if s <= t]
        if tr.jump < 0 and earlier:
            assert cron.latest_at_or_before(t) == earlier[-1], f"latest at {_local(cron, t)}: {say}"
            if later and tr.at <= t < tr.at - tr.jump + 30 * MINUTE:  # in the fold, or just after
                _check_late_firing(cron, earlier, later[0], t, say)


def _check_late_firing(cron: Cron, earlier: list[int], following: int, now: int, say: str) -> None:
    """A firing at `now` of a schedule due at the first slot of the span, catchup `latest`:
    the latest slot fires, the ones between are missed, the next is the one after `now`."""
    row = {"cron": cron.expr, "tz": cron.tz, "next_fire_at": earlier[0], "catchup": "latest"}
    firing = plan(row, now)
    assert (firing.slot, firing.next_fire_at, firing.missed) == (
        earlier[-1],
        following,
        len(earlier) - 1,
    ), f"late firing at {_local(cron, now)}: {say}"


@pytest.mark.parametrize("tz", ZONES)
def test_every_slot_fires_once_around_each_transition_as_the_reference_places_it(tz: str) -> None:
    found = transitions(tz, YEARS)
    assert len(found) == (6 if tz == "Asia/Tehran" else 2 * len(YEARS))
    for tr in found:
        span = Span(tz, tr.at - AROUND_S, tr.at + AROUND_S)
        for expr in itertools.chain(EVERYWHERE, (e.format(h=tr.hour) for e in AT_THE_HOUR)):
            _check(tr, span, expr)


def test_the_reference_places_skipped_walls_a_gap_later_and_repeated_ones_once() -> None:
    # Berlin 2021-03-28: 02:00-02:59 do not exist; 2021-10-31: 02:00-02:59 happen twice
    spring = expected_slots(
        "*/15 2 * * *", "Europe/Berlin", _utc(2021, 3, 27, 12), _utc(2021, 3, 28, 12)
    )
    assert spring == [_utc(2021, 3, 28, 1, m) for m in (0, 15, 30, 45)]  # 03:00-03:45 CEST
    autumn = expected_slots(
        "*/15 2 * * *", "Europe/Berlin", _utc(2021, 10, 30, 12), _utc(2021, 10, 31, 12)
    )
    assert autumn == [_utc(2021, 10, 31, 0, m) for m in (0, 15, 30, 45)]  # the CEST pass


def test_a_schedule_made_just_after_the_gap_keeps_that_days_skipped_slot() -> None:
    # 2026-03-29 01:10Z is 03:10 CEST: 02:30 did not exist and fires at 03:30 CEST, 01:30Z
    cron = Cron("30 2 * * *", "Europe/Berlin")
    assert cron.next_after(_utc(2026, 3, 29, 1, 10)) == _utc(2026, 3, 29, 1, 30)


def test_each_skipped_slot_of_the_gap_hour_fires_on_the_chained_path() -> None:
    cron = Cron("0,30 2 * * *", "Europe/Berlin")
    after = _utc(2021, 3, 27, 12)
    assert _chain(cron, after, _utc(2021, 3, 28, 12)) == [
        _utc(2021, 3, 28, 1, 0),
        _utc(2021, 3, 28, 1, 30),  # 02:30, fired at 03:30 CEST
    ]


def test_a_late_firing_in_the_repeated_hour_fires_the_latest_first_pass_slot() -> None:
    # Due 02:15 CEST (00:15Z), firing at 02:05 CET (01:05Z): 02:30 and 02:45 CEST have passed
    row = {
        "cron": "*/15 * * * *",
        "tz": "Europe/Berlin",
        "next_fire_at": _utc(2021, 10, 31, 0, 15),
        "catchup": "latest",
    }
    firing = plan(row, _utc(2021, 10, 31, 1, 5))
    assert firing.slot == _utc(2021, 10, 31, 0, 45)  # 02:45 CEST
    assert firing.missed == 2
    assert firing.next_fire_at == _utc(2021, 10, 31, 2, 0)  # 03:00 CET


def test_lord_howes_half_hour_gap_keeps_the_slots_that_exist_after_it() -> None:
    # 2021-10-03 02:00 LHST jumps to 02:30 LHDT (15:30Z): 02:00, 02:07, ... 02:28 land half an
    # hour later, between 02:35, 02:42, 02:49, 02:56, which exist
    cron = Cron("*/7 * * * *", "Australia/Lord_Howe")
    after, until = _utc(2021, 10, 2, 15, 29), _utc(2021, 10, 2, 15, 59)
    shifted = [15 * 60 + 30 + m for m in (0, 7, 14, 21, 28)]
    existing = [15 * 60 + 30 + m - 30 for m in (35, 42, 49, 56)]
    want = sorted(_utc(2021, 10, 2) + m * MINUTE for m in shifted + existing)
    assert cron.slots(after, until, 100) == want
    assert _chain(cron, after, until) == want


def test_hourly_on_lord_howes_spring_day_fires_at_one_half_past_two_and_three() -> None:
    cron = Cron("0 * * * *", "Australia/Lord_Howe")
    slots = cron.slots(_utc(2021, 10, 2, 14), _utc(2021, 10, 2, 16, 30), 100)
    assert [_local(cron, s)[11:] for s in slots] == ["01:00 +1030", "02:30 +11", "03:00 +11"]
