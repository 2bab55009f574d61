"""The command line, fuzzed: every verb and subverb, every option, hostile values.

The click trees of `lakeshore`, `lakeshore-daemon` and `lakeshore-controller` are walked; each
option and argument of each leaf command is run with each hostile value below (the rest of the
command line kept valid), in process with click's CliRunner against an embedded plane in a fresh
LAKESHORE_HOME. Every run must:

- let no Python exception escape (click's own exits are fine);
- print no traceback, and when it exits nonzero, end its output with one line `Error: ...`
  that is not the "internal error" line kept for bugs (cli/errors.py);
- exit nonzero where the value is invalid for that parameter: a number that is not a finite
  number in the option's range, a name that is not a name, a URL that is not a URL, a file that
  is not there, a path under a regular file, a choice that is not a choice.

Where a verb would block or start processes, the blocking part is replaced, not the command
line: `lakeshore server` runs with its serve (uvicorn) stubbed (all before serving is real: the
store is opened and checked, the token written), `lakeshore-daemon` with its run loop stubbed
(the plane is opened, the storage URL and signing key checked), and `lakeshore-controller` gets
`--once`. A verb that writes outside LAKESHORE_HOME by default (`systemd install`: /etc) is
always given the options that point it into the test's folder (CONFINE), and every test checks
that nothing named lakeshore appeared in /etc. A few real subprocess runs of the console scripts
close the pass: the same refusals, from the entry points a user types.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from dreamlake.lakeshore.cli import server as server_cli
from dreamlake.lakeshore.cli.errors import BUG_PREFIX
from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.controller.main import controller_command
from dreamlake.lakeshore.daemon import main as daemon_main
from dreamlake.lakeshore.daemon.main import daemon_command
from dreamlake.lakeshore.plane.dispatch import open_store

# -- the hostile values ---------------------------------------------------------------------------

UNDER_FILE = "<a path under a regular file>"
MISSING = "<a file that does not exist>"
DEEP_FILE = "<a file of JSON nested 100k deep>"
DEEP = "[" * 100_000 + "]" * 100_000

HOSTILE: dict[str, str] = {
    "empty": "",
    "space": " ",
    "newline": "q\n",
    "lone-newline": "\n",
    "control": "q\x01\x1b[2J",
    "tab": "\tq",
    "long": "q" * 10_000,
    "minus-one": "-1",
    "1e309": "1e309",
    "nan": "nan",
    "2**64": str(2**64),
    "-2**63-1": str(-(2**63) - 1),
    "lookalike": "d\u0435fault",  # Cyrillic e
    "fullwidth": "\uff51\uff11",
    "zero-width": "q\u200b",
    "bad-utf8": "q\udcff",  # what a shell argument that is not UTF-8 decodes to
    "deep-json": DEEP,
    "deep-pair": f"k={DEEP}",
    "under-file": UNDER_FILE,
    "missing-file": MISSING,
    "deep-file": DEEP_FILE,
}
#: Labels whose value is not a valid name (^[a-z0-9][a-z0-9-]*$, at most 128 characters).
#: "nan", "1e309" and "2**64" are valid names.
NOT_NAMES = set(HOSTILE) - {"nan", "1e309", "2**64"}

# -- what each parameter takes --------------------------------------------------------------------

#: Parameters holding a name or an id (queues, namespaces, workers, providers, invocations).
NAME_PARAMS = {
    "name",
    "queue",
    "queues",
    "inv_id",
    "digest",
    "provider_name",
    "namespace",
    "org",
    "add",
    "remove",
    "before",
}

#: A valid value for each required parameter, so that one hostile value is tried at a time.
BASELINE: dict[str, str] = {
    "name": "fuzz-q",
    "queue": "fuzz-q",
    "inv_id": "01J0000000000000000000000Z",
    "digest": "deadbeef",
    "command": "true",
    "provider_name": "fuzz-p",
    "kind": "local",
    "namespace": "fuzz-ns",
    "cron": "0 3 * * *",
    "directory": ".",
}
#: Flags that wait for a job to end get a short wait (no worker runs in this pass).
FLAG_COMPANIONS = {
    ("submit", "wait"): ["--wait-timeout-s", "0.2"],
    ("exec", "wait"): ["--result-timeout-s", "0.2"],
    ("jobs", "logs", "follow"): [],
    ("status", "watch"): ["--count", "1"],
}
#: Exit statuses a command documents for a job's outcome (`lakeshore jobs --help`).
JOB_EXITS = {10, 11, 12, 13, 124}


@dataclass(frozen=True)
class Verb:
    """One leaf command: how to reach it and what to add so that it returns."""

    root: click.Command
    path: tuple[str, ...]
    command: click.Command
    suffix: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        prog = {cli: "lakeshore", daemon_command: "lakeshore-daemon"}.get(
            self.root, "lakeshore-controller"
        )
        return " ".join((prog, *self.path))


def _walk(
    group: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    if isinstance(group, click.Group):
        for name, sub in sorted(group.commands.items()):
            yield from _walk(sub, (*path, name))
    else:
        yield path, group


def verbs() -> list[Verb]:
    found = [
        Verb(cli, path, command)
        for path, command in _walk(cli)
        # `lakeshore controller` hands its arguments to lakeshore-controller, fuzzed below.
        if path != ("controller",)
    ]
    found.append(Verb(daemon_command, (), daemon_command, ("--burst",)))
    found.append(Verb(controller_command, (), controller_command, ("--once",)))
    return found


VERBS = verbs()
#: Verbs left out, each with its reason: one that would block, start processes or write outside
#: LAKESHORE_HOME and the working directory, and has no flag that keeps it inside them. None now:
#: server, the daemon and the controller are covered as the module docstring says.
SKIP: dict[str, str] = {}
FUZZED = [
    pytest.param(v, id=v.id, marks=pytest.mark.skip(reason=SKIP[v.id])) if v.id in SKIP else v
    for v in VERBS
]


def _params(command: click.Command) -> list[click.Parameter]:
    return [p for p in command.params if p.name != "help"]


def _is_flag(param: click.Parameter) -> bool:
    return isinstance(param, click.Option) and (param.is_flag or param.count)


def _spelling(param: click.Parameter) -> str:
    assert isinstance(param, click.Option)
    return max(param.opts, key=len)


# -- the oracle: is this value invalid for this parameter? ----------------------------------------


def _number_refused(value: str, kind: click.ParamType) -> bool:
    integer = isinstance(kind, click.IntRange) or kind is click.INT
    try:
        number: float = int(value, 10) if integer else float(value)
    except ValueError:
        return True
    if number != number or number in (float("inf"), float("-inf")):
        return True
    low = getattr(kind, "min", None)
    high = getattr(kind, "max", None)
    if low is not None and (number < low or (getattr(kind, "min_open", False) and number == low)):
        return True
    return high is not None and (
        number > high or (getattr(kind, "max_open", False) and number == high)
    )


#: (verb, parameter) that no hostile value is valid for: a provider kind installed here, and
#: the two things `queues patch` refuses to change.
ALWAYS_REFUSED = {
    (("providers", "add"), "kind"),
    (("queues", "patch"), "kind"),
    (("queues", "patch"), "elasticity"),
}
TOO_LONG = {"long", "deep-json", "deep-pair"}
#: Parameters refusing only some values, by label.
REFUSED_LABELS: dict[str, set[str]] = {
    "url": set(HOSTILE),
    # a missing store is created, but not under a file nor with a 200k-character name
    "store": {"under-file", *TOO_LONG},
    # a compose file, a JSON payload: there, readable, and not nested 100k deep
    "path": {"under-file", "missing-file", "deep-file", "deep-json"},
    "payload": {"under-file", "missing-file", "deep-file", "deep-json"},
    "signing_key_file": {"under-file", "missing-file", "deep-json"},  # any 32 bytes are a key
    "key": TOO_LONG,  # keys are at most 512 characters
    # KEY=VALUE: none of the hostile values but one has an '='; a --set value is parsed as JSON
    "extra": set(HOSTILE),
    "labels": set(HOSTILE) - {"deep-pair"},
}


def _numeric(kind: click.ParamType) -> bool:
    return isinstance(kind, (click.IntRange, click.FloatRange)) or kind in (click.INT, click.FLOAT)


def must_refuse(verb: Verb, param: click.Parameter, label: str, value: str) -> bool:
    """Whether `value` is invalid for `param`: the run must exit nonzero."""
    name = param.name or ""
    if label == "empty" and isinstance(param, click.Option) and not param.required:
        return False  # an empty optional value often means "not given": not asserted
    if _numeric(param.type):
        return _number_refused(value, param.type)
    if isinstance(param.type, click.Choice) or (verb.path, name) in ALWAYS_REFUSED:
        return True
    if name in REFUSED_LABELS:
        return label in REFUSED_LABELS[name]
    return name in NAME_PARAMS and label in NOT_NAMES


# -- running --------------------------------------------------------------------------------------


@dataclass
class Box:
    """A fresh LAKESHORE_HOME and the files the hostile paths point at."""

    home: Path
    regular: Path
    missing: Path

    def resolve(self, param: click.Parameter, value: str) -> str:
        at = "@" if param.name == "payload" else ""
        if value == UNDER_FILE:
            return f"{at}{self.regular}/x.db"
        if value == MISSING:
            return f"{at}{self.missing}"
        if value == DEEP_FILE:
            deep = self.regular.with_name("deep.json")
            if not deep.exists():
                deep.write_text(DEEP)
            return f"{at}{deep}"
        return value


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Box:
    home = tmp_path / "home"
    regular = tmp_path / "regular-file"
    regular.write_text("not a folder\n")
    monkeypatch.chdir(tmp_path)  # relative paths a value names land here, not in the repo
    # The verbs that would block or start processes (see the module docstring).
    monkeypatch.setattr(server_cli, "serve", serve_nothing)
    monkeypatch.setattr(daemon_main, "Daemon", StubDaemon)
    open_store(home / "lakeshore.db").close()  # a plane to read: the controller creates none
    return Box(home, regular, tmp_path / "no-such-file.json")


def serve_nothing(config: Any, scheme: str, issued: str | None) -> None:
    """`cli.server.serve` (uvicorn's run), replaced: returns at once, closing the store as the
    app's shutdown does."""
    config.app.state.lakeshore.store.close()


class StubDaemon:
    """lakeshore-daemon's run loop, replaced: this pass is about its command line."""

    def __init__(self, plane: Any, config: Any, **kwargs: Any) -> None:
        self.config = config

    def run(self) -> int:
        return 0


def _env(box: Box) -> dict[str, str | None]:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("LAKESHORE_")}
    for keep in ("LAKESHORE_OBJECTS", "LAKESHORE_OBJECTS_CAP"):
        env.pop(keep, None)
    env["LAKESHORE_HOME"] = str(box.home)
    env["HOME"] = str(box.regular.parent)  # nothing lands in the real ~ either
    return env


