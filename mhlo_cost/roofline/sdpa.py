"""Attention in PyTorch eager as the program calls it: which attentions are one ``scaled_dot_product_attention``
call, the SDPA backend each call runs on, and the kernels of PyTorch's math backend.

* **An SDPA call** (:func:`is_sdpa_call`): a library attention (``F.scaled_dot_product_attention``, which
  transformers' ``attn_implementation="sdpa"`` and diffusers' processors call) is one framework call: torchax
  and torch-xla lower it with the call site of that one statement on every op, so its score product and its
  output product share a source position. An attention written out (``q @ k.transpose(-2, -1)``, softmax,
  ``@ v``: transformers' ``"eager"``, the bundled STDiT3 torch module) has one position per product: eager
  PyTorch runs it as the kernels it was written as and keeps their results (the B x H x Sq x Sk scores, the
  softmax's probabilities) in memory as long as the program references them. :func:`written_default` takes
  attention as written in a torch program (its call stacks run modules' ``forward``); a program lowered
  from JAX makes no torch call, and each attention found there is taken as an SDPA call, as before (the
  bundled JAX STDiT3 stands for the deployed module, whose attention calls a library kernel).
* **The backend** (:func:`resolve`): ``auto`` (no ``--sdpa``) is PyTorch's own order, the first of
  :data:`AUTO_ORDER` whose constraints the call meets (flash: f16/bf16 and a head dim up to
  :data:`FLASH_MAX_HEAD_DIM`; else mem_efficient). A backend asked for by name that the shapes or the chip
  profile cannot run is refused (:class:`BackendError`, as PyTorch refuses a forced backend: "No available
  kernel"), never replaced by another; a backend the profile has no rate of its own for (mem_efficient) is
  priced at the profile's attention library and :func:`notes` says so.
* **math** (:func:`math_pieces`): PyTorch's ``_scaled_dot_product_attention_math`` runs the call as kernels:
  the scaling of q and k, ``matmul`` (the scores), the mask and softmax, ``matmul``; the scores and the
  probabilities are written to memory.
"""
from __future__ import annotations

from ..walk.row import short_name
from .attention_backward import trails
from .attention_compute import score_head_dim

#: ``--sdpa``: ``auto`` (PyTorch's choice) or one backend by name (PyTorch's SDPA backends).
SDPA_BACKENDS = ("auto", "flash", "cudnn", "mem_efficient", "math")
#: The order in which PyTorch's dispatcher tries the backends (``sdp_utils.cpp``: flash, then memory-efficient,
#: then math; cuDNN only where asked).
AUTO_ORDER = ("flash", "mem_efficient", "math")
#: The attention library (:data:`mhlo_cost.machines.kernels.LIBRARIES`) a backend's kernel is: PyTorch's flash
#: backend is FlashAttention-2; mem_efficient has no model of its own (the profile's default library prices it).
BACKEND_LIBRARY = {"flash": "fa2", "cudnn": "cudnn"}
#: How an attention written out op by op runs: ``math`` (as written), ``sdpa`` (taken as an SDPA call),
#: ``auto`` (:func:`written_default`).
WRITTEN_ATTENTION = ("auto", "sdpa", "math")
#: FlashAttention-2 (PyTorch's flash backend) takes f16/bf16 and head dims up to 256.
FLASH_MAX_HEAD_DIM = 256
FLASH_DTYPES = ("bf16", "f16")
#: cuDNN's SDPA kernels take f16/bf16; the head dims it has kernels for here reach 128
#: (:data:`.attention_compute.PADDED_HEAD_DIMS`).
CUDNN_MAX_HEAD_DIM = 128


class BackendError(ValueError):
    """An SDPA backend asked for by name that a call's shapes or the chip profile cannot run (one line)."""


def _key(r):
    """The call an op belongs to: its scope and source position (``site``); where the location names no call-site
    chain (a module's ``forward`` called from the top level: ``"N.forward"("m.py":16:15)``, one frame, no site),
    its call stack's frames (file, line and column of the call); None where it has neither."""
    site = getattr(r.loc, "site", 0)
    if site:
        return (r.scope, site)
    stack = tuple(getattr(r.loc, "stack", ()) or ())
    return (r.scope, stack) if stack else None


def is_sdpa_call(rows, att) -> bool:
    """Whether an attention is one framework call (``scaled_dot_product_attention``, a library kernel): its score
    and output products share a source position; an attention written out op by op has one per product."""
    key = _key(rows[att.qk])
    return key is not None and key == _key(rows[att.pv])


