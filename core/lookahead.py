"""Playback solved ahead: a rig's frames solved in idle time, from the channels its action gives each frame,
so that playing it back only writes what was solved (the rig layer's side: `rig/lookahead.py`).

Playing back a rig whose chain bones are keyed (motion capture set up in one click) solves every chain on
every frame, after Blender has evaluated the frame, and the write costs a second evaluation: about five
times Blender's own IK per frame, most of it the solve (a Python solve per chain). Such a rig's inputs on a
frame are a function of the frame alone: its action gives every channel, its bones' poses follow from the
channels (`parent @ rest_rel @ basis`), its targets and poles are its own control bones. So the frames can
be solved before they are shown, on what the action will give, and a frame change then compares what
Blender evaluated with what was predicted, and writes.

This module solves one frame from its predicted channels with the rig's compiled program
(`core.live.Program`, the solver of live playback), and says what a frame change must find to take the
result. It imports ``mathutils`` (Blender's C math module, not bpy), as `core.live` does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from mathutils import Matrix, Vector
from numpy.typing import NDArray

from .live import Program, basis_matrix
from .model import ChainOutcome, rotation_channel

F32 = NDArray[np.float32]
F64 = NDArray[np.float64]
Channels = dict[str, F32]


@dataclass
class Frame:
    """One frame solved ahead, and what Blender must show for it to stand."""

    channels: bytes  # `digest` of every channel as the action gives it (the bytes of `rig.fingerprint.channel_bytes`)
    pose: F32  # (k, 4, 4) predicted armature-space pose of the checked bones (`Ahead.checks`)
    written: Channels  # the whole arrays of the channel attributes the solve changed, as written
    raw: F32  # (n, 4) the posed bones' rotations before the write, raw as their modes hold them
    fk: F32  # (n, 4) their FK values (`rig/fk.py`): `raw`, but for bones whose rotation the action does not set
    raw_written: F32  # (n, 4) the same after the write
    scale_y: F32  # (n,) the posed bones' Y scales (the solve does not stretch: the program leaves stretch out)
    outcomes: dict[int, ChainOutcome]


def digest(data: bytes) -> bytes:
    """What a frame keeps of its channels' bytes: 16 bytes instead of a few kilobytes (a long clip keeps
    thousands of frames), equal for equal bytes and, for unequal ones, with odds of 2^-128."""
    return hashlib.blake2b(data, digest_size=16).digest()


class Ahead:
    """Frames of one rig solved with its program, one at a time, in any order the caller likes.

    Parameters
    ----------
    program
        The rig's compiled program; every chain it takes is solved on every frame.
    modes
        Every bone's rotation mode name.
    world
        The armature's world matrix (not animated: the rig layer checks).
    angles
        Pole angles by chain index (not animated either).
    """

    def __init__(self, program: Program, modes: list[str], world: Matrix, angles: dict[int, float]) -> None:
        self.program = program
        self.modes = modes
        self.world = world
        self.angles = angles
        sk = program.snap.sk
        parents: list[int] = sk.parent.tolist()
        self.parents = parents
        order = program.closure(program.by_chain)
        assert order is not None  # the rig layer checked it
        self.order = order
        wanted: set[int] = set()
        for link in program.links:
            c = link.chain
            wanted.update(link.bones)
            wanted.update(b for b in (link.parent, link.rot_tip, c.target_local, c.pole_local) if b >= 0)
        need = set(wanted)
        for b in wanted:
            need.update(sk.ancestors(b))
        # Every bone whose pose the solve reads, and the bones above them, parents first.
        self.checks = sorted(need, key=lambda b: (int(sk.depth[b]), b))
        self.posed = [b for j in order for b in program.links[j].posed]
        self.rest_rel4 = {b: Matrix(sk.rest_rel4[b].tolist()) for b in self.checks}
        self.attrs = {b: rotation_channel(modes[b]) for b in (*self.checks, *self.posed)}  # (channel, width)
        self.connected = {b: bool(sk.connected[b]) for b in self.checks}
        self._last: tuple[bytes, bytes] | None = None

    def reset(self) -> None:
        """The program's shapes were forgotten: the next frame measures them (`Program.forget`)."""
        self._last = None

    def solve(self, channels: Channels, kept: tuple[list[int], F32] | None = None) -> Frame:
        """Solve the frame whose channels (every bone's, float32, as `rig.armature.read_channels` reads all of
        them) the action gives; `channels` is left holding what the write would put there. `kept`: the posed
        bones (places in `posed`) whose FK values are not their channels, and those values (c, 4): a bone whose
        rotation no key sets starts from the frame before's result, and keeps the FK value the range's first
        frame started from."""
        key = digest(b"".join(a.tobytes() for a in channels.values()))
        program = self.program
        # As the live path (`rig.live_program.program_full`): a chain bone's location or any bone's scale that
        # changed since the frame solved before re-measures the chains' shapes.
        geometry = (channels["location"][self.posed].tobytes(), channels["scale"].tobytes())
        if geometry != self._last:
            program.forget()
            self._last = geometry
        pose: dict[int, Matrix] = {}
        zero = Vector((0.0, 0.0, 0.0))
        location, scale = channels["location"], channels["scale"]
        for b in self.checks:
            attr, _width = self.attrs[b]
            loc = zero if self.connected[b] else Vector(location[b].tolist())
            m = self.rest_rel4[b] @ basis_matrix(
                self.modes[b], channels[attr][b].tolist(), loc, Vector(scale[b].tolist())
            )
            p = self.parents[b]
            pose[b] = m if p < 0 else pose[p] @ m
        checked = np.array([pose[b] for b in self.checks], dtype=np.float32)
        raw = self._raw(channels)
        world = self.world
        targets: dict[int, Matrix] = {}
        poles: dict[int, Matrix] = {}
        for j in self.order:
            c = program.links[j].chain
            targets[c.index] = world @ pose[c.target_local]
            if c.pole is not None:
                poles[c.index] = world @ pose[c.pole_local]
        result = program.solve(self.order, pose.__getitem__, world, targets, poles, self.angles, channels)
        return Frame(
            channels=key,
            pose=checked,
            written={attr: channels[attr].copy() for attr in sorted(result.changed)},
            raw=raw,
            fk=raw if kept is None else self._kept(raw, kept),
            raw_written=self._raw(channels),
            scale_y=channels["scale"][self.posed, 1].copy(),
            outcomes=result.outcomes,
        )

    @staticmethod
    def _kept(raw: F32, kept: tuple[list[int], F32]) -> F32:
        out = raw.copy()
        out[kept[0]] = kept[1]
        return out

    def _raw(self, channels: Channels) -> F32:
        out = np.zeros((len(self.posed), 4), dtype=np.float32)
        for k, b in enumerate(self.posed):
            attr, width = self.attrs[b]
            out[k, :width] = channels[attr][b]
        return out
