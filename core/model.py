"""The rig core's data: a rig's snapshot (what a solve reads), plans, inputs and outcomes. Plain data only."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

# Bone.inherit_scale, as codes (`Skeleton.inherit_scale`): how a bone takes its parent's scale.
INHERIT_SCALE = ("FULL", "FIX_SHEAR", "ALIGNED", "AVERAGE", "NONE", "NONE_LEGACY")
FULL, FIX_SHEAR, ALIGNED, AVERAGE, NONE, NONE_LEGACY = range(6)


@dataclass(frozen=True)
class Skeleton:
    """What does not change while posing: names, hierarchy and rest matrices (pose-bone order)."""

    names: tuple[str, ...]
    index: dict[str, int]
    parent: I64  # (B,) parent index, -1 for roots
    depth: I64  # (B,) 0 for roots
    rest: F64  # (B,4,4) bone rest matrices in armature space (Bone.matrix_local)
    rest_rel: F64  # (B,3,3) rest rotation relative to the parent's rest rotation (root: to the armature)
    rest_rel4: F64  # (B,4,4) rest matrix relative to the parent's rest matrix (root: to the armature)
    data_order: I64  # (B,) index in obj.data.bones of each pose bone
    # (B,) Bone.use_connect: Blender ignores a connected bone's location channel.
    connected: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # (B,) the bone inherits its parent's rotation and full scale (what carrying a subtree rigidly assumes).
    inherits: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # (B,) Bone.inherit_scale as codes (FULL, ALIGNED, NONE, ...; empty: every bone FULL).
    inherit_scale: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # Names, rest data and flags as read (see `_structure`): equal keys mean equal skeletons.
    key: bytes = b""

    # Bone -> its ancestors, nearest first (`ancestors`): worked out once per skeleton, as live updates ask for
    # them on every check.
    _ancestors: dict[int, tuple[int, ...]] = field(default_factory=dict, init=False, compare=False, repr=False)

    def ancestors(self, b: int) -> tuple[int, ...]:
        """Bone b's parent, its parent's parent, ... up to a root."""
        hit = self._ancestors.get(b)
        if hit is None:
            out = []
            p = int(self.parent[b])
            while p >= 0:
                out.append(p)
                p = int(self.parent[p])
            hit = self._ancestors[b] = tuple(out)
        return hit

    def scale_modes(self) -> I64:
        """(B,) `inherit_scale` codes, FULL for every bone when they were not read."""
        if self.inherit_scale.shape[0] == len(self.names):
            return self.inherit_scale
        return np.zeros(len(self.names), dtype=np.int64)


@dataclass
class ChainPlan:
    """One valid, enabled chain (indices into the pose bones, root first)."""

    index: int  # position in obj.reach_ik.chains
    name: str
    solver: str
    bones: list[int]
    target: str  # the target object's name (the rig layer finds the object by the chain's index)
    pole: str | None  # the pole object's name, or None
    weight: float
    use_target_rotation: bool
    # The target's and pole's bone when they are an armature's bone ("" = the object itself).
    target_bone: str = ""
    pole_bone: str = ""
    # A target or pole bone of this rig itself: its index in the skeleton (-1 otherwise). The solve takes
    # its matrix from the working pose, so a control bone hanging below a chain solved first follows it.
    target_local: int = -1
    pole_local: int = -1

    soft: float = 0.0  # the chain's Soft (0 = off) as set now; `Inputs.soft` holds it per frame when animated
    stretch: float = 1.0  # the chain's Stretch (1 = off) as set now; `Inputs.stretch` per frame
    # For each bone the chain solves (root first; without the tip with Use Target Rotation), the bone whose
    # Y scale channel carries its stretch: itself (the root, and bones that do not inherit scale) or, for a
    # bone with Inherit Scale 'Aligned', its parent's carrier. None when the chain cannot stretch.
    carriers: list[int] | None = None
    stretch_problem: str = ""  # why the chain cannot stretch (its message when Stretch is above 1)
    # CCD's largest turn of one joint in one iteration (radians; 0 = no cap; `solvers.ccd.solve_ccd`).
    ccd_max_step: float = 0.0

    def label(self, role: str) -> str:
        """The target or pole as messages name it, quoted: 'Empty' or 'Rig' bone 'IK-hand'."""
        name, bone = (self.target, self.target_bone) if role == "target" else (self.pole or "?", self.pole_bone)
        return f"'{name}' bone '{bone}'" if bone else f"'{name}'"


@dataclass
class Group:
    """Chains solved together: one chain, a batchable single, or a FABRIK tree of chains."""

    chains: list[ChainPlan]
    bones: list[int]  # every bone the group writes, parents before children
    level: int = 0
    is_tree: bool = False


@dataclass
class Plan:
    groups: list[Group] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)  # chain index -> message
    notes: dict[int, str] = field(default_factory=dict)  # chain index -> informative message
    # Filled by the solve on first use and kept with a cached plan: per-batch joint limits, and the bones'
    # rest lengths (only an armature edit changes them, and that drops cached plans: live.py).
    limits: dict[tuple[tuple[int, ...], ...], object] = field(default_factory=dict)
    lengths: NDArray[np.float64] | None = None
    bone_limits: BoneLimits | None = None  # the planned bones' limits as set (read by the rig layer once)
    bone_names: frozenset[str] | None = None  # the planned bones' names (the rig layer's FK store compares them)


def usable(m: NDArray[np.float64]) -> bool:
    """Finite and not absurd: Blender clamps an infinite location to FLT_MAX, which is finite but broken."""
    return bool(np.isfinite(m).all()) and float(np.abs(m).max(initial=0.0)) < 1e30


@dataclass(frozen=True)
class Settings:
    """A rig's Reach IK settings as a solve reads them (`Object.reach_ik`)."""

    rig: str  # the armature object's name, for messages
    tolerance: float
    max_iterations: int
    roll_mode: str
    start_from: str