#: Options a verb is always given so that it writes into the test's folder and nowhere else
#: (`{tmp}`); a fuzzed option of the same name takes its place. `systemd install` writes to
#: /etc by default, and this suite may run as root.
CONFINE: dict[tuple[str, ...], list[tuple[str, str]]] = {
    ("systemd", "install"): [("--unit-dir", "{tmp}/units"), ("--env-dir", "{tmp}/env")],
}


def run(verb: Verb, args: list[str], box: Box) -> Result:
    confined = [
        part
        for option, value in CONFINE.get(verb.path, [])
        if option not in args
        for part in (option, value.format(tmp=box.regular.parent))
    ]
    runner = CliRunner(env=_env(box))
    argv = [*verb.path, *args, *confined, *verb.suffix]
    return runner.invoke(verb.root, argv, catch_exceptions=True)


#: Where a verb that escaped its confinement would write: checked around every test.
SYSTEM_DIRS = (Path("/etc"), Path("/etc/systemd/system"), Path("/etc/lakeshore"))


def _system_entries() -> set[Path]:
    found: set[Path] = set()
    for folder in SYSTEM_DIRS:
        if folder.is_dir():
            found |= {p for p in folder.iterdir() if "lakeshore" in p.name}
    return found


@pytest.fixture(autouse=True)
def _writes_nothing_outside(tmp_path: Path) -> Iterator[None]:
    before = _system_entries()
    yield
    new = _system_entries() - before
    assert not new, f"a verb wrote outside its test's folder: {sorted(map(str, new))}"


