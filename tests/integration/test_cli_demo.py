"""`make demo` in CI: the real `kcoord demo` console script, end to end, on its own embedded
Ray instance (a subprocess: it starts and stops its own Ray). The summary must show no lost
record, every record read by the group and a group lag of 0.

The writes are spread over 4 s instead of the default 12 (the pacing is only there so a
person can watch): the leader is still killed mid-stream, after 40% of the records."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from cli_support import KCOORD, RAY_ENV

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_kcoord_demo_end_to_end(tmp_path):
    summary_file = tmp_path / "summary.json"
    env = {**os.environ, **RAY_ENV}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([KCOORD, "demo", "--seconds", "4", "--summary-json", str(summary_file)], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    summary = json.loads(summary_file.read_text())
    assert summary["ok"] and summary["lost"] == 0 and summary["write_errors"] == 0
    assert summary["records_written"] == summary["records_read"] == 20_000
    assert summary["group_mode"] == "group" and summary["group_lag"] == 0
    assert summary["failover_ms"] > 0 and summary["new_leader_epoch"] > 0
    assert "lost" in proc.stdout and "kcoord demo summary" in proc.stdout
    if summary["spark"]["status"] == "ok":  # the streaming step: every record once, lag 0, the group left
        stream = summary["spark"]["stream"]
        assert stream["ok"] and stream["input_rows"] == stream["output_rows"] == 20_000
        assert stream["group_lag"] == 0 and stream["members_after_stop"] == 0
