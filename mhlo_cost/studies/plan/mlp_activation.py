"""The MLP's activation as Megatron's stacks run it: kernels of their own, where the compiled model fuses it into the
fc1 GEMM's epilogue (bytes: exact ints; seconds on the chip's memory model).

The lowered layer (:mod:`.layer`, :mod:`.llama_layer`) computes the activation (GELU; SwiGLU's SiLU(gate) x up) under
the scope ``act``; the compiled fusion model (:mod:`mhlo_cost.roofline.fusion`) puts those elementwise ops, with fc1's
bias and, under fp8, the quantisation of fc2's input, into the epilogue of the GEMM that makes their operand, and
their backward into the epilogue of fc2's dgrad GEMM. What that charged is :func:`activation_charge`: per kernel
holding rows of the scope, its time less the time it would take without its elementwise members (their compute
taken out, its bytes kept: where a GEMM is compute-bound, as at full size, this is exactly their compute; where it
is memory-bound, a lower bound), or, in a kernel without a GEMM, those rows' share of it.

What the stacks run instead (``activation_kernel="megatron"``; per fc2-input element ``n = b x s/cp x ffn/t``, bf16):

* **Megatron-LM's bias_gelu** (``--bias-gelu-fusion``, on by default: ``megatron/arguments.py`` has only
  ``--no-bias-gelu-fusion``; Narayanan et al. 2021's sc21 scripts at de7dc40 and Korthikanti et al. 2022's code do
  not pass it): ``megatron/model/fused_bias_gelu.py``'s ``GeLUFunction`` calls the TorchScript ``bias_gelu`` (fc1 run
  with ``skip_bias_add``): the GEMM's output read and the activation written (2 + 2 bytes), one kernel; the backward's
  ``bias_gelu_back`` reads the gradient and the saved input and writes one (2 + 2 + 2). Megatron-Core's
  ``bias_gelu_impl`` (``megatron/core/fusions/fused_bias_gelu.py``; ``MLP.forward`` with ``bias_activation_fusion``,
  ``megatron/core/transformer/mlp.py``) is the same function, ``jit_fuser``-compiled.
* **Megatron-Core's bias_swiglu** (``bias_swiglu_impl``, ``megatron/core/fusions/fused_bias_swiglu.py``; no bias:
  ``SwiGLUFunction``): ``swiglu(y)`` chunks fc1's ``2n`` output into gate and up and writes ``silu(gate) * up``
  (4 + 2 bytes per ``n``), one kernel; ``swiglu_back(g, y)`` reads the gradient and both halves and writes the
  concatenated two-half gradient (2 + 4 + 4), one kernel. ``jit_fuser`` is ``torch.compile`` from torch 2.2
  (``megatron/core/jit.py``): each function taken as one kernel that reads and writes each tensor once.
* **NeMo's squared-ReLU** (``activation="squared-relu"``, ``bias_activation_fusion: false``): PyTorch's eager kernels,
  :data:`~.megatron_passes.SQUARED_RELU` (its text in :mod:`.megatron_passes`); whatever ``activation_kernel`` says.
* **fp8 (Transformer Engine's linears under Megatron-Core)**: the activation above writes bf16 and fc2
  (``TERowParallelLinear``) casts its input itself, in Transformer Engine's ``Linear`` forward (``module/linear.py``,
  TE 1.x): without sequence parallelism ``fp8_cast_transpose_fused`` (read 2, write the fp8 copy and its transpose
  for the wgrad GEMM, 1 + 1), with it ``cast_to_fp8`` (2 + 1) and the backward's ``fp8_transpose`` for the wgrad
  (1 + 1). The compiled model's quantisation of that input, in the activation's kernel, is part of what is replaced
  (its amax and cast, a kernel of their own after the epilogue, are :mod:`.te_amax`'s: taken out, with nothing in
  their place, under TE's delayed scaling, which records the amax in this cast kernel). Priced only there
  (:func:`.fp8_weights.delayed`: TE's stack, per-tensor, amax history > 1), so that each cast is priced once: under
  torchao's recipes and the row-wise one (not TE's stack) the program's own amax-and-cast kernel stands for it and
  nothing is added here. Under TE 2.x's current scaling (:func:`.fp8_weights.current`: history 1, Megatron-Bridge's
  FP8-CS; TE 2.9 ``Float8CurrentScalingQuantizer::quantize_impl``) the cast is priced here too, as TE 2.9 runs it:
  ``nvte_compute_amax`` (read 2), ``nvte_compute_scale_from_amax`` (a kernel, no tensor bytes), and the cast with its
  transpose in the forward (2 + 2) with or without sequence parallelism (fc2 is row-parallel and gathers no input:
  module/linear.py's "Do not all-gather input tensor" branch sets ``columnwise=backward_needs_input``), nothing in
  the backward.

These rows replace :func:`activation_charge`; a full recompute runs the forward's kernels again.
torchtitan and llm-foundry (torch.compile, PyTorch eager) keep their own execution model's activation: the default
``activation_kernel="compiled"``. Left out: the gradient's fp8 cast for fc1's backward (Transformer Engine's
``fp8_cast_transpose_fused`` of ``dgate, dup``), the bias gradients' reductions (the lowered layer has its own).
"""
from __future__ import annotations

