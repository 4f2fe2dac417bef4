"""The eager memory peak (``--execution eager``) of every model of the zoo against torch's MemTracker.

For each model of :mod:`model_zoo_models` (and two more that stress PyTorch's frees: Gemma2 with its final
logit soft-capping, whose vocabulary is large enough for the logits to lead the peak, and Wan's transformer,
whose rotary embedding writes into a buffer through strided slices): the model is lowered by ``mhlo-cost
lower`` (torchax, from shapes) and its eager peak taken (:func:`mhlo_cost.roofline.memory.eager_profile`); the
same model is built with real weights on the CPU (the sizes are small) and one no-grad forward run inside
``torch.distributed._tools.mem_tracker.MemTracker`` on zero inputs (mixture-of-experts models: random token
ids and eager experts, as :mod:`model_zoo` counts them), whose peak ``Total`` is the reference. A forward
that takes ``use_cache`` is run with ``use_cache=False``: the lowering keeps the tensors of the output, not a
cache object, so a cache's keys and values would be counted by MemTracker alone. Printed: both peaks and
their ratio per model (or why it was not measured), and last the median and worst |ratio - 1|.

    python benchmarks/eager_memory_zoo.py [--only NAME ...] [--list]
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import statistics
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import model_zoo  # noqa: E402
from model_zoo_models import MODELS, MOE  # noqa: E402

_SMALL = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16)
EXTRA = {
    "gemma2": ("hf", "Gemma2ForCausalLM", None, dict(_SMALL, vocab_size=4096, final_logit_softcapping=30.0),
               ["2x64:int64"], {}, None),
    "wan": ("diffusers", "WanTransformer3DModel", None, dict(
        patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
        text_dim=24, freq_dim=32, ffn_dim=64, num_layers=2, rope_max_seq_len=32),
        ["1x4x3x16x16", "timestep=1:int64", "encoder_hidden_states=1x6x24"], {}, None),
}


def _build(key: str):
    """The model with real weights (seeded), as the library builds it from the configuration."""
    import torch

    from mhlo_cost.lower.frontends import hub

    torch.manual_seed(0)
    if key in MOE:
        return model_zoo._model(key)
    lib, name, config, sets = MODELS[key][:4]
    if lib == "hf":
        cls = getattr(hub.import_library("hf"), name)
        return cls(hub.hf_config(cls, config, sets))
    if lib == "diffusers":
        return getattr(hub.import_library("diffusers"), name).from_config(sets)
    return hub.import_timm().create_model(name, pretrained=False, **sets)


def memtracker_peak(key: str) -> int:
    """MemTracker's peak (bytes, all categories) of one no-grad forward on the CPU."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    from mhlo_cost.lower.frontends.inputs import parse_input

    model = _build(key).eval()

    def make(spec):
        s = parse_input(spec)
        if key in MOE and s.dtype == "int64":
            return torch.randint(0, model.config.vocab_size, s.shape)
        return torch.zeros(s.shape, dtype=getattr(torch, s.dtype or "float32"))

    inputs, kwargs = MODELS[key][4], dict(MODELS[key][5])
    pos = [make(i) for i in inputs if "=" not in i]
    kw = {k: make(v) for k, v in (i.split("=", 1) for i in inputs if "=" in i)}
    if "use_cache" in inspect.signature(model.forward).parameters:
        kwargs.setdefault("use_cache", False)
    for q in model.parameters():  # MemTracker hooks every parameter's gradient (Whisper freezes a table)
        q.requires_grad_(q.is_floating_point())
    mt = MemTracker()
    mt.track_external(model, *pos, *kw.values())
    with mt, torch.no_grad():
        model(*pos, **kw, **kwargs)
    return int(sum(v["Total"] for v in mt.get_tracker_snapshot("peak").values()))


def eager_peak(key: str, tmp: str) -> int | str:
    """The eager peak of the model lowered by ``mhlo-cost lower``, or the lowering's one-line error."""
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.roofline.memory import eager_profile

    path = os.path.join(tmp, key + ".mlir")
    err = model_zoo._lower(key, path)
    if err:
        return err
    # with the copies of non-contiguous tensors eager PyTorch makes, as `report --execution eager` prices them
    return eager_profile(analyze(path, AnalysisOptions(dataflow=True, records=("layouts",)))).peak_bytes


def _one(key: str, tmp: str) -> tuple[float | None, str]:
    try:
        ref = memtracker_peak(key)
    except Exception as e:  # noqa: BLE001 - a model the reference cannot run is reported, not fatal
        return None, f"MemTracker failed: {type(e).__name__}: {str(e).splitlines()[0][:90]}"
    est = eager_peak(key, tmp)
    if isinstance(est, str):
        return None, f"not lowered: {est[:100]}"
    return est / ref, f"{ref:>12}{est:>12}{est / ref:>8.3f}"


def main(argv=None) -> int:
    MODELS.update(EXTRA)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", metavar="NAME", help="these models only (--list names them)")
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    if args.list:
        print("\n".join(MODELS))
        return 0
    keys = args.only or list(MODELS)
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        print(f"eager_memory_zoo: error: unknown model {', '.join(unknown)} (--list names them)", file=sys.stderr)
        return 2
    print(f"{'model':<16}{'MemTracker':>12}{'eager':>12}{'ratio':>8}")
    errors = []
    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as null, contextlib.redirect_stderr(null):
        for key in keys:
            ratio, line = _one(key, tmp)
            if ratio is not None:
                errors.append((abs(ratio - 1), key))
            print(f"{key:<16}{line}", flush=True)
    if errors:
        worst = max(errors)
        print(f"{len(errors)} of {len(keys)} measured; median |eager / MemTracker - 1| = "
              f"{100 * statistics.median(e for e, _ in errors):.1f}% (worst: {worst[1]} {100 * worst[0]:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
