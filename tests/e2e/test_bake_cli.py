"""The headless CLI on a real Blender: bake a shot, replay it in a fresh process, check, usage, OpenJD."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Blender

TOL = 1e-3

MAKE_SHOT = r"""
import bpy, json, sys
argv = sys.argv[sys.argv.index("--") + 1:]
out, wobble, broken = argv[0], float(argv[1]), argv[2] == "broken"
bpy.ops.wm.read_homefile(use_empty=True)
arm = bpy.data.armatures.new("Arm")
rig = bpy.data.objects.new("Rig", arm)
bpy.context.scene.collection.objects.link(rig)
bpy.context.view_layer.objects.active = rig
bpy.ops.object.mode_set(mode="EDIT")
prev = None
for i, (h, t) in enumerate([((0, 0, 0), (0.1, 0, 1)), ((0.1, 0, 1), (0, 0, 2)), ((0, 0, 2), (0.1, 0, 3))]):
    eb = arm.edit_bones.new(f"b{i}")
    eb.head, eb.tail = h, t
    if prev:
        eb.parent, eb.use_connect = prev, True
    prev = eb
bpy.ops.object.mode_set(mode="OBJECT")
rig.pose.bones["b1"].rotation_mode = "XYZ"
target = bpy.data.objects.new("Target", None)
bpy.context.scene.collection.objects.link(target)
for frame, loc in ((1, (0.8, 0.2, 2.2)), (24, (-0.6, wobble, 2.4)), (48, (0.3, -0.8, 1.8))):
    target.location = loc
    target.keyframe_insert("location", frame=frame)
ch = rig.reach_ik.chains.add()
ch.name, ch.tip_bone, ch.chain_length, ch.target = "arm", ("nope" if broken else "b2"), 3, target
rig.reach_ik.start_from = "REST"
bpy.context.scene.frame_start, bpy.context.scene.frame_end = 1, 48
bpy.ops.wm.save_as_mainfile(filepath=out)
print("RESULT " + json.dumps({"saved": out}))
"""

REPLAY = r"""
import bpy, json
rig = bpy.data.objects["Rig"]
rig.reach_ik.live = False
target = bpy.data.objects["Target"]
out = {"enabled": [c.enabled for c in rig.reach_ik.chains], "frames": {}, "keys": 0}
ad = rig.animation_data
out["has_action"] = bool(ad and ad.action)
for frame in (1, 7, 20, 24, 33, 48):
    bpy.context.scene.frame_set(frame)
    deps = bpy.context.evaluated_depsgraph_get()
    ev = rig.evaluated_get(deps)
    tip = ev.matrix_world @ ev.pose.bones["b2"].tail
    out["frames"][frame] = (tip - target.matrix_world.translation).length
