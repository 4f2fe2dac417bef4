"""Automatic mixed precision as PyTorch's CUDA autocast runs it: a torch module's forward under
``torch.autocast("cuda", dtype)`` (timm's ``benchmark.py --amp``, ``torch.cuda.amp.autocast()``), lowered through
torchax (``lower --amp float16``).

Source: PyTorch's ``aten/src/ATen/autocast_mode.h`` (the op lists ``AT_FORALL_LOWER_PRECISION_FP``,
``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``, ``AT_FORALL_PROMOTE``, the header torch installs under
``torch/include/ATen``) and ``aten/src/ATen/autocast_mode.cpp`` (``TORCH_LIBRARY_IMPL(aten, Autocast, m)``: those
lists registered for CUDA; ``cached_cast``). What the Autocast dispatch key does with each op:

* ``lower_precision_fp`` (convolutions, ``linear``, ``addmm``, ``mm``, ``bmm``, ``matmul``, ``einsum``,
  ``scaled_dot_product_attention``...): every floating tensor argument not already of the autocast dtype is cast
  to it (``cached_cast`` -> ``arg.to(to_type)``: a copy kernel of its own, reading the source and writing the
  cast), then the op runs. The cast of a parameter (an fp32 leaf that requires grad) is cached for the rest of the
  autocast region (``can_try_cache``; the region is one ``with autocast():`` block, one forward in timm's
  benchmark): a parameter is cast once per forward, an activation at every call;
* ``fp32`` (``layer_norm``, ``group_norm``, ``rms_norm``, ``exp``, ``log``, ``rsqrt``, ``pow``, ``softplus``,
  the losses, the upsampling ops...): every floating argument not fp32 is cast to fp32 the same way (never
  cached) and the op runs, and returns, in fp32;
* ``fp32_set_opt_dtype`` (``softmax``, ``log_softmax``, ``sum``, ``cumsum``, ``prod``, the vector and matrix
  norms): called without a ``dtype``, the op runs with ``dtype=float32``: it converts inside its own kernel
  (``softmax`` of a CUDA half tensor is ``_softmax(x, dim, half_to_float=True)``, SoftMax.cpp), no cast kernel;
* ``promote`` (``addcmul``, ``addcdiv``, ``atan2``, ``cross``, ``dot``, ``index_put``, ``scatter_add``...): the
  floating arguments cast to the widest of their types;
* every other op runs in the dtypes it is given (torch's usual type promotion: an fp16 activation added to an
  fp32 residual is fp32). An op's own kernel runs with autocast excluded (``ExcludeDispatchKeyGuard``): the ops it
  is made of are not cast again; an op autocast does not list that decomposes reaches autocast again with its parts.

torchax ships an autocast of its own (``torchax.amp``), with the AutocastCPU lists, keyed by aten overloads that
the functions torchax lowers whole (``F.linear``, ``F.scaled_dot_product_attention``) never reach; this module
applies the CUDA lists at both levels (the torch function torchax lowers, or the aten op it reaches).

Each cast kernel is lowered under the scope :data:`CAST_SCOPE` inside the module that made it, so that the eager
execution model (:mod:`mhlo_cost.roofline.eager`, one kernel per framework call, a call told by its scope and
source position) reads it as a call of its own, as PyTorch runs it; a fusing model fuses it where it fuses.
"""
from __future__ import annotations

import contextlib

#: The scope a cast kernel of autocast is lowered under (``blocks.0/attn/qkv/autocast_to_copy``): torch's
#: profiler names the kernel ``aten::_to_copy``.
CAST_SCOPE = "autocast_to_copy"

#: AT_FORALL_LOWER_PRECISION_FP (and ``cudnn_convolution``), autocast_mode.h / .cpp.
LOWER_PRECISION_FP = frozenset({
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "cudnn_convolution", "cudnn_convolution_transpose", "prelu", "addmm",
    "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm",
    "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention"})
#: AT_FORALL_FP32, with the aten ops their composite forms reach first (``group_norm`` -> ``native_group_norm``,
#: ``interpolate`` -> ``upsample_*``; ``interpolate(mode="area")`` is an adaptive average pool: not listed).
FP32 = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm",
    "group_norm", "native_group_norm", "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist",
    "pdist", "cdist", "renorm", "logsumexp", "upsample_nearest1d", "_upsample_nearest_exact1d",
    "upsample_nearest2d", "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d",
    "upsample_bicubic2d", "_upsample_bicubic2d_aa", "interpolate"})
