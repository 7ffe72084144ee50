"""A private ``ray start --head`` for tests that drive kcoord from separate processes
(the CLI, driver scripts), and a runner for the ``kcoord`` console script.

The head is started with ``--block`` in its own process group, on free ports and under its
own temp dir, so it never touches the pytest session's Ray instance or anyone else's; it is
stopped by signalling that process (``--block`` takes the processes it started down with
it), never with ``ray stop``, which would stop every Ray instance on the machine.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kcoord.cluster.local import LOCAL_RAY_ENV

VENV_BIN = Path(sys.executable).parent
KCOORD = str(VENV_BIN / "kcoord")
RAY = str(VENV_BIN / "ray")
REPO = Path(__file__).resolve().parents[2]

# kcoord's own Ray settings for many small actors on a small machine, without usage stats.
RAY_ENV = {**LOCAL_RAY_ENV, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayHead:
    """``ray start --head --block`` in a subprocess; ``env`` points drivers at it."""

    def __init__(self, num_cpus: int = 2) -> None:
        self.num_cpus = num_cpus
        self.temp_dir = tempfile.mkdtemp(prefix="kc-", dir="/tmp")  # short: unix socket paths
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(RAY_ENV)
        env["RAY_ADDRESS"] = self.address
        env.pop("KCOORD_CLUSTER", None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        return env

    def start(self, timeout: float = 180.0) -> "RayHead":
        cmd = [
            RAY,
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={self.port}",
            f"--num-cpus={self.num_cpus}",
            "--include-dashboard=false",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--ray-client-server-port={free_port()}",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
        ]
        self.proc = subprocess.Popen(
            cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        lines: queue.Queue = queue.Queue()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise RuntimeError("ray start --head did not come up in time:\n" + "".join(self.output[-30:]))
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError("ray start --head exited:\n" + "".join(self.output[-30:]))
            if "Ray runtime started" in line:
                return self

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM the ``--block`` process (it stops what it started); SIGKILL its process
        group if that does not finish in time."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def run_kcoord(head: RayHead, *args: str, input: str | None = None, timeout: float = 180.0, check: bool = False) -> subprocess.CompletedProcess:
    """Run the real console script against ``head``."""
    proc = subprocess.run([KCOORD, *args], env=head.env, input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kcoord {' '.join(args)} exited {proc.returncode}:\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def run_python(head: RayHead, code: str, timeout: float = 180.0) -> subprocess.CompletedProcess:
    """Run a separate driver script against ``head``."""
    return subprocess.run([sys.executable, "-c", code], env=head.env, capture_output=True, text=True, timeout=timeout, cwd=str(REPO))
