"""The eager execution model (``--execution eager``): one kernel per framework op, as PyTorch eager runs it.

A framework op (a torch ``aten`` call lowered through torchax or torch-xla, a ``jnp`` call in a JAX program)
lowers to several IR ops that share one location: the module path (the scope) and the source position of the
call (:attr:`~mhlo_cost.walk.locations.LocationInfo.site`). :func:`eager` groups the rows of one call,
consecutive in program order and of one multiplicity, into one kernel:

* a call made only of view ops (reshape, transpose, slice, broadcast: ``view``, ``permute``, ``expand``,
  indexing) launches no kernel: its readers read the viewed storage (a broadcast: its small operand);
* an attention is the library kernel the framework dispatches ``scaled_dot_product_attention`` to only where
  the program calls it (:mod:`.sdpa`: one call site for both products): on the backend ``--sdpa`` names, or
  PyTorch's own choice (``flash`` where the dtype and head dim allow, else ``mem_efficient``); its scores never
  leave the chip (:func:`.attention.find_attention` finds it), and in a training program its backward is that
  backend's one backward kernel (:func:`sdpa_backward`), not the ops autograd would run for it written out. On
  the ``math`` backend the call is the kernels PyTorch's math path runs. An attention written out (``q @ k^T``,
  softmax, ``@ v``) is the calls it was written as, its scores and probabilities stored (a program lowered from
  JAX makes no torch call: its attentions are taken as SDPA calls);
* an f32 convolution runs on TF32 tensor cores, a matmul in f32 (PyTorch's defaults: :mod:`.torch_math`);
* any other call is one kernel: it reads its inputs once and writes what others read (:class:`.kernel_io.KernelIO`),
  and pays the profile's kernel launch overhead; the host dispatches each framework op (views included) in
  :func:`dispatch_overhead` seconds (a cuDNN convolution far more: :mod:`.eager_host`), so a kernel takes at
  least its calls' host time (a small kernel is host-bound; a large one hides the host behind it); a call that
  reduces its rows and then reads them again (a norm) reads the part of its rows that no longer fits in L2 twice
  from HBM, and one over fewer rows than the chip holds row blocks streams at their share of the rate
  (:mod:`.two_pass`).

A row without a source position belongs to the call before it (the ops of a helper function the call runs,
such as a decomposition's ``jit(_where)``), except where it begins a call of its own (:mod:`.eager_calls`): where
the module scope changes (an activation module, ``bn1`` then ``act1``) or where a jax.nn activation's jitted
function begins (``jit(relu)``, ``jit(silu)``: torchax's lowering of one aten op, one eager kernel); where no
call came before, it is a call of its own. A copy PyTorch makes of a non-contiguous tensor (:mod:`.strides`, where the
walk recorded the views' ``layouts``: a ``reshape`` that is not a view, a matmul operand cuBLAS cannot take, a norm's
input) is a kernel of its own. What the model does not see: a ``.contiguous()`` whose result is not reshaped (the IR
writes nothing for it), in-place ops (``add_``: the IR is functional; the memory estimate counts a new buffer), and
fused library kernels the model code does not call.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..machines.hardware import Hardware
from ..walk.row import Row, short_name
from .band import masks_of
from .eager_calls import groups as _groups
from .eager_host import DISPATCH_S, dispatch_overhead, host_times  # noqa: F401 (DISPATCH_S: the eager names)
from .fusion import Fusion, Kernel, data_flow
from .kernel_io import KernelIO, share_time
from .optime import OpTime, op_time
from .torch_math import torch_times
from .torch_reduce import pays_row_time
from .two_pass import row_occupancy, second_pass_bytes
from .strides import eager_copies
from .sdpa import (BACKEND_LIBRARY, FLASH_DTYPES, FLASH_MAX_HEAD_DIM, SDPA_BACKENDS, WRITTEN_ATTENTION,  # noqa: F401
                   BackendError, backward_owner, is_sdpa_call, math_pieces, notes, resolve, written_default)

#: Ops a framework runs as views of their operand's storage (no kernel).
VIEW_OPS = frozenset({"reshape", "bitcast", "transpose", "broadcast_in_dim", "broadcast", "slice", "constant"})


@dataclass
class EagerKernel(Kernel):
    """A kernel of one framework call; ``host_s``: the host's dispatch time of its call (and of the view
    calls before it), which the kernel cannot run ahead of."""

    host_s: float = 0.0
    backend: str = ""  # an attention kernel's SDPA backend
    path: str = "stream"  # how it moves its bytes (:data:`mhlo_cost.machines.kernels.PATHS`, :func:`eager_path`)

    @property
    def time_s(self) -> float:
        return max(max(self.compute_s, self.memory_s) + self.overhead_s, self.host_s)


def _is_view(r: Row, t: OpTime) -> bool:
    return t.bound == "free" or short_name(r.op) in VIEW_OPS


def head_dim(rows, att) -> int:
    """The contracted dimension of an attention's score product (Q K^T): its FLOPs / (2 x its elements)."""
    from .attention_compute import score_head_dim

    return score_head_dim(rows[att.qk])


