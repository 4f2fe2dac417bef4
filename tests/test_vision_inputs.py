"""Vision-language inputs (issue 42, parts 2 and 5): a model lowered with images, its vision tower included,
and ``--set`` keys that a configuration takes through ``**kwargs``.

Qwen2-VL (and Qwen2.5-VL, whose vision tower attends within windows laid out from the grid) reads
``image_grid_thw`` (and the image tokens of ``input_ids``) in Python while it runs, so those are
given by value (``--input-value``); the patches (``pixel_values``) by shape. The references are not this code:
the parameter count is ``sum(p.numel())`` of the same built model, the GEMM + conv FLOPs are torch's
FlopCounterMode on the same model (real small weights, the same values, math attention).
"""
from __future__ import annotations

import importlib.util
import json

import pytest

torch = pytest.importorskip("torch")
_MISSING = [m for m in ("torchax", "transformers") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(f"{', '.join(_MISSING)} not installed (pip install 'mhlo-cost[models]')", allow_module_level=True)

from mhlo_cost import analyze  # noqa: E402
from mhlo_cost.analysis.collectors import assign_blocks  # noqa: E402
from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.lower.frontends import FrontendError, hub  # noqa: E402
from mhlo_cost.lower.frontends.inputs import parse_input_value  # noqa: E402

from stderr_lines import error_line  # noqa: E402

IMAGE = 250  # the image token id of the small configuration
# Two images: a 4 x 4 and a 2 x 4 grid of patches (t = 1); a spatial merge of 2 x 2 patches per token.
GRID = [[1, 4, 4], [1, 2, 4]]
PATCHES = sum(t * h * w for t, h, w in GRID)  # 24 rows of pixel_values
TOKENS = [t * h * w // 4 for t, h, w in GRID]  # 4 and 2 image tokens
IDS = [[1] + [IMAGE] * TOKENS[0] + [2] + [IMAGE] * TOKENS[1] + [3]]
TYPES = [[0] + [1] * TOKENS[0] + [0] + [1] * TOKENS[1] + [0]]
PATCH_WIDTH = 3 * 2 * 14 * 14  # channels x temporal patch x patch x patch = 1176
QWEN2_VL = {
    "vision_config.depth": 2, "vision_config.embed_dim": 32, "vision_config.num_heads": 2,
    "vision_config.hidden_size": 32, "text_config.hidden_size": 32, "text_config.num_hidden_layers": 1,
    "text_config.num_attention_heads": 2, "text_config.num_key_value_heads": 1,
    "text_config.intermediate_size": 64, "text_config.vocab_size": 256, "image_token_id": IMAGE,
    # head_dim 16: the multimodal rotary sections must add up to head_dim / 2
    "text_config.rope_parameters": {"rope_theta": 1e6, "rope_type": "default", "mrope_section": [2, 3, 3]},
}

QWEN2_5_VL = {**{k: v for k, v in QWEN2_VL.items() if not k.startswith("vision_config.")},
              "vision_config.depth": 2, "vision_config.hidden_size": 32, "vision_config.intermediate_size": 64,
              "vision_config.num_heads": 2, "vision_config.out_hidden_size": 32,
              "vision_config.fullatt_block_indexes": [1]}  # block 0 attends within windows, block 1 globally
# name: (class, model type, --set)
VLMS = {"qwen2_vl": ("Qwen2VLForConditionalGeneration", "qwen2_vl", QWEN2_VL),
        "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", QWEN2_5_VL)}


def _compact(v) -> str:
    return json.dumps(v, separators=(",", ":"))


def _argv(out, key="qwen2_vl") -> list[str]:
    name, model_type, sets = VLMS[key]
    argv = ["lower", "--hf", name, "--config", model_type, "-q", "-o", str(out)]
    for k, v in sets.items():
        argv += ["--set", f"{k}={_compact(v)}"]
    return argv + ["--input", f"pixel_values={PATCHES}x{PATCH_WIDTH}",
                   "--input-value", f"image_grid_thw={_compact(GRID)}:int64",
                   "--input-value", f"input_ids={_compact(IDS)}",
                   "--input-value", f"mm_token_type_ids={_compact(TYPES)}",
                   "--kwarg", "use_cache=false"]


@pytest.fixture(scope="module", params=list(VLMS))
def qwen2_vl(request, tmp_path_factory):
    """(analysis, blocks, key) of a small Qwen2-VL / Qwen2.5-VL with two images, lowered by `mhlo-cost lower`."""
    path = tmp_path_factory.mktemp("vlm") / f"{request.param}.mlir"
    assert main(_argv(path, request.param)) == 0
    a = analyze(path, conv_padding="dense")
    return a, assign_blocks(a), request.param


def _real_model(key):
    name, model_type, sets = VLMS[key]
    cls = hub.hf_class(name)
    cfg = hub.hf_config(cls, model_type, sets)
    torch.manual_seed(0)
    return cls(cfg).eval()


def test_qwen2_vl_params_include_the_vision_tower(qwen2_vl):
    a, _, key = qwen2_vl
    name, model_type, sets = VLMS[key]
    model = hub.build("hf", name, model_type, sets)
    vision = sum(p.numel() for p in model.model.visual.parameters())
    assert vision > 0
    assert a.summary["params"] == sum(p.numel() for p in model.parameters())


def test_qwen2_vl_flops_equal_flop_counter(qwen2_vl):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    a, blocks, key = qwen2_vl
    model = _real_model(key)
    inputs = dict(pixel_values=torch.randn(PATCHES, PATCH_WIDTH), image_grid_thw=torch.tensor(GRID),
                  input_ids=torch.tensor(IDS), mm_token_type_ids=torch.tensor(TYPES), use_cache=False)
    with FlopCounterMode(display=False) as fc, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        model(**inputs)
    assert a.summary["gemm_flops"] + a.summary["conv_flops"] == fc.get_total_flops()
    per_module = {k.split(".", 1)[1] if "." in k else "": sum(v.values()) for k, v in fc.get_flop_counts().items()}
    names = [b.name for b in blocks.blocks]
    for i, name in enumerate(names):  # each block (vision blocks included) equals the counter for its module
        mine = sum(r.gemm_flops + r.conv_flops for r, ids in zip(a.rows, blocks.row_blocks) if i in ids)
        assert mine == per_module[name.replace("/", ".")], name


def test_qwen2_vl_vision_tower_is_a_block_kind_of_its_own(qwen2_vl):
    _, blocks, _ = qwen2_vl
    assert blocks.kinds() == {"visual/blocks": 2, "layers": 1}
    assert [b.name for b in blocks.blocks if b.kind == "visual/blocks"] == ["model/visual/blocks.0",
                                                                           "model/visual/blocks.1"]


def test_without_values_the_grid_is_refused_in_one_line(tmp_path, capsys):
    """The grid given by shape cannot be read while tracing: one line, exit 2, no traceback."""
    argv = _argv(tmp_path / "x.mlir")
    i = argv.index("--input-value")
    argv[i:i + 2] = ["--input", "image_grid_thw=2x3:int64"]
    line = _refused(capsys, argv)
    assert "Qwen2VLForConditionalGeneration" in line and "--input-value" in line


# -- other vision-language models: the image tokens of input_ids given by value -------------------------------

SMALL_TOWERS = {"vision_config.image_size": 28, "vision_config.patch_size": 14, "vision_config.hidden_size": 32,
                "vision_config.intermediate_size": 64, "vision_config.num_hidden_layers": 2,
                "vision_config.num_attention_heads": 2, "text_config.hidden_size": 32,
                "text_config.num_hidden_layers": 1, "text_config.num_attention_heads": 2,
                "text_config.num_key_value_heads": 1, "text_config.intermediate_size": 64,
                "text_config.vocab_size": 256, "image_token_id": IMAGE}
# name: (class, model type, --set, vision module path); a 28 x 28 image of 2 x 2 patches is 4 image tokens
OTHERS = {"llava": ("LlavaForConditionalGeneration", "llava", SMALL_TOWERS, "vision_tower"),
          "paligemma": ("PaliGemmaForConditionalGeneration", "paligemma",
                        {**SMALL_TOWERS, "text_config.head_dim": 16, "projection_dim": 32,
                         "text_config.num_image_tokens": 4}, "vision_tower"),
          "gemma3": ("Gemma3ForConditionalGeneration", "gemma3",
                     {**SMALL_TOWERS, "text_config.head_dim": 16, "mm_tokens_per_image": 4}, "vision_tower")}
OTHER_IDS = [[IMAGE] * 4 + [2, 3, 4, 5]]
#: built, run by eager PyTorch, unused: LLaVA takes the vision features before CLIP's post_layernorm (only its
#: pooled output goes through it); Gemma 3 does not use SigLIP's attention-pooling head
UNUSED = {"llava": ("model.vision_tower.post_layernorm",), "gemma3": ("model.vision_tower.head",)}


@pytest.mark.parametrize("key", list(OTHERS))
def test_other_vlms_with_an_image(tmp_path, key):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    name, model_type, sets, vision = OTHERS[key]
    path = tmp_path / f"{key}.mlir"
    argv = ["lower", "--hf", name, "--config", model_type, "-q", "-o", str(path), "--input", "pixel_values=1x3x28x28",
            "--input-value", f"input_ids={_compact(OTHER_IDS)}", "--kwarg", "use_cache=false"]
    assert main(argv + [a for k, v in sets.items() for a in ("--set", f"{k}={_compact(v)}")]) == 0
    a = analyze(path, conv_padding="dense")
    cls = hub.hf_class(name)
    torch.manual_seed(0)
    model = cls(hub.hf_config(cls, model_type, sets)).eval()
    inputs = dict(pixel_values=torch.randn(1, 3, 28, 28), input_ids=torch.tensor(OTHER_IDS), use_cache=False)
    with FlopCounterMode(display=False) as fc, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        model(**inputs)
    # Modules the model builds and eager PyTorch runs, but whose result nothing uses: the lowered program has
    # neither their operations nor their parameters (JAX drops unused work and unused arguments)
    unused = UNUSED.get(key, ())
    per_module = {k.split(".", 1)[1] if "." in k else "": sum(v.values()) for k, v in fc.get_flop_counts().items()}
    assert a.summary["gemm_flops"] + a.summary["conv_flops"] == \
        fc.get_total_flops() - sum(per_module.get(m, 0) for m in unused)
    dropped = sum(p.numel() for n, p in model.named_parameters() if n.startswith(tuple(m + "." for m in unused)))
    assert a.summary["params"] == sum(p.numel() for p in model.parameters()) - dropped
    assert sum(p.numel() for p in getattr(model.model, vision).parameters()) > dropped
    kinds = assign_blocks(a).kinds()
    assert any(k.startswith(vision + "/") for k in kinds), kinds


# -- --set through **kwargs ----------------------------------------------------------------------------------


def test_set_a_key_read_through_kwargs_is_applied():
    model = hub.build("hf", "ModernBertModel", None, {"num_hidden_layers": 4, "hidden_size": 32,
                                                      "intermediate_size": 64, "num_attention_heads": 2,
                                                      "global_attn_every_n_layers": 2})
    cfg = model.config
    assert cfg.global_attn_every_n_layers == 2
    # every second layer global, the others sliding: the layout the key asks for, written out here
    assert cfg.layer_types == ["full_attention", "sliding_attention"] * 2
    default = hub.build("hf", "ModernBertModel", None, {"num_hidden_layers": 4, "hidden_size": 32,
                                                        "intermediate_size": 64, "num_attention_heads": 2}).config
    assert default.layer_types != cfg.layer_types  # (ModernBERT's default is every third layer)


def test_set_an_unknown_key_is_refused_with_close_names(capsys):
    line = _refused(capsys, ["lower", "--hf", "ModernBertModel", "--set", "global_attn_every_n_layer=2",
                             "--input", "1x8:int64"])
    assert "global_attn_every_n_layer'" in line and "global_attn_every_n_layers" in line


def test_set_a_typo_the_base_class_would_store_is_refused():
    with pytest.raises(FrontendError, match="num_hidden_layers"):
        hub.hf_config(hub.hf_class("ModernBertModel"), None, {"num_hiden_layers": 2})
    with pytest.raises(FrontendError, match="cache_dir"):  # read from **kwargs by from_pretrained, not a build
        hub.hf_config(hub.hf_class("ModernBertModel"), None, {"cache_dir": "x"})


# -- --input-value spellings ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, shape, dtype", [
    ("image_grid_thw=[[1,16,16]]:int64", (1, 3), "int64"), ("g=[[1,4,4],[1,2,4]]", (2, 3), "int64"),
    ("m=[true,false]", (2,), "bool"), ("s=3", (), "int64"), ("x=[0.5,2]", (2,), "float32"),
    ("x=[1,2]:i32", (2,), "int32"), ("x=[1.5,2]:bf16", (2,), "bfloat16")])
