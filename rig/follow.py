"""Objects that follow another armature's bone through a constraint, as live solving carries them.

A target or pole parented to a bone of a rig solved in the same update is carried with that bone's solution
(`live._carry`), since Blender cannot evaluate it again inside the handler. The same holds for one that
follows the bone through a constraint, when what the constraint does can be predicted from the bone's move:
Child Of with every channel and Copy Transforms move it rigidly with the bone, Copy Location moves it with
the point on the bone it copies (keeping its rotation). Other constraints (partial influence, local spaces,
some axes) are not followed in the same update: their target is reached at the next one.
"""

from __future__ import annotations

from typing import Any

import bpy


def constraint_leaders(node: bpy.types.Object) -> list[tuple[int, str]]:
    """(armature session uid, bone) for each bone `node` follows through a constraint (`followed`)."""
    out = []
    for con in node.constraints:
        arm = followed(con)
        if arm is not None:
            out.append((arm.session_uid, str(getattr(con, "subtarget", ""))))
    return out


def followed(con: bpy.types.Constraint) -> bpy.types.Object | None:
    """The armature whose bone `con` makes its owner follow in a way `live._carry` can predict, or None: rigidly
    (Child Of with every channel, Copy Transforms in world space), or by a point on the bone (Copy Location
    in world space, every axis, none inverted, an offset or not); at full influence."""
    if con.mute or not con.enabled or con.influence != 1.0:
        return None
    arm = getattr(con, "target", None)
    if arm is None or arm.type != "ARMATURE" or not getattr(con, "subtarget", ""):
        return None
    c: Any = con
    if con.type == "CHILD_OF":
        flags = ("use_location_x", "use_location_y", "use_location_z", "use_rotation_x", "use_rotation_y")
        ok = all(getattr(c, f) for f in (*flags, "use_rotation_z", "use_scale_x", "use_scale_y", "use_scale_z"))
    elif con.type in ("COPY_TRANSFORMS", "COPY_LOCATION"):
        ok = c.target_space == "WORLD" and c.owner_space == "WORLD"
        if ok and con.type == "COPY_TRANSFORMS":
            ok = c.mix_mode == "REPLACE" and not c.use_bbone_shape
        elif ok:
            axes = (c.use_x, c.use_y, c.use_z, not c.invert_x, not c.invert_y, not c.invert_z)
            ok = all(axes) and not c.use_bbone_shape
    else:
        ok = False
    return arm if ok else None


def point_follower(ob: bpy.types.Object, arm_uid: int, bone: str) -> tuple[float, float] | None:
    """For an object that copies only the location of a point on the bone (itself, or an object it hangs
    from, through Copy Location): the point's head-to-tail place and the bone's length. None: it follows
    the bone rigidly."""
    node: bpy.types.Object | None = ob
    depth = 0
    while node is not None and depth < 1000:
        for con in node.constraints:
            arm = followed(con)
            c: Any = con
            if arm is not None and arm.session_uid == arm_uid and c.subtarget == bone:
                if con.type != "COPY_LOCATION":
                    return None
                bones = arm.data.bones
                return float(c.head_tail), float(bones[bone].length) if bone in bones else 0.0
        node, depth = node.parent, depth + 1
    return None
