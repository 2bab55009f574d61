"""`LAKESHORE_HOME`: the one place this box's Lakeshore state lives (`~/.lakeshore` by default).

The embedded plane's database, the admin token, the signing key, the default storage and the
local provider's state all sit under it. Resolved on every call, never cached at import, so a
test or a program that sets the variable later is obeyed.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("LAKESHORE_HOME") or Path.home() / ".lakeshore")
