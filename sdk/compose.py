"""`lakeshore.yaml`: queues (and, where the plane supports them, providers and daemons) as code.

    namespace: ml                      # optional; else --namespace / LAKESHORE_NAMESPACE
    queues:
      cpu-prep:
        kind: fifo                     # fifo | priority | filo | boltzmann
        description: CPU pre-processing
        elasticity: {kind: fixed, max: 4}
        admission: {max_depth: 1000, on_full: reject}
      training-h100:
        kind: priority
        state: active                  # optional: active | draining | archived
    providers:
      my-ec2: {kind: ec2, region: us-east-1, instance_type: p5.48xlarge}
    daemons:
      train: {provider: my-ec2, queues: [training-h100], count: 2}

The file is the desired state of every queue it names: a field left out takes its default
(kind fifo, no description, elasticity none, no admission limits), so deleting a line from the
file and running `up` removes that setting. Queues the file does not name are left alone unless
`prune` is asked for; `state` is managed only when written, since drain and archive are usually
an operator's temporary actions. A kind cannot change in place (the claim order of queued work
would change under it): such a plan is refused as a whole before anything is written.

Reading and validating the file is compose_file.py's; this module plans the changes that bring
the plane to what a valid file says, and applies them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .compose_file import (
    STATE_ACTIONS,
    ComposeError,
    ComposeFile,
    Issue,
    QueueSpec,
    load,
    parse,
)
from .errors import InvalidArgument
from .plane.base import Plane
from .types import DEFAULT_QUEUE, DEFAULT_QUEUE_DESCRIPTION, QueueInfo, normalize_kind

__all__ = [
    "Change",
    "ComposeError",
    "ComposeFile",
    "Issue",
    "QueueSpec",
    "apply",
    "load",
    "parse",
    "plan",
    "plan_down",
]

NOT_APPLIED = "not applied (no provider support in this plane)"
#: Daemons are launched by the controller from a queue's elasticity (kind, max, provider), or by
#: hand; the plane has no verb that holds "N daemons of this spec", so the section is advisory.
DAEMONS_NOT_APPLIED = (
    "not applied (no daemon launch support in this plane: give the queue an elasticity policy "
    "naming the provider, and the controller launches its daemons)"
)


@dataclass(frozen=True)
class Change:
    """One step of a plan. `fields` maps a field to (current, desired)."""

    action: str  # create | patch | replace | delete | unchanged | blocked | not-applied | skip
    target: str  # queue | provider | daemon
    name: str
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    note: str = ""

    @property
    def is_change(self) -> bool:
        return self.action in ("create", "patch", "replace", "delete")


# -- planning and applying ---------------------------------------------------------------------


def _norm_admission(value: Mapping[str, Any]) -> dict[str, Any]:
    """Admission with its defaults dropped, so {} and {on_full: reject} compare equal."""
    return {
        k: v for k, v in value.items() if v is not None and not (k == "on_full" and v == "reject")
    }


def _norm_elasticity(value: Mapping[str, Any]) -> dict[str, Any]:
    return {**value, "kind": value.get("kind", "none")}


def _description(spec: QueueSpec) -> str:
    if spec.description is not None:
        return spec.description
    return DEFAULT_QUEUE_DESCRIPTION if spec.name == DEFAULT_QUEUE else ""


def _queue_change(spec: QueueSpec, current: QueueInfo | None) -> Change:
    desired_elasticity = _norm_elasticity(spec.elasticity)
    desired_admission = _norm_admission(spec.admission)
    if current is None:
        fields: dict[str, tuple[Any, Any]] = {"kind": (None, spec.kind)}
        if _description(spec):
            fields["description"] = (None, _description(spec))
        if desired_elasticity != {"kind": "none"}:
            fields["elasticity"] = (None, desired_elasticity)
        if desired_admission:
            fields["admission"] = (None, desired_admission)
        if spec.state not in (None, "active"):
            fields["state"] = ("active", spec.state)
        return Change("create", "queue", spec.name, fields)
    if normalize_kind(spec.kind) != normalize_kind(current.kind):
        return Change(
            "blocked",
            "queue",
            spec.name,
            {"kind": (current.kind, spec.kind)},
            note="a queue's kind cannot change in place (its queued work would change order): "
            "`lakeshore compose down` it (or `queues rm`), then `up`",
        )
    fields = {}
    if _description(spec) != current.description:
        fields["description"] = (current.description, _description(spec))
    current_elasticity = _norm_elasticity(current.elasticity)
    if desired_elasticity != current_elasticity:
        fields["elasticity"] = (current_elasticity, desired_elasticity)
    current_admission = _norm_admission(current.admission)
    if desired_admission != current_admission:
        fields["admission"] = (current_admission, desired_admission)
    if spec.state is not None and spec.state != current.state:
        fields["state"] = (current.state, spec.state)
    return Change("patch" if fields else "unchanged", "queue", spec.name, fields)


def provider_support(plane: Plane) -> bool:
    """Whether this plane stores named provider configs (`lakeshore providers`)."""
    return all(callable(getattr(plane, m, None)) for m in ("providers", "add_provider"))


def _split_provider(spec: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    config = {k: v for k, v in spec.items() if k != "kind"}
    return str(spec.get("kind")), config


def _provider_changes(plane: Plane, compose: ComposeFile, prune: bool) -> list[Change]:
    """Provider configs: the plane has no update verb, so a changed one is replaced."""
    if not provider_support(plane):
        return [Change("not-applied", "provider", n, note=NOT_APPLIED) for n in compose.providers]
    current = {p.name: p for p in plane.providers()}
    changes = []
    for name, spec in compose.providers.items():
        kind, config = _split_provider(spec)
        have = current.get(name)
        if have is None:
            changes.append(Change("create", "provider", name, {"kind": (None, kind)}))
            continue
        fields: dict[str, tuple[Any, Any]] = {}
        if have.kind != kind:
            fields["kind"] = (have.kind, kind)
        if have.config != config:
            fields["config"] = (have.config, config)
        action = "replace" if fields else "unchanged"
        note = "delete, then add: provider configs have no update" if fields else ""
        changes.append(Change(action, "provider", name, fields, note=note))
    if prune:
        for name in sorted(set(current) - set(compose.providers)):
            changes.append(Change("delete", "provider", name, note="not in the file (--prune)"))
    return changes


def _daemons_not_applied(compose: ComposeFile) -> list[Change]:
    return [Change("not-applied", "daemon", n, note=DAEMONS_NOT_APPLIED) for n in compose.daemons]


def _own_queues(plane: Plane) -> dict[str, QueueInfo]:
    return {q.name: q for q in plane.queues() if q.namespace == plane.namespace}


def plan(plane: Plane, compose: ComposeFile, *, prune: bool = False) -> list[Change]:
    """What `up` would do: create, patch, (with prune) delete; nothing is written.

    Providers come first, so a queue's policy never names one that is not there yet.
    """
    changes = _provider_changes(plane, compose, prune)
    current = _own_queues(plane)
    changes += [_queue_change(spec, current.get(name)) for name, spec in compose.queues.items()]
    if prune:
        for name in sorted(set(current) - set(compose.queues)):
            if name == DEFAULT_QUEUE:
                continue  # it cannot be deleted, and it is not the file's to remove
            changes.append(Change("delete", "queue", name, note="not in the file (--prune)"))
    return changes + _daemons_not_applied(compose)


def plan_down(plane: Plane, compose: ComposeFile) -> list[Change]:
    """What `down` would do: delete the file's queues, then its providers (never default)."""
    current = _own_queues(plane)
    changes = []
    for name in compose.queues:
        if name == DEFAULT_QUEUE:
            changes.append(Change("skip", "queue", name, note="the default queue is never deleted"))
        elif name in current:
            changes.append(Change("delete", "queue", name))
        else:
            changes.append(Change("unchanged", "queue", name, note="absent"))
    if provider_support(plane):
        have = {p.name for p in plane.providers()}
        for name in compose.providers:
            action = "delete" if name in have else "unchanged"
            changes.append(Change(action, "provider", name, note="" if name in have else "absent"))
    else:
        changes += [
            Change("not-applied", "provider", n, note=NOT_APPLIED) for n in compose.providers
        ]
    return changes + _daemons_not_applied(compose)


