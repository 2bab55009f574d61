"""A token read from a file (`--token-file`, LAKESHORE_TOKEN_FILE).

A token on a command line (`lakeshore-daemon --token lks_...`) is in /proc/<pid>/cmdline, which
every user of the box reads (`ps -ef`); a file the process reads once at start is not. A token
file that other users may read, or write, is refused with the path and its mode, as ssh refuses
a private key that is: a token others can read is already theirs, and one others can write lets
them choose whose work the process does (a daemon pointed at a stranger's namespace runs the
stranger's code).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dreamlake.lakeshore.errors import InvalidArgument

#: The environment's name for the file (the deploy's entrypoint and compose file use it too).
TOKEN_FILE_ENV = "LAKESHORE_TOKEN_FILE"
#: The mode bits no one but the owner may hold on a token file.
OPEN_TO_OTHERS = 0o077


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in `path` (surrounding whitespace dropped); InvalidArgument, changing nothing,
    for a file that cannot be read, is empty, holds more than one token or is open to others."""
    where = Path(path)
    try:
        mode = stat.S_IMODE(where.stat().st_mode)  # follows links: secrets are often mounted so
        if mode & OPEN_TO_OTHERS:
            raise InvalidArgument(
                f"the token file {where} is open to other users (mode {mode:04o}); it holds a "
                f"secret: chmod 600 {where} (only its owner may read it)"
            )
        text = where.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise InvalidArgument(
            f"cannot read the token file {where}: {exc.strerror or type(exc).__name__}"
        ) from None
    except UnicodeDecodeError:
        raise InvalidArgument(
            f"the token file {where} is not text: it should hold one token"
        ) from None
    if not text:
        raise InvalidArgument(f"the token file {where} is empty: it should hold one token")
    if not all("!" <= c <= "~" for c in text):
        # The message never repeats the file's content: it may be a secret with a typo in it.
        raise InvalidArgument(
            f"the token file {where} holds more than one word, or characters a token never "
            "has: it should hold one token (printable ASCII, no spaces)"
        )
    return text
