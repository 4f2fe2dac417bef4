"""The zoo's second half (issue 42): the held-out families (OLMoE, GPT-OSS, Llama 4 text, Qwen2-VL with an image, EVA-02,
RegNetY, ModernBERT, Gemma 2, Wan, Jamba) and families released in 2025-2026 that transformers 5.24, diffusers
0.42 and timm 1.0.31 carry, at small configurations; entries as in :mod:`model_zoo_models`.
"""
from __future__ import annotations

B, T = 2, 16
TOK = [f"{B}x{T}:int64"]
_ATTN = dict(num_hidden_layers=2, hidden_size=64, vocab_size=256, num_attention_heads=4, attn_implementation="eager")
_DENSE = dict(_ATTN, intermediate_size=128, num_key_value_heads=2)

OLMOE = dict(_ATTN, intermediate_size=32, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2)
GPT_OSS = dict(_ATTN, intermediate_size=32, num_key_value_heads=2, head_dim=16, num_local_experts=4,
               num_experts_per_tok=2, sliding_window=8)
LLAMA4 = dict(_ATTN, intermediate_size=32, intermediate_size_mlp=128, num_key_value_heads=2, head_dim=16,
              num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2, attention_chunk_size=8)
QWEN2_VL = dict(text_config=dict(_DENSE, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                              mrope_section=[2, 3, 3])),
                vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2), attn_implementation="eager")
MODERNBERT = dict(_ATTN, intermediate_size=128, local_attention=8, layer_types=["full_attention", "sliding_attention"],
                  pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
GEMMA2 = dict(_DENSE, head_dim=16, sliding_window=8)
JAMBA = dict(_ATTN, intermediate_size=64, num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1,
             expert_layer_period=2, expert_layer_offset=1, num_experts=4, num_experts_per_tok=2, mamba_d_state=8,
             mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=8, use_mamba_kernels=False)
WAN = dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
           text_dim=24, freq_dim=32, ffn_dim=64, num_layers=2, rope_max_seq_len=64)
EVA02 = dict(img_size=28, depth=2)
# 2025-2026
GEMMA3 = dict(_DENSE, head_dim=16, sliding_window=8)
QWEN3 = dict(_DENSE, head_dim=16)
QWEN3_NEXT = dict(_ATTN, intermediate_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                  num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
                  layer_types=["linear_attention", "full_attention"],
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                  linear_conv_kernel_dim=4)
SMOLLM3 = dict(_DENSE, no_rope_layer_interval=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
GLM4_MOE = dict(_ATTN, intermediate_size=128, moe_intermediate_size=32, num_key_value_heads=2,
                n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1,
                first_k_dense_replace=1)
COHERE2 = dict(_DENSE, sliding_window=8)
OLMO3 = dict(_DENSE, sliding_window=8)
ERNIE4_5 = dict(_DENSE, head_dim=16)
FALCON_H1 = dict(_DENSE, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1,
                 mamba_d_state=8, mamba_d_conv=4, mamba_chunk_size=8)
EXAONE4 = dict(_DENSE, sliding_window=8)
HUNYUAN = dict(_DENSE, head_dim=16)
LFM2 = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=256, full_attn_idxs=[1], attn_implementation="eager")
QWENIMAGE = dict(patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16,
                 num_attention_heads=2, joint_attention_dim=24, axes_dims_rope=[4, 6, 6])
LUMINA2 = dict(sample_size=8, patch_size=2, in_channels=4, hidden_size=64, num_layers=2, num_refiner_layers=1,
               num_attention_heads=4, num_kv_heads=2, multiple_of=16, axes_dim_rope=[4, 6, 6], axes_lens=[64, 32, 32],
               cap_feat_dim=24)
COGVIEW4 = dict(patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=16, num_attention_heads=2,
                text_embed_dim=24, time_embed_dim=32, condition_dim=8, pos_embed_max_size=16, sample_size=8,
                rope_axes_dim=[16, 16])


def layers(m):
    return m.config.num_hidden_layers


