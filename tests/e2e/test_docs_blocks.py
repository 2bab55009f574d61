"""Every fenced code block of README.md and docs/*.md runs as written (docs/objects.md has its
own test, tests/unit/test_docs_objects.py).

One test per page runs its blocks in order, in a fresh folder that is both `$HOME` and the
working directory, with `LAKESHORE_HOME=~/.lakeshore` (so `~/.lakeshore/token` in a block means
what it says) and this virtualenv's `bin/` first on `PATH`:

- `python` blocks run in one interpreter per page (tests/e2e/docs_session.py), in `__main__`, as
  a reader runs them in one session: a later block sees what an earlier one defined;
- `bash` / `sh` / `shell` blocks run with `bash` under `set -euo pipefail`, so any failing
  command fails the block;
- other fences (no language, `text`, `yaml`, ...) are synopses, diagrams and sample output:
  shown, never run. A shell session meant to run is tagged `bash`.

Markers are HTML comments on the lines right above a fence (several may stack), with no blank
line between them and the fence; a marker anywhere else (under a block, say, where it would be
read for the next block or for none) fails the page's marker test:

    <!-- not-run: REASON -->        not run here; the reason is required (AWS, systemd, a GPU,
                                    a command that runs in the foreground until stopped, ...)
    <!-- needs: server -->          a real `lakeshore server --host 127.0.0.1` on this page's
                                    home; `127.0.0.1:8765` in the block is rewritten to its port
                                    (the one liberty taken: parallel runs cannot share a port)
    <!-- needs: daemon ARGS -->     a real `lakeshore-daemon ARGS` (the script, started in the
                                    page's folder) on this page's home, ready before the block
    <!-- needs: postgres -->        a scratch schema on the test PostgreSQL server, its URL in
                                    `$LAKESHORE_STORE` for the whole page (skips off CI when none)
    <!-- needs: s3 BUCKET... -->    moto's S3 server (the one fake allowed, for AWS) holding the
                                    buckets, in the usual AWS environment for the whole page
    <!-- file: NAME -->             the block is a file: written to NAME in the page's folder
    <!-- raises: NAME -->           the python block must raise NAME (a class in the error's
                                    MRO); a `# NAME: message` comment in it must match the message
    <!-- expect: TEXT -->           the block's output must contain TEXT

Processes a page needs are started once, at the first block that needs them, and kept for the
rest of the page. A failure names the block's file and line, with its output and the logs of
the processes it ran against.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import BOX_VARS
from tests.support.daemons import DaemonProcess
from tests.support.postgres import postgres_schema
from tests.support.server import free_port, running_server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "objects.md")
PAGES = [ROOT / "README.md", *DOCS]
SESSION = Path(__file__).resolve().with_name("docs_session.py")
BIN = Path(sys.executable).parent
PYTHON = ("python", "py")
SHELL = ("bash", "sh", "shell")
MARKERS = ("not-run", "needs", "file", "raises", "expect")
DOC_ADDRESS = "127.0.0.1:8765"
BLOCK_TIMEOUT_S = 60.0

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*(?P<name>[\w-]+)\s*:?(?P<value>.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # the opening fence's line, 1-based
    lang: str
    source: str
    markers: tuple[tuple[str, str], ...] = ()

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def values(self, name: str) -> list[str]:
        return [value for key, value in self.markers if key == name]

    def value(self, name: str) -> str | None:
        found = self.values(name)
        return found[0] if found else None

    @property
    def runs(self) -> bool:
        code = self.lang in PYTHON or self.lang in SHELL
        return code and not self.values("not-run") and not self.values("file")


def fences(lines: list[str]) -> list[tuple[int, int, int, str]]:
    """Each fenced block's opening line, closing line, indent and language (0-based lines)."""
    found: list[tuple[int, int, int, str]] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence = opening["fence"]
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        found.append((i, end, len(opening["indent"]), opening["lang"].lower()))
        i = end + 1
    return found


def marker_stack(lines: list[str], opening: int) -> range:
    """The marker lines right above the fence on line `opening`: the ones that apply to it."""
    above = opening - 1
    while above >= 0 and MARKER.match(lines[above]):
        above -= 1
    return range(above + 1, opening)


