"""The liveness record's plain data (:class:`Frame`, :class:`Return`, :class:`Region`, :class:`Recording`),
made by :class:`mhlo_cost.walk.liveness.LivenessRecorder` during the walk.

Standard library only: the record travels from the walk in the MLIR reader's child process to a parent that
imports no jaxlib (:mod:`mhlo_cost.analysis.wire`).
"""
from __future__ import annotations

from dataclasses import dataclass, field


class Frame:
    """One sub-walk: ``rows`` (the list it produced; positions index it) and ``items``: the :class:`Region`
    and :class:`Return` items among the rows, in order."""

    __slots__ = ("rows", "items", "pending", "collected", "open")

    def __init__(self):
        self.rows: list = []
        self.items: list = []
        self.pending: list = []  # (child frame or None, start position, k) of replays not yet claimed
        self.collected: list = []  # frames collected while a region op of this frame ran
        self.open = 0  # region ops of this frame being visited


class Return:
    """A terminator at position ``pos`` (rows before it): the values it returns live to the frame's end."""

    __slots__ = ("pos", "uses")

    def __init__(self, pos: int, uses: tuple):
        self.pos, self.uses = pos, uses


class Region:
    """An op whose rows are replayed sub-walks, covering positions ``[start, end)`` of its frame.

    ``children``: (frame, start, k) of each replayed sub-walk (k 0: folded, its rows at ``start`` are an earlier
    call's); ``branches``: frames only collected (the
    branches not taken);
    ``argpos``: child block-argument key -> the index of the operand it stands for;
    ``passthrough``: result index -> operand index, where the result is that operand unchanged;
    ``sizes``: bytes of each result (the body's per-device sizes for ``shard_map``)."""

    __slots__ = ("name", "uses", "defs", "sizes", "children", "branches", "argpos", "passthrough", "start", "end")

    def __init__(self, name, uses, defs, sizes, children, branches, argpos, passthrough, start, end):
        self.name, self.uses, self.defs, self.sizes = name, uses, defs, sizes
        self.children, self.branches, self.argpos, self.passthrough = children, branches, argpos, passthrough
        self.start, self.end = start, end

    @property
    def pos(self) -> int:
        return self.start


@dataclass
class Recording:
    """The liveness record of one walk (no MLIR objects: it outlives the module's context)."""

    entry: Frame | None
    args: list  # (key, bytes, donated) of each entry argument
    alias: dict = field(default_factory=dict)  # result key -> the key whose buffer it is (inline containers)
    local: dict = field(default_factory=dict)  # key -> per-device bytes (operands of shard_map bodies)
    arg_names: list = field(default_factory=list)  # each entry argument's location name ("" for none)
    arg_elems: list = field(default_factory=list)  # each entry argument's elements (0: not a tensor)