def problem(result: Result, *, refuse: bool) -> str | None:
    """What is wrong with one run, in a few words (None: nothing)."""
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        return f"escaped: {type(exc).__name__}: {exc}"[:300]
    out = result.output
    if "Traceback" in out:
        return "printed a traceback"
    if refuse and result.exit_code == 0:
        return "accepted an invalid value"
    if result.exit_code in (0, *JOB_EXITS):
        return None
    if result.exit_code not in (1, 2):
        return f"exit status {result.exit_code}"
    lines = [line for line in out.splitlines() if line.strip()]
    if not lines or not lines[-1].startswith("Error: "):
        return f"the last line is not an error: {lines[-1][:200] if lines else '(none)'!r}"
    if BUG_PREFIX in lines[-1]:
        return lines[-1][:300]
    return None


def check(result: Result, argv: list[str], *, refuse: bool) -> None:
    found = problem(result, refuse=refuse)
    if found is not None:
        exc = result.exception
        stack = "".join(traceback.format_exception(exc)) if exc is not None else ""
        pytest.fail(f"{_shown(argv)}: {found}\n{result.output[-1500:]}\n{stack}")


def _shown(argv: list[str]) -> list[str]:
    return [a if len(a) < 60 else f"{a[:20]}...({len(a)} chars)" for a in argv]


