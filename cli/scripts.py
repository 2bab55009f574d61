"""The console scripts (`lakeshore`, `lakeshore-daemon`, `lakeshore-controller`).

Each imports its command and runs it. The scripts cannot point at the commands' own modules:
when an extra is missing (structlog for the daemon), the import of the module that defines
`main` fails before any of its code could catch it, and the user sees a traceback. Here that
failure becomes one line naming the missing module and the pip command, exit status 1; a
module missing that no extra brings (a broken install, a bug) keeps its traceback.

`lakeshore --version` alone is answered here, before click and the verb table are imported:
they were most of what that process did beyond starting Python and loading the package
(issue 45, item 4). It prints what click's version option prints (test_cli_startup.py).
"""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn

from dreamlake.lakeshore.extras import MissingExtra, missing_extra


def _fail(error: MissingExtra) -> NoReturn:
    sys.stderr.write(f"Error: {error}\n")  # as click prints its own errors
    sys.exit(1)


def _run(module: str, script: str) -> None:
    try:
        main = importlib.import_module(f"dreamlake.lakeshore.{module}").main
    except ModuleNotFoundError as exc:
        error = missing_extra(exc, script)
        if error is None:
            raise
        _fail(error)
    main()


def lakeshore() -> None:
    if sys.argv[1:] == ["--version"]:
        from dreamlake.lakeshore import __version__  # the package this module is in: loaded

        sys.stdout.write(f"lakeshore, version {__version__}\n")
        return
    _run("cli.main", "lakeshore")


def daemon() -> None:
    _run("daemon.main", "lakeshore-daemon")


def controller() -> None:
    _run("controller.main", "lakeshore-controller")
