"""The Inductor execution model (``--execution inductor``): the kernels ``torch.compile``'s Inductor makes of a graph.

Inductor lowers each framework op to loops over an index space, inlines pointwise loops and views into their
readers, and its scheduler then fuses what is left (``torch/_inductor/scheduler.py``, ``codegen/simd.py``: the
Triton backend's ``can_fuse``). :func:`inductor` groups rows into kernels by those rules, on the IR, in program
order:

* views (reshape, transpose, broadcast, slice, bitcast, constant) are free: their readers index the storage
  (a broadcast: its small operand); a pointwise op read only through broadcasts is inlined into its readers
  (:func:`inlined`: a BatchNorm's ``rsqrt(var + eps)``), and what is computed from constants only is folded;
* every other loop has a *group* ``(numel, rnumel)``: a pointwise op ``(its elements, 1)``, a reduction
  ``(its result's elements, elements reduced per result)``. A row joins the kernel of one of its producers
  (vertical fusion) where the groups agree as the Triton backend asks: pointwise with pointwise of the same
  numel; pointwise with a reduction kernel when its numel is the reduction's input (``numel x rnumel``: a
  prologue, or the broadcast back over the row: softmax, LayerNorm) or its output (``numel``); a reduction with
  a pointwise kernel over its input or output, or with a reduction of the same ``(numel, rnumel)`` (LayerNorm's
  mean and variance, softmax's max and sum: one kernel). A reduction of another shape starts a kernel: that is
  where a reduction splits a kernel. A kernel holds at most :data:`MAX_FUSION_SIZE` ops (``max_fusion_size``);
* a dot or convolution is a library call (cuBLAS / cuDNN, an extern kernel: Inductor's default without
  ``max_autotune``; an f32 convolution on TF32 tensor cores, PyTorch's default: :mod:`.torch_math`): nothing
  fuses into it but the bias of ``addmm`` (an add of a broadcast of a smaller operand) and the cast to its
  output dtype;
  its other consumers are Triton kernels of their own; a view it reads that is no row- or column-major matrix (a
  reshape regrouping permuted dimensions: attention's q, k, v and output written out) is copied first by a Triton
  loop, fused into its producer where that is a Triton kernel (:mod:`.inductor_copies`);
* attention written out (``q @ k^T``, softmax, ``@ v``) is rewritten by Inductor's SDPA patterns
  (``fx_passes/fuse_attention.py``) into one ``scaled_dot_product_attention`` kernel (``attention="fused"``,
  the default; the backend as PyTorch dispatches it: flash where dtype and head dim allow, else
  mem_efficient), or (``attention="unfused"``) runs as its kernels: two library GEMMs and one softmax kernel;
* each kernel pays the profile's per-kernel gap and, on the host, its launch from Inductor's Python wrapper
  (:mod:`.inductor_launch`: a Triton kernel through ``CachingAutotuner.run`` and Triton's binder, an extern
  kernel as an eager ATen call): a kernel takes at least that. With CUDA graphs (``cudagraphs=True``:
  ``mode="reduce-overhead"``) the host launches one graph per step and the kernels follow each other at
  :data:`GRAPH_GAP_S`, each paying at most :data:`GRAPH_FILL_S` of fixed memory time (the profile's fill and
  drain is read off kernels timed one at a time);
* ``torch_version`` (None: a current release) is the torch whose Inductor is modelled: before 2.1 it has no
  SDPA pattern rewrite (:func:`.inductor_launch.sdpa_rewrite`), and written-out attention runs as its kernels
  whatever ``attention`` says (an SDPA call in the program stays one library kernel).

* a training step (its phases recorded: :attr:`~mhlo_cost.analysis.Analysis.phases`) is the graphs AOTAutograd
  partitions it into (:data:`GRAPHS`): the forward, and the backward with what it recomputes; nothing fuses
  across them. The optimizer's step is not part of a compiled model: it runs as eager PyTorch runs it
  (:func:`_eager_optimizer`), unless ``optimizer="compiled"`` (a graph of its own).

Collectives and unknown ops stay alone, as in :mod:`.fusion`. What the model does not see: horizontal fusion of
siblings that share no producer-consumer edge (two reductions of one input are caught only through a chain),
``max_autotune``'s Triton GEMM templates with their fused epilogues, split reductions (a long reduction over few
rows as two kernels), and recompilation or graph breaks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..machines.hardware import Hardware
from ..walk.row import Row, short_name
from .band import masks_of
from .fusion import Fusion, Grouper, Kernel, grouping_inputs
from .inductor_copies import extern_copies
from .inductor_epilogue import EXTERN_MEMBERS, SCALED_MEMBERS, _epilogue, _scale_epilogue
from .inductor_launch import (GRAPH_FILL_S, GRAPH_GAP_S, TRITON_ARG_S, TRITON_LAUNCH_S,  # noqa: F401
                              graph_memory_s, launch, sdpa_rewrite)
from .kernel_io import KernelIO, share_time
from .optime import OpTime
from .torch_math import torch_times

#: Inductor's ``config.max_fusion_size``: the most nodes one fused kernel holds.
MAX_FUSION_SIZE = 64
#: How a training step's optimizer runs beside the compiled model (:func:`inductor`).
OPTIMIZER_MODES = ("eager", "compiled")
#: Ops Inductor turns into index arithmetic of their readers (no loop of their own).
VIEWS = frozenset({"reshape", "bitcast", "transpose", "broadcast_in_dim", "broadcast", "slice", "constant"})
#: Ops that are loops of their own but fuse as pointwise loops over their result (copies, casts, indexing).
POINTWISE_DATA = frozenset({"convert", "concatenate", "pad", "reverse", "copy", "reduce_precision", "iota",
                            "dynamic_slice", "real_dynamic_slice", "select", "clamp", "gather"})


@dataclass
class InductorKernel(Kernel):
    """A kernel Inductor emits: a Triton loop over ``(numel, rnumel)``, or an ``extern`` library call (GEMM,
    SDPA); ``host_s``: the host's launch time of it, which it cannot run ahead of."""

    numel: int = 0
    rnumel: int = 1
    extern: bool = False
    backend: str = ""  # an attention's SDPA backend
    host_s: float = 0.0

    @property
    def time_s(self) -> float:
        return max(max(self.compute_s, self.memory_s) + self.overhead_s, self.host_s)


