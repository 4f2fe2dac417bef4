"""The unfused core attention as Megatron-LM runs it: its own softmax kernel and PyTorch's dropout, where the compiled
model fuses the lowered layer's mask, softmax and dropout (bytes: exact ints; seconds on the chip's memory model).

The lowered layer (:mod:`.layer`) computes the attention proper under the scope ``core``: the scores' product, the
causal mask, the softmax, the dropout of the probabilities (its random bits a kernel of their own), the product with
V, and their backward. The compiled fusion model (:mod:`mhlo_cost.roofline.fusion`) fuses the non-GEMM ops as XLA
would; what it charged for them is :func:`core_charge` (:attr:`~.costs.LayerCost.core_own_s`): a kernel fusing
the scope's non-GEMM rows into a product (the softmax's and dropout's backward into the probabilities' gradient)
its time less the product's own, priced alone as a plain GEMM, as Megatron runs it; in a kernel without one, the
rows' share of it.

What Megatron-LM runs instead (``attention_kernel="megatron"``; Megatron-LM de7dc40, Narayanan et al. 2021's sc21
scripts, ``megatron/model/transformer.py`` ``ParallelAttention.forward``; Korthikanti et al. 2022's ``CoreAttention``
is the same code). Per device and micro-batch, ``B = b x heads/t`` score matrices of ``s x s`` (``s`` the whole
sequence, cp 1), 2-byte elements (fp16 / bf16):

* the scores: ``torch.baddbmm`` into a preallocated buffer, ``beta=0.0`` (the buffer not read), ``alpha`` the
  1/norm factor; ``query_layer`` / ``key_layer`` are strided views of the QKV GEMM's output (``view`` and
  ``transpose`` only: no copy). A GEMM, as the lowered product (the compiled model's charge for it stays).
* ``FusedScaleMaskSoftmax`` (``megatron/model/fused_softmax.py``): with a causal mask, fp16/bf16 input,
  ``16 < s <= 2048``, ``s % 4 == 0`` and ``B % 4 == 0`` (``custom_kernel_constraint``) and ``--masked-softmax-fusion``
  (on by default: ``arguments.py`` has only ``--no-masked-softmax-fusion``), ``ScaledUpperTriangMaskedSoftmax``:
  ``megatron/fused_kernels/scaled_upper_triang_masked_softmax.h``'s warp forward reads row ``r`` (1-based) in
  vectors of 4 (``ELEMENTS_PER_LDG_STG``) up to ``local_seq = r`` (``4 ceil(r / 4)`` elements: ``s (s + 4) / 2`` a
  matrix for ``s % 4 == 0``) and writes all ``s x s`` (the masked part as zeros). Priced for ``s > 128`` only
  (:func:`.attention_check.refusal`): at ``s <= 128`` the launcher puts 8 matrices in a block
  (``batches_per_warp`` 2, ``.h`` lines 356-363 at de7dc40 and 28b6ffce) and asserts ``B % 8 == 0`` where the
  Python side checks 4 (28b6ffce's ``is_kernel_available``, ``fused_softmax.py`` 175-180, falls back to torch's
  softmax), and at 28b6ffce
  ``ELEMENTS_PER_LDG_STG = (WARP_ITERATIONS < 4) ? 1 : 4`` (``s <= 64`` read in scalars: ``s (s + 1) / 2``);
  above 128 both versions run 4 matrices a block and vectors of 4; its backward
  (``scaled_upper_triang_masked_softmax_backward``) reads the gradient and the saved softmax output over the same
  triangle and writes all ``s x s``. One kernel each way.
* ``torch.nn.Dropout`` on the probabilities (``attention_dropout``): PyTorch's fused dropout (``_fused_dropout`` /
  ``native_dropout``, ``aten/src/ATen/native/cuda/Dropout.cu``) reads 2, writes 2 and its 1-byte mask per element;
  its backward (``_masked_scale`` / ``native_dropout_backward``) reads the gradient (2) and the mask (1), writes 2.
  Its Philox numbers are drawn inside the kernel (no random-number kernel).
* the context: ``torch.bmm`` of the probabilities and V (a GEMM, as lowered); its backward the two bmm gradients,
  the scores' the two baddbmm gradients (GEMMs).

With ALiBi (``alibi``: BLOOM, bigscience-workshop/Megatron-DeepSpeed 8387ae17 ``megatron/model/transformer.py``
291 and 322-326; ``_build_alibi_tensor`` 592-619 makes the bias ``(b x heads/t, 1, s)`` in the 2-byte dtype) the
scores' buffer is a slice of the bias and ``baddbmm`` runs with ``beta != 0``: PyTorch's ``baddbmm`` expands its
input and copies it into the output (one kernel: ``B x s`` elements read, ``B x s x s`` written) and cuBLAS reads
that output as its C operand (``B x s x s`` more read by the GEMM, no kernel of its own), forward and again in a
recompute (the bias needs no gradient: nothing in the backward). ESTIMATE: the GEMM's extra read is priced as
memory time, right where the scores' GEMM is memory-bound (at head dim 128 it does ``2 s^2 x 128`` FLOPs for
``2 s^2`` bytes written, about 128 FLOP a byte, under the A100's and H100's ridge points).

These kernels replace the compiled model's charge for the scope's non-GEMM work; a recompute of the core (full, or
Megatron's selective: ``checkpoint`` of the core attention) runs the forward's again. Left out (outside the scope,
priced as lowered): the context's ``permute(2, 0, 1, 3).contiguous()`` copy before the output projection, the
backward's ``SplitBackward`` concatenation of dq, dk, dv, and the ``alpha`` multiplies of baddbmm's input gradients
(PyTorch's ``tools/autograd/derivatives.yaml``), which the lowered layer has as its own scale of q.
"""
from __future__ import annotations

