"""Humanoid skeletons in the naming conventions of the tools characters come from, as plain data.

Each convention's names are written as its exporter writes them, with where they come from:

- ``mixamo``: Adobe Mixamo's FBX downloads (``mixamorig:LeftArm``, ``mixamorig:LeftForeArm``...).
- ``unreal``: the Unreal Engine mannequin (UE4/UE5 ``SK_Mannequin``: ``pelvis``, ``spine_01``, ``upperarm_l``,
  ``lowerarm_l``, ``calf_l``, with twist bones as children of the limb bones).
- ``vrm``: VRoid Studio's VRM avatars (``J_Bip_C_Hips``, ``J_Bip_L_UpperArm``, ``J_Bip_L_LowerLeg``...).
- ``cc``: Reallusion Character Creator / iClone (``CC_Base_BoneRoot``, ``CC_Base_Hip`` above ``CC_Base_Pelvis``
  and ``CC_Base_Waist``, ``CC_Base_L_Upperarm``, twist bones as children).
- ``daz``: Daz Genesis 8 (``hip`` above ``pelvis`` and ``abdomenLower``, ``lShldrBend`` -> ``lShldrTwist`` ->
  ``lForearmBend`` -> ``lForearmTwist`` -> ``lHand``: twist bones *in line*, ``lThighBend`` -> ``lThighTwist``).
- ``generic_lr``: generic ``L_``/``R_`` prefixes (``L_UpperArm``), ``generic_words``: ``Left``/``Right``
  suffix words (``UpperArm_Left``), ``generic_dot``: Blender's ``.L``/``.R`` with plain names.
- ``anonymous``: names that say nothing (``Bone``, ``Bone.001``...): only the topology can tell.

The rig is 1.8 m tall, Z up, facing -Y, its left on +X (Blender's metarig convention), arms in a slight A,
elbows a little bent (``bent=True``) or straight, knees a little forward. `bones()` returns
``(name, parent, head, tail)`` rows in hierarchy order; `demo/` and the tests build armatures from them.
"""

from __future__ import annotations

Vec = tuple[float, float, float]
Row = tuple[str, str, Vec, Vec]

# Role -> (parent role, head, tail) for the left side and the centre. Right-side roles mirror X.
_TEMPLATE: dict[str, tuple[str, Vec, Vec]] = {
    "root": ("", (0.0, 0.0, 0.0), (0.0, 0.3, 0.0)),
    "hips": ("root", (0.0, 0.0, 0.98), (0.0, 0.0, 1.08)),
    "pelvis": ("hips", (0.0, 0.0, 0.98), (0.0, 0.0, 0.9)),  # CC/Daz: the legs' own parent below the hips
    "spine1": ("hips", (0.0, 0.0, 1.08), (0.0, 0.01, 1.2)),
    "spine2": ("spine1", (0.0, 0.01, 1.2), (0.0, 0.01, 1.33)),
    "chest": ("spine2", (0.0, 0.01, 1.33), (0.0, 0.0, 1.48)),
    "neck1": ("chest", (0.0, 0.0, 1.48), (0.0, -0.01, 1.56)),
    "neck2": ("neck1", (0.0, -0.01, 1.56), (0.0, -0.01, 1.61)),
    "head": ("neck2", (0.0, -0.01, 1.61), (0.0, -0.01, 1.8)),
    "head_end": ("head", (0.0, -0.01, 1.8), (0.0, -0.01, 1.88)),
    "clavicle": ("chest", (0.03, 0.0, 1.44), (0.17, 0.02, 1.44)),
    "upperarm": ("clavicle", (0.17, 0.02, 1.44), (0.42, 0.04, 1.3)),
    "forearm": ("upperarm", (0.42, 0.04, 1.3), (0.64, 0.0, 1.16)),
    "hand": ("forearm", (0.64, 0.0, 1.16), (0.72, -0.01, 1.11)),
    "index1": ("hand", (0.72, -0.02, 1.11), (0.76, -0.02, 1.085)),
    "index2": ("index1", (0.76, -0.02, 1.085), (0.785, -0.02, 1.07)),
    "index3": ("index2", (0.785, -0.02, 1.07), (0.805, -0.02, 1.058)),
    "thigh": ("pelvis", (0.1, 0.0, 0.95), (0.1, -0.02, 0.53)),
    "shin": ("thigh", (0.1, -0.02, 0.53), (0.1, 0.02, 0.1)),
    "foot": ("shin", (0.1, 0.02, 0.1), (0.1, -0.1, 0.03)),
    "toe": ("foot", (0.1, -0.1, 0.03), (0.1, -0.16, 0.03)),
}