def _baseline(verb: Verb, skip: click.Parameter | None) -> list[str]:
    args: list[str] = []
    for param in _params(verb.command):
        if param is skip or not param.required:
            continue
        value = BASELINE[param.name or ""]
        args += [value] if isinstance(param, click.Argument) else [_spelling(param), value]
    return args


def _with(verb: Verb, param: click.Parameter, value: str) -> list[str]:
    """The valid command line with `param` given `value` (arguments keep their order)."""
    args: list[str] = []
    for p in _params(verb.command):
        if p is param:
            args += [value] if isinstance(p, click.Argument) else [_spelling(p), value]
        elif p.required:
            given = BASELINE[p.name or ""]
            args += [given] if isinstance(p, click.Argument) else [_spelling(p), given]
    if isinstance(param, click.Argument) and value.startswith("-"):
        args = [*[a for a in args if a != value], "--", value]  # a value, not an option
    return args


# -- the pass -------------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", FUZZED, ids=[v.id for v in VERBS])
def test_every_option_of_every_verb_refuses_hostile_values_in_one_line(
    verb: Verb, box: Box
) -> None:
    runs, failures = 0, []
    for param in _params(verb.command):
        if _is_flag(param):
            continue
        for label, raw in HOSTILE.items():
            args = _with(verb, param, box.resolve(param, raw))
            found = problem(run(verb, args, box), refuse=must_refuse(verb, param, label, raw))
            if found is not None:
                failures.append(f"{_shown([verb.id, *args])}: {found}")
            runs += 1
    print(f"{verb.id}: {runs} hostile runs, {len(failures)} failed")
    assert not failures, f"{len(failures)} of {runs} runs failed:\n" + "\n".join(failures[:15])


@pytest.mark.parametrize("verb", FUZZED, ids=[v.id for v in VERBS])
def test_every_flag_and_help_of_every_verb_ends_cleanly(verb: Verb, box: Box) -> None:
    help_run = run(verb, ["--help"], box)
    check(help_run, [verb.id, "--help"], refuse=False)
    assert help_run.exit_code == 0, help_run.output
    for param in _params(verb.command):
        if not _is_flag(param):
            continue
        key = (*verb.path, param.name or "")
        args = [*_baseline(verb, None), _spelling(param), *FLAG_COMPANIONS.get(key, [])]
        check(run(verb, args, box), [verb.id, *args], refuse=False)


