"""`lakeshore controller`: run the elastic controller, and what `queues stats` shows of it.

The controller records every decision as a queue event (`scaled`, `desired`, `terminated`,
`scale_error`) carrying the desired size and the reason, so "desired vs actual" needs no new
endpoint: it is the newest such event beside the live member count.
"""

from __future__ import annotations

from typing import Any

import click

from dreamlake.lakeshore.plane.base import Plane

CONTROLLER_EVENTS = (
    "scaled",
    "desired",
    "terminated",
    "scale_error",
    "reclaimed",
    "spot_fallback",
)


def controller_figures(plane: Plane, queue: str, actual: int | None) -> dict[str, Any]:
    """{desired, actual, scaling_reason} for `queues stats` (desired None if never decided);
    `actual` is the daemon_count the caller's stats read (a second read swept the plane again)."""
    for event in plane.events(queue, limit=200):
        detail = event.get("detail") or {}
        if event.get("kind") in CONTROLLER_EVENTS and "desired" in detail:
            return {
                "desired": detail["desired"],
                "actual": actual,
                "scaling_reason": detail.get("reason", ""),
                "scaling_target": detail.get("target", ""),
            }
    return {"desired": None, "actual": actual}


@click.command(
    "controller",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.pass_context
def controller(ctx: click.Context) -> None:
    """Run the elastic controller (same as `lakeshore-controller`; --help for its options)."""
    from dreamlake.lakeshore.controller.main import controller_command

    controller_command.main(args=ctx.args, prog_name="lakeshore controller")
