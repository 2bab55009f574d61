"""`--spot-notice auto`: the daemon tells an EC2 instance from local sysfs files alone, so it
polls the metadata service on EC2 and never sends a packet to 169.254.169.254 anywhere else.

Each test builds a fake sysfs in a tmp folder shaped like the real ones (a Nitro instance, a Xen
instance, a laptop, a container without DMI) and points the detection at it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dreamlake.lakeshore.daemon.ec2host import DMI, HYPERVISOR_UUID, ec2_evidence
from dreamlake.lakeshore.daemon.worker import Daemon, DaemonConfig
from dreamlake.lakeshore.plane import Dispatch


def sysfs(root: Path, hypervisor_uuid: str | None = None, **dmi: str) -> Path:
    """A fake /sys holding these DMI files (as the kernel writes them: a trailing newline)."""
    (root / DMI).mkdir(parents=True, exist_ok=True)
    for name, value in dmi.items():
        (root / DMI / name).write_text(value + "\n")
    if hypervisor_uuid is not None:
        (root / HYPERVISOR_UUID).parent.mkdir(parents=True, exist_ok=True)
        (root / HYPERVISOR_UUID).write_text(hypervisor_uuid + "\n")
    return root


@pytest.mark.parametrize(
    ("files", "evidence"),
    [
        (  # a Nitro instance (m5, c6i, p4d, ...)
            {
                "sys_vendor": "Amazon EC2",
                "board_vendor": "Amazon EC2",
                "board_asset_tag": "i-0123456789abcdef0",
            },
            "sys_vendor=Amazon EC2",
        ),
        ({"sys_vendor": "", "board_vendor": "Amazon EC2"}, "board_vendor=Amazon EC2"),
        ({"board_asset_tag": "i-0123456789abcdef0"}, "board_asset_tag=i-0123456789abcdef0"),
        ({"board_asset_tag": "i-0a1b2c3d"}, "board_asset_tag=i-0a1b2c3d"),
        (  # a Xen instance (t2, m4): the UUID says it
            {"sys_vendor": "Xen", "product_uuid": "EC2E1916-9099-7CAF-FD21-012345ABCDEF"},
            "product_uuid=EC2E1916-9099-7CAF-FD21-012345ABCDEF",
        ),
        (  # ... stored little-endian by older Xen: ec2ae145 read back to front
            {"sys_vendor": "Xen", "product_uuid": "45E12AEC-DCD1-B213-94ED-012345ABCDEF"},
            "product_uuid=45E12AEC-DCD1-B213-94ED-012345ABCDEF",
        ),
    ],
)
def test_an_ec2_instance_is_recognised_by_its_dmi_files(
    tmp_path: Path, files: dict[str, str], evidence: str
) -> None:
    assert ec2_evidence(sysfs(tmp_path, **files)) == evidence


def test_a_xen_instance_without_dmi_is_recognised_by_its_hypervisor_uuid(tmp_path: Path) -> None:
    root = sysfs(tmp_path, hypervisor_uuid="ec2e1916-9099-7caf-fd21-012345abcdef")
    assert ec2_evidence(root) == "hypervisor_uuid=ec2e1916-9099-7caf-fd21-012345abcdef"


@pytest.mark.parametrize(
    "files",
    [
        {  # a laptop
            "sys_vendor": "LENOVO",
            "board_vendor": "LENOVO",
            "board_asset_tag": "Not Available",
            "product_uuid": "4c4c4544-0042-3510-8056-b4c04f4e4d32",
        },
        {"sys_vendor": "Google", "product_uuid": "6f1c2a4e-0b2d-4b1e-9c1a-2f4e6d8a0b1c"},  # GCE
        {"sys_vendor": "QEMU", "board_asset_tag": "i-love-this-box"},  # a tag that only looks so
        {"sys_vendor": "Amazon EC2 lookalike"},  # the vendor must be exactly EC2's
        {"sys_vendor": "Xen", "product_uuid": "45e12aed-dcd1-b213-94ed-012345abcdef"},
    ],
)
def test_a_box_that_is_not_ec2_is_not_taken_for_one(tmp_path: Path, files: dict[str, str]) -> None:
    assert ec2_evidence(sysfs(tmp_path, **files)) is None


def test_missing_or_unreadable_files_are_no_evidence_and_no_error(tmp_path: Path) -> None:
    # A container with no DMI at all
    assert ec2_evidence(tmp_path / "nothing-here") is None
    # Files that cannot be read as text: a folder where a file should be (unreadable even by
    # root, unlike a chmod), and bytes that are not text
    root = sysfs(tmp_path / "odd")
    (root / DMI / "sys_vendor").mkdir()
    (root / DMI / "board_vendor").write_bytes(b"\xff\xfe Amazon EC2")
    assert ec2_evidence(root) is None
    # ... while the next file that can be read still counts
    (root / DMI / "board_asset_tag").write_text("i-0123456789abcdef0\n")
    assert ec2_evidence(root) == "board_asset_tag=i-0123456789abcdef0"


def test_the_sysfs_root_comes_from_the_environment_when_not_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESHORE_SYS_ROOT", str(sysfs(tmp_path, sys_vendor="Amazon EC2")))
    assert ec2_evidence() == "sys_vendor=Amazon EC2"


class Recorder:
    """Stands in for the daemon's logger: the events it was given, with their level."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.events.append((level, event, fields))


@pytest.mark.parametrize(
    ("mode", "on_ec2", "watches", "logged"),
    [
        ("auto", True, True, [("info", "spot.detected", {"evidence": "sys_vendor=Amazon EC2"})]),
        ("auto", False, False, [("debug", "spot.not_on_ec2", {})]),
        ("ec2", False, True, []),  # insists, whatever the files say
        (None, True, False, []),  # `none` switches it off, even on EC2
    ],
)
def test_the_daemon_watches_for_spot_notices_only_where_its_mode_says(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str | None,
    on_ec2: bool,
    watches: bool,
    logged: list[tuple[str, str, dict[str, Any]]],
) -> None:
    files = {"sys_vendor": "Amazon EC2" if on_ec2 else "Dell Inc."}
    monkeypatch.setenv("LAKESHORE_SYS_ROOT", str(sysfs(tmp_path, **files)))
    with Dispatch(":memory:") as plane:
        daemon = Daemon(plane, DaemonConfig(name="spot", spot_notice=mode), gpus=[])
        recorder = Recorder()
        daemon._log = recorder
        assert daemon._watches_spot(mode) is watches
    assert recorder.events == logged
