"""Every ```python example of the manual (docs/**/*.md) and the README runs on the bpy wheel, as written.

A fence marked ```python is a promise that the example runs: each is executed in a fresh namespace from an
empty factory scene with Reach IK enabled. Examples that only show something (pseudo-code, a contract, a
shell command) use another fence: ```py, ```sh, ```text, ```json. The installed module name the manual uses
(`bl_ext.user_default.reach_ik`) is swapped for the test's own (`bl_ext.reach_test.reach_ik`).
"""

from __future__ import annotations

import re
from pathlib import Path

import bpy
import bpy_session
import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)


def _examples() -> list[tuple[str, str]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            indent = len(match.group("indent"))
            code = "\n".join(row[indent:] for row in match.group("code").splitlines())
            found.append((f"{path.relative_to(ROOT)}:{line}", code))
    return found


EXAMPLES = _examples()


def test_the_manual_has_examples() -> None:
    assert len(EXAMPLES) >= 5, f"only {len(EXAMPLES)} ```python examples found: the fence pattern broke?"


@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_example_runs(where: str, code: str) -> None:
    code = code.replace("bl_ext.user_default.reach_ik", bpy_session.ADDON)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    try:
        exec(compile(code, where, "exec"), namespace)
    finally:
        if bpy.context.object is not None and bpy.context.object.mode != "OBJECT":
            bpy.ops.object.mode_set(mode="OBJECT")
