"""The eager memory peak (``--execution eager``) against torch's MemTracker on the same module, dtype and inputs.

For each model: the module is lowered through torchax from shapes (the ``meta`` device) and its eager peak
taken (:func:`mhlo_cost.roofline.memory.eager_profile`: one kernel per framework op, views sharing storage,
values freed when their last Python reference dies, as far as the IR's call stacks show it); the same module
is built under ``FakeTensorMode`` and one forward run under
``torch.no_grad()`` inside ``torch.distributed._tools.mem_tracker.MemTracker``, whose peak ``Total`` (parameters,
buffers, inputs and activations, bytes) is the reference. Printed: both peaks, their ratio, the unfused and the
compiled peaks beside them (labelled), and last the median and worst |ratio - 1|.

The models: the bundled STDiT3 (torch, :mod:`mhlo_cost.lower.models.stdit3_torch`) at depth 1 (one spatial and one
temporal block; the reduced depth keeps the 1280x720 shapes light) at the four published shapes, bf16, and as
issue 35 states it (``stdit3-f32``: 51_1280_720, depth 2, f32); and transformers / diffusers models of two
layers at sequence lengths of 1,024 (f32), each twice: ``NAME:sdpa`` (``attn_implementation="sdpa"``, diffusers'
default processor: ``scaled_dot_product_attention`` calls) and ``NAME:eager`` (``attn_implementation="eager"``,
diffusers' ``AttnProcessor``: attention written out). Every estimate takes the default options (SDPA calls on
PyTorch's own backend choice, attention written out run as written): STDiT3's torch module writes its attention
as matmul, softmax, matmul, so its scores are in its eager peak, as they are in MemTracker's.

    python benchmarks/eager_memory.py [--only NAME ...] [--list]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

STDIT3_SHAPES = ("204_640_360", "408_640_360", "51_1280_720", "102_1280_720")
SEQ = 1024


def _stdit3(shape: str):
    from mhlo_cost.lower.models import stdit3_torch
    from mhlo_cost.lower.models.config import STDiT3Config

    cfg = dataclasses.replace(STDiT3Config().with_shape(shape), depth=1, dtype="bfloat16")
    specs = [(s, d) for s, d in stdit3_torch.input_specs(cfg)]
    return (lambda: stdit3_torch.STDiT3(cfg)), torch.bfloat16, specs, {}, "auto"


def _stdit3_f32():
    """STDiT3 as issue 35 states it: ``lower --model stdit3 --shape 51_1280_720 --depth 2 --dtype f32``."""
    from mhlo_cost.lower.models import stdit3_torch
    from mhlo_cost.lower.models.config import STDiT3Config

    cfg = dataclasses.replace(STDiT3Config().with_shape("51_1280_720"), depth=2, dtype="float32")
    return (lambda: stdit3_torch.STDiT3(cfg)), torch.float32, list(stdit3_torch.input_specs(cfg)), {}, "auto"


def _hf(impl: str, cls_name: str, config_name: str, **cfg):
    import transformers

    def build():
        conf = getattr(transformers, config_name)(**cfg)
        conf._attn_implementation = impl
        return getattr(transformers, cls_name)(conf)
    return build


def _dit(impl: str):
    def build():
        from diffusers import DiTTransformer2DModel
        from diffusers.models.attention_processor import Attention, AttnProcessor

        m = DiTTransformer2DModel(num_attention_heads=4, attention_head_dim=64, in_channels=4, num_layers=2,
                                  sample_size=64, patch_size=2, num_embeds_ada_norm=1000)
        if impl == "eager":  # the processor that writes attention out (baddbmm, softmax, bmm)
            for mod in m.modules():
                if isinstance(mod, Attention):
                    mod.set_processor(AttnProcessor())
        return m
    return build


def _library(name: str):
    """(factory, dtype, positional input specs, keyword input specs, sdpa backend) of a library model
    ``MODEL:IMPL`` (IMPL: sdpa or eager, the attention implementation)."""
    name, impl = name.split(":") if ":" in name else (name, "sdpa")
    ids = [((1, SEQ), torch.int64)]
    small = dict(hidden_size=256, num_attention_heads=4, intermediate_size=1024)
    hf = {"gpt2": ("GPT2Model", "GPT2Config", dict(n_layer=2, n_embd=256, n_head=4, n_positions=SEQ)),
          "bert": ("BertModel", "BertConfig", dict(num_hidden_layers=2, max_position_embeddings=SEQ, **small)),
          "llama": ("LlamaModel", "LlamaConfig", dict(num_hidden_layers=2, num_key_value_heads=4, **small)),
          "qwen2": ("Qwen2Model", "Qwen2Config", dict(num_hidden_layers=2, num_key_value_heads=2, **small)),
          "opt": ("OPTModel", "OPTConfig", dict(num_hidden_layers=2, hidden_size=256, num_attention_heads=4,
                                                 ffn_dim=1024, word_embed_proj_dim=256,
                                                 max_position_embeddings=SEQ))}
    if name in hf:
        cls, conf, cfg = hf[name]
        return _hf(impl, cls, conf, **cfg), torch.float32, ids, {}, "auto"
    if name == "dit":
        return _dit(impl), torch.float32, [((1, 4, 64, 64), torch.float32)], {
            "timestep": ((1,), torch.int64), "class_labels": ((1,), torch.int64)}, "auto"
    raise KeyError(name)


LIBRARY = ("gpt2", "bert", "llama", "qwen2", "opt", "dit")
MODELS = (tuple(f"stdit3:{s}" for s in STDIT3_SHAPES) + ("stdit3-f32",)
          + tuple(f"{m}:{impl}" for m in LIBRARY for impl in ("sdpa", "eager")))


def spec_of(name: str):
    if name == "stdit3-f32":
        return _stdit3_f32()
    return _stdit3(name.split(":", 1)[1]) if name.startswith("stdit3:") else _library(name)


def memtracker_peak(build, dtype, specs, kw_specs) -> int:
    """torch's MemTracker peak (bytes, all categories) of one no-grad forward under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    old = torch.get_default_dtype()
    with FakeTensorMode():
        torch.set_default_dtype(dtype)  # parameters made in the model's dtype (a fake module cannot be cast)
        try:
            model = build().eval()
        finally:
            torch.set_default_dtype(old)
        args = [torch.zeros(s, dtype=d) for s, d in specs]
        kwargs = {k: torch.zeros(s, dtype=d) for k, (s, d) in kw_specs.items()}
        mt = MemTracker()
        mt.track_external(model, *args, *kwargs.values())
        with mt, torch.no_grad():
            model(*args, **kwargs)
        peak = mt.get_tracker_snapshot("peak")
    return int(sum(v["Total"] for v in peak.values()))


