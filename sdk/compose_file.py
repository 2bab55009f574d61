"""Reading `lakeshore.yaml`: parse it, and validate every queue, provider and daemon in it.

Validation names the file, line, column and field of every problem at once. The rules are the
plane's own (`check_name`, `check_elasticity`, `check_admission`, ...), run here before any
request, so a file that validates is one the plane accepts. Kept apart from planning and
applying (compose.py), which only ever sees a `ComposeFile` that passed, and never the YAML.
PyYAML is the `compose` extra.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InvalidArgument
from .extras import needs_extra
from .plane.store import check_admission, check_elasticity
from .types import DEFAULT_QUEUE, check_name

TOP_FIELDS = ("version", "namespace", "queues", "providers", "daemons")
QUEUE_FIELDS = ("kind", "description", "elasticity", "admission", "state")
QUEUE_KINDS = ("fifo", "priority", "filo", "boltzmann")
STATE_ACTIONS = {"active": "unarchive", "draining": "drain", "archived": "archive"}
DAEMON_FIELDS = ("provider", "queues", "count", "concurrency", "gpus_per_job", "labels", "match")
Path_ = tuple[str, ...]


class ComposeError(InvalidArgument):
    """The file is not valid; `issues` holds every problem, each with its line."""

    def __init__(self, issues: Sequence[Issue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


@dataclass(frozen=True)
class Issue:
    file: str
    line: int  # 1-based
    column: int  # 1-based
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        field = f"{self.field}: " if self.field else ""
        return f"{where}: {field}{self.message}"


@dataclass(frozen=True)
class QueueSpec:
    name: str
    kind: str = "fifo"
    description: str | None = None  # None: the default for this queue
    elasticity: dict[str, Any] = field(default_factory=lambda: {"kind": "none"})
    admission: dict[str, Any] = field(default_factory=dict)
    state: str | None = None  # None: not managed


@dataclass(frozen=True)
class ComposeFile:
    path: str
    namespace: str | None
    queues: dict[str, QueueSpec]
    providers: dict[str, dict[str, Any]]
    daemons: dict[str, dict[str, Any]]


# -- reading the file, with line numbers -------------------------------------------------------


class _Marks:
    """Where each key and value of the document is: (line, column), 1-based, by path."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.keys: dict[Path_, tuple[int, int]] = {}
        self.values: dict[Path_, tuple[int, int]] = {}
        self.issues: list[Issue] = []

    def issue(self, path: Path_, message: str, *, at_key: bool = False) -> None:
        """Record a problem at the field's key (unknown or misplaced) or its value."""
        table = self.keys if at_key else self.values
        probe = path
        while probe and probe not in table and probe not in self.values:
            probe = probe[:-1]  # a missing field: point at the nearest enclosing one
        line, col = table.get(probe) or self.values.get(probe) or (1, 1)
        self.issues.append(Issue(self.file, line, col, ".".join(path), message))


def _walk(node: Any, path: Path_, marks: _Marks) -> None:
    import yaml

    marks.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = (*path, key)
            marks.keys[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key in seen:
                marks.issue(child, "duplicate key (the later one would silently win)", at_key=True)
            seen.add(key)
            _walk(value_node, child, marks)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, str(i)), marks)


