"""Importing an optional part without its extra says which extra to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kcoord.extras import require

REPO = Path(__file__).resolve().parents[2]


def test_require_names_the_extra_and_the_missing_module():
    require("spark", "x", "json")  # present: nothing happens
    with pytest.raises(ImportError, match=r"kcoord.spark needs no_such_mod_kc, which is not installed: pip install 'kcoord\[spark\]'") as info:
        require("spark", "kcoord.spark", "json", "no_such_mod_kc")
    assert info.value.name == "no_such_mod_kc"


@pytest.mark.parametrize("module,blocked,extra", [("kcoord.spark", "pyarrow", "spark"), ("kcoord.ray_data", "pyarrow", "data")])
def test_importing_without_the_extra(module, blocked, extra):
    code = f"import sys; sys.modules[{blocked!r}] = None\ntry:\n    import {module}\nexcept ImportError as e:\n    print(e)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO).stdout
    assert f"pip install 'kcoord[{extra}]'" in out and blocked in out, out
