"""Build dist/reach_ik-<version>.zip with Blender's own extension builder, then validate it.

The builder is the standalone, stdlib-only `blender_ext.py` shipped inside the bpy wheel, so building needs
no Blender binary. Prints the zip's path on the last line.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Never shipped: the manifest's paths_exclude_pattern must keep these out; checked after every build.
FORBIDDEN_TOP = ("tests/", "bench/", "tools/", "demo/", "docs/", ".venv", ".git/", "dist/", "requirements/")


def blender_ext_script() -> Path:
    spec = importlib.util.find_spec("bpy")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("build: the bpy wheel is not installed in this Python; run `make build` (it makes the venv)")
    for base in spec.submodule_search_locations:
        found = sorted(Path(base).glob("*/scripts/addons_core/bl_pkg/cli/blender_ext.py"))
        if found:
            return found[-1]
    sys.exit("build: blender_ext.py not found inside the bpy wheel")


def build(output_dir: Path) -> Path:
    manifest = tomllib.loads((ROOT / "blender_manifest.toml").read_text())
    zip_path = output_dir / f"{manifest['id']}-{manifest['version']}.zip"
    script = blender_ext_script()
    output_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, str(script), "build", "--source-dir", str(ROOT), "--output-filepath", str(zip_path)],
        check=True,
    )
    subprocess.run([sys.executable, str(script), "validate", str(zip_path)], check=True)
    with zipfile.ZipFile(zip_path) as zf:
        bad = [n for n in zf.namelist() if n.startswith(FORBIDDEN_TOP) or "__pycache__" in n]
    if bad:
        sys.exit(f"build: {zip_path} contains files that must not ship: {bad[:10]}")
    return zip_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", type=Path, default=ROOT / "dist")
    args = parser.parse_args()
    print(build(args.output_dir.resolve()))


if __name__ == "__main__":
    main()