#: AT_FORALL_FP32_SET_OPT_DTYPE (and ``norm``'s fp32_append_dtype), with the aten ops ``softmax`` and
#: ``log_softmax`` reach (``_softmax``, ``_log_softmax``).
FP32_SET_OPT_DTYPE = frozenset({"prod", "softmax", "_softmax", "log_softmax", "_log_softmax", "cumprod", "cumsum",
                                "linalg_vector_norm", "linalg_matrix_norm", "sum", "norm"})
#: AT_FORALL_PROMOTE.
PROMOTE = frozenset({"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
                     "index_put", "tensordot", "scatter_add"})
#: Batch norm: on no list (it runs as it is given), but its CUDA kernel takes a half / bfloat16 input with fp32
#: weights and statistics and returns the input's dtype (aten/src/ATen/native/cuda/Normalization.cu:
#: ``batch_norm_cuda`` allocates ``output = at::empty_like(self)``; ``is_mixed_type``), where the IR's type
#: promotion would make it fp32: its output is converted back inside its own call.
BATCH_NORM = frozenset({"batch_norm", "native_batch_norm", "_native_batch_norm_legit_no_training",
                        "_native_batch_norm_legit", "cudnn_batch_norm", "_batch_norm_impl_index"})
#: Python operators of ``torch.Tensor`` -> the op they call.
_OPERATORS = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow", "__rpow__": "pow"}


def op_name(func) -> str:
    """The aten name of what torchax dispatches: an ``OpOverload`` (``aten.addmm.default`` -> ``addmm``), a
    torch function (``F.linear`` -> ``linear``) or a ``torch.Tensor`` method (``Tensor.__matmul__`` ->
    ``matmul``)."""
    packet = getattr(func, "overloadpacket", None)
    name = getattr(packet, "__name__", None) or getattr(func, "__name__", "") or ""
    name = name.split(".")[-1]
    return _OPERATORS.get(name, name)


def policy(func, kwargs: dict | None = None) -> str | None:
    """The autocast policy of ``func`` (``lower_precision_fp``, ``fp32``, ``fp32_set_opt_dtype``, ``promote``),
    None for an op autocast leaves alone."""
    name = op_name(func)
    if name in LOWER_PRECISION_FP:
        return "lower_precision_fp"
    if name == "interpolate" and (kwargs or {}).get("mode") == "area":
        return None
    if name in FP32:
        return "fp32"
    if name in FP32_SET_OPT_DTYPE:
        return "fp32_set_opt_dtype"
    if name in PROMOTE:
        return "promote"
    return None