print("RESULT " + json.dumps(out))
"""


def _shot(blender: Blender, path: Path, wobble: float = 0.7, broken: bool = False) -> Path:
    blender.python(MAKE_SHOT, str(path), str(wobble), "broken" if broken else "ok")
    assert path.exists()
    return path


def test_cli_bake_then_replay_in_fresh_process(installed: Blender, tmp_path: Path) -> None:
    shot = _shot(installed, tmp_path / "shot.blend")
    before = shot.read_bytes()
    out, report = tmp_path / "out.blend", tmp_path / "r.json"
    proc = installed.run(
        ["-b", str(shot), "-c", "reach_ik", "bake", "--frames", "1-48", "--output", str(out), "--report", str(report)]
    )
    assert "baked 'Rig'" in proc.stdout, proc.stdout[-2000:]
    assert shot.read_bytes() == before, "the input file is never overwritten without --in-place"
    data = json.loads(report.read_text())
    assert data["ok"] and data["rigs"][0]["frames_baked"] == 48, data
    chain = data["rigs"][0]["chains"][0]
    assert chain["name"] == "arm" and chain["max_residual"] <= TOL, chain
    assert {"mean_residual", "mean_iterations"} <= chain.keys()
    result = installed.python(REPLAY, blend=out)
    assert result["has_action"] and result["enabled"] == [False], result
    for frame, dist in result["frames"].items():
        assert dist <= TOL, f"frame {frame}: baked tip is {dist:.2e} from the target when replayed (live off)"


def test_cli_check_and_usage(installed: Blender, tmp_path: Path) -> None:
    good = _shot(installed, tmp_path / "good.blend")
    ok = installed.run(["-b", str(good), "-c", "reach_ik", "check"], check=False)
    assert ok.returncode == 0, ok.stdout[-2000:]
    broken = _shot(installed, tmp_path / "broken.blend", broken=True)
    bad = installed.run(["-b", str(broken), "-c", "reach_ik", "check"], check=False)
    assert bad.returncode == 1, f"check must exit 1 on a broken rig: {bad.returncode}\n{bad.stdout[-2000:]}"
    assert "INVALID Rig / arm" in bad.stdout and "bone 'nope'" in bad.stdout, bad.stdout[-2000:]
    usage = installed.run(["-b", str(good), "-c", "reach_ik", "bake", "--frobnicate"], check=False)
    assert usage.returncode == 2, f"a bad flag must exit 2: {usage.returncode}"
    assert "usage:" in usage.stderr + usage.stdout
    helped = installed.run(["-c", "reach_ik", "--help"], check=False)
    assert helped.returncode == 0 and "bake" in helped.stdout


def test_openjd_job_bakes_two_shots(installed: Blender, tmp_path: Path) -> None:
    openjd = shutil.which("openjd") or str(Path(sys.executable).parent / "openjd")
    assert Path(openjd).exists(), "openjd-cli is pinned in requirements/dev.txt"
    shots = [_shot(installed, tmp_path / f"shot{i}.blend", wobble=0.3 * i) for i in (1, 2)]
    bundle, out = tmp_path / "bundle", tmp_path / "baked"
    installed.run(
        [
            "-c",
            "reach_ik",
            "openjd",
            *map(str, shots),
            "--bundle",
            str(bundle),
            "--output-dir",
            str(out),
            "--frames",
            "1-24",
            "--blender",
            installed.exe,
        ]
    )
    template = bundle / "template.json"
    check = subprocess.run([openjd, "check", str(template)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    env = dict(os.environ, BLENDER_USER_RESOURCES=str(installed.resources), REAL_BLENDER_QUIET="1")
    params = f"file://{bundle / 'job_params.json'}"
    run = subprocess.run(
        [openjd, "run", str(template), "--step", "Bake", "-p", params],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    for shot in shots:
        baked, report = out / f"{shot.stem}_baked.blend", out / f"{shot.stem}_report.json"
        assert baked.exists() and report.exists(), f"the task for {shot.name} wrote no output: {run.stdout[-3000:]}"
        data = json.loads(report.read_text())
        assert data["ok"] and data["rigs"][0]["frames_baked"] == 24, data
        replay = installed.python(REPLAY, blend=baked)
        assert max(d for f, d in replay["frames"].items() if int(f) <= 24) <= TOL, replay


@pytest.mark.parametrize("flag", ["--in-place"])
def test_cli_in_place(installed: Blender, tmp_path: Path, flag: str) -> None:
    shot = _shot(installed, tmp_path / "inplace.blend")
    installed.run(["-b", str(shot), "-c", "reach_ik", "bake", "--frames", "1-10", flag])
    assert not list(tmp_path.glob("*.blend1")) and not list(tmp_path.glob(".*tmp*")), list(tmp_path.iterdir())
    result = installed.python(REPLAY, blend=shot)
    assert result["has_action"] and result["frames"]["7"] <= TOL, result


# --- Robustness: bad output paths, bad numbers, negative frames, leftovers of killed runs ---------------------


@pytest.fixture(scope="module")
def shot_file(installed: Blender, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One shot for the module; each test bakes its own copy (one Blender process saved instead of many)."""
    return _shot(installed, tmp_path_factory.mktemp("shot") / "shot.blend")


def _bake(blender: Blender, shot: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return blender.run(["-b", str(shot), "-c", "reach_ik", "bake", *args], check=False)


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None for folders), to prove a failed run wrote nothing."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


def _errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if "error" in line.lower()]


# Tests run as root, for whom a chmod-read-only folder is still writable, and neither read-only bind mounts nor
# `chattr +i` are available everywhere. So the unwritable targets here are ones that fail for every user on any
# Linux: a path under a regular file (ENOTDIR), and a new file in /proc (procfs never creates files, even for
# root). --in-place cannot point into either (the input must be a readable .blend), so its case is an input whose
# name is too long for the temp file beside it (ENAMETOOLONG, NAME_MAX is 255): the same check before baking.
UNWRITABLE = {
    "output-is-a-folder": (["--output", "{tmp}/folder"], "--output {tmp}/folder is a folder"),
    "output-under-a-file": (["--output", "{tmp}/notes.txt/out.blend"], "{tmp}/notes.txt is a file"),
    "output-dir-is-a-file": (["--output-dir", "{tmp}/notes.txt"], "{tmp}/notes.txt is a file"),
    "output-in-proc": (["--output", "/proc/reach_ik_out.blend"], "cannot write in /proc"),
    "report-under-a-file": (
        ["--output", "{tmp}/out.blend", "--report", "{tmp}/notes.txt/r.json"],
        "{tmp}/notes.txt is a file",
    ),
    "report-in-proc": (["--output", "{tmp}/out.blend", "--report", "/proc/reach_ik/r.json"], "cannot write in /proc"),
    "in-place-name-too-long": (["--in-place"], "too long"),
}


