"""A training configuration at scale: the model's shape and how it is split over devices.

A :class:`ScaleConfig` names a GPT-style decoder (layers, hidden, heads, sequence, vocabulary, MLP width)
and Megatron-LM's split of it: tensor degree ``t`` (the column/row split of the attention and MLP weights),
sequence parallelism ``sp`` (the norms and dropouts sharded along the sequence; each all_reduce becomes a
reduce_scatter + all_gather), pipeline degree ``p`` with ``interleave`` virtual stages per device (1: 1F1B),
data degree ``d`` with the gradient reduction ``dp_comm`` (``all_reduce``, or ``zero``: reduce_scatter +
all_gather with the optimizer state sharded d ways), the micro-batch ``micro_batch`` and the
``global_batch``, and the ``recompute`` policy (``none``; ``selective``: attention's softmax and dropout
only; ``full``: the whole layer, only its input kept).

:meth:`ScaleConfig.invalid` says why a split cannot run (one sentence), or None.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

RECOMPUTE = ("none", "selective", "full")
DP_COMM = ("all_reduce", "zero")


@dataclass(frozen=True)
class ScaleConfig:
    # the model
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    seq: int = 128
    vocab: int = 1024
    ffn: int = 0  # MLP width; 0: 4 x hidden
    kv_heads: int = 0  # key/value heads (grouped-query attention); 0: heads
    mlp_kind: str = "gelu"  # gelu: fc1, GELU, fc2 (GPT); swiglu: gate and up, SiLU(gate) x up, down (Llama)
    # the split
    t: int = 1
    p: int = 1
    d: int = 1
    sp: bool = False
    interleave: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    recompute: str = "none"
    dp_comm: str = "all_reduce"
    dp_overlap: bool = False  # the data-parallel reduction overlaps the last micro-batch's backward
    dropout: bool = True  # Megatron's attention and hidden dropouts (their masks are activations)
    dtype: str = "bfloat16"
    precision: str = "bf16"  # the linears' recipe (mhlo_cost.machines.precision.TRAINING): bf16 or fp8

    @property
    def mlp(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def gpus(self) -> int:
        return self.t * self.p * self.d

    @property
    def micro_batches(self) -> int:
        """m: micro-batches each pipeline runs per iteration (global batch / (micro-batch x d))."""
        return self.global_batch // (self.micro_batch * self.d)

    @property
    def layers_per_stage(self) -> int:
        """Layers one device holds (all its virtual stages together)."""
        return self.layers // self.p

    @property
    def layers_per_chunk(self) -> int:
        """Layers of one virtual stage (a model chunk): layers / (p x interleave)."""
        return self.layers // (self.p * self.interleave)

    def model_invalid(self) -> str | None:
        """Why the model itself (whatever its split) cannot run, in one sentence; None where it can."""
        for k in ("layers", "hidden", "heads", "seq", "vocab", "t", "p", "d", "interleave", "micro_batch",
                  "global_batch"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                return f"{k} must be a positive integer, got {v!r}"
        for k in ("ffn", "kv_heads"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                return f"{k} must be a positive integer (0: the default), got {v!r}"
        if self.recompute not in RECOMPUTE:
            return f"recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}"
        if self.dp_comm not in DP_COMM:
            return f"dp_comm must be one of {', '.join(DP_COMM)}, got {self.dp_comm!r}"
        if self.hidden % self.heads:
            return f"heads {self.heads} do not divide hidden {self.hidden}"
        if self.mlp_kind not in ("gelu", "swiglu"):
            return f"mlp_kind must be gelu or swiglu, got {self.mlp_kind!r}"
        if self.heads % self.kv:
            return f"key/value heads {self.kv} must divide heads {self.heads}"
        from ...machines.precision import PrecisionError, training_recipe

        try:
            training_recipe(self.precision)
        except PrecisionError as e:
            return str(e)
        return None

    def invalid(self) -> str | None:
        """Why this configuration cannot run, in one sentence; None where it can."""
        why = self.model_invalid()
        if why:
            return why
        if self.heads % self.t:
            return f"tensor degree {self.t} does not divide heads {self.heads}"
        if self.heads % self.kv or self.kv % self.t:
            return (f"key/value heads {self.kv} must divide heads {self.heads} and be divisible by the tensor "
                    f"degree {self.t}")
        if self.mlp % self.t:
            return f"tensor degree {self.t} does not divide the MLP width {self.mlp}"
        if self.sp and self.seq % self.t:
            return f"sequence parallelism: tensor degree {self.t} does not divide seq {self.seq}"
        if self.sp and self.t == 1:
            return "sequence parallelism needs a tensor degree above 1"
        if self.layers % (self.p * self.interleave):
            return (f"pipeline degree {self.p} x interleave {self.interleave} does not divide "
                    f"layers {self.layers}")
        if self.interleave > 1 and self.p == 1:
            return "interleaving needs a pipeline degree above 1"
        if self.global_batch % (self.micro_batch * self.d):
            return (f"micro-batch {self.micro_batch} x data degree {self.d} does not divide global batch "
                    f"{self.global_batch}")
        if self.interleave > 1 and self.micro_batches % self.p:
            return (f"the interleaved schedule needs micro-batches ({self.micro_batches}) to be a multiple of "
                    f"the pipeline degree {self.p}")
        return None

    def with_split(self, **kw) -> "ScaleConfig":
        return replace(self, **kw)

    def layer_key(self) -> tuple:
        """What decides the per-device layer's lowered program (configurations that share it share one
        lowering): shapes, the tensor degree, sequence parallelism, recompute and dropout."""
        key = (self.hidden, self.heads, self.seq, self.mlp, self.t, self.sp, self.micro_batch,
               self.recompute, self.dropout, self.dtype)
        key = key if (self.kv, self.mlp_kind) == (self.heads, "gelu") else key + (self.kv, self.mlp_kind)
        return key if self.precision == "bf16" else key + (self.precision,)  # (bf16 keys unchanged)

    def label(self) -> str:
        sp = "+sp" if self.sp else ""
        v = f" v{self.interleave}" if self.interleave > 1 else ""
        return (f"t{self.t}{sp} p{self.p}{v} d{self.d} mb{self.micro_batch} {self.recompute}"
                f"{' zero' if self.dp_comm == 'zero' else ''}")


#: The models of Korthikanti et al. 2022 (Table 3), vocabulary 51,200 as Megatron pads GPT-2's.
MODELS = {
    "gpt-22b": dict(layers=48, hidden=6144, heads=64, seq=2048, vocab=51200),
    "gpt-175b": dict(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200),
    "gpt-530b": dict(layers=105, hidden=20480, heads=128, seq=2048, vocab=51200),
    "gpt-1t": dict(layers=128, hidden=25600, heads=160, seq=2048, vocab=51200),
}


def model_config(name: str, **split) -> ScaleConfig:
    """Model ``name`` of :data:`MODELS`; ``split`` (and sizes given) replacing its fields."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    return ScaleConfig(**{**MODELS[name], **split})