def _apply_provider(plane: Any, compose: ComposeFile, change: Change) -> None:
    if change.action in ("delete", "replace"):
        plane.delete_provider(change.name)
    if change.action in ("create", "replace"):
        kind, config = _split_provider(compose.providers[change.name])
        plane.add_provider(change.name, kind, config)


def _replace_elasticity(plane: Plane, name: str, elasticity: dict[str, Any]) -> None:
    replace = getattr(plane, "replace_elasticity", None)
    if replace is None:
        raise InvalidArgument(
            f"this plane ({type(plane).__name__}) cannot replace a queue's elasticity policy"
        )
    replace(name, elasticity)


def _admission_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The plane merges admission: fields to drop are sent as their neutral value."""
    patch: dict[str, Any] = dict(desired)
    for key in current:
        if key not in desired:
            patch[key] = "reject" if key == "on_full" else None
    return patch


def _apply_queue(plane: Plane, spec: QueueSpec, change: Change) -> None:
    if change.action == "create":
        plane.create_queue(
            spec.name,
            kind=spec.kind,
            description=_description(spec),
            elasticity=spec.elasticity,
            admission=spec.admission,
        )
        if spec.state not in (None, "active"):
            plane.set_queue_state(spec.name, STATE_ACTIONS[spec.state])
        return
    patch: dict[str, Any] = {}
    if "description" in change.fields:
        patch["description"] = change.fields["description"][1]
    if "admission" in change.fields:
        current, desired = change.fields["admission"]
        patch["admission"] = _admission_patch(current, desired)
    if patch:
        plane.patch_queue(spec.name, patch)
    if "elasticity" in change.fields:
        _replace_elasticity(plane, spec.name, change.fields["elasticity"][1])
    if "state" in change.fields:
        plane.set_queue_state(spec.name, STATE_ACTIONS[change.fields["state"][1]])


def apply(
    plane: Plane, compose: ComposeFile, changes: Sequence[Change], *, force: bool = False
) -> list[Change]:
    """Carry out a plan; refuses a plan with a blocked step before writing anything.

    `force` (for deletes) scrubs the queue from its member workers first, as `queues rm --force`.
    """
    blocked = [c for c in changes if c.action == "blocked"]
    if blocked:
        raise InvalidArgument(
            "nothing applied: " + "; ".join(f"{c.target} {c.name}: {c.note}" for c in blocked)
        )
    done = []
    for change in changes:
        if not change.is_change:
            continue
        if change.target == "provider":
            _apply_provider(plane, compose, change)
        elif change.action == "delete":
            plane.delete_queue(change.name, force=force)
        else:
            _apply_queue(plane, compose.queues[change.name], change)
        done.append(change)
    return done
