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

    def gui(
        self, script: Path, builtin: str, value: object, shot: Path, *, size: str = "800x600", deadline: float = 180
    ) -> subprocess.CompletedProcess[str]:
        """Run `script` in the real GUI (`blender-shot` beside the binary, which screenshots it to `shot`),
        with `builtins.<builtin>` set to `value` first; skips the test when there is no `blender-shot`."""
        tool = Path(self.exe).with_name("blender-shot")
        if not tool.exists():
            pytest.skip(f"no blender-shot beside {self.exe}: the GUI tests need it")
        env = dict(os.environ, BLENDER_USER_RESOURCES=str(self.resources), REAL_BLENDER_QUIET="1")
        args = ["--python-expr", f"import builtins; builtins.{builtin} = {value!r}", "--python", str(script)]
        return subprocess.run(
            [str(tool), str(shot), "--size", size, "--wait", str(deadline), "--", *args],
            capture_output=True,
            text=True,
            timeout=deadline + 240,
            env=env,
            cwd=ROOT,
        )

    def gui_json(self, script: Path, builtin: str, out: Path, *, deadline: float = 180) -> dict[str, object]:
        """`gui` for a script that writes its result as JSON to the path in `builtins.<builtin>` (`out`), with
        "ok" and "errors": that result, once the script ran to its end without an error."""
        proc = self.gui(script, builtin, str(out), out.with_suffix(".png"), deadline=deadline)
        log = proc.stdout + proc.stderr
        assert out.exists(), f"{script.name} wrote nothing ({proc.returncode}):\n{log[-4000:]}"
        result: dict[str, object] = json.loads(out.read_text())
        assert result["ok"] and not result["errors"], result["errors"]
        return result

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