def vl_blocks(m):  # the vision tower's blocks, then the language model's layers
    return m.config.vision_config.depth + m.config.text_config.num_hidden_layers


def num_layers(m):
    return m.config.num_layers


def timm_blocks(m):  # EVA-02: m.blocks
    return len(m.blocks)


def regnet_blocks(m):  # RegNet: stages s1..s4 of blocks b1..bn
    return sum(len(list(getattr(m, f"s{i}").children())) for i in range(1, 5))


def stage_blocks(m):  # timm: blocks per stage, summed
    return sum(len(s.blocks) for s in m.stages)


def csat_blocks(m):  # CSATv2: each stage a Sequential of Blocks (then norms, attention)
    return sum(type(c).__name__ == "Block" for s in m.stages for c in s)


def lumina2_blocks(m):  # the noise and context refiners, then the layers
    return len(m.noise_refiner) + len(m.context_refiner) + len(m.layers)


NEW = {
    "olmoe": ("hf", "OlmoeForCausalLM", "olmoe", OLMOE, TOK, {}, layers),
    "gpt_oss": ("hf", "GptOssForCausalLM", "gpt_oss", GPT_OSS, TOK, {}, layers),
    "llama4_text": ("hf", "Llama4ForCausalLM", "llama4_text", LLAMA4, TOK, {}, layers),
    # one image of 4 x 4 patches (t = 1): 16 rows of pixel_values (3 x 2 x 14 x 14 = 1,176 wide), 16 / (2 x 2) = 4
    # image tokens; the grid, the token ids and their types by value (the forward reads them in Python)
    "qwen2_vl": ("hf", "Qwen2VLForConditionalGeneration", "qwen2_vl", dict(QWEN2_VL, image_token_id=250),
                 ["pixel_values=16x1176", "value:image_grid_thw=[[1,4,4]]:int64",
                  "value:input_ids=[[1,250,250,250,250,2,3]]:int64",
                  "value:mm_token_type_ids=[[0,1,1,1,1,0,0]]:int64"], {"use_cache": False}, vl_blocks),
    "eva02": ("timm", "eva02_tiny_patch14_224", None, EVA02, ["1x3x28x28"], {}, timm_blocks),
    "regnety": ("timm", "regnety_002", None, {}, ["1x3x32x32"], {}, regnet_blocks),
    "modernbert": ("hf", "ModernBertModel", None, MODERNBERT, TOK, {}, layers),
    "gemma2": ("hf", "Gemma2ForCausalLM", None, GEMMA2, TOK, {}, layers),
    "wan": ("diffusers", "WanTransformer3DModel", None, WAN, ["1x4x2x8x8", "timestep=1:int64",
            "encoder_hidden_states=1x6x24"], {}, num_layers),
    "jamba": ("hf", "JambaForCausalLM", "jamba", JAMBA, TOK, {"use_cache": False}, layers),
    "gemma3": ("hf", "Gemma3ForCausalLM", "gemma3_text", GEMMA3, TOK, {}, layers),
    "qwen3": ("hf", "Qwen3ForCausalLM", None, QWEN3, TOK, {}, layers),
    "qwen3_next": ("hf", "Qwen3NextForCausalLM", "qwen3_next", QWEN3_NEXT, TOK, {"use_cache": False}, layers),
    "smollm3": ("hf", "SmolLM3ForCausalLM", None, SMOLLM3, TOK, {}, layers),
    "glm4_moe": ("hf", "Glm4MoeForCausalLM", "glm4_moe", GLM4_MOE, TOK, {}, layers),
    "cohere2": ("hf", "Cohere2ForCausalLM", None, COHERE2, TOK, {}, layers),
    "olmo3": ("hf", "Olmo3ForCausalLM", None, OLMO3, TOK, {}, layers),
    "ernie4_5": ("hf", "Ernie4_5ForCausalLM", None, ERNIE4_5, TOK, {}, layers),
    "falcon_h1": ("hf", "FalconH1ForCausalLM", None, FALCON_H1, TOK, {"use_cache": False}, layers),
    "exaone4": ("hf", "Exaone4ForCausalLM", None, EXAONE4, TOK, {}, layers),
    "hunyuan": ("hf", "HunYuanDenseV1ForCausalLM", None, HUNYUAN, TOK, {}, layers),
    "lfm2": ("hf", "Lfm2ForCausalLM", None, LFM2, TOK, {"use_cache": False}, layers),
    "qwenimage": ("diffusers", "QwenImageTransformer2DModel", None, QWENIMAGE, ["1x16x16",
                  "encoder_hidden_states=1x6x24", "timestep=1"], {"img_shapes": [[[1, 4, 4]]]}, num_layers),
    "lumina2": ("diffusers", "Lumina2Transformer2DModel", None, LUMINA2, ["1x4x8x8", "timestep=1",
                "encoder_hidden_states=1x6x24", "value:encoder_attention_mask=[[true,true,true,true,true,true]]:bool"],
                {}, lumina2_blocks),
    "cogview4": ("diffusers", "CogView4Transformer2DModel", None, COGVIEW4, ["1x4x8x8", "encoder_hidden_states=1x6x24",
                 "timestep=1:int64", "original_size=1x2", "target_size=1x2", "crop_coords=1x2"], {}, num_layers),
    "csatv2": ("timm", "csatv2", None, {}, ["1x3x64x64"], {}, csat_blocks),
    "fastvit_mci0": ("timm", "fastvit_mci0", None, {}, ["1x3x64x64"], {}, stage_blocks),
    "mambaout": ("timm", "mambaout_femto", None, {}, ["1x3x64x64"], {}, stage_blocks),
}
#: counted with eager experts on real tensors
NEW_MOE = ("olmoe", "gpt_oss", "llama4_text", "jamba", "qwen3_next", "glm4_moe")
#: counted and measured on real tensors (the forward reads a value: Falcon-H1's and LFM2's ``.item()``, Lumina2's
#: ``encoder_attention_mask.sum(dim=1).tolist()``, Qwen2-VL's image grid and token ids; meta tensors hold none)
REAL = ("falcon_h1", "lfm2", "lumina2", "qwen2_vl")
#: why a column differs (measured with this configuration)
NEW_NOTES = {
    "cogview4": "difference: the last block's feed-forward on the text tokens (ff on encoder_hidden_states, "
                "2 x 49,152) feeds an output the model drops; the lowered program has no dead code, eager runs it",
    "qwen3_next": "difference: the gated delta rule's last recurrent-state update (key^T @ v_new, 262,144) feeds "
                  "only the cache (use_cache=False): the lowered program drops it, eager runs it",
    "llama4_text": "difference: transformers' Llama4TextMoe runs every expert on every token (E/k = 4 times the "
                   "routed work: 3 x 393,216 more); lower routes each token to its top-k experts, as a deployment "
                   "does (frontends/moe_llama4.py), the counter runs the library's dense code",
    "fastvit_mci0": "blocks: besides the stages' 20 blocks the collector takes the stem's 3 MobileOne blocks, each "
                    "downsample's proj.0 / proj.1 and final_conv's conv_kxk.0 as units: indexed siblings with "
                    "deeper scopes, which the collector's rule makes blocks",
    "csatv2": "blocks: each stage is kept whole: its children are not alike (stage 0: Block, Block, LayerNorm2d; "
              "later ones open with a Conv2d downsample, stages 2-3 end with TransformerBlocks whose matrix "
              "products differ from the conv Blocks'), and the collector splits a stage only into identical units "
              "or units alike in their matrix products",
    "qwenimage": "difference: the last block's text stream after attention (attn.to_add_out and txt_mlp on "
                 "encoder_hidden_states, 12,288 + 98,304) feeds an output the model drops; the lowered program has "
                 "no dead code, eager runs it; params: their weights (9,408) are no argument of the lowered function",
    "lumina2": "the mask is given by value (lower --input-value): the forward reads its sequence lengths "
               "(encoder_attention_mask.sum(dim=1).tolist())",
}
