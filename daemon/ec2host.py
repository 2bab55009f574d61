"""Is this box an EC2 instance? Decided from local files only (issue 35, `--spot-notice auto`).

The daemon polls the instance metadata service for spot notices only on EC2, and must never
send a packet to 169.254.169.254 elsewhere (a laptop, a Slurm node, a sandbox that allows
loopback alone): asking the service whether it is there is exactly the traffic to avoid, and
waits out a timeout on every box that is not EC2. So the answer comes from what the firmware
already wrote to sysfs, as cloud-init's `identify_aws` and amazon-ec2-utils do:

- Nitro instances: DMI `sys_vendor` or `board_vendor` is "Amazon EC2", and `board_asset_tag`
  is the instance id (`i-0123...`).
- Xen instances: DMI `product_uuid` or `/sys/hypervisor/uuid` starts with "ec2" (the DMI one
  possibly byte-swapped, as older Xen wrote it little-endian).

`product_uuid` is readable by root alone; a file that is missing or unreadable is no evidence
either way, never an error. `LAKESHORE_SYS_ROOT` points the daemon at another sysfs (the
tests' fake folders), and so does `sys_root` here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SYS_ROOT = Path("/sys")
DMI = Path("devices/virtual/dmi/id")
HYPERVISOR_UUID = Path("hypervisor/uuid")
VENDOR = "amazon ec2"
#: An EC2 instance id: `i-` and 8 or 17 hex digits; a looser tag ("i-love-my-box") is no proof.
INSTANCE_ID = re.compile(r"i-[0-9a-f]{8}(?:[0-9a-f]{9})?")


def ec2_evidence(sys_root: Path | str | None = None) -> str | None:
    """What says this box is on EC2 (`sys_vendor=Amazon EC2`), or None when nothing does."""
    root = Path(sys_root or os.environ.get("LAKESHORE_SYS_ROOT") or SYS_ROOT)
    dmi = root / DMI
    for name in ("sys_vendor", "board_vendor"):
        value = _read(dmi / name)
        if value is not None and value.lower() == VENDOR:
            return f"{name}={value}"
    tag = _read(dmi / "board_asset_tag")
    if tag is not None and INSTANCE_ID.fullmatch(tag.lower()):
        return f"board_asset_tag={tag}"
    uuid = _read(dmi / "product_uuid")
    if uuid is not None and _ec2_uuid(uuid, swapped_too=True):
        return f"product_uuid={uuid}"
    uuid = _read(root / HYPERVISOR_UUID)
    if uuid is not None and _ec2_uuid(uuid, swapped_too=False):
        return f"hypervisor_uuid={uuid}"
    return None


def _ec2_uuid(uuid: str, *, swapped_too: bool) -> bool:
    """A Xen instance's UUID starts with "ec2"; SMBIOS may store its first field little-endian
    (`45e12aec-...` for `ec2ae145-...`), which amazon-ec2-utils reads both ways too."""
    text = uuid.lower()
    if text.startswith("ec2"):
        return True
    head = text[:8]
    if not swapped_too or not re.fullmatch(r"[0-9a-f]{8}", head):
        return False
    return "".join(reversed([head[i : i + 2] for i in range(0, 8, 2)])).startswith("ec2")


def _read(path: Path) -> str | None:
    """The file's text, stripped; None when it is missing, unreadable or not text."""
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