def _spec_text(shape, dtype) -> str:
    name = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.int64: "int64"}[dtype]
    return ("x".join(map(str, shape)) or "scalar") + ":" + name


def estimated_peaks(build, dtype, specs, kw_specs, sdpa: str) -> dict:
    """The eager, unfused and compiled peaks (bytes) of the module lowered through torchax from shapes."""
    from mhlo_cost import lower_model
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.roofline.memory import eager_profile, fused_profile

    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            model = build().eval()
    finally:
        torch.set_default_dtype(old)
    kwargs = {k: _spec_text(s, d) for k, (s, d) in kw_specs.items()}
    lowered = lower_model(model, *[_spec_text(s, d) for s, d in specs], frontend="torchax", **kwargs)
    # the layouts record: the copies eager PyTorch makes of non-contiguous tensors, as `report --execution eager` sees them
    analysis = analyze(lowered.text, AnalysisOptions(dataflow=True, records=("layouts",)))
    return {"eager": eager_profile(analysis, sdpa=sdpa).peak_bytes, "unfused": analysis.memory.peak_bytes,
            "compiled": fused_profile(analysis, attention="fused").peak_bytes}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", metavar="NAME", help="these models only (--list names them)")
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    if args.list:
        print("\n".join(MODELS))
        return 0
    names = args.only or MODELS
    print(f"{'model':<22}{'MemTracker GB':>14}{'eager GB':>10}{'ratio':>8}{'unfused GB':>12}{'compiled GB':>13}")
    errors = []
    for name in names:
        t0 = time.perf_counter()
        build, dtype, specs, kw, sdpa = spec_of(name)
        try:
            ref = memtracker_peak(build, dtype, specs, kw)
            est = estimated_peaks(build, dtype, specs, kw, sdpa)
        except Exception as e:  # noqa: BLE001 - a model one side cannot run is reported, not fatal
            print(f"{name:<22}not measured: {type(e).__name__}: {str(e).splitlines()[0][:90]}", flush=True)
            continue
        ratio = est["eager"] / ref
        errors.append((abs(ratio - 1), name))
        print(f"{name:<22}{ref / 1e9:>14.3f}{est['eager'] / 1e9:>10.3f}{ratio:>8.3f}{est['unfused'] / 1e9:>12.3f}"
              f"{est['compiled'] / 1e9:>13.3f}   ({time.perf_counter() - t0:.0f} s)", flush=True)
    worst = max(errors)
    print(f"median |eager / MemTracker - 1| = {100 * statistics.median(e for e, _ in errors):.1f}% "
          f"(worst: {worst[1]} {100 * worst[0]:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