def test_unknown_verbs_and_options_are_usage_errors(box: Box) -> None:
    top = Verb(cli, (), cli)
    for args in (
        ["nosuchverb"],
        ["queues", "nosuchverb"],
        ["queues", "ls", "--nosuch"],
        ["\udcff"],
    ):
        result = run(top, args, box)
        check(result, args, refuse=True)
        assert result.exit_code == 2


# -- the home, the database and the environment ---------------------------------------------------

#: One reading verb and one writing verb per plane-backed group.
HOME_VERBS = [
    ["queues", "ls"],
    ["queues", "add", "fuzz-q"],
    ["submit", "fuzz-q", "--payload-json", "1"],
    ["jobs", "ls"],
    ["daemon", "ls"],
    ["status"],
    ["providers", "ls"],
    ["namespaces", "ls"],
    ["tokens", "ls"],
    ["server"],
]


@pytest.mark.parametrize("where", ["a regular file", "a path under a regular file", "unwritable"])
@pytest.mark.parametrize("args", HOME_VERBS, ids=[" ".join(a) for a in HOME_VERBS])
def test_an_unusable_home_is_one_line_naming_it(args: list[str], where: str, box: Box) -> None:
    if where == "a regular file":
        box.home = box.regular
    elif where == "a path under a regular file":
        box.home = box.regular / "home"
    elif os.geteuid() != 0:
        box.home = box.home.with_name("read-only-home")
        box.home.mkdir(mode=0o500)
    else:  # root writes through any mode bits, but not into sysfs
        box.home = _unwritable_for_root()
    result = run(Verb(cli, (), cli), args, box)
    check(result, args, refuse=True)
    assert "LAKESHORE_HOME" in result.output.splitlines()[-1]


def _unwritable_for_root() -> Path:
    path = Path("/sys/lakeshore-fuzz-home")
    try:
        path.mkdir()
    except PermissionError:
        return path
    except OSError as exc:
        pytest.skip(f"no folder here that root cannot write ({exc})")
    path.rmdir()
    pytest.skip("root can write into /sys here: no unwritable folder to point the home at")


@pytest.mark.parametrize("args", HOME_VERBS, ids=[" ".join(a) for a in HOME_VERBS])
def test_a_garbage_database_is_one_line_naming_the_file(args: list[str], box: Box) -> None:
    box.home = box.home.with_name("garbage-home")
    box.home.mkdir(mode=0o700)
    (box.home / "lakeshore.db").write_bytes(b"this is not a database\n" * 200)
    result = run(Verb(cli, (), cli), args, box)
    check(result, args, refuse=True)
    assert "lakeshore.db" in result.output.splitlines()[-1]


@pytest.mark.parametrize("entry", ["lakeshore-controller", "lakeshore controller"])
def test_the_controller_refuses_to_create_or_read_a_bad_store(entry: str, box: Box) -> None:
    typo = box.home.parent / "typo" / "x.db"
    garbage = box.home.parent / "garbage.db"
    garbage.write_bytes(b"not a database\n" * 100)
    if entry == "lakeshore-controller":
        verb = Verb(controller_command, (), controller_command, ("--once",))
    else:  # the subcommand hands its arguments to lakeshore-controller
        verb = Verb(cli, ("controller",), cli, ("--once",))
    for store, says in ((typo, "no database"), (garbage, "damaged")):
        result = run(verb, ["--store", str(store)], box)
        check(result, [entry, "--store", str(store)], refuse=True)
        assert says in result.output.splitlines()[-1], result.output
    assert not typo.parent.exists()


def test_the_strict_queues_error_names_a_verb_that_exists() -> None:
    from dreamlake.lakeshore.errors import NotFound
    from dreamlake.lakeshore.plane.dispatch import Dispatch
    from dreamlake.lakeshore.queue_rows import unknown_queue

    with Dispatch(":memory:") as plane, pytest.raises(NotFound) as refused:
        unknown_queue(plane, "nope", strict=True)
    named = str(refused.value).split("`lakeshore ", 1)[1].split("`", 1)[0].split()
    group = cli.commands[named[0]]
    assert isinstance(group, click.Group) and named[1] in group.commands, named


