"""What liveness needs, recorded during the one walk: :class:`LivenessRecorder`.

The walk already gives every row the keys of its operand and result values (``Row.values``; a value's key is
its hash, unique in a module). What the rows alone do not say is where sub-walks begin and end: a function
body replayed at a call site, a loop's condition and body, the branch of a ``case`` taken, a ``shard_map``
body. The recorder records each sub-walk as a :class:`Frame` (the rows it produced, in order, with the region
ops and returns among them) and each op whose rows come from sub-walks as a :class:`Region` item of its
parent frame: its operands and results, and the child frames it replayed with their positions.

A function has one frame however often it is called; :mod:`mhlo_cost.memory.sweep` sweeps a frame once per
instance (call site), on top of what is live where the instance runs. A call folded into an earlier call's rows
(:mod:`mhlo_cost.walk.callgraph`) is a child with ``k`` 0 whose ``start`` is that earlier row set: its
peak counts on top of its own call site, its rows are the earlier call's.

The walk tells the recorder where the region ops (:data:`~mhlo_cost.walk.recorder.REGION_OPS`) begin and
end; it only looks at which rows they replayed. A replay by an op it does not know becomes a region item
without operands or results.
"""
from __future__ import annotations

import gc

from jaxlib.mlir import ir

from ..files import collector
from .frames import Frame, Recording, Region, Return
from .locations import location_info
from .recorder import REGION_OPS, Recorder
from .row import short_name


class LivenessRecorder(Recorder, record="liveness", fields=("liveness",)):
    """Records :class:`Frame` and :class:`Region` items during the walk; :meth:`recording` returns them."""

    def __init__(self):
        self._walk = None
        self._frame = Frame()
        self._stack: list[Frame] = []
        self._frames: dict[int, Frame] = {}
        self._alias: dict[int, int] = {}
        self._local: dict[int, int] = {}
        self._entry_args: list = []
        self._entry_facts: tuple = ([], [])
        self._entry_frame: Frame | None = None

    def recording(self) -> Recording:
        return Recording(self._entry_frame, self._entry_args, self._alias, self._local, *self._entry_facts)

    record = recording  # ``Analysis.liveness``

    # -- frames ---------------------------------------------------------------------------------------------
    def started(self, walk):
        self._walk = walk
        self._entry_args = list(_arguments(walk, walk.functions[walk.entry]))
        self._entry_facts = _argument_facts(walk.functions[walk.entry])

    def finished(self, walk):
        self._entry_frame = self._frames.get(id(walk.function_rows(walk.entry)))  # the cached entry rows
        if not gc.isenabled():
            # The rows, their value keys and this record are kept for the analysis' life and hold no cycles; made
            # while the caller paused the cyclic collector (:func:`mhlo_cost.analysis.walk`), they would all wait
            # in its youngest generation, and the first collection after the walk would traverse every one of them
            # (the keys alone are three tuples per row: 20 -> 37 ms on the 400-layer benchmark). Moved to the
            # oldest generation at once, they skip that pass.
            collector.settle_heap()

    def function_started(self, name):
        self._stack.append(self._frame)
        self._frame = Frame()

    def function_finished(self, name, rows):
        fr, self._frame = self._frame, self._stack.pop()
        if rows is not None:
            fr.rows = rows
            self._frames[id(rows)] = fr

    def collect_started(self):
        self._stack.append(self._frame)
        self._frame = Frame()

    def collect_finished(self, rows):
        fr, self._frame = self._frame, self._stack.pop()
        if rows is not None:
            fr.rows = rows
            self._frames[id(rows)] = fr
            self._frame.collected.append(fr)

    def replayed(self, rows, k, start):
        if not rows:
            return
        f = self._frame
        entry = (self._frames.get(id(rows)), start, k)
        if f.open:
            f.pending.append(entry)
        else:  # replayed by an op this recorder does not know: a region without operands or results
            f.items.append(Region("", (), (), (), [entry], [], {}, {}, start, len(self._walk.out)))

    def folded(self, rows, k, at):
        if k == 0 or not rows:
            return
        f = self._frame
        entry = (self._frames.get(id(rows)), at, 0)
        if f.open:
            f.pending.append(entry)
        else:
            n = len(self._walk.out)
            f.items.append(Region("", (), (), (), [entry], [], {}, {}, n, n))

    def returned(self, op):
        self._frame.items.append(Return(len(self._walk.out), tuple(map(hash, op.operands))))

    def contained(self, op):
        if len(op.regions) and len(op.results) and short_name(op.name) not in REGION_OPS:
            # A container whose body ran inline (mhlo.fusion, ...): its results are what its body returns.
            blocks = op.regions[0].blocks
            ops = list(blocks[0].operations) if len(blocks) else []
            if ops:
                for res, v in zip(op.results, ops[-1].operation.operands):
                    self._alias[hash(res)] = hash(v)

    # -- region ops -------------------------------------------------------------------------------------------
    def region_started(self, kind, op):
        if kind not in REGION_OPS:
            return None
        f = self._frame
        f.open += 1
        return len(f.pending), len(f.collected)

    def region_finished(self, kind, op, token, start):
        if token is None:
            return
        f = self._frame
        f.open -= 1
        n0, c0 = token
        children, collected = f.pending[n0:], f.collected[c0:]
        del f.pending[n0:], f.collected[c0:]
        out = self._walk.out
        if not children and len(out) > start:
            return  # the op emitted a row of its own (a call to a function without a body): a leaf
        replayed = {id(c[0]) for c in children}
        branches = [c for c in collected if id(c) not in replayed]
        argpos, passthrough, sizes, local = _boundary(self._walk, op, kind)
        uses = tuple(map(hash, op.operands))
        f.items.append(Region(kind, uses, tuple(map(hash, op.results)), sizes, children, branches, argpos,
                              passthrough, start, len(out)))
        for u, nbytes in zip(uses, local):  # shard_map: the operands are per-device buffers of these sizes
            if nbytes < self._local.get(u, nbytes + 1):
                self._local[u] = nbytes


