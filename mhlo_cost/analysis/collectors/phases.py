"""Training phases: which ops of a step are forward, backward, recompute or optimizer work.

What JAX writes into the locations of a training step (``jax.value_and_grad`` then an optax update):

* ``jvp(...)``: the forward (JAX linearises the loss; ``jit(step)/jvp(layers.0)/attn/dot_general``);
* ``transpose(jvp(...))``: the backward (the transposed linear map);
* ``.../checkpoint/rematted_computation/...`` inside a transpose: the forward that ``jax.checkpoint``
  recomputes during the backward (``recompute``);
* no transformation at all, after the backward: the optimizer (optax runs outside ``value_and_grad``;
  gradient clipping and anything else the step does after the gradients counts here too); before the
  forward, input preparation (counted as forward).

Fallbacks where a row's own name says nothing: a constant, an op in a called function or in a loop body
(their names are relative: ``layers/attn/dot_general``, the transformation is on the call or the loop)
takes the phase of its neighbours in program order (both sides agreeing, else the nearer). A program
with no backward in its names (inference, or locations stripped) is all forward, and says so.

Backward matrix products (dot, convolution) are split into ``dgrad`` (the gradient of an activation)
and ``wgrad`` (the gradient of a weight), by the data flow. A backward product transposes one forward
product: it multiplies a cotangent by one of that product's operands, as the forward kept it (or
recomputed it), and gives the gradient of the *other* operand. Values are followed through data
movement (reshape, transpose, convert, broadcast, and ``reverse``: a convolution's dgrad flips its
kernel) and, at a convert to an 8-bit float, past the scaling of that fp8 cast (a multiply or divide by a
broadcast scale, a clamp to the format's range) to the value it casts, and the first rule that applies decides:

1. an operand is a parameter (a donated argument of the step, or a slice of one in a loop): the
   product is cotangent x weight, a ``dgrad``;
2. an operand is a value some forward product read: ``wgrad`` when that forward product's other
   operand is a parameter, ``dgrad`` otherwise (attention's score and value products: activations on
   both sides);
3. the result reaches the optimizer through data movement and sums only (it is a parameter's
   gradient): ``wgrad``;
4. where the data flow cannot be followed (loop-carried values of a scanned model), a product whose
   result has the shape of a forward weight operand (dimensions in any order) is a ``wgrad``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import fill_nearest, is_matmul, short_op

FORWARD, BACKWARD, RECOMPUTE, OPTIMIZER = "forward", "backward", "recompute", "optimizer"
PHASES = (FORWARD, BACKWARD, RECOMPUTE, OPTIMIZER)
DGRAD, WGRAD = "dgrad", "wgrad"

#: Ops that move or recast a value without changing what it is (followed to find where it came from).
_PASS = frozenset({"transpose", "reshape", "convert", "broadcast_in_dim", "copy", "bitcast_convert", "reverse"})
#: Ops through which a parameter's gradient reaches the optimizer (data movement and sums of gradients).
_TO_GRAD = _PASS | {"add"}
#: Ops that take a slice of a stacked value (a scanned model's weights).
_SLICE = frozenset({"dynamic_slice", "slice"})
#: Ops between a value and its fp8 cast that scale or bound it (followed past to the value the cast scales).
_SCALE = frozenset({"multiply", "divide", "clamp", "minimum", "maximum"})
_CALLS = ("jit(", "pjit(")


@dataclass
class Phases:
    """``phase[i]``: one of :data:`PHASES` for row i; ``grad[i]``: ``dgrad`` / ``wgrad`` for the backward
    matrix products, "" elsewhere. ``training``: whether the program has a backward at all."""

    phase: list[str]
    grad: list[str]
    training: bool
    notes: list[str] = field(default_factory=list)

    def key(self, i: int) -> str:
        """The group of row i in ``report --by phase``: forward, backward/dgrad|wgrad|other, ..."""
        p = self.phase[i]
        if p == BACKWARD:
            return f"backward/{self.grad[i] or 'other'}"
        return p


def evidence(name: str) -> str | None:
    """What a location name alone says: a phase, ``outside`` (top level, untransformed) or None."""
    if not name:
        return None
    segments = name.split("/")
    if "rematted_computation" in segments:
        return RECOMPUTE
    transformed = forward = False
    for s in segments:
        if s.startswith("transpose("):
            transformed = True
            break
        if s.startswith(("jvp(", "linearize(")):
            forward = True
    if transformed:
        return BACKWARD
    if forward:
        return FORWARD
    if segments[0].startswith(_CALLS):
        return "outside"
    return None


def assign_phases(analysis) -> Phases:
    """The phase of every row of ``analysis`` (and the dgrad / wgrad split where it has a data flow)."""
    rows = analysis.rows
    ev = [None if short_op(r) == "constant" else evidence(r.loc.name) for r in rows]
    first_bwd = next((i for i, e in enumerate(ev) if e in (BACKWARD, RECOMPUTE)), None)
    if first_bwd is None:
        note = "no backward in the op locations: every op counted as forward"
        return Phases([FORWARD] * len(rows), [""] * len(rows), False, [note])
    base = []
    for i, e in enumerate(ev):
        if e == "outside":
            e = OPTIMIZER if i > first_bwd else FORWARD
        base.append(e if e in PHASES else None)
    unnamed = sum(1 for b in base if b is None)
    # (recompute rows are neighbours too: an unnamed op amid a recompute, a jnp.where's select in its called
    # function, is recomputed with them, not the backward's)
    phase = fill_nearest(base, FORWARD)
    notes = []
    if unnamed:
        notes.append(f"{unnamed} op(s) without a phase of their own (constants, called functions, loop "
                     "bodies) take their neighbours'")
    grad, how = split_backward(analysis, phase)
    notes += how
    return Phases(phase, grad, True, notes)


# -- dgrad / wgrad -------------------------------------------------------------------------------------------


def split_backward(analysis, phase: list[str]) -> tuple[list[str], list[str]]:
    """``dgrad`` / ``wgrad`` for every backward matrix row (see the module docstring), and notes."""
    rows = analysis.rows
    producers = analysis.producers
    if producers is not None and len(producers) != len(rows):
        producers = None
    params = analysis.param_args
    flow = Flow(rows, producers, params)
    uses, weight_shapes = _forward_uses(rows, phase, flow)
    grad = [""] * len(rows)
    guessed = 0
    for i, r in enumerate(rows):
        if phase[i] != BACKWARD or not is_matmul(r):
            continue
        label = _by_flow(flow, uses, phase, i)
        if label is None:
            guessed += 1
            shape = tuple(sorted(getattr(r.result, "shape", ())))
            label = WGRAD if shape in weight_shapes else DGRAD
        grad[i] = label
    notes = []
    if guessed:
        notes.append(f"{guessed} backward matrix op(s) split into dgrad / wgrad by shape (their operands "
                     "could not be followed to the forward)")
    return grad, notes


def _forward_uses(rows, phase, flow) -> tuple[dict, set]:
    """(root of a forward product's operand -> [is the other operand a parameter?], the (sorted) shapes of
    the parameters forward products read)."""
    uses: dict = {}
    weight_shapes = set()
    for i, r in enumerate(rows):
        if phase[i] not in (FORWARD, RECOMPUTE) or not is_matmul(r) or len(r.operands) < 2:
            continue
        roots = [flow.root_of(i, 0), flow.root_of(i, 1)]
        for pos in (0, 1):
            other = flow.is_param(roots[1 - pos], i, 1 - pos)
            if roots[pos] is not None:
                uses.setdefault(roots[pos], []).append(other)
            if flow.is_param(roots[pos], i, pos):
                weight_shapes.add(tuple(sorted(r.operands[pos].shape)))
    return uses, weight_shapes


def _by_flow(flow, uses, phase, i: int) -> str | None:
    """Rules 1-3 of the module docstring for backward product i; None where none applies."""
    n = min(2, len(flow.rows[i].operands))
    roots = [flow.root_of(i, pos) for pos in range(n)]
    if any(flow.is_param(roots[pos], i, pos, strict=True) for pos in range(n)):
        return DGRAD
    votes = [v for root in roots if root is not None for v in uses.get(root, [])]
    if votes:
        return WGRAD if any(votes) else DGRAD
    if flow.reaches_optimizer(i, phase):
        return WGRAD
    return None


class Flow:
    """Where operands come from, through data movement: a row index, an argument key, or None."""

    def __init__(self, rows, producers, params):
        self.rows = rows
        self.producers = producers
        self.params = params  # argument keys of the step's parameters (None: every argument)
        self._memo: dict = {}
        self._consumers: list | None = None

    def consumers(self, i: int) -> list[int]:
        """The rows that read row i's result (from the producers; empty without a data flow)."""
        if self._consumers is None:
            self._consumers = [[] for _ in self.rows]
            for j, srcs in enumerate(self.producers or ()):
                for s in srcs:
                    if isinstance(s, int) and s != j:
                        self._consumers[s].append(j)
        return self._consumers[i]

    def reaches_optimizer(self, i: int, phase: list[str]) -> bool:
        """Whether row i's result reaches an optimizer row through data movement and sums alone (it is, or
        is summed into, a parameter's gradient)."""
        todo, seen = [i], {i}
        while todo and len(seen) < 10_000:
            for j in self.consumers(todo.pop()):
                if phase[j] == OPTIMIZER:
                    return True
                if j not in seen and phase[j] == BACKWARD and short_op(self.rows[j]) in _TO_GRAD:
                    seen.add(j)
                    todo.append(j)
        return False

    def source(self, i: int, pos: int):
        if self.producers is None:
            return ("weight", i, pos) if pos in self.rows[i].weights else None
        ps = self.producers[i]
        return ps[pos] if pos < len(ps) else None

    def root(self, src):
        seen = 0
        while isinstance(src, int) and seen < 10_000:
            hit = self._memo.get(src)
            if hit is not None:
                return hit[0]
            r = self.rows[src]
            if short_op(r) not in _PASS or not self.producers or not self.producers[src]:
                break
            src = self._unscaled(self.producers[src][0]) if _to_fp8(r) else self.producers[src][0]
            seen += 1
        return src

    def _unscaled(self, src):
        """The value an fp8 cast scales: past the multiplies / divides by a broadcast scale and the clamps to
        the format's range between it and the cast (``x / scale`` then ``convert``, torchao's
        ``hp_tensor_to_float8_dynamic``; TE's cast kernels), ``src`` itself where there are none."""
        while isinstance(src, int) and short_op(self.rows[src]) in _SCALE and self.producers[src]:
            ops = self.producers[src]
            main = [k for k, o in enumerate(ops) if not self._is_scale(o)]
            if len(main) != 1 or (short_op(self.rows[src]) == "divide" and main[0] != 0):
                break
            src = ops[main[0]]
        return src

    def _is_scale(self, src) -> bool:
        """A broadcast of a smaller value (a per-tensor / per-row scale, a bound) or a constant."""
        if not isinstance(src, int):
            return False
        r = self.rows[src]
        op = short_op(r)
        if op == "constant":
            return True
        return op == "broadcast_in_dim" and bool(r.operands) and r.operands[0].nelems < r.result.nelems

    def root_of(self, i: int, pos: int):
        src = self.source(i, pos)
        out = self.root(src)
        if isinstance(src, int):
            self._memo[src] = (out,)
        return out

    def is_param(self, root, i: int, pos: int, strict: bool = False) -> bool:
        """A step parameter: a (donated) argument, or a slice of a value from outside the loop body. With
        ``strict``, only where the parameters are known (donated) and the data flow reaches one."""
        if root is None or (strict and self.params is None):
            return False
        if isinstance(root, tuple):  # no data flow: an argument of the op's own function
            return not strict
        if isinstance(root, str):
            return self.params is None or root in self.params
        r = self.rows[root]
        if short_op(r) in _SLICE and self.producers is not None and self.producers[root]:
            inner = self.root(self.producers[root][0])
            if inner is None:
                return not strict
            return isinstance(inner, str) and (self.params is None or inner in self.params)
        return False


def _to_fp8(row) -> bool:
    """Whether ``row`` converts to an 8-bit float (an fp8 recipe's cast of a GEMM operand)."""
    return short_op(row) == "convert" and str(getattr(row.result, "dtype", "")).startswith("f8")