def parse(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, with the marker comments right above each."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    for opening, end, indent, lang in fences(lines):
        inner = lines[opening + 1 : end]
        body = [line[indent:] if line[:indent].isspace() else line for line in inner]
        markers = tuple(
            (m["name"], m["value"].strip())
            for m in (MARKER.match(lines[n]) for n in marker_stack(lines, opening))
            if m is not None
        )
        source = "\n".join(body) + "\n"
        blocks.append(Block(path, opening + 1, lang, source, markers))
    return blocks


def misplaced_markers(path: Path) -> list[str]:
    """Marker comments that apply to no block, or that touch the block above them too.

    A marker put under its block is silently read for the next block (or for none), so the
    check it states is never made: the one place for a marker is right above its fence.
    """
    lines = path.read_text().splitlines()
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    blocks = fences(lines)
    inside = {n for opening, end, _, _ in blocks for n in range(opening, end + 1)}
    closing = {end for _, end, _, _ in blocks}
    attached: set[int] = set()
    problems: list[str] = []
    for opening, _, _, _ in blocks:
        stack = marker_stack(lines, opening)
        attached.update(stack)
        if stack and stack.start - 1 in closing:
            problems.append(
                f"{where}:{stack.start + 1}: a marker right under a block's "
                "closing fence; leave a line between it and the block above"
            )
    for n, line in enumerate(lines):
        if n not in inside and n not in attached and MARKER.match(line):
            problems.append(
                f"{where}:{n + 1}: {line.strip()} applies to no block; "
                "markers go on the lines right above the fence of the block they check"
            )
    return problems


def documented_message(source: str, name: str) -> str | None:
    """`# Name: message` and its `#   continuation` lines, whitespace collapsed."""
    lines = source.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"# {name}: "):
            parts = [line[len(f"# {name}: ") :]]
            parts += [c[1:] for c in lines[i + 1 :] if c.startswith("#   ")]
            return " ".join(" ".join(parts).split())
    return None


# -- the processes a page runs against ----------------------------------------------------------


