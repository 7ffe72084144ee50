"""A wheel holds only the packages pyproject.toml lists: every folder of the package with an
``__init__.py`` must be listed, or ``pip install kcoord`` (not editable) ships without it."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {package: REPO / folder for package, folder in config["package-dir"].items()}
    found = set()
    for package, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            found.add(".".join([package, *parts]))
    assert sorted(found - set(config["packages"])) == []
    assert sorted(set(config["packages"]) - found) == []