def _arguments(visitor, fn):
    """(key, bytes, donated) of each argument of ``fn``; donated: ``jax.buffer_donor`` or ``tf.aliasing_output``."""
    if not len(fn.regions[0].blocks):
        return
    attrs = None
    if "arg_attrs" in fn.attributes:
        try:
            attrs = ir.ArrayAttr(fn.attributes["arg_attrs"])
        except (ValueError, TypeError):
            attrs = None
    for i, a in enumerate(fn.regions[0].blocks[0].arguments):
        donated = False
        if attrs is not None and i < len(attrs):
            try:
                d = ir.DictAttr(attrs[i])
                donated = "jax.buffer_donor" in d or "tf.aliasing_output" in d
            except (ValueError, TypeError):
                donated = False
        yield hash(a), visitor.nbytes(a.type), donated


def _argument_facts(fn) -> tuple[list, list]:
    """(location names, elements) of the arguments of ``fn``: what tells parameters from inputs where the
    lowering named them (``state['fc.weight']``, ``params['embed']``)."""
    names, elems = [], []
    if not len(fn.regions[0].blocks):
        return names, elems
    for a in fn.regions[0].blocks[0].arguments:
        try:
            names.append(location_info(a.location).name)
        except RuntimeError:  # a name that is not UTF-8
            names.append("")
        try:
            t = ir.RankedTensorType(a.type)
            n = 1
            for d in t.shape:
                n *= d if d >= 0 else 0
            elems.append(n)
        except (ValueError, TypeError):
            elems.append(0)
    return names, elems


def _boundary(visitor, op, name: str):
    """For a region op: child block argument -> operand index, results that are an operand passed through, each
    result's bytes, and (``shard_map``) the per-device bytes of each operand."""
    operands = [hash(v) for v in op.operands]
    blocks = []
    if name in ("call", "composite"):
        attr = "callee" if name == "call" else "decomposition"
        fn = visitor.functions.get(ir.FlatSymbolRefAttr(op.attributes[attr]).value) if attr in op.attributes else None
        if fn is not None and len(fn.regions[0].blocks):
            blocks = [fn.regions[0].blocks[0]]
    elif name in ("while", "manual_computation"):
        blocks = [r.blocks[0] for r in op.regions if len(r.blocks)]
    argpos = {hash(a): j for b in blocks for j, a in enumerate(b.arguments) if j < len(operands)}
    body = blocks[-1] if blocks else None  # a while's body, a function's or a shard_map's block
    ops = list(body.operations) if body is not None else []
    returned = list(ops[-1].operation.operands) if ops else []
    passthrough = {}
    if body is not None:
        index = {hash(a): i for i, a in enumerate(body.arguments)}
        for j, v in enumerate(returned):
            i = index.get(hash(v))
            if i is not None and (name != "while" or i == j):
                passthrough[j] = i
    manual = name == "manual_computation"
    sizes = tuple(visitor.nbytes(returned[j].type if manual and j < len(returned) else res.type)
                  for j, res in enumerate(op.results))
    local = tuple(visitor.nbytes(a.type) for a in body.arguments) if manual and body is not None else ()
    return argpos, passthrough, sizes, local