@dataclass
class Page:
    """One page's folder, environment and processes; `close()` stops them all."""

    root: Path
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    url: str | None = None
    daemons: dict[tuple[str, ...], DaemonProcess] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)
    session: subprocess.Popen[str] | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.root / ".lakeshore"

    def start(self, blocks: list[Block]) -> None:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("LAKESHORE_", "NOTIFY_SOCKET", "WATCHDOG_")) or k in BOX_VARS
        }
        env["HOME"] = str(self.root)
        env["LAKESHORE_HOME"] = str(self.home)
        env["PATH"] = os.pathsep.join((str(BIN), env.get("PATH", "")))
        needs = [need.split() for b in blocks for need in b.values("needs")]
        if ["postgres"] in needs:
            env["LAKESHORE_STORE"] = self.stack.enter_context(postgres_schema("lakeshore_docs"))
        buckets = [bucket for kind, *names in needs if kind == "s3" for bucket in names]
        if buckets:
            env.update(self.s3(buckets))
        self.env = env
        self.home.mkdir(parents=True, exist_ok=True)

    def s3(self, buckets: list[str]) -> dict[str, str]:
        """moto's S3 server on a loopback port with `buckets` made: the AWS environment."""
        pytest.importorskip("boto3")
        moto = pytest.importorskip("moto.server")
        import boto3

        port = free_port()
        server = moto.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        self.stack.callback(server.stop)
        env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        }
        client = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name=env["AWS_DEFAULT_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        return env

    def provide(self, need: str) -> None:
        kind, _, args = need.partition(" ")
        if kind == "server":
            self.server()
        elif kind == "daemon":
            self.daemon(tuple(shlex.split(args)))
        elif kind not in ("postgres", "s3"):  # those are set up for the whole page in start()
            raise AssertionError(f"unknown need {need!r}; use server, daemon ARGS, postgres, s3")

    def server(self) -> str:
        if self.url is None:
            args = ("--host", "127.0.0.1")
            self.url, _ = self.stack.enter_context(running_server(self.home, extra_args=args))
            self.logs.append(self.home / f"server-{self.url.rsplit(':', 1)[1]}.log")
        return self.url

    def daemon(self, args: tuple[str, ...]) -> DaemonProcess:
        if args not in self.daemons:
            rest = list(args)
            name = f"docs-{len(self.daemons)}"
            if "--name" in rest:
                at = rest.index("--name")
                name = rest[at + 1]
                del rest[at : at + 2]
            proc = DaemonProcess(
                self.home,
                name,
                rest,
                env={"HOME": str(self.root)},
                cwd=self.root,
                command=(str(BIN / "lakeshore-daemon"),),
            )
            self.stack.callback(proc.stop)
            self.daemons[args] = proc
            self.logs.append(proc.log_path)
            proc.ready()
        return self.daemons[args]

    def rewrite(self, source: str) -> str:
        if self.url is None:
            return source
        port = self.url.rsplit(":", 1)[1]
        source = source.replace(DOC_ADDRESS, f"127.0.0.1:{port}")
        return source.replace("localhost:8765", f"localhost:{port}")

    def close(self) -> None:
        self.end_session()
        self.stack.close()

    def end_session(self, *, kill: bool = False) -> None:
        session, self.session = self.session, None
        if session is None:
            return
        assert session.stdin is not None and session.stdout is not None
        with contextlib.suppress(OSError):
            session.stdin.close()  # the session's loop ends with its input
        if kill:
            session.kill()
        try:
            session.wait(10)
        except subprocess.TimeoutExpired:
            session.kill()
            session.wait()
        session.stdout.close()

    # -- running blocks ----------------------------------------------------------------------

    def run(self, block: Block, index: int) -> None:
        for need in block.values("needs"):
            self.provide(need)
        output = self.root / f".block-{index}.out"
        output.touch()
        source = self.rewrite(block.source)
        if block.lang in PYTHON:
            error = self.run_python(block, source, output)
        else:
            error = self.run_shell(source, output)
        printed = output.read_text(errors="replace")
        for text in block.values("expect"):
            if error is None and text not in printed:
                error = f"expected {text!r} in the output"
        if error is not None:
            pytest.fail(self.report(block, source, printed, error), pytrace=False)

    def run_python(self, block: Block, source: str, output: Path) -> str | None:
        if self.session is None:
            self.session = subprocess.Popen(
                [sys.executable, str(SESSION)],
                cwd=self.root,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        ask = {
            "source": source,
            "path": str(block.path),
            "line": block.line + 1,
            "output": str(output),
            "raises": block.value("raises"),
        }
        assert self.session.stdin is not None and self.session.stdout is not None
        self.session.stdin.write(json.dumps(ask) + "\n")
        self.session.stdin.flush()
        ready, _, _ = select.select([self.session.stdout], [], [], BLOCK_TIMEOUT_S)
        line = self.session.stdout.readline() if ready else ""
        if not line:
            self.end_session(kill=True)
            return f"no answer within {BLOCK_TIMEOUT_S}s (the session was stopped)"
        answer = json.loads(line)
        if not answer["ok"]:
            return str(answer["error"])
        expected = block.value("raises")
        if expected is not None:
            documented = documented_message(source, expected)
            actual = " ".join(str(answer.get("message", "")).split())
            if documented is not None and documented != actual:
                return f"{expected} says {actual!r}; the page says {documented!r}"
        return None

    def run_shell(self, source: str, output: Path) -> str | None:
        with output.open("ab") as out:
            try:
                done = subprocess.run(
                    ["bash", "--noprofile", "--norc", "-c", "set -euo pipefail\n" + source],
                    cwd=self.root,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=BLOCK_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return f"still running after {BLOCK_TIMEOUT_S}s"
        return None if done.returncode == 0 else f"bash exited {done.returncode}"

    def report(self, block: Block, source: str, printed: str, error: str) -> str:
        logs = "".join(
            f"\n--- {log.name} (last lines)\n{log.read_text(errors='replace')[-3000:]}"
            for log in self.logs
            if log.exists()
        )
        return (
            f"{block.where}: the {block.lang} block fails: {error}\n"
            f"--- the block as run\n{source}--- its output\n{printed}{logs}"
        )


@pytest.fixture
def page_runner(tmp_path: Path) -> Iterator[Page]:
    page = Page(tmp_path)
    try:
        yield page
    finally:
        page.close()


# -- the tests ----------------------------------------------------------------------------------

ALL = [block for page in PAGES for block in parse(page)]
RUNNABLE = [page for page in PAGES if any(b.runs for b in parse(page))]


def test_the_pages_have_blocks_to_run() -> None:
    assert ROOT / "README.md" in RUNNABLE
    assert sum(b.runs for b in ALL) >= 15  # the parser still finds the blocks


@pytest.mark.parametrize("block", ALL, ids=[b.where for b in ALL])
def test_each_marker_is_known_and_each_skip_has_a_reason(block: Block) -> None:
    for name, value in block.markers:
        assert name in MARKERS, f"{block.where}: unknown marker {name!r}; use one of {MARKERS}"
        assert value, f"{block.where}: <!-- {name}: ... --> needs a value (a reason, a name)"
    idle = [name for name in ("needs", "raises", "expect") if block.values(name)]
    assert block.runs or not idle, f"{block.where}: {idle} on a block that is not run"
    assert block.lang in PYTHON or not block.values("raises"), f"{block.where}: raises: in python"


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_each_marker_sits_right_above_its_block(path: Path) -> None:
    problems = misplaced_markers(path)
    assert not problems, "\n".join(problems)


def test_a_marker_under_its_block_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- expect: 1 -->\n```python\nprint(1)\n```\n"
        "<!-- expect: 2 -->\n```python\nprint(2)\n```\n"
        "\n```python\nprint(3)\n```\n<!-- expect: 3 -->\n\nText.\n"
    )
    assert [b.values("expect") for b in parse(page)] == [["1"], ["2"], []]
    problems = misplaced_markers(page)
    assert len(problems) == 2, problems
    assert f"{page}:5: a marker right under a block's closing fence" in problems[0]
    assert f"{page}:13: <!-- expect: 3 --> applies to no block" in problems[1]


@pytest.mark.parametrize("path", RUNNABLE, ids=[str(p.relative_to(ROOT)) for p in RUNNABLE])
def test_every_block_of_the_page_runs(path: Path, page_runner: Page) -> None:
    blocks = parse(path)
    page_runner.start(blocks)
    for index, block in enumerate(blocks):
        name = block.value("file")
        if name is not None:
            target = (page_runner.root / name).resolve()
            assert target.is_relative_to(page_runner.root), f"{block.where}: {name} escapes"
            target.parent.mkdir(parents=True, exist_ok=True)  # a package's module
            target.write_text(block.source)
        elif block.runs:
            page_runner.run(block, index)
