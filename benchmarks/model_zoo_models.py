"""The models of benchmarks/model_zoo.py: small configurations of the libraries' own classes (no weights).

Each entry: (library, class or timm name, --config (a transformers model type) or None, --set overrides,
inputs (positional ``SHAPE[:DTYPE]``, then ``NAME=SHAPE[:DTYPE]``), --kwarg values, blocks expected: a function of
the built model that reads them from its configuration (layers per tower, blocks per stage)).
"""
from __future__ import annotations

B, T = 2, 16  # batch, tokens of the text models
TOK = [f"{B}x{T}:int64"]

LLAMA = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, attn_implementation="eager")
GPT2 = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64, attn_implementation="eager")
BERT = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=256,
            attn_implementation="eager")
T5 = dict(num_layers=2, num_decoder_layers=2, d_model=64, d_ff=128, d_kv=16, num_heads=4, vocab_size=256,
          attn_implementation="eager")
VIT = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, image_size=32,
           patch_size=8, attn_implementation="eager")
DIT = dict(num_layers=2, num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8,
           sample_size=8, patch_size=2, norm_num_groups=4)
PIXART = dict(DIT, cross_attention_dim=32, caption_channels=24)
LATTE = dict(num_layers=2, num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8,
             sample_size=8, patch_size=2, cross_attention_dim=32, caption_channels=24, video_length=3,
             norm_type="ada_norm_single")
COGVIDEOX = dict(num_layers=2, num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
                 time_embed_dim=32, text_embed_dim=24, sample_width=8, sample_height=8, sample_frames=5,
                 patch_size=2, max_text_seq_length=6)
MISTRAL = dict(LLAMA, sliding_window=8)
QWEN2 = dict(LLAMA, use_sliding_window=True, sliding_window=8, max_window_layers=1)
_TEXT = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2)
WHISPER = dict(encoder_layers=3, decoder_layers=2, d_model=32, encoder_attention_heads=2, decoder_attention_heads=2,
               encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=8, vocab_size=64,
               pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, attn_implementation="eager")
TWO_TOWERS = dict(text_config=dict(_TEXT, vocab_size=64), vision_config=dict(_TEXT, num_hidden_layers=3,
                  image_size=16, patch_size=8), attn_implementation="eager")
CLIP = dict(TWO_TOWERS, projection_dim=16)
SIGLIP = dict(TWO_TOWERS, text_config=dict(TWO_TOWERS["text_config"], projection_size=32))
WAV2VEC2 = dict(_TEXT, conv_dim=[16, 16], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=2, vocab_size=32, attn_implementation="eager")
MAMBA = dict(num_hidden_layers=2, hidden_size=32, state_size=8, expand=2, conv_kernel=4, vocab_size=256)
UNET = dict(sample_size=8, in_channels=4, out_channels=4, block_out_channels=[32, 64], layers_per_block=1,
            down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"],
            up_block_types=["UpBlock2D", "CrossAttnUpBlock2D"], cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)
VAE = dict(in_channels=3, out_channels=3, block_out_channels=[16, 32], layers_per_block=1, latent_channels=4,
           norm_num_groups=8, sample_size=16, down_block_types=["DownEncoderBlock2D"] * 2,
           up_block_types=["UpDecoderBlock2D"] * 2)
