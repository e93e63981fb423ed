"""`blender -b shot.blend -c reach_ik ...`: the headless command for pipelines and render farms.

    blender -b shot.blend -c reach_ik bake [--frames 1-250] [--step 1] [--rig NAME]... [--chains all|NAME,...]
                                           [--start-from rest|current] (--output OUT.blend | --in-place)
                                           [--report report.json]
    blender -b shot.blend -c reach_ik check [--rig NAME]...
    blender -c reach_ik openjd SHOT.blend... --bundle DIR --output-dir OUT [--frames 1-250] [--blender PATH]
    blender -c reach_ik --help

Exit codes: 0 ok, 1 validation or bake failure, 2 usage. Outputs are written to a temporary file beside the
target and renamed into place, so a killed job never leaves a half-written .blend or report; the temp file a
killed save leaves is removed by the next run to the same output. Every output path is checked before baking,
so a run that cannot save writes nothing. The input file is never overwritten unless --in-place is given.
`main(argv)` is the same entry point, callable from Python.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import NoReturn

import bpy

from ..rig.bake import BakeError, BakeOptions, bake_rig
from ..rig.props import rig_settings
from ..rig.snapshot import broken_inputs, prepare, read_inputs

OK, FAILED, USAGE = 0, 1, 2
_handle: object | None = None


class UsageError(Exception):
    """A usage mistake: exit 2 with a one-line message (`reach_ik: error: ...`)."""


class _ArgparseError(UsageError):
    """argparse's own errors, already formatted with the usage lines."""


class TargetError(Exception):
    """An output path that cannot be written, found before baking so that a failed run writes nothing."""


class _Parser(argparse.ArgumentParser):
    # argparse would sys.exit() inside Blender's process; raise instead and map to exit code 2.
    def error(self, message: str) -> NoReturn:
        raise _ArgparseError(f"{self.format_usage()}{self.prog}: error: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="blender -b FILE.blend -c reach_ik",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 ok, 1 validation or bake failure, 2 usage.",
    )
    sub = p.add_subparsers(dest="command", metavar="{bake,check,openjd}")
    bake = sub.add_parser("bake", help="bake the IK chains to keyframes and save the result")
    bake.add_argument("--frames", help="frame range START-END or a single frame (default: the scene's range)")
    bake.add_argument("--step", type=int, default=1, help="bake every Nth frame (the last is always baked)")
    bake.add_argument(
        "--rig",
        action="append",
        default=[],
        metavar="NAME",
        help="armature object to bake (repeatable; default: every armature with chains)",
    )
    bake.add_argument("--chains", default="all", help="'all' (every enabled chain) or comma-separated chain names")
    bake.add_argument(
        "--start-from",
        choices=("rest", "current"),
        help="override each rig's Start From: 'rest' gives bit-identical keys on re-runs",
    )
    bake.add_argument("--reduce", type=float, metavar="TOL", help="drop keys a straight line reproduces within TOL")
    bake.add_argument("--keep-enabled", action="store_true", help="leave the baked chains enabled")
    out = bake.add_mutually_exclusive_group(required=True)
    out.add_argument("--output", type=Path, help="write the baked file here (never the input file)")
    out.add_argument(
        "--output-dir", type=Path, help="write DIR/<shot>_baked.blend and DIR/<shot>_report.json (for farm jobs)"
    )
    out.add_argument("--in-place", action="store_true", help="overwrite the input file with the baked result")
    bake.add_argument("--report", type=Path, help="write a JSON report (per rig and chain) here")
    job = sub.add_parser("openjd", help="write an OpenJD job bundle that bakes each shot in its own task")
    job.add_argument("shots", nargs="+", type=Path, help=".blend files to bake, one task each")
    job.add_argument("--bundle", type=Path, required=True, help="job bundle directory to write (template.json)")
    job.add_argument("--output-dir", type=Path, required=True, help="where the tasks write baked files and reports")
    job.add_argument("--frames", default="", help="frame range START-END (default: each shot's scene range)")
    job.add_argument("--step", type=int, default=1, help="bake every Nth frame")
    job.add_argument("--blender", default="blender", help="the Blender executable on the workers")
    check = sub.add_parser("check", help="validate every chain; exit 1 if any is invalid")
    check.add_argument("--rig", action="append", default=[], metavar="NAME", help="armature object to check")
    return p


# Options whose value may start with '-': negative frames (legal in Blender) and numbers the checks refuse.
_DASH_VALUE_OPTIONS = ("--frames", "--reduce", "--step")
_DASH_VALUE = re.compile(r"-(\d|\.\d|inf|nan)", re.IGNORECASE)


