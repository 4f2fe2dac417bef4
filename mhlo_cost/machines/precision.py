"""Precision recipes: how a model's weights, activations, KV cache and accumulators are stored and scaled.

One vocabulary for ``lower``, ``serve``, ``train-plan``, ``sweep`` and the API (``--precision NAME[,NAME]``).
A :class:`Recipe` names the element types (numpy / ``ml_dtypes`` names, as JAX spells them) of

- the **weights** of the transformer's linear layers (the embeddings, norms and the LM head stay in the model's
  dtype, as vLLM, TensorRT-LLM and torchao leave them by default),
- the **activations** entering those linears (the dtype the matmul runs in),
- the **KV cache**, and the matmul's **accumulator**,

with the **scaling** of each quantised operand (:class:`Scaling`): per tensor, per row (per output channel of
a weight, per token of an activation), per block of N along the contraction, MX microscaling (block 32,
power-of-two ``e8m0`` scales) or NVFP4 (block 16, ``e4m3`` scales and one float32 scale per tensor).

Named recipes (:data:`RECIPES`), each with the paper or library that defines it:

``bf16``
    Today's default: everything in bfloat16, float32 accumulation.
``fp8-tensorwise``
    e4m3 weights and activations, one float32 scale per tensor (the weight's static, the activation's from
    its amax at run time). Micikevicius et al., "FP8 Formats for Deep Learning" (arXiv 2209.05433);
    torchao ``Float8LinearConfig`` tensorwise; Transformer Engine current scaling.
``fp8-rowwise``
    e4m3, a float32 scale per output channel of the weight and per token (row) of the activation, dynamic.
    torchao float8 ``rowwise``; vLLM ``fp8`` dynamic per-token (FBGEMM's ``f8f8bf16_rowwise``).
``fp8-blockwise-128``
    e4m3, weights scaled per 128x128 block, activations per 1x128 group along the contraction, float32
    scales; partial products rescaled per block of K. DeepSeek-V3 Technical Report (arXiv 2412.19437) sec. 3.3.
``mxfp8``
    e4m3 elements, one ``e8m0`` (power of two) scale per 32 elements along the contraction, both operands.
    OCP Microscaling Formats (MX) Specification v1.0 (2023); Rouhani et al., arXiv 2310.10537.
``nvfp4``
    e2m1 (fp4) elements, one e4m3 scale per 16 elements along the contraction and one float32 scale per
    tensor, both operands. NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference"
    (2025); TensorRT Model Optimizer ``NVFP4_DEFAULT_CFG``.
``w4a16-awq``
    int4 weights packed two per byte, groups of 128 along the input dimension, each group with a float16
    scale and an int4 zero point (packed two per byte); activations in the model's dtype, the weight
    dequantised before the matmul. Lin et al., "AWQ" (MLSys 2024, arXiv 2306.00978); AutoAWQ ``GEMM``.
``w8a8-int8``
    int8 weights with a float32 scale per output channel, int8 activations with a dynamic float32 scale per
    token, int32 accumulation. Xiao et al., "SmoothQuant" (arXiv 2211.10438); vLLM's W8A8 int8 kernels.
``w8a16``
    int8 weights with a scale per output channel in the model's dtype, dequantised before the matmul;
    activations in the model's dtype. TensorRT-LLM weight-only int8 (``--weight_only_precision int8``).
``kv-fp8``
    The KV cache in e4m3 with one float32 scale per layer for the keys and one for the values (static).
    vLLM ``--kv-cache-dtype fp8`` (``k_scale`` / ``v_scale`` per attention layer). Combinable:
    ``--precision fp8-rowwise,kv-fp8``.

Everything here is data: the lowering (:mod:`mhlo_cost.lower.models.quant`) reads it, and so do the studies.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

#: Scaling schemes.
SCHEMES = ("none", "tensor", "row", "block", "group", "mx", "nvfp4")


class PrecisionError(ValueError):
    """An unknown recipe, or recipes that do not combine."""


@dataclass(frozen=True)
class Scaling:
    """How one quantised operand is scaled: ``scheme`` (:data:`SCHEMES`), ``block`` elements along the
    contraction (block, group, mx, nvfp4; ``block2``: the second dimension of a 2-D weight block), the scales'
    element type, whether a zero point goes with each scale (asymmetric), and whether a float32 per-tensor scale
    sits above the block scales (NVFP4)."""

    scheme: str = "none"
    block: int | None = None
    scale_dtype: str | None = None
    zero: bool = False
    block2: int | None = None
    tensor_scale: bool = False


NONE = Scaling()


@dataclass(frozen=True)
class Recipe:
    """A precision recipe. ``weight`` / ``activation`` None: the model's dtype (bf16 by default); ``kv`` None:
    the model's dtype. ``weight_scaling`` / ``activation_scaling`` say how each is scaled; ``weight_only``: the
    weight is dequantised to the activation dtype before the matmul (no low-precision matmul)."""

    name: str
    weight: str | None = None
    activation: str | None = None
    kv: str | None = None
    accumulation: str = "float32"
    weight_scaling: Scaling = NONE
    activation_scaling: Scaling = NONE
    kv_scaling: Scaling = NONE
    weight_only: bool = False
    source: str = ""

    @property
    def quantised(self) -> bool:
        """Whether the linears' weights are stored in another dtype than the model's."""
        return self.weight is not None


_F8 = "float8_e4m3fn"
_ROW = Scaling("row", scale_dtype="float32")
_TENSOR = Scaling("tensor", scale_dtype="float32")

#: The named recipes (see the module docstring for their sources).
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("bf16", source="the default: bfloat16 weights, activations and cache, float32 accumulation"),
    Recipe("fp8-tensorwise", _F8, _F8, weight_scaling=_TENSOR, activation_scaling=_TENSOR,
           source="Micikevicius et al. 2022 (arXiv 2209.05433); torchao Float8 tensorwise"),
    Recipe("fp8-rowwise", _F8, _F8, weight_scaling=_ROW, activation_scaling=_ROW,
           source="torchao float8 rowwise; vLLM fp8 dynamic per-token (FBGEMM f8f8bf16_rowwise)"),
    Recipe("fp8-blockwise-128", _F8, _F8, weight_scaling=Scaling("block", 128, "float32", block2=128),
           activation_scaling=Scaling("block", 128, "float32"),
           source="DeepSeek-V3 Technical Report (arXiv 2412.19437) sec. 3.3"),
    Recipe("mxfp8", _F8, _F8, weight_scaling=Scaling("mx", 32, "float8_e8m0fnu"),
           activation_scaling=Scaling("mx", 32, "float8_e8m0fnu"),
           source="OCP Microscaling Formats (MX) v1.0; Rouhani et al. 2023 (arXiv 2310.10537)"),
    Recipe("nvfp4", "float4_e2m1fn", "float4_e2m1fn",
           weight_scaling=Scaling("nvfp4", 16, _F8, tensor_scale=True),
           activation_scaling=Scaling("nvfp4", 16, _F8, tensor_scale=True),
           source="NVIDIA NVFP4 (2025); TensorRT Model Optimizer NVFP4_DEFAULT_CFG"),
    Recipe("w4a16-awq", "int4", weight_scaling=Scaling("group", 128, "float16", zero=True), weight_only=True,
           source="Lin et al., AWQ (MLSys 2024, arXiv 2306.00978); AutoAWQ GEMM"),
    Recipe("w8a8-int8", "int8", "int8", accumulation="int32", weight_scaling=_ROW, activation_scaling=_ROW,
           source="Xiao et al., SmoothQuant (arXiv 2211.10438); vLLM W8A8 int8"),
    Recipe("w8a16", "int8", weight_scaling=Scaling("row", scale_dtype=None), weight_only=True,
           source="TensorRT-LLM weight-only int8"),
    Recipe("kv-fp8", kv=_F8, kv_scaling=_TENSOR,
           source="vLLM --kv-cache-dtype fp8 (k_scale / v_scale per attention layer)"),
)}

#: Recipes a training step runs (``train-plan --precision``): the float8 training of torchao (``Float8Linear``,
#: tensorwise or rowwise) and Transformer Engine: the linears' three GEMMs (forward, dgrad, wgrad) in fp8; the
#: weights kept in bf16, the master weights and AdamW's moments in float32, as bf16 mixed-precision training
#: keeps them (the fp8 casts are made at each use and never stored).
TRAINING = ("bf16", "fp8-tensorwise", "fp8-rowwise")

#: Recipes that set only the KV cache (they combine with one that sets the linears).
KV_ONLY = ("kv-fp8",)


def names() -> str:
    return ", ".join(RECIPES)


def parse(text: str | None, what: str = "--precision") -> Recipe:
    """``fp8-rowwise`` or ``fp8-rowwise,kv-fp8`` -> one :class:`Recipe` (None or "": ``bf16``). PrecisionError
    names the accepted recipes in one line."""
    if text is None:
        return RECIPES["bf16"]
    parts = [p.strip().lower() for p in str(text).split(",")]
    if not text.strip() or any(not p for p in parts):
        raise PrecisionError(f"{what} {text!r}: name a recipe ({names()}), or two joined by a comma")
    for p in parts:
        if p not in RECIPES:
            raise PrecisionError(f"{what} {p}: unknown recipe (known: {names()})")
    linears = [p for p in parts if p not in KV_ONLY]
    kvs = [p for p in parts if p in KV_ONLY]
    if len(linears) > 1 or len(kvs) > 1:
        raise PrecisionError(f"{what} {text}: at most one recipe for the linears and one for the KV cache "
                             f"({', '.join(KV_ONLY)})")
    base = RECIPES[linears[0]] if linears else RECIPES["bf16"]
    if not kvs:
        return base
    kv = RECIPES[kvs[0]]
    name = kv.name if base.name == "bf16" and not linears else f"{base.name},{kv.name}"
    return replace(base, name=name, kv=kv.kv, kv_scaling=kv.kv_scaling, source=f"{base.source}; {kv.source}")


#: ``--dtype`` spellings of a quantised precision: refused with a pointer to the recipes.
QUANTISED_SPELLINGS = ("fp8", "f8", "float8", "float8_e4m3fn", "float8_e5m2", "e4m3", "e5m2", "f8e4m3fn",
                       "f8e5m2", "fp4", "f4", "float4", "float4_e2m1fn", "nvfp4", "mxfp8", "mxfp4", "int8", "i8",
                       "uint8", "u8", "int4", "i4", "uint4", "u4", "fp6", "w8a8", "w4a16")


def dtype_hint(text: str) -> str | None:
    """The one line that says a ``--dtype`` spelling is a quantised precision, naming the recipes; None for any
    other spelling."""
    key = text.strip().lower().removeprefix("torch.").removeprefix("jnp.")
    if key in QUANTISED_SPELLINGS or key.startswith(("float8", "float4", "f8e", "f4e")):
        return (f"--dtype {text}: a model's weights and activations take one floating dtype (bf16, f16, f32); "
                f"{key} runs through a precision recipe: serve, sweep, train-plan, lower --decode / --prefill --precision NAME "
                f"({names()})")
    return None


def training_recipe(text: str | None) -> Recipe:
    """A recipe a training step runs (:data:`TRAINING`); PrecisionError says which do."""
    recipe = parse(text)
    if recipe.name not in TRAINING:
        raise PrecisionError(f"--precision {recipe.name}: a training step runs {', '.join(TRAINING)} (the float8 "
                             "training of torchao and Transformer Engine); the others are inference recipes (serve)")
    return recipe


def upcast_note(hw, precision: str) -> str | None:
    """What ``hw`` does with a dot in ``precision`` (a key: fp8, fp4, int8, ...) when its matrix unit has no rate
    for it: the rate it is priced at instead (the format upcast, as XLA and the libraries run fp8 on Ampere),
    said in one line; None where the chip has the precision."""
    from .profile import FALLBACK_CHAINS

    if precision in hw.matrix_flops:
        return None
    for k in FALLBACK_CHAINS[precision][1:]:
        if k == "f32" and hw.f32_matmul == "tf32" and "tf32" in hw.matrix_flops:
            k = "tf32"  # (an upcast to f32 runs as f32 dots do: Hardware.matrix_peak)
        if k in hw.matrix_flops:
            return (f"{hw.name} has no {precision} matrix rate: {precision} dots are priced at its {k} rate "
                    f"(upcast to {k}, as the libraries run them there)")
    return f"{hw.name} has no {precision} matrix rate: {precision} dots are priced on its vector unit"


def dtype_bits(name: str) -> int:
    """Bits of one stored element of a numpy / ``ml_dtypes`` dtype name (``int4`` 4, ``float4_e2m1fn`` 4,
    ``bfloat16`` 16); ValueError for an unknown name."""
    import ml_dtypes
    import numpy as np

    short = {"bf16": "bfloat16", "f16": "float16", "fp16": "float16", "f32": "float32", "fp32": "float32",
             "i8": "int8", "i4": "int4", "u8": "uint8", "u4": "uint4"}  # the spellings the profiles use
    name = short.get(name, name)
    try:
        dt = np.dtype(getattr(ml_dtypes, name, name))
    except TypeError:
        raise ValueError(f"unknown dtype {name!r}") from None
    try:
        return ml_dtypes.iinfo(dt).bits
    except ValueError:
        return ml_dtypes.finfo(dt).bits


@dataclass(frozen=True)
class WeightOnlyTime:
    """The time of one weight-only GEMM (:func:`weight_only_time`): its parts and the bytes it moves."""

    compute_s: float
    memory_s: float
    overhead_s: float
    bytes: int
    flops: int
    note: str

    @property
    def time_s(self) -> float:
        """max(compute, memory) + the launch overhead: one kernel, as the roofline prices a dot."""
        return max(self.compute_s, self.memory_s) + self.overhead_s


def weight_only_time(hw, batch: int, m: int, n: int, k: int, weight: str, act: str = "float16", group: int = 0,
                     scale: str = "float16", zero: bool = False, out: str | None = None) -> WeightOnlyTime:
    """One weight-only GEMM (w4a16 / w8a16) as Marlin, Machete and AWQ's kernels run it: activations [batch*m, k]
    in ``act`` times a [k, n] weight stored in ``weight`` (int4 packed two a byte, int8), its scales in ``scale``
    per ``group`` elements along K (0: one per output channel) with a zero point of the weight's width where
    ``zero``; the weight dequantised in registers inside the one kernel and multiplied on ``hw``'s ``act`` matrix
    unit (no low-precision MMA: the library has none on any chip). Bytes: activations + the weight at its width +
    scales (+ zeros) + the result in ``out`` (``act`` by default), read and written once; compute: 2 x batch x m x n
    x k FLOPs at ``hw``'s ``act`` peak x its GEMM efficiency for that shape; memory: ``hw.memory_time`` of one
    kernel. At small M the weight read binds (memory-bound), as these kernels are built for."""
    from .profile import canonical_dtype

    if k <= 0 or n <= 0 or m <= 0 or batch <= 0 or group < 0 or (group and k % group):
        raise ValueError(f"weight-only GEMM {batch}x{m}x{n}x{k} (group {group}): sizes must be positive and the "
                         "group divide K")
    groups = k // group if group else 1
    wbits = dtype_bits(weight)
    nbytes = (-(-batch * m * k * dtype_bits(act) // 8) + -(-k * n * wbits // 8)
              + -(-groups * n * dtype_bits(scale) // 8) + (-(-groups * n * wbits // 8) if zero else 0)
              + -(-batch * m * n * dtype_bits(out or act) // 8))
    flops = 2 * batch * m * n * k
    key = canonical_dtype(act)
    model = getattr(hw, "gemm", None)
    eff = model.efficiency_of(batch, m, n, k, key) if model is not None else 1.0
    note = (f"{weight} x {act} weight-only GEMM on {hw.name}: the {weight} weight and its {scale} scales read, "
            f"dequantised to {act} in registers, {key} MMAs at the {key} rate (Marlin's path)")
    return WeightOnlyTime(flops / (hw.matrix_peak(act) * eff), hw.memory_time(nbytes, 1), hw.kernel_overhead,
                          nbytes, flops, note)
