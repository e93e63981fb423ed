"""Reach IK's rig core: a snapshot of a rig in, poses and per-chain outcomes out. No bpy anywhere.

`rig/` reads Blender data into a `model.Snapshot` (plain arrays and settings), `solve.solve` turns it into
solved bone rotations and chain outcomes (batching chains per solver, chains below chains level by level,
forward kinematics, status messages), and `rig/` writes the result back. The live handler and the bake use
the same flow; `tests/unit` exercises it without Blender. `live.Program` is the same rig compiled for
live updates that move only targets and poles: plain chains solved one at a time on mathutils (the one
module here that imports it; tested in the bpy tier), or many at once in the numpy batches.
"""
