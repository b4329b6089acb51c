"""scripts/demo.sh (``make demo``) runs start to end and leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_and_cleans_up(tmp_path: Path) -> None:
    # The demo runs the venv of this test run's Python (make test-matrix has one per version).
    env = {**os.environ, "TMPDIR": str(tmp_path), "DEMO_VENV": str(Path(sys.executable).parent.parent)}
    env.pop("STREAMKIT_DATA_DIR", None)
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")], capture_output=True, env=env, timeout=120
    )
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    for header in ("== 1. A streaming pipeline", "lag: 0", "== 7. A consumer group", "== 9. Verify", "== 11. A table", "== Done =="):
        assert header in out
    assert "no damage found" in out and "1 problem found" in out
    assert '{"key": "the", "value": 3}' in out and '{"key": "fox", "value": 1}' in out
    assert "Traceback" not in result.stderr.decode()
    assert list(tmp_path.iterdir()) == []  # the temporary data directory is gone
