"""`farm submit --frames 1-1000000 --chunk-size 1` is refused at once, before the farm is touched:
exit code 2, one line saying why, nothing recorded (the farm here does not even answer)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_million_chunks_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "farm", "submit", str(ROOT / "scenes" / "demo.blend"),
         "--frames", "1-1000000", "--chunk-size", "1"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "FARM_CONFIG": str(tmp_path / "c"),
             "FARM_REDIS_URL": "redis://127.0.0.1:1/0", "FARM_S3_ENDPOINT": "http://127.0.0.1:1"},
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "1000000 chunks" in done.stderr and "at most 10000" in done.stderr
    assert "Traceback" not in done.stderr
