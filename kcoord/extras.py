"""Optional parts of kcoord and the pip extras that bring what they need.

``pip install kcoord`` is the log, the clients and the CLI; Spark on Ray and Ray Data need
more. Importing such a part without its extra should say which extra to install, not
``No module named 'pyarrow'`` from deep inside."""

from __future__ import annotations

import importlib.util
import sys


def _missing(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is None
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a parent package is missing, or blocked
        return True


def require(extra: str, part: str, *modules: str) -> None:
    """Raise ImportError naming ``pip install 'kcoord[extra]'`` if any of ``modules`` is
    not installed (checked without importing them)."""
    missing = [m for m in modules if _missing(m)]
    if missing:
        raise ImportError(
            f"{part} needs {', '.join(missing)}, which is not installed: pip install 'kcoord[{extra}]'",
            name=missing[0],
        )
