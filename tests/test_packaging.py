"""The distribution lists every package folder: an editable install finds an unlisted subpackage, a
wheel leaves it out, so a folder missing from `packages` only breaks real installs."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for name, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            if "__pycache__" not in parts:
                found.add(".".join((name, *parts)))
    listed = set(setuptools["packages"])
    assert found - listed == set()
    # what is listed beyond the Python packages is a data folder inside one (a dashboard's static files)
    for name in listed - found:
        parent, _, leaf = name.rpartition(".")
        assert parent in found and (ROOT / _folder(setuptools["package-dir"], parent) / leaf).is_dir(), name


def _folder(package_dir: dict[str, str], package: str) -> Path:
    base = max((name for name in package_dir if package == name or package.startswith(name + ".")), key=len)
    return (
        Path(package_dir[base], *package[len(base) :].strip(".").split("."))
        if package != base
        else Path(package_dir[base])
    )