def test_input_value_spellings(text, shape, dtype):
    v = parse_input_value(text)
    assert (v.shape, v.dtype) == (shape, dtype)
    assert v.array().shape == shape


@pytest.mark.parametrize("value", ["image_grid_thw", "=[[1,4,4]]", "1g=[1]", "g=[[1,2],[3]]", "g=[]", "g=abc",
                                   "g=[1]:foo", "g=[1.5]:int64", 'g={"a":1}', 'g=["a"]', "g=[[1]]:"])
def test_bad_input_value_is_refused_in_one_line(tmp_path, capsys, value):
    _refused(capsys, ["lower", "--hf", "BertModel", "--input", "1x8:int64", "--input-value", value,
                      "-o", str(tmp_path / "x.mlir")])


@pytest.mark.parametrize("argv", [
    ["--input", "g=1x3:int64", "--input-value", "g=[[1,4,4]]"],  # one name twice
    ["--input-value", "g=[[1,4,4]]", "--input-value", "g=[[1,2,2]]"],
    ["--kwarg", "g=1", "--input-value", "g=[[1,4,4]]"],  # as a plain keyword and by value
])
def test_an_input_given_twice_is_refused(tmp_path, capsys, argv):
    _refused(capsys, ["lower", "--hf", "BertModel", "--set", "num_hidden_layers=1", "--input", "1x8:int64", *argv,
                      "-o", str(tmp_path / "x.mlir")])