_HANDED = frozenset({"broadcast_in_dim", "broadcast", "reshape", "bitcast"})


def _handed_views(rows, times, grp: list[int], consumers) -> set:
    """The view rows of a call whose values only leave it (read by other calls, directly or through other such
    views): a broadcast or reshape a decomposition makes for the next call (``masked_fill``'s mask and fill
    value, expanded to the scores' shape). Eager never materialises them: the reader takes the viewed storage."""
    inside, out = set(grp), set()
    for i in reversed(grp):
        if short_name(rows[i].op) in _HANDED and consumers[i] and all(
                c not in inside or c in out for c in consumers[i]):
            out.add(i)
    return out


#: Ops whose kernels are not TensorIterator's elementwise loops (reductions, indexing, copies with their own
#: kernels): they keep the streaming rate.
_NOT_ELEMENTWISE = frozenset({"reduce", "reduce_window", "sort", "scatter", "gather", "concatenate", "pad",
                              "dynamic_slice", "dynamic_update_slice", "select_and_scatter", "custom_call",
                              "iota", "rng_bit_generator", "rng", "while", "case", "if", "call", "fft"})


def _strided_view(r: Row) -> bool:
    """A view that hands its reader a broadcast ([B,1,C] read as [B,N,C]) or a permuted (strided) operand."""
    name = short_name(r.op)
    if not r.operands or not hasattr(r.result, "nelems"):
        return False
    if name in ("broadcast_in_dim", "broadcast"):  # a scalar is a kernel argument, not a broadcast operand
        return 1 < r.operands[0].nelems < r.result.nelems
    if name == "transpose":
        return sum(1 for d in r.result.shape if d > 1) > 1
    return False


def _widening(r: Row) -> bool:
    """A dtype conversion to a wider type (bf16 -> f32): PyTorch's unrolled elementwise path."""
    res = r.result
    if short_name(r.op) != "convert" or not r.operands or not hasattr(res, "nbytes"):
        return False
    src = r.operands[0]
    return src.nelems > 0 and res.nbytes * src.nelems > src.nbytes * res.nelems


def _non_unit(shape) -> tuple:
    return tuple(d for d in shape if d != 1)


def _copying_reshape(rows, producers, role, i: int) -> bool:
    """A reshape of a permuted view that regroups its dimensions (``x.transpose(1, 2).reshape(b, n, h * d)``):
    PyTorch cannot view it and copies (``.contiguous()``), a kernel on the generic path."""
    r = rows[i]
    if short_name(r.op) != "reshape" or not r.operands or not hasattr(r.result, "shape"):
        return False
    if _non_unit(r.operands[0].shape) == _non_unit(r.result.shape):
        return False
    p, depth = (producers[i][0] if producers[i] else None), 0
    while isinstance(p, int) and role[p] in ("free", "dup") and depth < 16:
        name = short_name(rows[p].op)
        if name == "transpose":
            return _strided_view(rows[p])
        if name not in ("reshape", "bitcast", "convert"):
            return False
        srcs = [q for q in producers[p] if isinstance(q, int)]
        p, depth = (srcs[0] if len(srcs) == 1 else None), depth + 1
    return False