from .scope_charge import scope_charge, without_compute

#: The scope of the lowered layer's attention proper (:mod:`.layer`)
SCOPE = "core"
#: Bytes of an element of the scores (fp16 / bf16)
ELEM = 2
#: Bytes of an element of PyTorch's dropout mask (uint8 / bool)
MASK = 1
#: The softmax kernel's vector width (scaled_upper_triang_masked_softmax.h's ELEMENTS_PER_LDG_STG)
VECTOR = 4
PHASES = ("forward", "backward")
#: Bytes read inside a kernel already priced (the scores' GEMM reading the ALiBi copy as C): no kernel of their own
IN_GEMM = ("baddbmm_beta_read",)


def core_charge(a, rf, phases: tuple) -> dict:
    """phase -> seconds the compiled model charged for the scope :data:`SCOPE`'s non-GEMM work (the compiled model
    only; eager and Inductor: the rows' own shares). Megatron's ``baddbmm`` / ``bmm`` are plain cuBLAS GEMMs (no
    epilogue): a fused kernel whose members besides its products are all of the scope (the dropout's and softmax's
    backward fused into the probabilities' gradient GEMM) is charged its time less its products' own (each priced
    alone, as the profile prices an unfused GEMM: its operands and output); one that also holds rows of other scopes
    its time less its time without the scope's non-GEMM compute, its bytes kept
    (:func:`.scope_charge.without_compute`, :func:`.mlp_activation.activation_charge`'s rule); a kernel without a
    product, the scope's rows' share of it (:func:`.scope_charge.scope_charge`)."""
    return scope_charge(a, rf, phases, SCOPE, _plain_gemm)


def _plain_gemm(k, mine, rows, times) -> float:
    """A GEMM kernel holding rows of the scope: its time less its products' own if all its other members are of the
    scope, else less its time without the scope's non-GEMM compute (:func:`core_charge`)."""
    if len(mine) < len(k.members):  # rows of other scopes in it: the scope's compute only
        return without_compute(k, mine, rows, times)
    dots = [i for i in k.members if rows[i].gemm_flops]
    return max(0.0, k.time_s - sum(max(times[i].compute_s, times[i].memory_s) + times[i].overhead_s for i in dots))


def triangle_elems(s: int) -> int:
    """Elements the causal softmax kernel reads of one s x s matrix: row r (1-based) in vectors of 4 up to r."""
    return sum(VECTOR * -(-r // VECTOR) for r in range(1, s + 1))


def attention_kernels(cfg) -> dict:
    """phase -> the kernels (name, bytes read, bytes written) of one layer's micro-batch on a device, and with ALiBi
    the GEMM's read of the bias copy (:data:`IN_GEMM`: bytes, no kernel); empty tuples under the compiled default."""
    if getattr(cfg, "attention_kernel", "compiled") != "megatron":
        return {ph: () for ph in PHASES}
    mats, s = cfg.micro_batch * (cfg.heads // cfg.t), cfg.local_seq
    full, tri = mats * s * s, mats * triangle_elems(s)
    fwd = [("scaled_upper_triang_masked_softmax", ELEM * tri, ELEM * full)]
    bwd = [("scaled_upper_triang_masked_softmax_backward", 2 * ELEM * tri, ELEM * full)]
    if getattr(cfg, "alibi", False):  # the bias expanded and copied into the scores, then read as the GEMM's C
        fwd[:0] = [("baddbmm_alibi_copy", ELEM * mats * s, ELEM * full), ("baddbmm_beta_read", ELEM * full, 0)]
    if cfg.dropout:
        fwd.append(("fused_dropout", ELEM * full, (ELEM + MASK) * full))
        bwd.insert(0, ("masked_scale", (ELEM + MASK) * full, ELEM * full))
    return {"forward": tuple(fwd), "backward": tuple(bwd)}


def attention_bytes_kernels(cfg) -> dict:
    """phase -> (bytes, kernels) of :func:`attention_kernels`."""
    return {ph: (sum(r + w for _, r, w in ks), sum(n not in IN_GEMM for n, _, _ in ks))
            for ph, ks in attention_kernels(cfg).items()}


def attention_pass_seconds(cfg, hw, charged: dict | None) -> tuple[float, float]:
    """(forward, backward) seconds Megatron's kernels add to one layer's micro-batch beyond what the compiled model
    ``charged`` for the core's non-GEMM work (phase -> seconds: :attr:`~.costs.LayerCost.core_own_s`); 0, 0 under
    the compiled default or without a profile."""
    if getattr(cfg, "attention_kernel", "compiled") != "megatron" or hw is None:
        return 0.0, 0.0
    charged = charged or {}
    own = attention_bytes_kernels(cfg)
    return tuple(hw.memory_time(n, kernels=k) - charged.get(ph, 0.0) for ph, (n, k) in
                 ((ph, own[ph]) for ph in PHASES))