def group_of(r: Row) -> tuple[int, int]:
    """A row's loop group ``(numel, rnumel)``: a reduction's result elements and the elements reduced into each
    (its first operand's elements over its result's), any other op's result elements and 1."""
    res = r.result if hasattr(r.result, "nelems") else (r.result[0] if r.result else None)
    numel = res.nelems if res is not None else 0
    if short_name(r.op) == "reduce" and r.operands and numel:
        return numel, max(r.operands[0].nelems // numel, 1)
    return numel, 1


def fits(kernel: tuple[int, int], row: tuple[int, int]) -> tuple[int, int] | None:
    """The group of a kernel of group ``kernel`` once a row of group ``row`` joins it, None where the Triton
    backend would not fuse them (see the module docstring)."""
    (kn, kr), (n, r) = kernel, row
    if kr == 1 and r == 1:
        return kernel if n == kn else None
    if kr > 1 and r > 1:
        return kernel if (n, r) == (kn, kr) else None
    if r == 1:  # a pointwise row into a reduction kernel: over its input or over its output
        return kernel if n in (kn * kr, kn) else None
    return row if kn in (n * r, n) else None  # a reduction into a pointwise kernel


class _InductorGrouper(Grouper):
    """The grouping of :func:`inductor`: the placement of :class:`.fusion.Grouper` with Inductor's rules."""

    def __init__(self, *a, inline: set | None = None, graph: list | None = None, skip: set | None = None,
                 copies: set | None = None, **kw):
        super().__init__(*a, **kw)
        self.inline = inline or set()
        self.copies = copies or set()  # views copied before an extern GEMM (:mod:`.inductor_copies`)
        self.graph = graph  # each row's graph (:func:`graphs_of`; None: one graph)
        self.skip = skip or set()  # rows another model runs (the optimizer's step, eager)
        self.readers: dict = {}  # a value read by a kernel (a row, or an argument's name) -> those kernels
        self.folded: set[int] = set()  # rows computed from constants only (folded at compile time)

    def sources(self, i: int) -> set:
        """The values row i reads from outside any kernel, looking through views: rows and argument names."""
        out, todo, seen = set(), list(self.producers[i]), set()
        while todo:
            p = todo.pop()
            if isinstance(p, int) and self.row_kernel[p] is None and self.role[p] in ("free", "dup"):
                if p not in seen:
                    seen.add(p)
                    todo.extend(self.producers[p])
            elif p is not None and not (isinstance(p, int) and p in self.folded):
                out.add(p)
        return out

    def siblings(self, i: int) -> set:
        """Kernels that read a value row i reads (horizontal fusion: the scheduler fuses nodes sharing reads)."""
        out = set()
        for v in self.sources(i):
            out.update(self.readers.get(v, ()))
        return out

    def open_kernel_of(self, i: int, no_dot: bool = False) -> int | None:
        vertical = self.candidates(i, set())
        found = self._first_fit(i, vertical)
        if found is None:
            found = self._first_fit(i, self.siblings(i) - vertical)
        return found

    def _first_fit(self, i: int, kernels: set) -> int | None:
        """Of ``kernels``, the one with the latest member that row i may join (groups, size, no cycle)."""
        r = self.rows[i]
        row = group_of(r)
        best = None
        for k in sorted(kernels, key=lambda k: -self.kernels[k].members[-1]):
            kern = self.kernels[k]
            if kern.closed or kern.multiplicity != r.multiplicity or len(kern.members) >= MAX_FUSION_SIZE:
                continue
            if self.graph is not None and self.graph[kern.head] != self.graph[i]:
                continue  # another graph (AOTAutograd's forward / backward): compiled apart
            if kern.extern:
                if not (kern.has_dot and self._extern_takes(kern, i)):
                    continue
            elif fits((kern.numel, kern.rnumel), row) is None:
                continue
            if self.acyclic(i, k):
                best = k
                break
        return best

    def _extern_takes(self, kern, i: int) -> bool:
        """Whether the library GEMM ``kern`` takes row i into its call (:func:`_epilogue`, :func:`_scale_epilogue`)."""
        rows, prod, role = self.rows, self.producers, self.role
        if _scale_epilogue(rows, prod, role, kern.head, i):  # (the scales come first: cuBLASLt's alpha)
            return len(kern.members) < SCALED_MEMBERS - 2
        limit = SCALED_MEMBERS if any(_scale_epilogue(rows, prod, role, kern.head, m) for m in kern.members) \
            else EXTERN_MEMBERS
        return len(kern.members) < limit and _epilogue(rows, prod, role, i)

    def new_kernel(self, i: int, **kw) -> int:
        self.row_kernel[i] = len(self.kernels)
        self.role[i] = "kernel"
        n, rn = group_of(self.rows[i])
        self.kernels.append(InductorKernel([i], self.rows[i].multiplicity, numel=n, rnumel=rn, **kw))
        self._reads(i, len(self.kernels) - 1)
        return len(self.kernels) - 1

    def _reads(self, i: int, k: int) -> None:
        for v in self.sources(i):
            self.readers.setdefault(v, []).append(k)

    def join(self, i: int, k: int) -> None:
        super().join(i, k)
        self._reads(i, k)
        kern = self.kernels[k]
        if not kern.extern:  # (a library GEMM takes only its bias and output cast: :func:`_epilogue`)
            kern.numel, kern.rnumel = fits((kern.numel, kern.rnumel), group_of(self.rows[i]))

    def place_preset(self, i: int) -> None:
        g = self.preset[i]
        if g in self.preset_kernel:
            self.row_kernel[i], self.role[i] = self.preset_kernel[g], "kernel"
            self.kernels[self.preset_kernel[g]].members.append(i)  # (bypasses join: no group to update)
        else:
            self.preset_kernel[g] = self.new_kernel(i, has_dot=True, attention=True, extern=True, closed=True)

    def place_loop(self, i: int) -> None:
        """Row i into the open kernel it fuses with (:meth:`open_kernel_of`), else a Triton kernel of its own."""
        k = self.open_kernel_of(i)
        if k is None:
            self.new_kernel(i)
        else:
            self.join(i, k)

    def place(self, i: int) -> None:
        r, t = self.rows[i], self.times[i]
        name = short_name(r.op)
        if r.kind in ("collective", "unknown") or i in self.skip:
            return
        if i in self.preset:
            self.place_preset(i)
        elif name == "constant" or (self.producers[i] and all(isinstance(p, int) and p in self.folded
                                                               for p in self.producers[i])):
            self.folded.add(i)  # constants, and what is computed from them only: folded at compile time
            self.role[i] = "dup"
        elif i in self.inline:
            self.role[i] = "dup"  # recomputed by its readers (:func:`inlined`)
        elif i in self.copies:  # a copy loop, fused into its producer where that is a Triton kernel of its size
            self.place_loop(i)
        elif t.bound == "free" or name in VIEWS:
            self.role[i] = "dup" if name in ("broadcast_in_dim", "broadcast") else "free"
        elif r.kind in ("dot", "conv"):
            self.new_kernel(i, has_dot=True, extern=True)
        elif r.kind in ("elementwise", "transcendental", "reduce") or name in POINTWISE_DATA:
            self.place_loop(i)
        else:
            self.new_kernel(i, closed=True, extern=name in ("sort", "custom_call", "fft", "scatter"))


_BROADCASTS = frozenset({"broadcast_in_dim", "broadcast"})


def inlined(rows, producers) -> set[int]:
    """Pointwise rows Inductor inlines into their readers rather than running as loops of their own: those whose
    value is read only through broadcasts (a BatchNorm's ``rsqrt(var + eps)`` over channels, read by the
    normalisation over every element), directly or through other such rows. Their readers recompute them."""
    consumers: list[list[int]] = [[] for _ in rows]
    for i, ps in enumerate(producers):
        for q in ps:
            if isinstance(q, int):
                consumers[q].append(i)
    out: set[int] = set()
    for i in range(len(rows) - 1, -1, -1):
        r = rows[i]
        if r.kind not in ("elementwise", "transcendental") and short_name(r.op) != "convert":
            continue
        if consumers[i] and all(short_name(rows[c].op) in _BROADCASTS or c in out for c in consumers[i]):
            out.add(i)
    return out


def _attention_preset(rows, producers, attention: str, sdpa: str, hw: Hardware,
                      rewrite: bool = True) -> tuple[dict, set, list]:
    """Rows of each attention Inductor's SDPA rewrite makes one kernel (none with ``attention="unfused"``; only
    the SDPA calls of the program without ``rewrite``: a torch before 2.1), the score shapes kept on chip, and
    each attention's SDPA backend."""
    if attention == "unfused":
        return {}, set(), []
    from .attention import find_attention
    from .attention_backward import find_attention_backward
    from .sdpa import backward_backend, backward_owner, is_sdpa_call, resolve

    forward = find_attention(rows, producers)
    backward, onchip = find_attention_backward(rows, producers, forward)
    if not rewrite:  # only the SDPA calls (and their backward): written attention stays its ops
        backward = [b for b in backward if (n := backward_owner(rows, forward, b)) is not None
                    and is_sdpa_call(rows, forward[n])]
        forward = [att for att in forward if is_sdpa_call(rows, att)]
        onchip = onchip if backward else set()
    preset = {}
    for g, att in enumerate(forward + backward):
        preset.update((i, g) for i in att.members)
    backends = [resolve(rows, att, sdpa, hw) for att in forward]
    return preset, onchip, backends + [backward_backend(rows, forward, backends, att) for att in backward]


def inductor(analysis, hw: Hardware, times: list[OpTime] | None = None, producers: list | None = None,
             attention: str = "fused", cudagraphs: bool = False, sdpa: str = "auto",
             optimizer: str = "eager", torch_version: str | None = None) -> Fusion:
    """The kernels of ``analysis`` as Inductor compiles it (see the module docstring), timed on ``hw``;
    ``cudagraphs``: replayed from a CUDA graph (``mode="reduce-overhead"``); ``sdpa``: the SDPA backend asked
    (``auto``: PyTorch's own choice; a backend that cannot run the attention is refused, :func:`.sdpa.resolve`);
    ``optimizer``: how a training step's optimizer runs (``eager``: :func:`_eager_optimizer`; ``compiled``: in
    a graph of its own, as ``torch.compile(optimizer.step)``); ``torch_version``: the torch modelled (None: a
    current release; :func:`.inductor_launch.sdpa_rewrite`)."""
    if optimizer not in OPTIMIZER_MODES:
        raise ValueError(f"unknown optimizer mode {optimizer!r}: choose one of {', '.join(OPTIMIZER_MODES)}")
    rows, producers, times = grouping_inputs(analysis, hw, times, producers, attention, "inductor()")
    times = torch_times(rows, times, hw)
    preset, onchip, backends = _attention_preset(rows, producers, attention, sdpa, hw, sdpa_rewrite(torch_version))
    graph = graphs_of(analysis)
    kept = _eager_optimizer(analysis, hw, times, graph, sdpa) if optimizer == "eager" else []
    skip = {i for k in kept for i in k.members}
    copies = extern_copies(analysis, rows, producers, set(preset)) - skip
    grouper = _InductorGrouper(rows, producers, times, preset, inline=inlined(rows, producers) - set(preset),
                               graph=graph, skip=skip, copies=copies)
    for i in range(len(rows)):
        grouper.place(i)
    from .eager import BACKEND_LIBRARY

    for g, k in grouper.preset_kernel.items():
        kern = grouper.kernels[k]
        kern.backend = backends[g] if g < len(backends) else ""
        kern.library = BACKEND_LIBRARY.get(kern.backend, "")
    io = KernelIO(rows, producers, times, grouper.role, onchip, masks=masks_of(analysis))
    for k in grouper.kernels:
        io.measure(k, hw)
        if copies.intersection(k.members):  # a copy's bytes (its view's unfused time is nil: no cap by it)
            k.memory_s = hw.memory_time(k.bytes_read + k.bytes_written, k.multiplicity)
        launch(k, hw, cudagraphs, rows)
    kernels = sorted(grouper.kernels + kept, key=lambda k: k.head)
    row_kernel: list[int | None] = [None] * len(rows)
    for n, k in enumerate(kernels):
        for i in k.members:
            row_kernel[i] = n
    return Fusion(kernels, row_kernel, share_time(kernels, times, len(rows)))


#: The graph of each training phase under ``torch.compile``: AOTAutograd traces a compiled model's forward and
#: backward and partitions them into two graphs, compiled apart (what the backward recomputes is in its graph);
#: the optimizer's step is not part of the model.
GRAPHS = {"forward": 0, "backward": 1, "recompute": 1, "optimizer": 2}


def graphs_of(analysis) -> list[int] | None:
    """Each row's graph (:data:`GRAPHS`) in a training step whose phases were recorded, else None (one graph)."""
    ph = getattr(analysis, "phases", None)
    if ph is None or not ph.training:
        return None
    return [GRAPHS.get(p, 0) for p in ph.phase]


def _eager_optimizer(analysis, hw: Hardware, times, graph, sdpa: str) -> list:
    """The eager kernels of a training step's optimizer (:func:`.eager.eager`): ``torch.compile(model)`` compiles
    the model's forward and backward; ``optimizer.step()`` runs eagerly unless it is compiled on its own
    (torchtitan compiles each transformer block; transformers' Trainer compiles the model). The eager kernels
    all of whose rows are the optimizer's."""
    if graph is None or GRAPHS["optimizer"] not in graph:
        return []
    from .eager import eager

    opt = GRAPHS["optimizer"]
    return [k for k in eager(analysis, hw, times, sdpa=sdpa).kernels if all(graph[i] == opt for i in k.members)]


def compile_gain(eager_s: float, inductor_s: float) -> float:
    """Eager time over Inductor time (NaN where the Inductor time is zero)."""
    return eager_s / inductor_s if inductor_s > 0 else math.nan