@dataclass(frozen=True)
class BoneLimits:
    """Every bone's joint limits as set (`PoseBone.reach_ik`), pose-bone order; unread bones are unlimited."""

    use_cone: NDArray[np.bool_]  # (B,)
    cone: F64  # (B, 4) up, down, left, right (radians)
    use_twist: NDArray[np.bool_]  # (B,)
    twist: F64  # (B, 2) min, max as stored (radians; see core.checks.twist_bound)

    @classmethod
    def none(cls, n: int) -> BoneLimits:
        return cls(np.zeros(n, dtype=bool), np.zeros((n, 4)), np.zeros(n, dtype=bool), np.zeros((n, 2)))


# Which rotation channel a bone's rotation mode uses (`Snapshot.channel_kind`).
QUATERNION, EULER, AXIS_ANGLE = 0, 1, 2
CHANNEL_NAMES = ("rotation_quaternion", "rotation_euler", "rotation_axis_angle")
_ROTATION_CHANNEL = {"QUATERNION": ("rotation_quaternion", 4), "AXIS_ANGLE": ("rotation_axis_angle", 4)}


def rotation_channel(mode: str) -> tuple[str, int]:
    """The channel a rotation mode ('QUATERNION', 'AXIS_ANGLE' or an Euler order) uses, and its width."""
    return _ROTATION_CHANNEL.get(mode, ("rotation_euler", 3))


@dataclass(frozen=True)
class BodySettings:
    """Full Body (`Object.reach_ik.full_body`) as a solve reads it: the rig's chains are solved as one body
    (`core/body.py`)."""

    root: int  # the body root bone (-1: the lowest common ancestor of the chains)
    pins: dict[int, bool]  # chain index -> Pin
    pulls: dict[int, float]  # chain index -> Pull (0..1)
    # The body root's home, where it stands when nothing pulls: its location channel (3,) and its rotation
    # (3, 3) as a basis rotation; None: as in the pose read (a keyed channel in a bake: each frame's own).
    home_location: F64 | None = None
    home_rotation: F64 | None = None
    missing: str = ""  # a Body Root name that names no bone (the lowest common ancestor is used)


@dataclass
class Snapshot:
    """Everything of one rig a solve needs besides the per-frame inputs: no Blender object inside."""

    sk: Skeleton
    plan: Plan
    settings: Settings
    limits: BoneLimits
    lengths: F64  # (B,) rest bone lengths
    channel_kind: I64 | None = None  # (B,) QUATERNION, EULER or AXIS_ANGLE, when channels are checked
    body: BodySettings | None = None  # Full Body on: how the chains move the body (`core/body.py`)