def load(path: str | Path) -> ComposeFile:
    """Read and validate a compose file; ComposeError lists every problem with its line."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {p}: {exc}") from None
    return parse(text, str(p))


def parse(text: str, file: str = "lakeshore.yaml") -> ComposeFile:
    with needs_extra("lakeshore compose"):
        import yaml
    marks = _Marks(file)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _walk(node, (), marks)
        data = loader.construct_document(node) if node is not None else {}
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise ComposeError([Issue(file, line, col, "", f"not valid YAML: {problem}")]) from None
    except yaml.YAMLError as exc:
        raise ComposeError([Issue(file, 1, 1, "", f"not valid YAML: {exc}")]) from None
    except RecursionError:
        raise ComposeError([Issue(file, 1, 1, "", "nested too deeply to read")]) from None
    finally:
        loader.dispose()
    try:
        result = _validate(data, marks)
    except RecursionError:
        raise ComposeError([Issue(file, 1, 1, "", "nested too deeply to read")]) from None
    if marks.issues:
        raise ComposeError(marks.issues)
    return result


# -- validation --------------------------------------------------------------------------------


def _section(data: Mapping[str, Any], key: str, marks: _Marks) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        marks.issue((key,), f"must be a mapping of name: settings, got {type(value).__name__}")
        return {}
    return value


def _unknown(value: Mapping[str, Any], allowed: Sequence[str], path: Path_, marks: _Marks) -> None:
    for key in value:
        if key not in allowed:
            marks.issue(
                (*path, str(key)),
                f"unknown field '{key}'; allowed: {', '.join(allowed)}",
                at_key=True,
            )


def _validate(data: Any, marks: _Marks) -> ComposeFile:
    if not isinstance(data, dict):
        marks.issue((), "the file must be a mapping with a 'queues' section")
        return ComposeFile(marks.file, None, {}, {}, {})
    _unknown(data, TOP_FIELDS, (), marks)
    if data.get("version", 1) != 1:
        marks.issue(("version",), "only version 1 is known")
    namespace = data.get("namespace")
    if namespace is not None:
        _check(marks, ("namespace",), lambda: check_name(namespace, "namespace"))
    queues = {
        str(name): _queue(str(name), spec, marks)
        for name, spec in _section(data, "queues", marks).items()
    }
    providers = {}
    for name, spec in _section(data, "providers", marks).items():
        providers[str(name)] = _provider(str(name), spec, marks)
    daemons = {}
    for name, spec in _section(data, "daemons", marks).items():
        daemons[str(name)] = _daemon(str(name), spec, providers, queues, marks)
    return ComposeFile(
        marks.file,
        namespace if isinstance(namespace, str) else None,
        queues,
        providers,
        daemons,
    )


_FIELD_IN_MESSAGE = re.compile(r"\b(elasticity|admission)\.([a-z_]+)")
_UNKNOWN_IN_MESSAGE = re.compile(r"unknown (elasticity|admission) field\(s\) ([a-z_, ]+)")
_SECTION_IN_MESSAGE = re.compile(r"\b(elasticity|admission)( kind)?\b")


def _check(marks: _Marks, path: Path_, check: Callable[[], Any], *, at_key: bool = False) -> Any:
    """Run one of the plane's own checks; its message names a field, which gives the line."""
    try:
        return check()
    except InvalidArgument as exc:
        message = str(exc)
        unknown = _UNKNOWN_IN_MESSAGE.search(message)
        named = _FIELD_IN_MESSAGE.search(message)
        section = _SECTION_IN_MESSAGE.search(message)
        if unknown:
            first = unknown.group(2).split(",")[0].strip()
            marks.issue((*path, unknown.group(1), first), message, at_key=True)
        elif named:
            marks.issue((*path, named.group(1), named.group(2)), message)
        elif section:
            kind = section.group(2) is not None
            marks.issue((*path, section.group(1), *(("kind",) if kind else ())), message)
        else:
            marks.issue(path, message, at_key=at_key)
        return None


def _elasticity_fields() -> tuple[str, ...] | None:
    try:
        from .plane.elasticity import FIELDS
    except ImportError:
        return None
    return tuple(FIELDS)


def _scaling_check() -> Callable[[Mapping[str, Any]], None] | None:
    """The controller's stricter elasticity rules, where this install has them."""
    try:
        from .plane.elasticity import check_scaling
    except ImportError:
        return None
    return check_scaling


