"""pytest plugin (loaded with `-p pytest_root`): collect the checkout root as a plain directory.

The checkout root is also the add-on package, and its `__init__.py` imports bpy. pytest would otherwise make
the root a Package node and import it while setting up every test, pulling bpy into the numpy-only unit tier
(and into the e2e tier's own process). A plugin module, unlike a root conftest.py, is imported on its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if path == ROOT:
        return pytest.Dir.from_parent(parent, path=path)
    return None