@dataclass
class ChainOutcome:
    """One chain's result; with several frames, the worst frame's residual and the mean iterations."""

    valid: bool
    message: str
    iterations: float = 0.0
    residual: float = 0.0  # world units, worst frame
    reached: bool = False
    status: str = ""
    residuals: F64 | None = None  # (F,) world units, per frame
    iteration_counts: F64 | None = None  # (F,)
    stretch: float = 1.0  # the largest factor the chain's bones were lengthened by (1: not stretched)


@dataclass
class RigReport:
    """What one solve did, per chain index of `obj.reach_ik.chains` (disabled chains are absent)."""

    outcomes: dict[int, ChainOutcome] = field(default_factory=dict)
    rig_error: str | None = None
    # (before, after) armature-space pose matrices (B, 4, 4) of a written live solve, when asked for
    # (`solve_rig(carry=True)`): how the bones moved, to carry objects parented to them (live.py).
    moved: tuple[F64, F64] | None = None


@dataclass
class Inputs:
    """Everything a solve reads from Blender, for F frames (stacked along axis 0)."""

    pose: F64  # (F,B,4,4) evaluated pose matrices, armature space
    world: F64  # (F,4,4) the armature's world matrix
    targets: dict[int, F64]  # chain index -> (F,4,4) world matrices
    poles: dict[int, F64]  # chain index -> (F,4,4) world matrices (chains with a pole only)
    # chain index -> (F,) pole angles (radians) of chains with a pole and a pole angle (absent: 0).
    pole_angles: dict[int, F64] = field(default_factory=dict)
    # Only for start_from='REST': (F,B,4,4) matrix_basis, (F,B,3) location and scale channels. `scale` is
    # also read for 'CURRENT' when chains stretch (their bones' Y scale channel holds the last stretch).
    basis: F64 | None = None
    location: F64 | None = None
    scale: F64 | None = None
    # (F,M,4,4) every target and pole matrix when read together (`targets`/`poles` are views of it), or None.
    objects: F64 | None = None
    # True when pose, world, basis, location and scale are the same in every frame (the bake's fast read:
    # the armature is not animated). Work on them is then done once and repeated.
    static: bool = False
    # Per chain index, (F,) Soft and Stretch values when read per frame (animated); else `ChainPlan`'s.
    soft: dict[int, F64] = field(default_factory=dict)
    stretch: dict[int, F64] = field(default_factory=dict)
    # Chains with Stretch 1 whose bones still hold a stretch this session wrote: it is divided out, and their
    # Y scale goes back to 1 (the rig layer knows what it wrote).
    release: set[int] = field(default_factory=set)
    # Bones of those chains holding such a stretch that are not their chain's carriers (`Work.loose`).
    release_bones: set[int] = field(default_factory=set)
    # IK <-> FK: chain index -> (F,) Influence of the chains below 1 in some frame (absent: 1, pure IK), and
    # bone index -> (F,3,3) the FK basis rotation (the rig layer's FK pose, `rig/fk.py`) of their bones.
    influence: dict[int, F64] = field(default_factory=dict)
    fk: dict[int, F64] = field(default_factory=dict)
    fk_scale: dict[int, F64] = field(default_factory=dict)  # bone index -> (F,) FK Y scale channel, likewise
    # bone index -> (F,3,3) basis rotations the rig layer has just set (the FK pose given back to bones no
    # chain drives any more): the working pose takes them, and the bones below follow, before solving.
    preset: dict[int, F64] = field(default_factory=dict)
    # bone index -> (F,) how many times its Y scale channel changed with its preset (a stretch given back).
    preset_scale: dict[int, F64] = field(default_factory=dict)


@dataclass
class Solved:
    """Solved basis rotations for F frames, ready to become channels or keys."""

    bones: list[int]  # parents before children
    basis: F64  # (F, len(bones), 3, 3) local (basis) rotations
    # (F, B, 4, 4) armature-space pose of every bone after the solve (bones below solved ones carried along),
    # when asked for (`core.solve.solve(final_pose=True)`): where objects parented to these bones will be.
    pose: F64 | None = None
    # Bones whose Y scale channel a stretching chain sets, and the values, (F, len(scale_bones)). Only
    # chains that stretch in some frame, or whose bones hold a stretch to undo, are listed.
    scale_bones: list[int] = field(default_factory=list)
    scale_y: F64 = field(default_factory=lambda: np.zeros((0, 0)))
    # Full Body: bones whose location channel the solve sets (the body root), and the values, (F, n, 3).
    location_bones: list[int] = field(default_factory=list)
    location: F64 = field(default_factory=lambda: np.zeros((0, 0, 3)))
