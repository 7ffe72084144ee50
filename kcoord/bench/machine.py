"""What a benchmark run was measured on: hardware, OS, package versions and the code's git
commit. Figures without this are not comparable between runs or machines."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

# The packages whose versions change the figures.
PACKAGES = ("kcoord", "ray", "pyspark", "raydp", "msgpack", "numpy", "pyarrow", "psutil", "matplotlib")


@dataclass
class GitState:
    """The commit the benchmarks ran from; ``dirty`` when the work tree had changes."""

    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None


@dataclass
class MachineInfo:
    cores: int
    physical_cores: int | None
    memory_bytes: int
    cpu_model: str
    os: str
    python: str
    packages: dict[str, str | None]
    git: GitState
    hostname: str = ""
    load_average: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["memory_gib"] = round(self.memory_bytes / 2**30, 1)
        return out


def parse_cpu_model(cpuinfo: str) -> str | None:
    """The first ``model name`` (x86) or ``Model``/``Hardware`` (ARM) line of /proc/cpuinfo."""
    for key in ("model name", "Model", "Hardware"):
        for line in cpuinfo.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return value.strip()
    return None


def cpu_model() -> str:
    try:
        found = parse_cpu_model(Path("/proc/cpuinfo").read_text())
        if found:
            return found
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown"


def memory_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def physical_cores() -> int | None:
    try:
        import psutil

        return psutil.cpu_count(logical=False)
    except ImportError:
        return None


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed distribution versions (None: not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_state(repo: Path) -> GitState:
    """Commit, branch and dirty flag of ``repo``; all None outside a git checkout."""

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return GitState()
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return GitState(commit=commit.strip(), branch=branch.strip() if branch else None, dirty=None if status is None else bool(status.strip()))


def collect(repo: Path) -> MachineInfo:
    """Describe this machine and the checkout at ``repo``."""
    uname = platform.uname()
    return MachineInfo(
        cores=os.cpu_count() or 0,
        physical_cores=physical_cores(),
        memory_bytes=memory_bytes(),
        cpu_model=cpu_model(),
        os=f"{uname.system} {uname.release} ({platform.platform()})",
        python=platform.python_version(),
        packages=package_versions(),
        git=git_state(repo),
        hostname=uname.node,
        load_average=[round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else [],
    )