from .fp8_weights import current, delayed
from .megatron_passes import SQUARED_RELU
from .scope_charge import scope_charge, without_compute

#: ``ScaleConfig.activation_kernel``: compiled (fused into the fc1 GEMM's epilogue, as lowered) | megatron (its own
#: jitted kernel: Megatron-LM's bias_gelu, Megatron-Core's bias_gelu_impl / bias_swiglu_impl)
ACTIVATION_KERNEL = ("compiled", "megatron")
#: The scope of the lowered layer's activation (:mod:`.layer`, :mod:`.llama_layer`)
SCOPE = "act"
#: Megatron's jitted activation by MLP kind: (name, bytes read, bytes written) per fc2-input element, bf16
MEGATRON = {
    "gelu": {"forward": (("bias_gelu", 2, 2),), "backward": (("bias_gelu_back", 4, 2),)},
    "swiglu": {"forward": (("swiglu", 4, 2),), "backward": (("swiglu_back", 6, 4),)},
}
#: Transformer Engine's cast of fc2's input to fp8 (per element: read bf16, write fp8), by sequence parallelism
TE_FP8_CAST = {
    False: {"forward": (("fp8_cast_transpose_fused", 2, 2),), "backward": ()},
    True: {"forward": (("cast_to_fp8", 2, 1),), "backward": (("fp8_transpose", 1, 1),)},
}
#: TE 2.9's current-scaling quantize of fc2's input (:func:`.fp8_weights.current`): amax, scale, cast with transpose
TE_CS_CAST = {"forward": (("nvte_compute_amax", 2, 0), ("nvte_compute_scale_from_amax", 0, 0),
                          ("cast_transpose", 2, 2)), "backward": ()}
PHASES = ("forward", "backward")


def runs_own(cfg) -> bool:
    """Whether the activation runs as a framework's own kernels (NeMo's eager squared-ReLU, Megatron's jitted)."""
    return cfg.activation == "squared-relu" or getattr(cfg, "activation_kernel", "compiled") == "megatron"


def activation_kernels(cfg) -> dict:
    """phase -> the kernels (name, read, written per fc2-input element) the stack runs for the activation, TE's cast
    of fc2's fp8 input among them under its delayed scaling (empty tuples where the compiled epilogue stands)."""
    if not runs_own(cfg):
        return {ph: () for ph in PHASES}
    own = SQUARED_RELU if cfg.activation == "squared-relu" else MEGATRON[cfg.mlp_kind]
    if not (delayed(cfg) or current(cfg)):  # TE's cast only where .te_amax takes out the program's
        return {ph: tuple(own[ph]) for ph in PHASES}
    cast = TE_CS_CAST if current(cfg) else TE_FP8_CAST[bool(cfg.sp and cfg.t > 1)]
    return {ph: tuple(own[ph]) + cast[ph] for ph in PHASES}


def fc2_input_elems(cfg) -> int:
    """Elements of fc2's input on one device for one micro-batch: ``b x s/cp x ffn/t`` (the whole local sequence:
    under sequence parallelism fc1 runs on the all-gathered one)."""
    return cfg.micro_batch * cfg.local_seq * (cfg.mlp // cfg.t)


def activation_bytes_kernels(cfg) -> dict:
    """phase -> (bytes, kernels) of the stack's activation for one layer and micro-batch (:func:`activation_kernels`;
    0, 0 where the compiled epilogue stands)."""
    n = fc2_input_elems(cfg)
    return {ph: (n * sum(r + w for _, r, w in ks), len(ks)) for ph, ks in activation_kernels(cfg).items()}


def activation_pass_seconds(cfg, hw, charged: dict | None) -> tuple[float, float]:
    """(forward, backward) seconds the stack's activation kernels add to one layer's micro-batch beyond what the
    compiled model ``charged`` for the fused activation (phase -> seconds: :attr:`~.costs.LayerCost.act_s`); 0, 0
    where the compiled epilogue stands or without a profile."""
    if not runs_own(cfg) or hw is None:
        return 0.0, 0.0
    charged = charged or {}
    own = activation_bytes_kernels(cfg)
    return tuple(hw.memory_time(n, kernels=k) - charged.get(ph, 0.0) for ph, (n, k) in
                 ((ph, own[ph]) for ph in PHASES))


def activation_charge(a, rf, phases: tuple, scope: str = SCOPE) -> dict:
    """phase -> seconds the compiled model charged for the rows of ``scope`` (:data:`SCOPE`; the module's text):
    per fused kernel holding one, its time less its time without its non-GEMM members' compute, or in a kernel
    without a GEMM those rows' share of its time (under another execution model, eager or Inductor, the rows'
    seconds as that model shares them): :func:`.scope_charge.scope_charge` with every member's compute taken out."""
    return scope_charge(a, rf, phases, scope, _epilogue)


def _epilogue(k, mine, rows, times) -> float:
    """A GEMM kernel with the scope's rows in its epilogue: its time less its time without its non-GEMM members'
    compute (:func:`.scope_charge.without_compute` over all its members)."""
    return without_compute(k, k.members, rows, times)