def reduced_rows(rows, k) -> int:
    """The rows an eager call's one reduction reduces (its output elements, over the multiplicity): PyTorch's
    generic reduction kernel (a mean, a sum) pays a fixed time per row beside its stream (``reduce_row_ns``) where
    a warp or a block shares each output (:func:`.torch_reduce.pays_row_time`: over the minor dimension, or over
    another with many inputs per output); one over another dimension with few inputs per output streams. A call of
    several reductions is a kernel of its own (softmax, LayerNorm: a warp or a block per row): 0, as for a GEMM or
    an attention."""
    if k.attention or k.has_dot:
        return 0
    red = [i for i in k.members if short_name(rows[i].op) == "reduce" and hasattr(rows[i].result, "nelems")]
    if len(red) != 1 or not pays_row_time(rows[red[0]]):
        return 0
    return rows[red[0]].result.nelems * k.multiplicity


def eager_path(rows, producers, role, k, reshapes: bool = True) -> str:
    """How an eager kernel moves its bytes (:data:`mhlo_cost.machines.kernels.PATHS`): an elementwise kernel that
    reads a broadcast or a permuted view (inside its call, or handed to it as a view) runs TensorIterator's
    generic path; one that widens a dtype its unrolled path; GEMMs, attention, reductions and indexing stream."""
    if k.attention or k.has_dot or any(short_name(rows[i].op) in _NOT_ELEMENTWISE for i in k.members):
        return "stream"
    if reshapes and any(_copying_reshape(rows, producers, role, i) for i in k.members):
        return "generic"
    members = set(k.members)
    views = {_input_view(rows, producers, role, members, i, p) for i in k.members for p in producers[i]}
    if any(_strided_view(rows[i]) and short_name(rows[i].op) != "transpose" for i in k.members):
        views.add("broadcast")
    if "broadcast" in views or ("permuted" in views and "plain" in views):
        return "generic"  # operands of one layout (all permuted alike) keep the vector loads
    return "convert" if any(_widening(rows[i]) for i in k.members) else "stream"


def _input_view(rows, producers, role, members: set, i: int, p) -> str:
    """How member ``i`` reads operand producer ``p``: through a ``broadcast``, a ``permuted`` view, or
    ``plain`` (its storage as it is, or a value of the kernel itself: ``inside``)."""
    depth = 0
    if isinstance(p, int) and p in members:
        return "inside"
    while isinstance(p, int) and p not in members and role[p] in ("free", "dup") and depth < 16:
        if _strided_view(rows[p]):
            return "broadcast" if short_name(rows[p].op) != "transpose" else "permuted"
        srcs = [q for q in producers[p] if isinstance(q, int)]
        p, depth = (srcs[0] if len(srcs) == 1 else None), depth + 1
    return "plain"


@dataclass
class EagerFusion(Fusion):
    """The eager kernels; ``sdpa_note``: the attention calls per backend and the attentions written out
    (:func:`.sdpa.notes`; "" for a program without attention)."""

    sdpa_note: str = ""


def eager(analysis, hw: Hardware, times: list[OpTime] | None = None, producers: list | None = None,
          sdpa: str = "auto", written: str = "auto") -> EagerFusion:
    """The kernels of ``analysis`` run op by op (see the module docstring), timed on ``hw``. ``sdpa``
    (:data:`.sdpa.SDPA_BACKENDS`): the backend of the SDPA calls (``auto``: PyTorch's choice; a backend the
    call cannot run: :class:`.sdpa.BackendError`). ``written`` (:data:`.sdpa.WRITTEN_ATTENTION`): how an
    attention written out op by op runs: ``math`` (as written, as PyTorch eager runs such code; only an
    attention made by one framework call, :func:`.sdpa.is_sdpa_call`, is an SDPA call), ``sdpa`` (as an SDPA
    call), ``auto`` (:func:`.sdpa.written_default`: as written where the IR carries torch call stacks)."""
    rows = analysis.rows
    producers = data_flow(analysis, producers, "eager()")
    if sdpa not in SDPA_BACKENDS:
        raise ValueError(f"unknown attention backend {sdpa!r}: choose one of {', '.join(SDPA_BACKENDS)}")
    if written not in WRITTEN_ATTENTION:
        raise ValueError(f"unknown written attention {written!r}: choose one of {', '.join(WRITTEN_ATTENTION)}")
    if written == "auto":
        written = written_default(rows)
    if times is None:
        times = [op_time(r, hw) for r in rows]
    times = torch_times(rows, times, hw)
    n = len(rows)
    role = ["alone"] * n
    row_kernel: list[int | None] = [None] * n
    kernels, note, onchip = _attention_kernels(rows, producers, hw, sdpa, written, role, row_kernel)
    preset = {i for k in kernels for i in k.members}
    copies = _copies(analysis, producers, _groups(rows, times, preset),
                     {i for k in kernels if k.attention for i in k.members})
    calls = _call_kernels(rows, producers, times, preset, role, row_kernel, kernels, copies)
    io = KernelIO(rows, producers, times, role, onchip, masks=masks_of(analysis))
    for k in kernels:
        _measure(k, io, rows, producers, role, times, hw, copies)
    host_times(kernels, calls, rows, dispatch_overhead(hw))
    return EagerFusion(kernels, row_kernel, share_time(kernels, times, n), note)