@pytest.mark.parametrize("extra", [["--model", "gpt"], ["--hf", "BertModel", "--train"],
                                   ["--hf", "BertModel", "--decode"],
                                   ["--module", "mhlo_cost:nothing", "--frontend", "torch-xla"]])
def test_input_value_is_refused_where_it_would_be_dropped(tmp_path, capsys, extra):
    line = _refused(capsys, ["lower", *extra, "--input-value", "g=[1]", "-o", str(tmp_path / "x.mlir")])
    assert "--input-value" in line or "torch-xla" in line, line


def test_values_leave_torchax_as_they_found_it():
    from mhlo_cost.lower.frontends._torch_shim import import_torchax
    from mhlo_cost.lower.frontends.values import concrete_values

    tx = import_torchax()
    from torchax.view import View

    env = tx.default_env()
    op = torch.ops.aten._is_all_true.default
    before = (vars(env).get("dispatch"), vars(View).get("tolist"), env._ops.get(op))
    with concrete_values(env):
        assert "dispatch" in vars(env) and "tolist" in vars(View) and op in env._ops
    assert (vars(env).get("dispatch"), vars(View).get("tolist"), env._ops.get(op)) == before


def _refused(capsys, argv) -> str:
    code = main([str(a) for a in argv])
    _, err = capsys.readouterr()
    assert code == 2, err
    line = error_line(err)
    assert "Traceback" not in err
    return line