class CudaAutocast:
    """The policy applied to the calls torchax's environment ``env`` dispatches (its ``dispatch`` wrapped while
    active); ``params``: the module's parameters as the forward sees them (their casts are cached, once per
    forward); ``dtype``: the autocast dtype (``torch.float16``, ``torch.bfloat16``)."""

    def __init__(self, env, dtype, params=()):
        self.env, self.dtype = env, dtype
        self.params = {id(p) for p in params}
        self.cache: dict[int, object] = {}
        self.depth = 0  # > 0 inside an op autocast ran: its parts are not cast again

    @contextlib.contextmanager
    def active(self):
        inner = self.env.dispatch  # the bound method of the environment's class
        self.env.dispatch = lambda func, types, args, kwargs=None: self._dispatch(inner, func, types, args, kwargs)
        try:
            yield self
        finally:
            del self.env.dispatch
            self.cache.clear()  # the region ends: autocast's clear_cache()

    def _dispatch(self, inner, func, types, args, kwargs):
        kwargs = kwargs or {}
        rule = policy(func, kwargs) if self.depth == 0 else None
        if self.depth == 0 and op_name(func) in BATCH_NORM and self._lowered(func):
            return self._batch_norm(inner, func, types, args, kwargs)
        if rule is None:
            return inner(func, types, args, kwargs)
        lowered = self._lowered(func)
        if not lowered and _is_aten(func):  # torchax decomposes it: autocast meets the parts
            return inner(func, types, args, kwargs)
        args, kwargs = self._cast_args(rule, func, args, kwargs)
        self.depth += 1
        try:
            # a torch function torchax does not lower whole (F.conv2d): run as torchax's function mode falls
            # back to it (the function itself, its aten ops dispatched again), on the cast arguments
            return inner(func, types, args, kwargs) if lowered else func(*args, **kwargs)
        finally:
            self.depth -= 1

    def _batch_norm(self, inner, func, types, args, kwargs):
        """Batch norm of a lower-precision input with fp32 parameters (:data:`BATCH_NORM`): its output in the
        input's dtype, converted inside the call (the kernel writes it so); its statistics as the op returns them."""
        x = args[0] if args else kwargs.get("input")
        self.depth += 1
        try:
            out = inner(func, types, args, kwargs)
        finally:
            self.depth -= 1
        if not _is_float(x):
            return out
        if isinstance(out, (tuple, list)):
            return type(out)([self._keep(out[0], x.dtype), *out[1:]])
        return self._keep(out, x.dtype)

    def _keep(self, out, dtype):
        return self._to(out, dtype) if _is_float(out) and out.dtype != dtype else out

    def _lowered(self, func) -> bool:
        """Whether torchax lowers ``func`` itself (else it decomposes it, and autocast meets the parts)."""
        try:
            self.env._get_op_or_decomp(func)
        except Exception:  # noqa: BLE001 - torchax's OperatorNotFound: the parts come through again
            return False
        return True

    def _cast_args(self, rule: str, func, args, kwargs):
        import torch
        from torch.utils import _pytree as pytree

        floats = [a for a in pytree.tree_leaves((args, kwargs)) if _is_float(a)]
        if not floats:
            return args, kwargs
        if rule == "fp32_set_opt_dtype":
            return self._set_opt_dtype(func, args, kwargs)
        if rule == "lower_precision_fp":
            to = self.dtype
        elif rule == "fp32":
            to = torch.float32
        else:  # promote: torch's promotion of the arguments' floating types (float16 with bfloat16: float32)
            to = floats[0].dtype
            for a in floats[1:]:
                to = torch.promote_types(to, a.dtype)
        return pytree.tree_map_only(torch.Tensor, lambda a: self.cast(a, to), (args, kwargs))

    def _set_opt_dtype(self, func, args, kwargs):
        """``dtype=float32`` where the call gives none and its first argument is floating: the op converts
        inside its own kernel (the cast lowered in the op's own call, no cast kernel)."""
        import torch

        if kwargs.get("dtype") is not None or any(isinstance(a, torch.dtype) for a in args[1:]):
            return args, kwargs
        first = args[0] if args else None
        if not _is_float(first) or first.dtype == torch.float32:
            return args, kwargs
        wide = self._to(first, torch.float32)
        if op_name(func) in ("_softmax", "_log_softmax"):  # (x, dim, half_to_float): the op's output fp32
            return (wide, *args[1:2], False), kwargs
        return (wide, *args[1:]), kwargs

    def _to(self, a, to):
        """``a.to(to)`` as torchax lowers it (its ``_to_copy``: a JAX ``convert_element_type``), callable from
        inside a call torchax's modes are handling."""
        return self.env._to_copy(a, to, None)

    def cast(self, a, to):
        """``cached_cast``: a floating tensor not of dtype ``to`` -> a cast kernel of its own (under
        :data:`CAST_SCOPE`); a parameter's cast to the autocast dtype once per forward."""
        import jax

        import torch

        if not _is_float(a) or a.dtype in (to, torch.float64):  # is_eligible: a double is never cast
            return a
        key = id(a)
        cached = key in self.params and to == self.dtype
        if cached and key in self.cache:
            return self.cache[key]
        with jax.named_scope(CAST_SCOPE):
            out = self._to(a, to)
        if cached:
            self.cache[key] = out
        return out


def _is_aten(func) -> bool:
    return hasattr(func, "overloadpacket") or type(func).__name__ == "OpOverloadPacket"


def _is_float(a) -> bool:
    import torch

    return isinstance(a, torch.Tensor) and a.is_floating_point()


def torch_dtype(name):
    """``float16`` / ``bfloat16`` (``f16``, ``bf16``, ``half``, or the torch dtype) -> the torch dtype;
    FrontendError for any other."""
    import torch

    from . import FrontendError

    if name in (torch.float16, torch.bfloat16):
        return name
    names = {"float16": torch.float16, "f16": torch.float16, "fp16": torch.float16, "half": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    try:
        return names[str(name).lower()]
    except KeyError:
        raise FrontendError(f"--amp {name}: autocast runs in float16 or bfloat16") from None