def _join_dash_values(argv: list[str]) -> list[str]:
    """`--frames -5--1` -> `--frames=-5--1`, which argparse reads as the option's value.

    argparse takes any word starting with '-' for an option unless it is a plain negative number, so
    `--frames -5--1` or `--frames -10-5` failed with "expected one argument". Only a word that starts like a
    negative number is joined, so `--frames --output x` still reports the missing frames.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return out + argv[i:]
        if word in _DASH_VALUE_OPTIONS and i + 1 < len(argv) and _DASH_VALUE.match(argv[i + 1]):
            out.append(f"{word}={argv[i + 1]}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def _say(msg: str) -> None:
    print(f"reach_ik: {msg}", flush=True)


def _rigs(names: list[str]) -> list[bpy.types.Object]:
    with_chains = [o for o in bpy.data.objects if o.type == "ARMATURE" and len(rig_settings(o).chains)]
    if not names:
        return with_chains
    picked: list[bpy.types.Object] = []
    for name in names:
        obj = bpy.data.objects.get(name)
        if obj is None or obj.type != "ARMATURE":
            known = ", ".join(o.name for o in with_chains) or "none"
            raise BakeError(f"rig '{name}' is not an armature in this file (armatures with chains: {known})")
        picked.append(obj)
    return picked


def _frames(text: str | None) -> tuple[int, int]:
    scene = bpy.context.scene
    if not text:
        return scene.frame_start, scene.frame_end
    try:
        if "-" in text.lstrip("-"):
            head, tail = text.lstrip("-").split("-", 1)
            start = int(("-" if text.startswith("-") else "") + head)
            return start, int(tail)
        return int(text), int(text)
    except ValueError:
        raise UsageError(f"--frames takes START-END or one frame number, not {text!r}") from None


def _temp_path(path: Path) -> Path:
    """The hidden temp file beside `path` that the output is written to before the rename.

    Blender itself first writes `<temp>@` and renames that to `<temp>`, so a killed save can leave either.
    """
    return path.with_name(f".{path.name}.tmp-{os.getpid()}{path.suffix}")


def _one_line(exc: BaseException) -> str:
    # Blender's RuntimeErrors span several lines ("Error: Cannot open file ...\n"); a message is one line.
    return " ".join(str(exc).split())


def _check_target(flag: str, given: Path, target: Path, if_folder: str) -> None:
    """Raise TargetError unless the file `target` (from option `flag` `given`) can be written by `_atomic_write`.

    Checked for every output before baking: a run that cannot save must fail before it writes anything, not
    after the .blend is saved and the report is not. Missing folders are fine (they are made at save time), so
    the nearest existing one must be a folder we can create files in: probed with the very temp file name we
    will use, since os.access() says yes to root on any folder and knows nothing of /proc or too-long names.
    `if_folder` says what to do when `target` is an existing folder.
    """
    target = target.resolve()
    where = f"{flag} {given}"
    if target.is_dir():
        named = where if target == Path(given).resolve() else f"{where}: {target}"
        raise TargetError(f"{named} is a folder: {if_folder}")
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise TargetError(f"{where}: {folder} is a file, not a folder: choose a path inside a folder")
    probe = folder / (_temp_path(target).name + "@")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise TargetError(
                f"{where}: the name is too long for the temp file written beside it ({exc.strerror}): "
                "use a shorter file name"
            ) from None
        raise TargetError(f"{where}: cannot write in {folder} ({exc.strerror}): choose a writable folder") from None


def _remove_leftovers(path: Path, since: float) -> None:
    """Remove the temp files that runs killed while saving `path` left beside it (see `_temp_path`).

    Only hidden files named exactly like our temp files for this same output, by another process id, and last
    written before this run started (`since`, wall clock): a newer one may be another run's save in progress.
    """
    pattern = re.compile(rf"\.{re.escape(path.name)}\.tmp-(\d+){re.escape(path.suffix)}@?")
    with os.scandir(path.parent) as entries:
        for entry in entries:
            found = pattern.fullmatch(entry.name)
            if found is None or int(found.group(1)) == os.getpid():
                continue
            try:
                if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < since:
                    os.unlink(entry.path)
                    _say(f"removed {entry.path}, left by an interrupted run")
            except OSError:
                pass  # another run removed it first, or it is not ours to remove: either way not this run's job


def _atomic_write(path: Path, write: object, since: float) -> None:
    """Write via `write(tmp_path)` to a temp file in the same folder, then rename it over `path`.

    Leftover temp files of killed runs for the same `path` older than `since` are removed first.
    """
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(path, since)
    tmp = _temp_path(path)
    try:
        write(tmp)  # type: ignore[operator]
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _save_blend(path: Path, since: float) -> None:
    def write(tmp: Path) -> None:
        # copy=True: the open file keeps its own path; no .blend1 backup appears since tmp is new.
        bpy.ops.wm.save_as_mainfile(filepath=str(tmp), copy=True, check_existing=False)

    _atomic_write(path, write, since)


def _write_report(path: Path, data: dict[str, object], since: float) -> None:
    def write(tmp: Path) -> None:
        tmp.write_text(json.dumps(data, indent=2) + "\n")

    _atomic_write(path, write, since)


def _chain_indices(obj: bpy.types.Object, spec: str, seen: set[str]) -> set[int] | str:
    if spec.strip().lower() == "all":
        return "ALL"
    wanted = {n.strip() for n in spec.split(",") if n.strip()}
    chains = rig_settings(obj).chains
    found = {i for i, ch in enumerate(chains) if ch.name in wanted}
    seen.update(chains[i].name for i in found)
    return found


def cmd_bake(args: argparse.Namespace) -> int:
    started, since = time.perf_counter(), time.time()
    source = bpy.data.filepath
    if args.in_place and not source:
        raise UsageError("--in-place needs a saved .blend file to overwrite")
    if args.output is not None and source and Path(args.output).resolve() == Path(source).resolve():
        raise UsageError("--output is the input file: use --in-place to overwrite it on purpose")
    report_given = args.report  # None when --output-dir names the report
    if args.output_dir is not None:
        if not source:
            raise UsageError("--output-dir names its output after the input .blend: open a saved file")
        args.output = Path(args.output_dir) / f"{Path(source).stem}_baked.blend"
        if args.report is None:
            args.report = Path(args.output_dir) / f"{Path(source).stem}_report.json"
    start, end = _frames(args.frames)
    if args.reduce is not None and not (math.isfinite(args.reduce) and args.reduce >= 0):
        # NaN compares false with every key's error (2 keys per curve were left), and below 0 nothing is in it.
        raise UsageError(f"--reduce {args.reduce:g} is not a tolerance: give a finite number >= 0, e.g. --reduce 0.001")
    stem = Path(source).stem if source else "shot"
    target = Path(args.output) if args.output else Path(source)
    if args.report is not None:
        report_path = Path(args.report).resolve()
        if report_path == target.resolve():
            raise UsageError(f"--report {args.report} is the baked .blend itself: give the report its own file name")
        if source and report_path == Path(source).resolve():
            raise UsageError(f"--report {args.report} is the input file: give the report its own file name")
    try:
        if args.output_dir is not None:
            again = "move it away or choose another --output-dir"
            _check_target("--output-dir", args.output_dir, target, again)
            if report_given is None:
                _check_target("--output-dir", args.output_dir, Path(args.report), again)
        elif args.in_place:
            _check_target("--in-place", target, target, "the input must be a .blend file")
        else:
            inside = f"give a file path in it, e.g. --output {target / (stem + '_baked.blend')}, or use --output-dir"
            _check_target("--output", target, target, inside)
        if report_given is not None:
            inside = f"give a file path in it, e.g. --report {Path(report_given) / (stem + '_report.json')}"
            _check_target("--report", report_given, Path(report_given), inside)
    except TargetError as exc:
        _say(f"error: {exc}")  # before baking and with no report: a run that cannot save writes nothing
        return FAILED
    report: dict[str, object] = {
        "file": source,
        "blender": bpy.app.version_string,
        "frames": [start, end],
        "step": args.step,
        "output": str(Path(args.output).resolve()) if args.output else source,
        "rigs": [],
        "errors": [],
    }
    errors: list[str] = report["errors"]  # type: ignore[assignment]
    rig_reports: list[dict[str, object]] = report["rigs"]  # type: ignore[assignment]
    try:
        rigs = _rigs(args.rig)
        if not rigs:
            raise BakeError("no armature in this file has Reach IK chains: nothing to bake")
        seen: set[str] = set()
        jobs = []
        for obj in rigs:
            which = _chain_indices(obj, args.chains, seen)
            if which == set():
                continue
            jobs.append((obj, which))
        if args.chains.strip().lower() != "all":
            missing = {n.strip() for n in args.chains.split(",") if n.strip()} - seen
            if missing:
                raise BakeError(f"no chain named {', '.join(sorted(missing))} on the chosen rigs")
        for obj, which in jobs:
            if args.start_from:
                rig_settings(obj).start_from = args.start_from.upper()
            opts = BakeOptions(
                frame_start=start,
                frame_end=end,
                step=args.step,
                chains=which,
                reduce=args.reduce is not None,
                reduce_tolerance=args.reduce or 0.0,
                disable_after=not args.keep_enabled,
            )
            last = [-1.0]

            def progress(fraction: float, message: str, name: str = obj.name, last: list[float] = last) -> None:
                if fraction - last[0] >= 0.25 or fraction >= 0.9:
                    last[0] = fraction
                    _say(f"baking '{name}': {100 * fraction:3.0f}% {message}")

            result = bake_rig(obj, opts, progress)
            rig_reports.append(result.as_dict())
            worst = max((c.max_residual for c in result.chains), default=0.0)
            _say(
                f"baked '{obj.name}': {len(result.chains)} chain(s), frames {start}-{end} step {args.step}, "
                f"{result.keys_written} keys in {result.seconds:.3f} s, worst residual {worst:.3g}"
            )
            for text in result.warnings:
                _say(f"warning: {text}")
        try:
            _save_blend(target, since)
        except (OSError, RuntimeError) as exc:  # checked writable above, so a full disk or a vanished share
            raise BakeError(f"cannot save {target}: {_one_line(exc)}: free space or choose another path") from None
        _say(f"saved {target}")
    except BakeError as exc:
        errors.append(str(exc))
        _say(f"error: {exc}")
    report["ok"] = not errors
    report["seconds"] = round(time.perf_counter() - started, 4)
    if args.report:
        try:
            _write_report(args.report, report, since)
        except OSError as exc:
            _say(f"error: cannot write --report {args.report}: {_one_line(exc)}: free space or choose another path")
            return FAILED
        _say(f"report {Path(args.report).resolve()}")
    return FAILED if errors else OK


def cmd_check(args: argparse.Namespace) -> int:
    try:
        rigs = _rigs(args.rig)
    except BakeError as exc:
        _say(f"error: {exc}")
        return FAILED
    if not rigs:
        _say("no armature in this file has Reach IK chains")
        return FAILED
    invalid = 0
    for obj in rigs:
        report, sk, plan = prepare(obj)
        broken: dict[int, str] = {}
        if sk is not None and plan is not None and plan.groups:
            # As a solve refuses them: a broken pose or armature transform every chain, a broken target,
            # pole or pole angle its own chain.
            whole, broken = broken_inputs(obj, sk, plan, read_inputs(obj, plan))
            if whole is not None:
                report.rig_error = whole
        chains = rig_settings(obj).chains
        for i, ch in enumerate(chains):
            if not ch.enabled:
                _say(f"skip    {obj.name} / {ch.name}: disabled")
                continue
            out = report.outcomes.get(i)
            msg = report.rig_error or broken.get(i) or (out.message if out is not None and not out.valid else "")
            if msg:
                invalid += 1
                _say(f"INVALID {obj.name} / {ch.name}: {msg}")
            else:
                _say(f"ok      {obj.name} / {ch.name}")
    _say(f"{invalid} invalid chain(s)" if invalid else "every chain is valid")
    return FAILED if invalid else OK


def cmd_openjd(args: argparse.Namespace) -> int:
    from .farm import job_template, write_bundle

    missing = [str(s) for s in args.shots if not Path(s).is_file()]
    if missing:
        _say(f"error: shot file(s) not found: {', '.join(missing)}")
        return FAILED
    if args.step < 1:
        raise UsageError("--step must be 1 or more")
    if args.frames:
        _frames(args.frames)  # validate the syntax now rather than on every worker
    template = job_template(
        list(args.shots),
        Path(args.output_dir).resolve(),
        args.blender,
        args.frames,
        args.step,
        bundle=Path(args.bundle),
    )
    path, params = write_bundle(Path(args.bundle), template, Path(args.output_dir))
    _say(
        f"wrote {path} ({len(args.shots)} task(s)); run it locally with: "
        f"openjd run {path} --step Bake -p file://{params}"
    )
    return OK


def main(argv: list[str]) -> int:
    """The CLI command: parse `argv` (the words after `-c reach_ik`) and run; returns the exit code."""
    parser = _parser()
    try:
        if not argv or argv[0] in ("-h", "--help", "help"):
            parser.print_help()
            return OK if argv else USAGE
        args = parser.parse_args(_join_dash_values(argv))
        if args.command == "bake":
            return cmd_bake(args)
        if args.command == "check":
            return cmd_check(args)
        if args.command == "openjd":
            return cmd_openjd(args)
        parser.error("unknown command")
    except UsageError as exc:
        print(exc if isinstance(exc, _ArgparseError) else f"reach_ik: error: {exc}", file=sys.stderr, flush=True)
        return USAGE
    except SystemExit as exc:  # argparse's own --help inside a subcommand
        return int(exc.code or 0) if isinstance(exc.code, int) else USAGE


def register() -> None:
    global _handle
    _handle = bpy.utils.register_cli_command("reach_ik", main)


def unregister() -> None:
    global _handle
    if _handle is not None:
        bpy.utils.unregister_cli_command(_handle)
        _handle = None