# -- the console scripts, for real ----------------------------------------------------------------


def _script(name: str) -> list[str]:
    exe = Path(sys.executable).with_name(name)
    if exe.exists():
        return [str(exe)]
    module = {
        "lakeshore": "cli.main",
        "lakeshore-daemon": "daemon.main",
        "lakeshore-controller": "controller.main",
    }[name]
    return [sys.executable, "-c", f"from dreamlake.lakeshore.{module} import main; main()"]


def _deep_json(path: Path) -> str:
    path.write_text("[" * 100_000 + "]" * 100_000)
    return f"@{path}"


SCRIPT_CASES: dict[str, tuple[str, list[str | bytes], str]] = {
    # id: (script, arguments, words the last line must hold)
    "deep-json": ("lakeshore", ["submit", "q", "--json", "<deep>"], "nested deeper"),
    "missing-json-file": ("lakeshore", ["submit", "q", "--json", "@<missing>"], "cannot read"),
    "max-depth-10**30-http": (
        "lakeshore",
        ["queues", "add", "x", "--max-depth", str(10**30), "--url", "http://127.0.0.1:9"],
        "--max-depth",
    ),
    "broken-url": ("lakeshore", ["queues", "ls", "--url", "http://[::1"], "URL"),
    "token-newline": (
        "lakeshore",
        ["queues", "ls", "--url", "http://127.0.0.1:9", "--token", "lks_a\nb"],
        "token",
    ),
    "token-non-ascii": (
        "lakeshore",
        ["queues", "ls", "--url", "http://127.0.0.1:9", "--token", "lks_t\u00f6k\u00e9n"],
        "token",
    ),
    "argv-not-utf8": ("lakeshore", ["queues", "show", b"q\xff"], "name"),
    "server-store-under-file": ("lakeshore", ["server", "--store", "<under-file>"], "not a folder"),
    "server-postgres-unreachable": (
        "lakeshore",
        ["server", "--store", "postgresql://postgres@127.0.0.1:9/test"],
        "PostgreSQL",
    ),
    "daemon-ftp-storage": (
        "lakeshore-daemon",
        ["--storage", "ftp://x", "--burst"],
        "file:///dir or s3://",
    ),
    "daemon-nan-lease": ("lakeshore-daemon", ["--lease-s", "nan", "--burst"], "finite"),
    "controller-typo-store": (
        "lakeshore-controller",
        ["--store", "<typo>", "--once"],
        "no database",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SCRIPT_CASES))
def test_console_scripts_refuse_in_one_line(case: str, tmp_path: Path) -> None:
    script, args, words = SCRIPT_CASES[case]
    regular = tmp_path / "regular-file"
    regular.write_text("x")
    fill = {
        "<deep>": _deep_json(tmp_path / "deep.json") if "<deep>" in args else "",
        "@<missing>": f"@{tmp_path / 'missing.json'}",
        "<under-file>": str(regular / "x.db"),
        "<typo>": str(tmp_path / "typo" / "x.db"),
    }
    argv = [fill.get(a, a) if isinstance(a, str) else a for a in args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env.update(
        {
            k: os.environ[k]
            for k in ("LAKESHORE_OBJECTS", "LAKESHORE_OBJECTS_CAP")
            if k in os.environ
        }
    )
    env["LAKESHORE_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [*_script(script), *argv], env=env, cwd=tmp_path, capture_output=True, timeout=60
    )
    out = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode in (1, 2), (case, done.returncode, out[-1500:])
    assert "Traceback" not in out, out[-3000:]
    last = [line for line in out.splitlines() if line.strip()][-1]
    assert last.startswith("Error: ") and words in last, (case, last)
    assert BUG_PREFIX not in last
    assert not (tmp_path / "typo").exists()
