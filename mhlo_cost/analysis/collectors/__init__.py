"""Block attribution: which transformer block (and which part of it) each op row belongs to.

Three collectors, from most to least informed:

* :class:`~mhlo_cost.analysis.collectors.scope.ScopeCollector` reads block names from the rows' scope paths
  (``spatial_blocks.3/attn``, ``blocks_3``, ``layers[2]``, ``layers/0``, torch paths ``layers.0.attn.qkv``);
* :class:`~mhlo_cost.analysis.collectors.repeat.RepeatCollector` finds the period of the op sequence (op name +
  result shape) that repeats most, with one or several alternating block kinds;
* :class:`~mhlo_cost.analysis.collectors.rms.RMSCollector` cuts the op sequence at normalisations (RMSNorm,
  LayerNorm: an ``rsqrt`` shortly after a ``reduce``), ``norms_per_block`` of them per block.

All three understand loops: the body of a ``while`` (``jax.lax.scan`` over layers) is one set of rows of
multiplicity N ("while xN"); where no block is found inside it, it becomes N blocks and each of its rows
is split evenly over them (:attr:`Blocks.row_blocks` holds a tuple of block ids per row).

``assign_blocks(analysis, method="auto")`` tries scope, then repeat, then rms; ``"stages"`` is the scope collector
keeping stages of blocks whole (Swin's ``layers.1``, not its ``layers.1/blocks.0``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter, not_

from ...walk.row import METRICS
from .perrow import fill_nearest

#: Segment names that structure loops rather than name user scopes.
LOOP_SEGMENTS = ("while", "body", "cond")

_SCOPE, _NOTE = attrgetter("scope"), attrgetter("note")
_WHILE_NOTE = re.compile(r"^while x(\d+)")
_TRAILING_INDEX = re.compile(r"^(.*?)(?:[._/](\d+)|\[(\d+)\])$")


@dataclass(frozen=True)
class Block:
    name: str  # "spatial_blocks.3", "layers.0", "block_a.4"
    kind: str  # "spatial", "layers", "A", "block"
    index: int | None = None


@dataclass
class Blocks:
    """The result of a collector.

    ``row_blocks[i]`` are the ids (into :attr:`blocks`) of the blocks row ``i`` belongs to: empty for rows
    outside every block, one id mostly, N ids for a loop body split evenly over N iterations.
    ``row_parts[i]`` is the part inside the block (``attn``, ``mlp``, ...; "" where unknown).
    ``row_groups[i]`` names the group of rows outside every block (``x_embedder``, ``(top)``).
    """

    method: str
    blocks: list[Block]
    row_blocks: list[tuple[int, ...]]
    row_parts: list[str]
    row_groups: list[str]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # for the user's attention (stderr)

    @property
    def count(self) -> int:
        return len(self.blocks)

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.blocks:
            out[b.kind] = out.get(b.kind, 0) + 1
        return out

    def found(self) -> str:
        """One line for stderr: ``blocks by scope: 4 found``, or, where none was, what was tried."""
        if self.blocks:
            return f"blocks by {self.method}: {self.count} found"
        return f"no blocks found ({'; '.join(self.notes) or 'by ' + self.method}): rows are grouped by scope"

    def loop_spans(self) -> list[tuple[tuple[int, int], tuple[int, ...]]]:
        """((start, end), ids) of the runs of rows split over several blocks (a loop body's iterations)."""
        out = []
        start, cur = None, None
        for i, ids in enumerate(list(self.row_blocks) + [()]):
            multi = len(ids) > 1
            if start is not None and (not multi or ids != cur):
                out.append(((start, i), cur))
                start = None
            if multi and start is None:
                start, cur = i, ids
        return out

    def describe(self) -> str:
        """One line for stderr: ``blocks by scope: 4 (2 spatial, 2 temporal)``."""
        if not self.blocks:
            return f"blocks by {self.method}: none found"
        kinds = ", ".join(f"{n} {k}" for k, n in self.kinds().items())
        return f"blocks by {self.method}: {self.count} ({kinds})"


METHODS = ("auto", "scope", "repeat", "rms", "stages")


def assign_blocks(analysis, method: str = "auto", pattern: str | None = None,
                  norms_per_block: int | None = None) -> Blocks:
    """Group the rows of ``analysis`` into blocks with ``method`` (``auto``: scope, then repeat, then rms).

    ``pattern`` (a regular expression; its first group or whole match names the block) is the scope
    collector's; ``norms_per_block`` the rms collector's (normalisations per block, qk-norms included).
    """
    rows = analysis.rows if hasattr(analysis, "rows") else list(analysis)
    hint = no_locations_hint(rows) if method in ("auto", "scope") else None
    found = _assign(rows, method, pattern, norms_per_block)
    if hint:
        found.warnings.insert(0, hint)
    return found


NO_LOCATIONS = ("the module carries no op locations, so no scope names: blocks are found by repetition or "
                "normalisations, if at all. Keep them: lower with `mhlo-cost lower`, or print JAX's module with "
                "`jax.jit(f).lower(...).as_text(debug_info=True)`")


def no_locations_hint(rows) -> str | None:
    """The warning for a module none of whose ops carries a location name (None where some do)."""
    if not rows or any(row_scope(r) for r in rows):
        return None
    return NO_LOCATIONS


def _assign(rows, method: str, pattern: str | None, norms_per_block: int | None) -> Blocks:
    from .rms import RMSCollector
    from .scope import ScopeCollector

    def repeat() -> Blocks:  # imported where it runs: it needs numpy, which a report found by scope does not
        from .repeat import RepeatCollector

        return RepeatCollector().collect(rows)

    makers = {
        "scope": lambda: ScopeCollector(pattern).collect(rows),
        "stages": lambda: ScopeCollector(pattern, stages=True).collect(rows),
        "repeat": repeat,
        "rms": lambda: RMSCollector(norms_per_block).collect(rows),
    }
    if method in makers:
        return makers[method]()
    if method != "auto":
        raise ValueError(f"unknown block method {method!r}: choose one of {', '.join(METHODS)}")
    order = ["scope", "repeat", "rms"]
    if pattern is not None:
        order = ["scope"]
    elif norms_per_block is not None:
        order = ["scope", "rms", "repeat"]
    tried = []
    for m in order:
        b = makers[m]()
        if b.count:
            return b
        tried.append(m)
    return none_found(rows, "none", [f"tried {', '.join(tried)}"])


# ---------------------------------------------------------------------------------------------------------
# Helpers shared by the collectors
# ---------------------------------------------------------------------------------------------------------


def row_scope(r) -> str:
    """The row's scope; for a bare module-path location name (``layers.0.attn.qkv``), that name."""
    s = r.scope
    if s:
        return s
    loc = getattr(r, "loc", None)
    name = getattr(loc, "name", "") if loc is not None else ""
    if name and "/" not in name and _MODULE_PATH.match(name) and not _is_instruction_name(name):
        return name
    return ""


_MODULE_PATH = re.compile(r"^[A-Za-z_][\w-]*(?:\[\d+\])?(?:\.[\w-]+(?:\[\d+\])?)+$")
_INSTRUCTION = re.compile(r"^([a-z][a-z0-9_-]*)\.\d+$")


def _is_instruction_name(name: str) -> bool:
    """An XLA instruction name (``broadcast.167``, ``divide.531``, ``p0.2``) as torch-xla writes them into
    locations: an HLO opcode or parameter with a counter, not a module path like ``h.11``."""
    m = _INSTRUCTION.match(name)
    if m is None:
        return False
    word = m.group(1).replace("-", "_")
    return word in _HLO_OPCODES or bool(re.fullmatch(r"p\d+|arg\d+|param(eter)?", word))


def _hlo_opcodes() -> frozenset:
    from ...walk.opsets import DATA_MOVEMENT, ELEMENTWISE, TRANSCENDENTAL

    return ELEMENTWISE | TRANSCENDENTAL | DATA_MOVEMENT | frozenset({
        "dot", "convolution", "reduce", "reduce_window", "select_and_scatter", "scatter", "sort", "map", "fusion",
        "custom_call", "call", "while", "conditional", "parameter", "tuple", "all_reduce", "all_gather",
        "reduce_scatter", "all_to_all", "collective_permute", "broadcast", "iota", "rng", "cholesky", "fft",
        "triangular_solve", "clamp", "get_tuple_element", "dynamic_slice", "dynamic_update_slice", "maximum",
        "minimum", "exponential", "log", "logistic", "tanh", "rsqrt", "sqrt", "sine", "cosine", "power",
    })


_HLO_OPCODES = _hlo_opcodes()


def short_op(r) -> str:
    op = r.op
    return op.split(".", 1)[1] if "." in op else op


def is_matmul(r) -> bool:
    return r.kind in ("dot", "conv") or short_op(r) in ("dot_general", "dot", "convolution")


def group_of(scope: str) -> str:
    """Name of a non-block group: the first scope segment (first dotted component of a module path)."""
    if not scope:
        return ""
    first = scope.split("/", 1)[0]
    if "." in first and _MODULE_PATH.match(first):
        first = first.split(".", 1)[0]
    return first


def row_scopes(rows) -> list[str]:
    """:func:`row_scope` of every row (a location is looked at only for the rows without a scope)."""
    scopes = list(map(_SCOPE, rows))
    for i in compress(range(len(scopes)), map(not_, scopes)):
        if getattr(getattr(rows[i], "loc", None), "name", ""):  # mostly none: a constant's
            scopes[i] = row_scope(rows[i])
    return scopes


def nearest_groups(rows, scopes: list[str] | None = None) -> list[str]:
    """Group name of every row: its first scope segment, else that of the nearest scoped row, else (top)."""
    if scopes is None:
        scopes = row_scopes(rows)
    group = {s: group_of(s) for s in dict.fromkeys(scopes)}  # few distinct scopes, many rows
    return fill_nearest(list(map(group.__getitem__, scopes)), "(top)")


def while_trips(r) -> int | None:
    """N of the outermost ``while xN`` of the row's note, None where the row is in no (counted) loop."""
    m = _WHILE_NOTE.match(r.note) if r.note else None
    return int(m.group(1)) if m else None


_SPLIT_METRICS = METRICS + ("multiplicity",)


def _in_cond(scope: str) -> bool:
    """Whether the outermost loop segment of the scope is a condition (``while/cond``)."""
    segs = scope.split("/")
    for i in range(len(segs) - 1):
        if segs[i] == "while" and segs[i + 1] in ("cond", "body"):
            return segs[i + 1] == "cond"
    return False


def compute_of(rows, s: int = 0, e: int | None = None) -> int:
    """GEMM + convolution + vector FLOPs of rows[s:e]."""
    return sum(r.gemm_flops + r.conv_flops + r.vector_flops for r in rows[s:e])


def loop_runs(rows, min_compute: bool = True) -> list[tuple[int, int, int]]:
    """Maximal runs ``(start, end, N)`` of consecutive rows of one loop body run N times.

    A row belongs to a body when its outermost note is ``while xN`` and its multiplicity and every metric
    divide by N (the loop's condition runs N+1 times and is left out). With ``min_compute`` only runs with
    GEMM or convolution FLOPs are returned. (Only the rows with a note are looked at: a row without one
    ends a run.)
    """
    runs = []
    start, trips, note0, prev = None, None, None, -2
    for i in compress(range(len(rows)), map(_NOTE, rows)):
        r = rows[i]
        n = while_trips(r)
        ok = (n is not None and n >= 1 and not _in_cond(r.scope)
              and all(getattr(r, m) % n == 0 for m in _SPLIT_METRICS))
        key = r.note.split(";", 1)[0] if ok else None
        if start is not None and (i != prev + 1 or not ok or key != note0):
            runs.append((start, prev + 1, trips))
            start = None
        if ok and start is None:
            start, trips, note0 = i, n, key
        prev = i
    if start is not None:
        runs.append((start, prev + 1, trips))
    if min_compute:
        runs = [(s, e, n) for s, e, n in runs
                if any(rows[i].gemm_flops or rows[i].conv_flops for i in range(s, e))]
    return runs


def index_of(name: str) -> tuple[str, int | None]:
    """``spatial_blocks.3`` -> (``spatial_blocks``, 3); ``blocks_3``, ``layers[2]``, ``layers/0`` alike."""
    m = _TRAILING_INDEX.match(name)
    if not m or not m.group(1):
        return name, None
    idx = m.group(2) if m.group(2) is not None else m.group(3)
    return m.group(1), int(idx)


def kind_of(name: str) -> str:
    """The kind of a block from its name.

    ``spatial_blocks.3`` -> ``spatial``; ``layers.2`` -> ``layers``; ``h.11`` -> ``h``; ``blocks_3`` -> ``blocks``;
    a block of a ``Sequential`` inside a ``Sequential``, ``blocks.2.1`` -> ``blocks``.
    """
    base, _ = index_of(name)
    base = re.sub(r"(?:[./]\d+)+$", "", base) or base
    base = re.split(r"[/.]", base)[-1] or base
    for suffix in ("_blocks", "_block", "_layers", "_layer"):
        if base.endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    return base


def none_found(rows, method: str, notes: list[str] | None = None) -> Blocks:
    return Blocks(method, [], [()] * len(rows), [""] * len(rows), nearest_groups(rows), notes or [])


def segments_to_blocks(rows, method: str, segments: list[tuple[int, int, str, str, int]],
                       parts: list[str], loop_name: str = "block", loop_kind: str = "block",
                       notes: list[str] | None = None) -> Blocks:
    """Blocks from contiguous segments ``(start, end, name, kind, index)`` plus loops left outside them.

    A loop body (see :func:`loop_runs`) that overlaps no segment becomes N blocks ``{loop_name}.{i}``.
    ``parts`` is the per-row part list, kept as the result's :attr:`Blocks.row_parts`.
    """
    n = len(rows)
    row_blocks: list[tuple[int, ...]] = [()] * n
    covered = [False] * n
    for s, e, *_ in segments:
        for i in range(s, e):
            covered[i] = True
    items = [(seg[0], 0, ("seg", seg)) for seg in segments]
    for s, e, trips in loop_runs(rows):
        if any(covered[s:e]):
            continue
        items.append((s, 1, ("loop", (s, e, trips))))
    items.sort(key=lambda t: (t[0], t[1]))
    blocks: list[Block] = []
    loop_count = sum(1 for seg in segments if seg[3] == loop_kind)  # loop blocks number on from these
    for _, _, (what, data) in items:
        if what == "seg":
            s, e, name, kind, idx = data
            bid = len(blocks)
            blocks.append(Block(name, kind, idx))
            for i in range(s, e):
                row_blocks[i] = (bid,)
        else:
            s, e, trips = data
            base = len(blocks)
            # Several loops: number their iterations on from the previous loop's.
            blocks.extend(Block(f"{loop_name}.{loop_count + k}", loop_kind, loop_count + k) for k in range(trips))
            loop_count += trips
            ids = tuple(range(base, base + trips))
            for i in range(s, e):
                row_blocks[i] = ids
    groups = nearest_groups(rows)
    return Blocks(method, blocks, row_blocks, parts, groups, notes or [])
