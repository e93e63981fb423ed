"""End-to-end tests with a real Blender binary (`BLENDER`, e.g. ../shared/tools/blender).

Every Blender process gets its own `BLENDER_USER_RESOURCES` under pytest's temp folder, so nothing is
written to the user's real configuration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import build as build_tool  # noqa: E402


@dataclass
class Blender:
    exe: str
    resources: Path

    def run(
        self, args: Sequence[str], *, check: bool = True, timeout: float = 300, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, BLENDER_USER_RESOURCES=str(self.resources), REAL_BLENDER_QUIET="1")
        proc = subprocess.run(
            [self.exe, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd or ROOT
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"blender {' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                f"\n--- stderr\n{proc.stderr[-4000:]}"
            )
        return proc

    def python(self, code: str, *args: str, blend: Path | None = None) -> dict[str, object]:
        """Run `code` in a fresh `blender -b` process; it must print one line `RESULT <json>`."""
        # No --factory-startup: it would also ignore the temp user preferences that enable the add-on.
        pre = [str(blend)] if blend else []
        proc = self.run(["-b", *pre, "--python-exit-code", "1", "--python-expr", code, "--", *args])
        for line in proc.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]
        raise AssertionError(f"no RESULT line in Blender's output:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")


@pytest.fixture(scope="session")
def blender_exe() -> str:
    exe = os.environ.get("BLENDER")
    if not exe:
        pytest.skip("BLENDER is not set: these tests need a real Blender binary (BLENDER=../shared/tools/blender)")
    return exe


@pytest.fixture(scope="session")
def addon_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tool.build(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def installed(blender_exe: str, addon_zip: Path, tmp_path_factory: pytest.TempPathFactory) -> Blender:
    """A real Blender with the built zip installed by Blender's own installer into a temp user folder."""
    b = Blender(blender_exe, tmp_path_factory.mktemp("user") / "resources")
    b.run(["-c", "extension", "validate", str(addon_zip)])
    b.run(["-c", "extension", "install-file", "-r", "user_default", "-e", str(addon_zip)])
    return b