def _attention_kernels(rows, producers, hw, sdpa: str, written: str, role: list, row_kernel: list) -> tuple:
    """The kernels of the SDPA calls (one per call; on the math backend the kernels PyTorch's math path runs,
    :func:`.sdpa.math_pieces`) and of their backward (:func:`sdpa_backward`), in program order of their first
    member; their rows' ``role`` and ``row_kernel`` set; the note (:func:`.sdpa.notes`) and the score shapes the
    library kernels keep on chip."""
    from .attention import find_attention

    found = find_attention(rows, producers)
    calls = found if written == "sdpa" else [att for att in found if is_sdpa_call(rows, att)]
    backends = [resolve(rows, att, sdpa, hw) for att in calls]
    calls, backward, onchip = sdpa_backward(rows, producers, found, calls, backends)
    pieces: list[tuple[list[int], str]] = [(sorted(att.members), b) for att, b in backward]
    for att, b in zip(calls, backends):
        if b == "math":
            pieces += [(p, b) for p in math_pieces(rows, att)]
        else:
            pieces.append((sorted(att.members), b))
    kernels: list[EagerKernel] = []
    for members, b in sorted(pieces, key=lambda pb: pb[0][0]):
        whole = b != "math"
        kernels.append(EagerKernel(members, rows[members[0]].multiplicity, attention=whole, backend=b,
                                   has_dot=any(rows[i].kind == "dot" for i in members),
                                   library=BACKEND_LIBRARY.get(b, "") if whole else ""))
        for i in members:
            row_kernel[i], role[i] = len(kernels) - 1, "kernel"
    return kernels, notes(backends, hw, written, sum(not is_sdpa_call(rows, att) for att in found)), onchip


def sdpa_backward(rows, producers, found: list, calls: list, backends: list[str]) -> tuple[list, list, set]:
    """The backward of the SDPA calls a library backend runs (a training program): PyTorch's SDPA autograd runs
    that backend's own backward kernel (flash: FlashAttention-2's, from Q, K, V, the output and the row
    statistics; it recomputes the probabilities), one kernel per call and never the scores through HBM
    (:func:`.attention_backward.find_attention_backward`, given every attention ``found`` so that none is taken for
    another's backward); an attention written out, or a call on the math backend, is differentiated op by op
    (its backward stays the kernels autograd runs). Returns the calls (with the rows that save their
    statistics), each library backward with its forward's backend, and the score shapes kept on chip."""
    from .attention_backward import find_attention_backward

    if all(b == "math" for b in backends):
        return calls, [], set()
    forward = list(found)
    backward, onchip = find_attention_backward(rows, producers, forward)  # (extends ``forward``'s members)
    index = {id(att): n for n, att in enumerate(found)}
    backend = {index[id(att)]: b for att, b in zip(calls, backends)}
    pairs = [(att, backend.get(backward_owner(rows, forward, att), "math")) for att in backward]
    return [forward[index[id(att)]] for att in calls], [(a, b) for a, b in pairs if b != "math"], onchip


def _copies(analysis, producers, calls: list, library: set) -> set | None:
    """The copies eager PyTorch makes (:func:`.strides.eager_copies`); None where the walk did not record the views'
    ``layouts``: then a reshape of a permuted view is a copy where it regroups dimensions."""
    facts = analysis.record("layouts")
    return None if facts is None else eager_copies(analysis.rows, producers, facts, calls, library)