@pytest.mark.parametrize("case", sorted(UNWRITABLE))
def test_cli_unwritable_target_fails_before_baking(
    installed: Blender, shot_file: Path, tmp_path: Path, case: str
) -> None:
    args, expected = UNWRITABLE[case]
    name = ("x" * 244 + ".blend") if case == "in-place-name-too-long" else "shot.blend"
    shot = Path(shutil.copy(shot_file, tmp_path / name))
    (tmp_path / "folder").mkdir()
    (tmp_path / "notes.txt").write_text("not a folder\n")
    before = _snapshot(tmp_path)
    proc = _bake(installed, shot, "--frames", "1-5", *(a.format(tmp=tmp_path) for a in args))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, f"{case}: exit {proc.returncode}\n{output[-3000:]}"
    assert "Traceback" not in output, f"{case}: a one-line message, not a traceback:\n{output[-3000:]}"
    errors = _errors(proc)
    assert len(errors) == 1 and expected.format(tmp=tmp_path) in errors[0], f"{case}: {errors}\n{output[-2000:]}"
    assert "baked '" not in proc.stdout, f"{case}: the paths are checked before baking:\n{proc.stdout[-2000:]}"
    assert _snapshot(tmp_path) == before, f"{case}: a failed run writes nothing (no output, report or temp file)"


@pytest.mark.parametrize("tol", ["nan", "-1", "inf", "-inf"])
def test_cli_reduce_tolerance_must_be_finite_and_not_negative(
    installed: Blender, shot_file: Path, tmp_path: Path, tol: str
) -> None:
    out = tmp_path / "out.blend"
    proc = _bake(installed, shot_file, "--frames", "1-5", "--reduce", tol, "--output", str(out))
    assert proc.returncode == 2, f"--reduce {tol} is a usage error: exit {proc.returncode}\n{proc.stdout[-2000:]}"
    errors = _errors(proc)
    assert len(errors) == 1 and f"--reduce {tol}" in errors[0], errors
    assert not out.exists()


@pytest.mark.parametrize(("frames", "span"), [("-5--1", [-5, -1]), ("-5", [-5, -5]), ("-10-5", [-10, 5])])
def test_cli_negative_frames(installed: Blender, shot_file: Path, tmp_path: Path, frames: str, span: list[int]) -> None:
    out, report = tmp_path / "out.blend", tmp_path / "r.json"
    # `--frames -5--1` as two words, the way farm templates and shell scripts pass it (not only `--frames=-5--1`).
    proc = _bake(installed, shot_file, "--frames", frames, "--output", str(out), "--report", str(report), "--step", "1")
    assert proc.returncode == 0, (
        f"--frames {frames}: exit {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    )
    data = json.loads(report.read_text())
    assert data["frames"] == span and data["rigs"][0]["frames_baked"] == span[1] - span[0] + 1, data


def test_cli_removes_leftover_temp_files_of_a_killed_run(installed: Blender, shot_file: Path, tmp_path: Path) -> None:
    """A run killed while saving leaves its hidden temp file (`.out.blend.tmp-PID.blend@` while Blender writes it,
    `.out.blend.tmp-PID.blend` between Blender's rename and ours): the next run to the same output removes it."""
    old, future = 1_000_000_000, 4_000_000_000  # 2001 and 2096: before and after this run, with no clock involved
    planted = {
        ".out.blend.tmp-48213.blend@": (old, True),  # killed while Blender wrote the file
        ".out.blend.tmp-48214.blend": (old, True),  # killed between Blender's rename and ours
        ".r.json.tmp-48213.json": (old, True),  # the report's temp file
        ".out.blend.tmp-48215.blend@": (future, False),  # newer than the run: another run may be writing it
        ".other.blend.tmp-48213.blend@": (old, False),  # another output's
        ".out.blend.tmp-x48213.blend@": (old, False),  # not our pattern
        "out.blend.tmp-48213.blend@": (old, False),  # not hidden: not ours
        "notes.txt": (old, False),
    }
    for name, (mtime, _gone) in planted.items():
        (tmp_path / name).write_text(name)
        os.utime(tmp_path / name, (mtime, mtime))
    proc = _bake(
        installed,
        shot_file,
        "--frames",
        "1-5",
        "--output",
        str(tmp_path / "out.blend"),
        "--report",
        str(tmp_path / "r.json"),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for name, (_mtime, gone) in planted.items():
        path = tmp_path / name
        if gone:
            assert not path.exists(), f"{name}: a leftover of a killed run is removed"
            assert f"removed {path}" in proc.stdout, proc.stdout[-2000:]
        else:
            assert path.exists() and path.read_text() == name, f"{name}: not a leftover of ours, left untouched"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*(n for n, (_m, gone) in planted.items() if not gone), "out.blend", "r.json"]
    )
