"""Every fault at once, at random, from one seed: daemons killed and paused, the server killed
and restarted, answers lost, workers stalled past their leases. Zero anomalies expected."""

from __future__ import annotations

from pathlib import Path

import pytest
from mixed import run_mixed

pytestmark = pytest.mark.slow


def test_faults_mixed_at_random(tmp_path: Path, seed: int) -> None:
    report = run_mixed(tmp_path, seed, seconds=10.0, daemon_jobs=30, loop_jobs=120)
    print(
        f"mixed: faults={report.faults} daemon_jobs={report.daemon_jobs} "
        f"loop_jobs={report.loop_jobs} loops={report.loop_stats} daemons={report.daemon_stats} "
        f"checkpoint_resumes={report.checkpoint_resumes}"
    )
    assert not report.anomalies, "\n".join(report.anomalies)
    assert report.loop_stats["settles_refused"] > 0, "no stall produced a late, refused settle"
