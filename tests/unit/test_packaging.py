"""Packaging: exactly one import package, every sub-package listed, mapped from the top level."""

from __future__ import annotations

import sys

from conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAPPED_FOLDERS = {"traceview": "traceview", "parsers": "traceview.parsers",
                  "analyses": "traceview.analyses", "app": "traceview.app"}


def test_every_python_package_folder_is_installed():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    expected = set()
    for folder, package in MAPPED_FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO / folder)
            expected.add(".".join([package, *relative.parts]) if relative.parts else package)
    assert listed == expected, f"pyproject packages differ from the folders: missing {expected - listed}, extra {listed - expected}"
    for package in listed:
        assert package == "traceview" or package.startswith("traceview.")


def test_package_dir_maps_the_top_level_folders():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    for folder, package in MAPPED_FOLDERS.items():
        assert config["package-dir"][package] == folder