# Convention -> role -> name, with {s}/{S}/{side}/{Side} for the side. A role missing from a convention is
# absent from its rig (the hierarchy skips up to the next present parent). "*_twist" roles are extra bones:
# "upperarm_twist_inline" splits the upper arm in two in line (Daz), "*_twist_child" hangs a twist bone off
# the limb bone (Unreal, CC).
CONVENTIONS: dict[str, dict[str, str]] = {
    "mixamo": {
        "hips": "mixamorig:Hips",
        "spine1": "mixamorig:Spine",
        "spine2": "mixamorig:Spine1",
        "chest": "mixamorig:Spine2",
        "neck1": "mixamorig:Neck",
        "head": "mixamorig:Head",
        "head_end": "mixamorig:HeadTop_End",
        "clavicle": "mixamorig:{Side}Shoulder",
        "upperarm": "mixamorig:{Side}Arm",
        "forearm": "mixamorig:{Side}ForeArm",
        "hand": "mixamorig:{Side}Hand",
        "index1": "mixamorig:{Side}HandIndex1",
        "index2": "mixamorig:{Side}HandIndex2",
        "index3": "mixamorig:{Side}HandIndex3",
        "thigh": "mixamorig:{Side}UpLeg",
        "shin": "mixamorig:{Side}Leg",
        "foot": "mixamorig:{Side}Foot",
        "toe": "mixamorig:{Side}ToeBase",
    },
    "unreal": {
        "root": "root",
        "hips": "pelvis",
        "spine1": "spine_01",
        "spine2": "spine_02",
        "chest": "spine_03",
        "neck1": "neck_01",
        "head": "head",
        "clavicle": "clavicle_{s}",
        "upperarm": "upperarm_{s}",
        "upperarm_twist_child": "upperarm_twist_01_{s}",
        "forearm": "lowerarm_{s}",
        "forearm_twist_child": "lowerarm_twist_01_{s}",
        "hand": "hand_{s}",
        "index1": "index_01_{s}",
        "index2": "index_02_{s}",
        "index3": "index_03_{s}",
        "thigh": "thigh_{s}",
        "thigh_twist_child": "thigh_twist_01_{s}",
        "shin": "calf_{s}",
        "shin_twist_child": "calf_twist_01_{s}",
        "foot": "foot_{s}",
        "toe": "ball_{s}",
    },
    "vrm": {
        "hips": "J_Bip_C_Hips",
        "spine1": "J_Bip_C_Spine",
        "spine2": "J_Bip_C_Chest",
        "chest": "J_Bip_C_UpperChest",
        "neck1": "J_Bip_C_Neck",
        "head": "J_Bip_C_Head",
        "clavicle": "J_Bip_{S}_Shoulder",
        "upperarm": "J_Bip_{S}_UpperArm",
        "forearm": "J_Bip_{S}_LowerArm",
        "hand": "J_Bip_{S}_Hand",
        "index1": "J_Bip_{S}_Index1",
        "index2": "J_Bip_{S}_Index2",
        "index3": "J_Bip_{S}_Index3",
        "thigh": "J_Bip_{S}_UpperLeg",
        "shin": "J_Bip_{S}_LowerLeg",
        "foot": "J_Bip_{S}_Foot",
        "toe": "J_Bip_{S}_ToeBase",
    },
    "cc": {
        "root": "CC_Base_BoneRoot",
        "hips": "CC_Base_Hip",
        "pelvis": "CC_Base_Pelvis",
        "spine1": "CC_Base_Waist",
        "spine2": "CC_Base_Spine01",
        "chest": "CC_Base_Spine02",
        "neck1": "CC_Base_NeckTwist01",
        "neck2": "CC_Base_NeckTwist02",
        "head": "CC_Base_Head",
        "clavicle": "CC_Base_{S}_Clavicle",
        "upperarm": "CC_Base_{S}_Upperarm",
        "upperarm_twist_child": "CC_Base_{S}_UpperarmTwist01",
        "forearm": "CC_Base_{S}_Forearm",
        "hand": "CC_Base_{S}_Hand",
        "thigh": "CC_Base_{S}_Thigh",
        "shin": "CC_Base_{S}_Calf",
        "foot": "CC_Base_{S}_Foot",
        "toe": "CC_Base_{S}_ToeBase",
    },
    "daz": {
        "hips": "hip",
        "pelvis": "pelvis",
        "spine1": "abdomenLower",
        "spine2": "abdomenUpper",
        "chest": "chestUpper",
        "neck1": "neckLower",
        "neck2": "neckUpper",
        "head": "head",
        "clavicle": "{s}Collar",
        "upperarm": "{s}ShldrBend",
        "upperarm_twist_inline": "{s}ShldrTwist",
        "forearm": "{s}ForearmBend",
        "forearm_twist_inline": "{s}ForearmTwist",
        "hand": "{s}Hand",
        "thigh": "{s}ThighBend",
        "thigh_twist_inline": "{s}ThighTwist",
        "shin": "{s}Shin",
        "foot": "{s}Foot",
        "toe": "{s}Toe",
    },
    "generic_lr": {
        "hips": "Hips",
        "spine1": "Spine",
        "spine2": "Spine2",
        "chest": "Chest",
        "neck1": "Neck",
        "head": "Head",
        "clavicle": "{S}_Shoulder",
        "upperarm": "{S}_UpperArm",
        "forearm": "{S}_LowerArm",
        "hand": "{S}_Hand",
        "thigh": "{S}_UpperLeg",
        "shin": "{S}_LowerLeg",
        "foot": "{S}_Foot",
    },
    "generic_words": {
        "hips": "Pelvis",
        "spine1": "Spine1",
        "spine2": "Spine2",
        "chest": "Spine3",
        "neck1": "Neck",
        "head": "Head",
        "clavicle": "Clavicle_{Side}",
        "upperarm": "UpperArm_{Side}",
        "forearm": "Forearm_{Side}",
        "hand": "Hand_{Side}",
        "thigh": "Thigh_{Side}",
        "shin": "Calf_{Side}",
        "foot": "Foot_{Side}",
    },
    "generic_dot": {
        "root": "root",
        "hips": "hips",
        "spine1": "spine",
        "spine2": "spine.001",
        "chest": "chest",
        "neck1": "neck",
        "head": "head",
        "clavicle": "shoulder.{S}",
        "upperarm": "upper_arm.{S}",
        "forearm": "forearm.{S}",
        "hand": "hand.{S}",
        "thigh": "thigh.{S}",
        "shin": "shin.{S}",
        "foot": "foot.{S}",
        "toe": "toe.{S}",
    },
}