def _is_copy(rows, producers, role, copies, grp: set, i: int, views_only: bool) -> bool:
    """Whether row ``i`` of a call (rows ``grp``) is a copy kernel: of a tensor the call reads, not of a value made
    inside it (a lowering's own reshapes)."""
    if copies is None:
        return views_only and _copying_reshape(rows, producers, role, i)
    return i in copies and (views_only or not any(isinstance(p, int) and p in grp for p in producers[i]))


def _call_kernels(rows, producers, times, preset: set, role: list, row_kernel: list, kernels: list,
                  copy_rows: set | None = None) -> list:
    """A kernel per framework call (appended to ``kernels``), views made only for the next call free, a copy of a
    non-contiguous tensor (``copy_rows``, :func:`_copies`) a kernel of its own before its call's; the calls in
    program order, as (kernel id, or -1 for a call that only makes views; executions)."""
    calls: list[tuple[int, int]] = []
    for i, r in enumerate(rows):
        if short_name(r.op) == "constant":
            role[i] = "free"
    consumers: list[list[int]] = [[] for _ in rows]
    for i, ps in enumerate(producers):
        for q in ps:
            if isinstance(q, int):
                consumers[q].append(i)
    for grp in _groups(rows, times, preset):
        handed = _handed_views(rows, times, grp, consumers) - (copy_rows or set())  # a copy is made by its call
        for i in handed:  # views another call reads (its broadcast operand, its mask): not made here
            role[i] = _view_role(rows[i])
        grp = [i for i in grp if i not in handed] or grp
        views = all(_is_view(rows[i], times[i]) for i in grp)
        if views:
            for i in grp:
                role[i] = _view_role(rows[i])
        inside = set(grp)
        copies = [i for i in grp if _is_copy(rows, producers, role, copy_rows, inside, i, views)]
        if copy_rows is None and copies:
            copies = [copies]  # torch copies a permuted tensor to reshape it: one copy kernel
        else:
            copies = [[i] for i in copies]  # one copy kernel each, a call of its own where the call only views
        for c in copies:
            _add_kernel(kernels, rows, c, role, row_kernel, calls if views else None)
        if views:
            if not copies:
                calls.append((-1, rows[grp[0]].multiplicity))
            continue
        rest = [i for i in grp if [i] not in copies]
        if rest:
            _add_kernel(kernels, rows, rest, role, row_kernel, calls)
    return calls


def _add_kernel(kernels, rows, grp: list, role, row_kernel, calls) -> None:
    """A kernel of ``grp`` appended; a call of its own in ``calls`` (None: a copy its call makes, no dispatch)."""
    k = len(kernels)
    kernels.append(EagerKernel(grp, rows[grp[0]].multiplicity,
                               has_dot=any(rows[i].kind in ("dot", "conv") for i in grp)))
    for i in grp:
        row_kernel[i], role[i] = k, "kernel"
    if calls is not None:
        calls.append((k, rows[grp[0]].multiplicity))


def _view_role(r) -> str:
    """A view's role: a broadcast is made where it is read (``dup``), any other view costs nothing (``free``)."""
    return "dup" if short_name(r.op) in ("broadcast_in_dim", "broadcast") else "free"


def _measure(k: EagerKernel, io, rows, producers, role, times, hw: Hardware, copies: set | None = None) -> None:
    """A kernel's bytes, its memory time on the path its elementwise work takes (a copy of a non-contiguous
    tensor: TensorIterator's generic path, reading through strides), and its matrix peak."""
    io.measure(k, hw)
    again = second_pass_bytes(rows, producers, role, k, hw)
    k.bytes_read += again
    copy = copies is not None and len(k.members) == 1 and k.members[0] in copies
    k.path = "generic" if copy else eager_path(rows, producers, role, k, copies is None)
    share = row_occupancy(rows, producers, role, k, hw)
    if k.path != "stream" or again or share < 1:
        k.memory_s = hw.memory_time(k.bytes_read + k.bytes_written, k.multiplicity, k.path)
    if share < 1:  # a grid of fewer row blocks than the chip holds: its stream at their share of the rate
        fixed = hw.memory_fixed(k.multiplicity)
        k.memory_s = fixed + (k.memory_s - fixed) / share
    k.memory_s += reduced_rows(rows, k) * (hw.memory.reduce_row_s if hw.memory is not None else 0.0)
    dots = [i for i in k.members if rows[i].kind in ("dot", "conv")]
    if dots:
        k.peak = times[dots[0]].peak