def written_default(rows) -> str:
    """``math`` (attention as written) for a torch program (its call stacks run a module's ``forward``, as
    torchax and torch-xla record them), ``sdpa`` for any other (a JAX program: no torch call to read)."""
    return "math" if any(f[0].endswith(".forward") for r in rows for f in getattr(r.loc, "stack", ())) else "sdpa"


def _dtype(rows, att) -> str:
    r = rows[att.qk]
    return r.operands[0].dtype if r.operands else ""


def _half(dt: str) -> bool:
    return any(dt == d or dt.startswith(d) for d in FLASH_DTYPES)


def refusal(rows, att, backend: str, hw) -> str:
    """Why ``backend`` cannot run the attention ``att`` on ``hw`` ("" where it can)."""
    d, dt = score_head_dim(rows[att.qk]), _dtype(rows, att)
    if backend == "flash":
        if not _half(dt):
            return f"flash takes f16 or bf16, not {dt or 'this dtype'}"
        if not 0 < d <= FLASH_MAX_HEAD_DIM:
            return f"flash takes head dims up to {FLASH_MAX_HEAD_DIM}, not {d}"
    if backend == "cudnn":
        if not _half(dt):
            return f"cudnn takes f16 or bf16, not {dt or 'this dtype'}"
        if not 0 < d <= CUDNN_MAX_HEAD_DIM:
            return f"cudnn has no kernel modelled for head dim {d} (up to {CUDNN_MAX_HEAD_DIM})"
        model = getattr(hw, "attention", None)
        if model is None or model.get("cudnn") is None:
            have = f" (it has {', '.join(n for n, _ in model.libraries)})" if model is not None else ""
            return f"{hw.name} has no cuDNN attention model{have}"
    return ""


def resolve(rows, att, asked: str, hw) -> str:
    """The backend the attention ``att`` runs on: with ``auto`` the first of :data:`AUTO_ORDER` it can run; a
    backend asked for by name, or :class:`BackendError` where it cannot run."""
    if asked == "auto":
        return next(b for b in AUTO_ORDER if b == "math" or not refusal(rows, att, b, hw))
    why = refusal(rows, att, asked, hw)
    if why:
        r = rows[att.qk]
        raise BackendError(f"--sdpa {asked}: {why} (the attention at row {r.index}, {r.scope or 'top'}); "
                           f"choose another backend, or leave --sdpa out for PyTorch's own choice")
    return asked


def backward_owner(rows, forward, att) -> int | None:
    """The index in ``forward`` of the attention whose backward ``att`` is: the first whose score shape one of
    its tensors ends in (None: none)."""
    for n, fwd in enumerate(forward):
        score = tuple(rows[fwd.qk].result.shape) if hasattr(rows[fwd.qk].result, "shape") else ()
        if score and any(trails(t, {score}) for i in att.members
                         for t in (*rows[i].operands, rows[i].result) if hasattr(t, "shape")):
            return n
    return None


def backward_backend(rows, forward, backends, att) -> str:
    """The SDPA backend of a backward kernel ``att``: its forward's (PyTorch runs an SDPA call's backward with the
    backend of its forward: flash's backward is FlashAttention-2's), the forward found by
    :func:`backward_owner` ("": none found)."""
    n = backward_owner(rows, forward, att)
    return backends[n] if n is not None else ""


def math_pieces(rows, att) -> list[list[int]]:
    """The kernels PyTorch's math backend runs an SDPA call as (members in program order): what comes before the
    score product (the scaling of q and k), the score product, what lies between the products (mask, softmax,
    casts), the output product, and what follows; empty pieces left out."""
    members = sorted(att.members)
    cut = [[], [], [], [], []]
    for i in members:
        part = 0 if i < att.qk else 1 if i == att.qk else 2 if i < att.pv else 3 if i == att.pv else 4
        cut[part].append(i)
    return [p for p in cut if p]


def notes(backends: list[str], hw, written: str, written_out: int) -> str:
    """One line: the SDPA calls per backend (``backends``, one per call; and the library that prices a fused
    one, where it is not its own), and the ``written_out`` attentions and how they run (``written``)."""
    model = getattr(hw, "attention", None)
    parts = []
    for b in sorted(set(backends)):
        text = f"{backends.count(b)} {b}"
        lib = BACKEND_LIBRARY.get(b, "")
        if b != "math" and model is None:
            text += " (no attention model: priced by the GEMM model)"
        elif b != "math" and (not lib or model.get(lib) is None):
            text += f" (no {b} model: priced as {model.library})"
        parts.append(text)
    if written_out:
        parts.append(f"{written_out} written out, run as written" if written == "math" else
                     f"of which {written_out} written out, taken as SDPA calls")
    return "; ".join(parts)