SWIN = dict(img_size=32, window_size=2, embed_dim=24, depths=[2, 1, 3, 2], num_heads=[1, 2, 3, 4])
_ATTN = dict(num_hidden_layers=2, hidden_size=64, vocab_size=256, num_attention_heads=4, attn_implementation="eager")
MIXTRAL = dict(_ATTN, intermediate_size=128, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)
DSV3 = dict(_ATTN, first_k_dense_replace=1, intermediate_size=128, moe_intermediate_size=32, num_key_value_heads=4,
            n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
            q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
QWEN2_MOE = dict(_ATTN, intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=64,
                 num_key_value_heads=2, num_experts=8, num_experts_per_tok=2)
QWEN3_MOE = dict(_ATTN, intermediate_size=128, moe_intermediate_size=32, num_key_value_heads=2, num_experts=8,
                 num_experts_per_tok=2)
IMAGE = ["1x3x32x32"]
NO_RES = {"added_cond_kwargs": {"resolution": None, "aspect_ratio": None}}


def layers(m):
    return m.config.num_hidden_layers


def stages(m):  # timm: blocks per stage, summed (EfficientNet, MobileNetV3: m.blocks; ConvNeXt, Swin: stages)
    if hasattr(m, "stages"):
        return sum(len(s.blocks) for s in m.stages)
    if hasattr(m, "layers") and hasattr(m.layers[0], "blocks"):
        return sum(len(s.blocks) for s in m.layers)
    return sum(len(s) for s in m.blocks)


def towers(m):  # CLIP, SigLIP: the text and the vision model's layers
    return m.config.text_config.num_hidden_layers + m.config.vision_config.num_hidden_layers


def unet_blocks(m):  # diffusers' UNet / VAE: the resnets and attentions of every down, mid and up block
    parts = [*getattr(m, "down_blocks", ()), *getattr(m, "up_blocks", ()), getattr(m, "mid_block", None)]
    return sum(len(getattr(p, "resnets", ())) + len(getattr(p, "attentions", ()) or ()) for p in parts if p)


def vae_blocks(m):
    return unet_blocks(m.encoder) + unet_blocks(m.decoder)


MODELS = {
    "llama": ("hf", "LlamaForCausalLM", None, LLAMA, TOK, {}, layers),
    "gpt2": ("hf", "GPT2LMHeadModel", None, GPT2, TOK, {}, lambda m: m.config.n_layer),
    "bert": ("hf", "BertModel", None, BERT, TOK + [f"token_type_ids={B}x{T}:int64"], {}, layers),
    "t5": ("hf", "T5ForConditionalGeneration", None, T5, TOK + [f"decoder_input_ids={B}x8:int64"],
           {"use_cache": False}, lambda m: m.config.num_layers + m.config.num_decoder_layers),
    "vit": ("hf", "ViTModel", None, VIT, [f"{B}x3x32x32"], {}, layers),
    "dit": ("diffusers", "DiTTransformer2DModel", None, DIT, [f"{B}x4x8x8", f"timestep={B}:int64",
            f"class_labels={B}:int64"], {}, lambda m: m.config.num_layers),
    "pixart": ("diffusers", "PixArtTransformer2DModel", None, PIXART, [f"{B}x4x8x8", f"encoder_hidden_states={B}x6x24",
               f"timestep={B}:int64"], NO_RES, lambda m: m.config.num_layers),
    "latte": ("diffusers", "LatteTransformer3DModel", None, LATTE, [f"{B}x4x3x8x8", f"encoder_hidden_states={B}x6x24",
              f"timestep={B}:int64"], {}, lambda m: 2 * m.config.num_layers),  # spatial + temporal per layer
    "cogvideox": ("diffusers", "CogVideoXTransformer3DModel", None, COGVIDEOX, ["1x2x4x8x8",
                  "encoder_hidden_states=1x6x24", "timestep=1:int64"], {}, lambda m: m.config.num_layers),
    "resnet18": ("timm", "resnet18", None, {}, ["1x3x64x64"], {},
                 lambda m: sum(len(getattr(m, f"layer{i}")) for i in range(1, 5))),
    "convnext": ("timm", "convnext_atto", None, {}, IMAGE, {}, stages),
    "mistral_sw": ("hf", "MistralForCausalLM", None, MISTRAL, TOK, {}, layers),
    "qwen2_sw": ("hf", "Qwen2ForCausalLM", None, QWEN2, TOK, {}, layers),
    "whisper": ("hf", "WhisperForConditionalGeneration", None, WHISPER, ["1x8x16", "decoder_input_ids=1x4:int64"], {},
                lambda m: m.config.encoder_layers + m.config.decoder_layers),
    "clip": ("hf", "CLIPModel", None, CLIP, ["1x6:int64", "pixel_values=1x3x16x16"], {}, towers),
    "siglip": ("hf", "SiglipModel", None, SIGLIP, ["1x6:int64", "pixel_values=1x3x16x16"], {}, towers),
    "wav2vec2": ("hf", "Wav2Vec2Model", None, WAV2VEC2, ["1x400"], {},  # the feature encoder's convs, the layers
                 lambda m: m.config.num_feat_extract_layers + m.config.num_hidden_layers),
    "mamba": ("hf", "MambaForCausalLM", None, MAMBA, TOK, {"use_cache": False}, layers),
    "unet2d": ("diffusers", "UNet2DConditionModel", None, UNET, ["1x4x8x8", "timestep=1:int64",
               "encoder_hidden_states=1x6x32"], {}, unet_blocks),
    "autoencoderkl": ("diffusers", "AutoencoderKL", None, VAE, ["1x3x16x16"], {}, vae_blocks),
    "swin": ("timm", "swin_tiny_patch4_window7_224", None, SWIN, IMAGE, {}, stages),
    "efficientnet": ("timm", "efficientnet_b0", None, {}, IMAGE, {}, stages),
    "mobilenetv3": ("timm", "mobilenetv3_small_100", None, {}, IMAGE, {}, stages),
    "mixtral": ("hf", "MixtralForCausalLM", "mixtral", MIXTRAL, TOK, {}, layers),
    "deepseek_v3": ("hf", "DeepseekV3ForCausalLM", "deepseek_v3", DSV3, TOK, {}, layers),
    "qwen2_moe": ("hf", "Qwen2MoeForCausalLM", "qwen2_moe", QWEN2_MOE, TOK, {}, layers),
    "qwen3_moe": ("hf", "Qwen3MoeForCausalLM", "qwen3_moe", QWEN3_MOE, TOK, {}, layers),
}
MOE = ("mixtral", "deepseek_v3", "qwen2_moe", "qwen3_moe")  # counted with eager experts on real tensors
#: the backward against FlopCounterMode: model -> the output the loss reads
TRAIN = {"llama": "logits", "bert": "last_hidden_state", "resnet18": "output"}
#: why blocks found differ from the units expected (written where they do; measured with this configuration)
NOTES = {
    "unet2d": "blocks: each down_blocks.i / up_blocks.i is kept whole (its resnets hold 38-60% of its compute, "
              "attentions and samplers the rest; a stage splits only where one family of like blocks holds 80%); "
              "the unindexed mid_block gives its resnets.0, attentions.0, resnets.1",
    "wav2vec2": "params: masked_spec_embed (hidden_size elements) is used only when training masks time steps; "
                "the inference forward never reads it, so it is no argument of the lowered function",
    "autoencoderkl": "blocks: each encoder down / decoder up block is kept whole (one resnet per down block: no "
                     "repetition; in up_blocks.0 the upsampler holds 49%); each mid_block gives its 2 resnets and "
                     "its attention",
}

from model_zoo_new import NEW, NEW_MOE, NEW_NOTES, REAL  # noqa: E402, F401 - the held-out and 2025-2026 families

MODELS.update(NEW)
MOE += NEW_MOE
NOTES.update(NEW_NOTES)
