"""Blocks as the model names them, on real models built from their libraries' classes at small sizes (no
weights) and lowered by `mhlo-cost lower`, as tests/test_zoo.py does:
* two-tower models (Whisper's encoder and decoder, CLIP's and SigLIP's text and vision models): one kind per
  tower, ``encoder/layers`` ..., with as many blocks as the configuration has layers in that tower;
* stage-of-blocks models (Swin, EfficientNet, MobileNetV3): the default finds every block the model holds
  (counted on the model's own modules), ``--blocks stages`` its stages;
* every block's (and stage's) GEMM + conv FLOPs equal torch's FlopCounterMode for that module.
"""
from __future__ import annotations

import importlib.util
import json

import pytest

torch = pytest.importorskip("torch")
_MISSING = [m for m in ("torchax", "transformers", "timm") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(f"{', '.join(_MISSING)} not installed (pip install 'mhlo-cost[models]')", allow_module_level=True)

from mhlo_cost import analyze  # noqa: E402
from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.analysis.collectors import assign_blocks  # noqa: E402
from mhlo_cost.lower.frontends import hub  # noqa: E402
from mhlo_cost.lower.frontends.inputs import parse_input  # noqa: E402

_TEXT = {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2}
_VISION = dict(_TEXT, num_hidden_layers=3, image_size=16, patch_size=8)
WHISPER = {"encoder_layers": 3, "decoder_layers": 2, "d_model": 32, "encoder_attention_heads": 2,
           "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "num_mel_bins": 8,
           "max_source_positions": 8, "vocab_size": 64, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
           "decoder_start_token_id": 1, "attn_implementation": "eager"}
TWO_TOWERS = {"text_config": dict(_TEXT, vocab_size=64), "vision_config": _VISION, "attn_implementation": "eager"}
SIGLIP = dict(TWO_TOWERS, text_config=dict(TWO_TOWERS["text_config"], projection_size=32))
SWIN = {"img_size": 32, "window_size": 2, "embed_dim": 24, "depths": [2, 1, 3, 2], "num_heads": [1, 2, 3, 4]}
IMAGE = ["1x3x32x32"]

# name: (library, class or model, --set overrides, inputs (positional, then NAME=SHAPE))
MODELS = {
    "whisper": ("hf", "WhisperForConditionalGeneration", WHISPER, ["1x8x16", "decoder_input_ids=1x4:int64"]),
    "clip": ("hf", "CLIPModel", dict(TWO_TOWERS, projection_dim=16), ["1x6:int64", "pixel_values=1x3x16x16"]),
    "siglip": ("hf", "SiglipModel", SIGLIP, ["1x6:int64", "pixel_values=1x3x16x16"]),
    "swin": ("timm", "swin_tiny_patch4_window7_224", SWIN, IMAGE),
    "efficientnet": ("timm", "efficientnet_b0", {}, IMAGE),
    "mobilenetv3": ("timm", "mobilenetv3_small_100", {}, IMAGE),
}


def _argv(key, out):
    lib, name, sets, inputs = MODELS[key]
    argv = ["lower", f"--{lib}", name, "-o", str(out), "-q"]
    for k, v in sets.items():
        argv += ["--set", f"{k}={json.dumps(v, separators=(',', ':')) if not isinstance(v, str) else v}"]
    return argv + [a for i in inputs for a in ("--input", i)]


def _meta(spec: str):
    s = parse_input(spec)
    return torch.zeros(s.shape, dtype=getattr(torch, s.dtype or "float32"), device="meta")


def _model(key):
    lib, name, sets, _ = MODELS[key]
    return hub.build(lib, name, None, sets).eval()


def _flop_counter(key) -> dict[str, int]:
    """FlopCounterMode per module (math attention, meta tensors), by module path ("" the whole model)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    _, _, _, inputs = MODELS[key]
    pos = [_meta(i) for i in inputs if "=" not in i]
    kw = {k: _meta(v) for k, v in (i.split("=", 1) for i in inputs if "=" in i)}
    with FlopCounterMode(display=False) as fc, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        _model(key)(*pos, **kw)
    return {k.split(".", 1)[1] if "." in k else "": sum(v.values()) for k, v in fc.get_flop_counts().items()}


@pytest.fixture(scope="module")
def lowered(tmp_path_factory):
    """key -> analysis; every model lowered once by `mhlo-cost lower`."""
    tmp = tmp_path_factory.mktemp("towers")
    out = {}
    for key in MODELS:
        path = tmp / f"{key}.mlir"
        assert main(_argv(key, path)) == 0, key
        out[key] = analyze(path, conv_padding="dense")
    return out


def _matrix_flops(a, blocks) -> dict[str, int]:
    out = {b.name: 0 for b in blocks.blocks}
    for r, ids in zip(a.rows, blocks.row_blocks):
        for i in ids:
            out[blocks.blocks[i].name] += r.gemm_flops + r.conv_flops
    return out


def _expected_kinds(key) -> dict[str, int]:
    """Blocks per kind, from the model's configuration (one kind per tower) or its own modules."""
    m = _model(key)
    if key == "whisper":
        return {"encoder/layers": m.config.encoder_layers, "decoder/layers": m.config.decoder_layers}
    if key in ("clip", "siglip"):
        return {"vision_model/encoder/layers": m.config.vision_config.num_hidden_layers,
                "text_model/encoder/layers": m.config.text_config.num_hidden_layers}
    if key == "swin":
        assert [len(s.blocks) for s in m.layers] == SWIN["depths"]
        return {"blocks": sum(SWIN["depths"])}
    return {"blocks": sum(len(stage) for stage in m.blocks)}  # EfficientNet's, MobileNetV3's stages


@pytest.mark.parametrize("key", list(MODELS))
def test_blocks_per_tower_equal_the_model_and_flop_counter(lowered, key):
    a = lowered[key]
    blocks = assign_blocks(a)
    per_module = _flop_counter(key)
    assert a.summary["gemm_flops"] + a.summary["conv_flops"] == per_module[""]
    names = [b.name for b in blocks.blocks]
    assert blocks.kinds() == _expected_kinds(key) and len(set(names)) == len(names), names
    for name, flops in _matrix_flops(a, blocks).items():  # each block's products: the counter's for it
        assert flops == per_module[name.replace("/", ".")], name


@pytest.mark.parametrize("key", ["swin", "efficientnet", "mobilenetv3"])
def test_blocks_stages_finds_the_stages(lowered, key):
    a = lowered[key]
    stages = assign_blocks(a, "stages")
    m = _model(key)
    expected = [f"layers.{i}" for i in range(len(m.layers))] if key == "swin" else \
        [f"blocks.{i}" for i in range(len(m.blocks))]
    assert [b.name for b in stages.blocks] == expected
    per_module = _flop_counter(key)
    for name, flops in _matrix_flops(a, stages).items():
        assert flops == per_module[name], name