#: Roles in build order (parents before children).
_ORDER = tuple(_TEMPLATE)
_SIDED = {"clavicle", "upperarm", "forearm", "hand", "index1", "index2", "index3", "thigh", "shin", "foot", "toe"}


def _mirror(v: Vec, side: str) -> Vec:
    return (v[0], v[1], v[2]) if side == "L" else (-v[0], v[1], v[2])


def _lerp(a: Vec, b: Vec, t: float) -> Vec:
    return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t)


def bones(convention: str, bent: bool = True) -> list[Row]:
    """The skeleton of `convention` as (name, parent name, head, tail) rows, parents first.

    With ``anonymous`` every bone is named ``Bone``, ``Bone.001``...; `bent` False straightens elbows and
    knees (a T-pose-like limb with no bend plane of its own).
    """
    names = CONVENTIONS["generic_dot" if convention == "anonymous" else convention]
    rows: list[Row] = []
    placed: dict[tuple[str, str], str] = {}  # (role, side) -> bone name of the bone that ends the role
    for role in _ORDER:
        if role not in names:
            continue
        parent_role, head, tail = _TEMPLATE[role]
        if not bent and role in {"forearm", "shin"}:
            # Straight limb: the lower bone continues the upper bone's direction.
            ph, pt = _TEMPLATE["upperarm" if role == "forearm" else "thigh"][1:]
            d = (pt[0] - ph[0], pt[1] - ph[1], pt[2] - ph[2])
            n = sum(x * x for x in d) ** 0.5
            ln = sum((tail[i] - head[i]) ** 2 for i in range(3)) ** 0.5
            tail = (head[0] + d[0] / n * ln, head[1] + d[1] / n * ln, head[2] + d[2] / n * ln)
        for side in ("L", "R") if role in _SIDED else ("",):
            name = names[role].format(s=side.lower(), S=side, Side={"L": "Left", "R": "Right"}.get(side, ""))
            # The nearest present ancestor role is the parent.
            p = parent_role
            while p and p not in names:
                p = _TEMPLATE[p][0]
            parent = placed.get((p, side if p in _SIDED else ""), "") if p else ""
            h, t = (_mirror(head, side), _mirror(tail, side)) if side else (head, tail)
            inline = names.get(f"{role}_twist_inline")
            if inline and side:
                mid = _lerp(h, t, 0.5)
                rows.append((name, parent, h, mid))
                twist = inline.format(s=side.lower(), S=side)
                rows.append((twist, name, mid, t))
                placed[(role, side)] = twist
            else:
                rows.append((name, parent, h, t))
                placed[(role, side)] = name
            child = names.get(f"{role}_twist_child")
            if child and side:
                rows.append((child.format(s=side.lower(), S=side), name, _lerp(h, t, 0.5), t))
    if convention == "anonymous":
        rename = {row[0]: ("Bone" if i == 0 else f"Bone.{i:03d}") for i, row in enumerate(rows)}
        rows = [(rename[n], rename.get(p, ""), h, t) for n, p, h, t in rows]
    return rows


def role_names(convention: str) -> dict[str, str]:
    """Role key ('upperarm.L', 'shin.R', 'chest', ...) -> bone name, for the tests' expectations."""
    names = CONVENTIONS[convention]
    out = {}
    for role, text in names.items():
        if role.endswith(("_inline", "_child")):
            continue
        for side in ("L", "R") if role in _SIDED else ("",):
            key = f"{role}.{side}" if side else role
            out[key] = text.format(s=side.lower(), S=side, Side={"L": "Left", "R": "Right"}.get(side, ""))
    return out