def _queue(name: str, spec: Any, marks: _Marks) -> QueueSpec:
    path = ("queues", name)
    _check(marks, path, lambda: check_name(name), at_key=True)
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        marks.issue(path, f"must be a mapping of settings, got {type(spec).__name__}")
        return QueueSpec(name)
    _unknown(spec, QUEUE_FIELDS, path, marks)
    kind = spec.get("kind", "fifo")
    if kind not in QUEUE_KINDS:
        marks.issue((*path, "kind"), f"unknown queue kind {kind!r}; use {'|'.join(QUEUE_KINDS)}")
        kind = "fifo"
    description = spec.get("description")
    if description is not None and not isinstance(description, str):
        marks.issue((*path, "description"), "must be a string")
        description = None
    state = spec.get("state")
    if state is not None and state not in STATE_ACTIONS:
        marks.issue((*path, "state"), f"unknown state {state!r}; use {'|'.join(STATE_ACTIONS)}")
        state = None
    if name == DEFAULT_QUEUE and state == "archived":
        marks.issue((*path, "state"), "the default queue cannot be archived")
    elasticity = _queue_elasticity(spec.get("elasticity"), path, marks)
    admission = _queue_admission(spec.get("admission"), path, marks)
    return QueueSpec(name, kind, description, elasticity, admission, state)


def _queue_elasticity(raw: Any, path: Path_, marks: _Marks) -> dict[str, Any]:
    if raw is None:
        return {"kind": "none"}
    if not isinstance(raw, dict):
        marks.issue((*path, "elasticity"), "must be a mapping (kind, min, max, ...)")
        return {"kind": "none"}
    known = _elasticity_fields()
    if known is not None:  # each typo at its own line, before the checks that stop at one
        _unknown(raw, known, (*path, "elasticity"), marks)
        raw = {k: v for k, v in raw.items() if k in known}
    checked = _check(marks, path, lambda: check_elasticity(dict(raw)))
    scaling = _scaling_check()
    if checked is not None and scaling is not None:
        _check(marks, path, lambda: scaling(checked))
    return checked or {"kind": "none"}


def _queue_admission(raw: Any, path: Path_, marks: _Marks) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        marks.issue((*path, "admission"), "must be a mapping (max_depth, on_full, ...)")
        return {}
    return _check(marks, path, lambda: check_admission(dict(raw))) or {}


def _provider(name: str, spec: Any, marks: _Marks) -> dict[str, Any]:
    path = ("providers", name)
    _check(marks, path, lambda: check_name(name, "provider"), at_key=True)
    if not isinstance(spec, dict):
        marks.issue(path, "must be a mapping with at least 'kind'")
        return {}
    kind = spec.get("kind")
    if kind is None:
        marks.issue((*path, "kind"), "missing: the provider plugin to use (local, ec2, ...)")
    else:
        _check(marks, (*path, "kind"), lambda: check_name(kind, "provider kind"))
    return dict(spec)


def _daemon(
    name: str,
    spec: Any,
    providers: Mapping[str, Any],
    queues: Mapping[str, QueueSpec],
    marks: _Marks,
) -> dict[str, Any]:
    path = ("daemons", name)
    _check(marks, path, lambda: check_name(name, "daemon"), at_key=True)
    if not isinstance(spec, dict):
        marks.issue(path, "must be a mapping with 'provider', 'queues' and 'count'")
        return {}
    _unknown(spec, DAEMON_FIELDS, path, marks)
    provider = spec.get("provider")
    if provider is None:
        marks.issue((*path, "provider"), "missing: which provider launches these daemons")
    elif not isinstance(provider, str):
        marks.issue((*path, "provider"), "must be a provider name")
    elif providers and provider not in providers:
        marks.issue(
            (*path, "provider"),
            f"provider '{provider}' is not declared under 'providers' "
            f"({', '.join(sorted(providers))})",
        )
    names = spec.get("queues", [])
    if not isinstance(names, list) or not all(isinstance(q, str) for q in names):
        marks.issue((*path, "queues"), "must be a list of queue names ([] is the default queue)")
    else:
        for i, q in enumerate(names):
            if q not in queues and q != DEFAULT_QUEUE:
                message = f"queue '{q}' is not declared under 'queues'"
                marks.issue((*path, "queues", str(i)), message)
    for key in ("count", "concurrency", "gpus_per_job"):
        value = spec.get(key)
        whole = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        if value is not None and not whole:
            marks.issue((*path, key), "must be a whole number >= 0")
    return dict(spec)
