"""Open Job Description (OpenJD) job bundles: one task per shot, each running the headless bake.

OpenJD is the open job format of AWS Deadline Cloud; `openjd-cli` (PyPI) checks and runs templates locally.
Task parameter values must be listed in the template, so we write a bundle for a given list of shots
instead of shipping a fixed template. Each task is one Blender process (`-c reach_ik bake --output-dir`),
which keeps its own report next to its baked file. Pure Python: no bpy, so it is easy to test and reuse.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TEMPLATE_NAME = "template.json"


def job_template(
    shots: list[Path],
    output_dir: Path,
    blender: str = "blender",
    frames: str = "",
    step: int = 1,
    name: str = "Reach IK bake",
    bundle: Path | None = None,
) -> dict[str, object]:
    """An OpenJD job template (jobtemplate-2023-09) that bakes each shot in its own task.

    OpenJD requires a PATH parameter's default to lie inside the template's folder: when `output_dir` is
    inside `bundle` it becomes the default; otherwise OutputDir has no default and is given at run time
    (`write_bundle` puts it in job_params.json for `openjd run ... -p file://job_params.json`).
    """
    base = Path(bundle).resolve() if bundle is not None else Path.cwd()
    out = Path(output_dir).resolve()
    inside = out == base or base in out.parents
    if not shots:
        raise ValueError("a job needs at least one shot (.blend file)")
    args = [
        "-b",
        "{{Task.Param.Shot}}",
        "-c",
        "reach_ik",
        "bake",
        "--output-dir",
        "{{Param.OutputDir}}",
        "--step",
        "{{Param.FrameStep}}",
    ]
    if frames:
        args += ["--frames", "{{Param.Frames}}"]
    params: list[dict[str, object]] = [
        {
            "name": "Blender",
            "type": "STRING",
            "default": blender,
            "description": "The Blender executable (with the Reach IK extension installed) on the worker",
        },
        {
            "name": "OutputDir",
            "type": "PATH",
            "objectType": "DIRECTORY",
            "dataFlow": "OUT",
            "description": "Where each shot's baked .blend and JSON report go",
            **({"default": os.path.relpath(out, base)} if inside else {}),
        },
        {
            "name": "FrameStep",
            "type": "INT",
            "default": int(step),
            "minValue": 1,
            "description": "Bake every Nth frame (the last frame is always baked)",
        },
    ]
    if frames:
        params.append(
            {
                "name": "Frames",
                "type": "STRING",
                "default": frames,
                "description": "Frame range START-END (default: each shot's scene range)",
            }
        )
    return {
        "specificationVersion": "jobtemplate-2023-09",
        "name": name,
        "description": "Bake Reach IK chains to keyframes, one Blender process per shot (exit 1 fails the task).",
        "parameterDefinitions": params,
        "steps": [
            {
                "name": "Bake",
                "parameterSpace": {
                    "taskParameterDefinitions": [
                        {"name": "Shot", "type": "PATH", "range": [str(Path(s).resolve()) for s in shots]}
                    ]
                },
                "script": {"actions": {"onRun": {"command": "{{Param.Blender}}", "args": args, "timeout": 3600}}},
            }
        ],
    }


PARAMS_NAME = "job_params.json"


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def write_bundle(bundle: Path, template: dict[str, object], output_dir: Path) -> tuple[Path, Path]:
    """Write the job bundle: template.json and job_params.json (the absolute OutputDir for this machine)."""
    bundle.mkdir(parents=True, exist_ok=True)
    path, params = bundle / TEMPLATE_NAME, bundle / PARAMS_NAME
    _write_json(path, template)
    _write_json(params, {"OutputDir": str(Path(output_dir).resolve())})
    return path, params
