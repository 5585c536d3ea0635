"""Tiny random transformers models, one or more per supported model_type, for the universal proof.

Every case names the config class and the model class of one family (the class
``qkenergy layouts`` names as its proof) and only what differs from the shared
tiny sizes: :func:`tiny_config` starts from the config class's defaults and
shrinks every size key the class has (hidden width 32, 4 query heads, 2 key
heads, 2 layers, head_dim 8, a vocabulary of 64, tiny towers), recursively for the
sub-configs of multimodal models. Anything a case sets wins.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import transformers

# The sizes every tiny model shares; a config class takes those it has.
SIZES: dict[str, Any] = dict(
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=2,
    intermediate_size=64,
    vocab_size=64,
    max_position_embeddings=64,
    head_dim=8,
    moe_intermediate_size=16,
    shared_expert_intermediate_size=16,
    num_experts=4,
    num_local_experts=4,
    n_routed_experts=4,
    num_experts_per_tok=2,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    attention_dropout=0.0,
    image_size=12,
    patch_size=4,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
TOKENS = 7  # sequence length of the text inputs
VOCAB = SIZES["vocab_size"]


@dataclass(frozen=True)
class Tiny:
    """One tiny model: config and model class names, and what its config sets beyond SIZES."""

    config: str
    model: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    inputs: str = "text"  # text, seq2seq, speech, image, clip, audio, ... (test_universal_proof._inputs)
    # The attention modules compute their scores themselves (no AttentionInterface): the
    # queries and keys are the operands of the first score product in their forward.
    scores_in_module: bool = False
    # ALBERT: the first application of the shared layer is fed by the embedding projection,
    # not by the norm the layout names; fold_norm is checked on the later applications.
    unfed_first_call: bool = False
    # The model scales its queries per position (llama4's NoPE layers: attention temperature).
    scaled_queries: bool = False
    # Attention modules the model runs that no layout reads (class names), with the reason in the docs.
    unread: tuple[str, ...] = ()
    # A 2-D rotary embedding (rope_2d vision towers) is replaced by the identity (cos 1, sin 0):
    # the form read is the one at offset (0, 0). The rotary modules whose qualified name
    # contains this ("" for every one); None: none is replaced.
    identity_rope: str | None = None
    # The forward runs on this submodule of the model ("" for the model itself); several, comma
    # separated, run in turn, each on the inputs its forward names.
    run: str = ""
    # The attention modules hand their projection weights to torch's multi_head_attention_forward
    # (wavlm): the projection modules never run; the proof wraps that function instead.
    mha_forward: bool = False
    # Attention calls per run of the projections (diffllama: two softmax maps share q and k).
    calls_per_projection: int = 1


def _shrunk(cls: type, extra: dict[str, Any]) -> dict[str, Any]:
    """SIZES restricted to the keys ``cls`` has, sub-configs shrunk too, then ``extra``."""
    params = inspect.signature(cls.__init__).parameters
    try:
        default = cls()
    except Exception:  # a config that needs arguments: only its signature counts
        default = None
    kwargs = {
        key: value
        for key, value in SIZES.items()
        if (key in params or (default is not None and hasattr(default, key)))
        and not isinstance(getattr(cls, key, None), property)
    }
    for key, sub in getattr(cls, "sub_configs", {}).items():
        if isinstance(sub, type) and key not in extra:
            kwargs[key] = _shrunk(sub, {})
    for key, value in extra.items():
        sub = getattr(cls, "sub_configs", {}).get(key)
        kwargs[key] = _shrunk(sub, value) if isinstance(value, dict) and isinstance(sub, type) else value
    return kwargs


def tiny_config(case: Tiny) -> Any:
    """The case's config object (transformers' config class with tiny sizes)."""
    cls = getattr(transformers, case.config)
    return cls(**_shrunk(cls, case.kwargs))


_ENCODER = dict(max_position_embeddings=32)
_T5 = dict(d_model=32, num_heads=4, num_layers=2, d_ff=64, d_kv=8, dropout_rate=0.0, decoder_start_token_id=0)
_SEQ2SEQ = dict(
    d_model=32,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_layers=2,
    decoder_layers=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=32,
)
_LATENT = dict(
    num_key_value_heads=4,
    q_lora_rank=16,
    kv_lora_rank=8,
    qk_nope_head_dim=8,
    qk_rope_head_dim=4,
    head_dim=4,
    v_head_dim=8,
    first_k_dense_replace=1,
    n_group=1,
    topk_group=1,
)

# The sizes of a tower whose config class the parent's sub_configs leave open (AutoConfig).
_TOWER = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64)

_MROPE = dict(rope_type="default", rope_theta=10000.0, mrope_section=[1, 1, 2])
_QWEN_VL_TEXT = dict(_TOWER, num_key_value_heads=2, head_dim=8, vocab_size=VOCAB, rope_parameters=_MROPE)
_QWEN3_5_TEXT = dict(
    _TOWER,
    num_key_value_heads=2,
    head_dim=8,
    vocab_size=VOCAB,
    layer_types=["linear_attention", "full_attention"],
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    rope_parameters=dict(_MROPE, partial_rotary_factor=0.5),
)

# Vision encoders of the multimodal decoders (Qwen: 2 x 2 patches of 2 x 2 pixels merged into one
# text token; Qwen2.5-VL's layer 0 attends within windows of 2 x 2 merged tokens, layer 1 to the image).
_QWEN_VISION = dict(
    _TOWER,
    num_heads=4,
    depth=2,
    out_hidden_size=32,
    patch_size=2,
    temporal_patch_size=2,
    spatial_merge_size=2,
)
_QWEN2_5_VISION = dict(_QWEN_VISION, window_size=8, fullatt_block_indexes=[1])
_QWEN3_VISION = dict(_QWEN_VISION, num_position_embeddings=16)
_QWEN_TOKENS = dict(image_token_id=5, video_token_id=6, vision_start_token_id=3, vision_end_token_id=4)

# A tiny convolutional feature encoder: 400 samples become a few frames.
_AUDIO = dict(
    conv_dim=(16, 16),
    conv_stride=(5, 4),
    conv_kernel=(10, 4),
    num_conv_pos_embeddings=4,
    num_conv_pos_embedding_groups=2,
    apply_spec_augment=False,
)

# A vision-language wrapper over a CLIP tower (3 x 3 patches: 9 image tokens) and a Llama decoder.
_LLAVA: dict[str, Any] = dict(
    text_config=dict(_TOWER, model_type="llama", num_key_value_heads=2, head_dim=8, vocab_size=VOCAB),
    vision_config=dict(_TOWER, model_type="clip_vision_model", image_size=12, patch_size=4),
    image_token_index=5,
)

_GLM_MROPE = dict(_MROPE, mrope_section=[1, 0, 1], partial_rotary_factor=0.5)

# Idefics3 / SmolVLM: a Llama decoder over a SigLIP-like tower, 4 x 4 patches pixel-shuffled into 4 tokens.
_IDEFICS3: dict[str, Any] = dict(
    text_config=_LLAVA["text_config"],
    vision_config=dict(_TOWER, image_size=16, patch_size=4),
    scale_factor=2,
    image_token_id=5,
)

# A Whisper-like audio encoder alone: 8 mel bins, 16 frames (8 positions after the strided convolution).
_AUDIO_ENCODER = dict(
    d_model=32,
    encoder_attention_heads=4,
    encoder_layers=2,
    encoder_ffn_dim=64,
    num_mel_bins=8,
    max_source_positions=8,
)

# case id -> tiny model; the model_type is the config class's.
CASES: dict[str, Tiny] = {
    # ---------------------------------------------------------------- the first 37 families
    "bert": Tiny("BertConfig", "BertForMaskedLM", _ENCODER),
    "roberta": Tiny("RobertaConfig", "RobertaForMaskedLM", dict(_ENCODER, pad_token_id=1)),
    "xlm-roberta": Tiny("XLMRobertaConfig", "XLMRobertaForMaskedLM", dict(_ENCODER, pad_token_id=1)),
    "electra": Tiny("ElectraConfig", "ElectraForPreTraining", dict(_ENCODER, embedding_size=16)),
    "albert": Tiny(
        "AlbertConfig", "AlbertForMaskedLM", dict(_ENCODER, embedding_size=16), unfed_first_call=True
    ),
    "distilbert": Tiny(
        "DistilBertConfig",
        "DistilBertModel",
        dict(dim=32, n_heads=4, n_layers=2, hidden_dim=64, max_position_embeddings=32, dropout=0.0),
    ),
    "gpt2": Tiny("GPT2Config", "GPT2LMHeadModel", dict(n_embd=32, n_head=4, n_layer=2, n_positions=32)),
    "gpt_neox": Tiny("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(rotary_pct=0.25)),
    "bloom": Tiny("BloomConfig", "BloomForCausalLM", dict(n_head=4, n_layer=2), scores_in_module=True),
    "opt": Tiny("OPTConfig", "OPTForCausalLM", dict(ffn_dim=64, word_embed_proj_dim=32)),
    # Post-norm OPT (opt-350m): layer i >= 1 is fed by layer i-1's final_layer_norm.
    "opt-postnorm": Tiny(
        "OPTConfig", "OPTModel", dict(ffn_dim=64, word_embed_proj_dim=32, do_layer_norm_before=False)
    ),
    "llama": Tiny("LlamaConfig", "LlamaForCausalLM"),
    "mistral": Tiny("MistralConfig", "MistralModel", dict(sliding_window=None)),
    "qwen2": Tiny("Qwen2Config", "Qwen2ForCausalLM"),
    "gemma": Tiny("GemmaConfig", "GemmaForCausalLM", dict(head_dim=16)),  # head_dim != hidden / heads
    "phi3": Tiny("Phi3Config", "Phi3ForCausalLM", dict(partial_rotary_factor=0.5)),
    "qwen3": Tiny("Qwen3Config", "Qwen3ForCausalLM"),
    "qwen3_moe": Tiny("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "gemma2": Tiny("Gemma2Config", "Gemma2ForCausalLM", dict(head_dim=16)),
    "gemma3_text": Tiny("Gemma3TextConfig", "Gemma3ForCausalLM", dict(head_dim=16)),
    "olmo2": Tiny("Olmo2Config", "Olmo2ForCausalLM"),
    "mixtral": Tiny("MixtralConfig", "MixtralForCausalLM"),
    "starcoder2": Tiny("Starcoder2Config", "Starcoder2ForCausalLM"),
    "stablelm": Tiny("StableLmConfig", "StableLmForCausalLM", dict(qk_layernorm=True)),
    "phi": Tiny("PhiConfig", "PhiForCausalLM", dict(qk_layernorm=True)),
    "gpt_neo": Tiny(
        "GPTNeoConfig",
        "GPTNeoForCausalLM",
        dict(num_heads=4, num_layers=2, attention_types=[[["global", "local"], 1]]),
        scores_in_module=True,
    ),
    "gptj": Tiny(
        "GPTJConfig", "GPTJForCausalLM", dict(n_embd=32, n_head=4, n_layer=2, rotary_dim=4, n_positions=32)
    ),
    "falcon-new": Tiny(
        "FalconConfig",
        "FalconForCausalLM",
        dict(new_decoder_architecture=True, num_kv_heads=2),
        scores_in_module=True,
    ),
    "falcon-multi-query": Tiny(
        "FalconConfig", "FalconForCausalLM", dict(multi_query=True, bias=True), scores_in_module=True
    ),
    "falcon-multi-head": Tiny(
        "FalconConfig", "FalconForCausalLM", dict(multi_query=False), scores_in_module=True
    ),
    "mpt": Tiny(
        "MptConfig",
        "MptForCausalLM",
        dict(d_model=32, n_heads=4, n_layers=2, max_seq_len=32),
        scores_in_module=True,
    ),
    "modernbert": Tiny(
        "ModernBertConfig",
        "ModernBertForMaskedLM",
        dict(_ENCODER, cls_token_id=1, sep_token_id=2, global_attn_every_n_layers=2),
    ),
    "t5": Tiny("T5Config", "T5ForConditionalGeneration", _T5, inputs="seq2seq"),
    "mt5": Tiny("MT5Config", "MT5ForConditionalGeneration", dict(_T5, num_layers=1), inputs="seq2seq"),
    "bart": Tiny("BartConfig", "BartForConditionalGeneration", _SEQ2SEQ, inputs="seq2seq"),
    "whisper": Tiny(
        "WhisperConfig",
        "WhisperForConditionalGeneration",
        dict(
            _SEQ2SEQ,
            num_mel_bins=8,
            max_source_positions=8,
            max_target_positions=16,
            decoder_start_token_id=1,
        ),
        inputs="speech",
    ),
    "vit": Tiny("ViTConfig", "ViTModel", _ENCODER, inputs="image"),
    "dinov2": Tiny("Dinov2Config", "Dinov2Model", dict(mlp_ratio=2), inputs="image"),
    "clip": Tiny(
        "CLIPConfig", "CLIPModel", dict(text_config=_ENCODER, vision_config=_ENCODER), inputs="clip"
    ),
    "deepseek_v3": Tiny("DeepseekV3Config", "DeepseekV3ForCausalLM", _LATENT),
    # ----------------------------------------------------------------- families of 2025-2026
    "gpt_oss": Tiny("GptOssConfig", "GptOssForCausalLM"),
    "smollm3": Tiny("SmolLM3Config", "SmolLM3ForCausalLM", dict(no_rope_layers=[1, 0])),
    "cohere": Tiny("CohereConfig", "CohereForCausalLM"),
    "cohere-qk-norm": Tiny("CohereConfig", "CohereForCausalLM", dict(use_qk_norm=True)),
    "cohere2": Tiny(
        "Cohere2Config", "Cohere2ForCausalLM", dict(layer_types=["sliding_attention", "full_attention"])
    ),
    "glm": Tiny("GlmConfig", "GlmForCausalLM"),
    "glm4": Tiny("Glm4Config", "Glm4ForCausalLM"),
    "glm4_moe": Tiny("Glm4MoeConfig", "Glm4MoeForCausalLM", dict(use_qk_norm=True, first_k_dense_replace=1)),
    "seed_oss": Tiny("SeedOssConfig", "SeedOssForCausalLM"),
    "ernie4_5": Tiny("Ernie4_5Config", "Ernie4_5ForCausalLM"),
    "ernie4_5_moe": Tiny("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM"),
    "hunyuan_v1_dense": Tiny("HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM"),
    "hunyuan_v1_moe": Tiny("HunYuanMoEV1Config", "HunYuanMoEV1ForCausalLM"),
    "granite": Tiny("GraniteConfig", "GraniteForCausalLM"),
    "granitemoe": Tiny("GraniteMoeConfig", "GraniteMoeForCausalLM"),
    "granitemoeshared": Tiny("GraniteMoeSharedConfig", "GraniteMoeSharedForCausalLM"),
    "olmo3": Tiny("Olmo3Config", "Olmo3ForCausalLM"),
    "flex_olmo": Tiny("FlexOlmoConfig", "FlexOlmoForCausalLM"),
    "olmoe": Tiny("OlmoeConfig", "OlmoeForCausalLM"),
    "minimax_m2": Tiny("MiniMaxM2Config", "MiniMaxM2ForCausalLM"),
    "exaone4": Tiny("Exaone4Config", "Exaone4ForCausalLM"),
    "exaone4-sliding": Tiny(
        "Exaone4Config",
        "Exaone4ForCausalLM",
        dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"]),
    ),
    "exaone_moe": Tiny("ExaoneMoeConfig", "ExaoneMoeForCausalLM"),
    "helium": Tiny("HeliumConfig", "HeliumForCausalLM"),
    "arcee": Tiny("ArceeConfig", "ArceeForCausalLM"),
    "ministral": Tiny("MinistralConfig", "MinistralForCausalLM"),
    "ministral3": Tiny("Ministral3Config", "Ministral3ForCausalLM"),
    "qwen2_moe": Tiny("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
    "phimoe": Tiny("PhimoeConfig", "PhimoeForCausalLM"),
    "olmo": Tiny("OlmoConfig", "OlmoForCausalLM"),
    "nemotron": Tiny("NemotronConfig", "NemotronForCausalLM"),
    "cwm": Tiny("CwmConfig", "CwmForCausalLM"),
    "vaultgemma": Tiny("VaultGemmaConfig", "VaultGemmaForCausalLM"),
    "solar_open": Tiny("SolarOpenConfig", "SolarOpenForCausalLM"),
    "hy_v3": Tiny("HYV3Config", "HYV3ForCausalLM"),
    "apertus": Tiny("ApertusConfig", "ApertusForCausalLM"),
    "afmoe": Tiny("AfmoeConfig", "AfmoeForCausalLM"),
    "laguna": Tiny("LagunaConfig", "LagunaForCausalLM"),
    "deepseek_v2": Tiny("DeepseekV2Config", "DeepseekV2ForCausalLM", _LATENT),
    "deepseek_v32": Tiny("DeepseekV32Config", "DeepseekV32ForCausalLM", _LATENT),
    "glm4_moe_lite": Tiny("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM", _LATENT),
    "youtu": Tiny("YoutuConfig", "YoutuForCausalLM", _LATENT),
    # hybrids: the first layer has no softmax attention, the second has
    "qwen3_next": Tiny(
        "Qwen3NextConfig",
        "Qwen3NextForCausalLM",
        dict(
            layer_types=["linear_attention", "full_attention"],
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
        ),
    ),
    "lfm2": Tiny("Lfm2Config", "Lfm2ForCausalLM", dict(layer_types=["conv", "full_attention"])),
    "falcon_h1": Tiny(
        "FalconH1Config", "FalconH1ForCausalLM", dict(key_multiplier=1.0, attention_in_multiplier=1.0)
    ),
    "jamba": Tiny("JambaConfig", "JambaForCausalLM", dict(attn_layer_period=2, attn_layer_offset=1)),
    "nemotron_h": Tiny(
        "NemotronHConfig", "NemotronHForCausalLM", dict(layers_block_type=["mamba", "attention"])
    ),
    "minimax": Tiny(
        "MiniMaxConfig", "MiniMaxForCausalLM", dict(layer_types=["linear_attention", "full_attention"])
    ),
    "kimi_linear": Tiny(
        "KimiLinearConfig",
        "KimiLinearForCausalLM",
        dict(_LATENT, q_lora_rank=None, layer_types=["linear_attention", "full_attention"]),
    ),
    # ----------------------------------------------------------------- towers, vision, audio
    "siglip": Tiny(
        "SiglipConfig", "SiglipModel", dict(text_config=_ENCODER, vision_config=_ENCODER), inputs="clip"
    ),
    "siglip2": Tiny(
        "Siglip2Config",
        "Siglip2Model",
        dict(text_config=_ENCODER, vision_config=dict(num_patches=16)),
        inputs="siglip2",
    ),
    "gemma3": Tiny(
        "Gemma3Config",
        "Gemma3ForConditionalGeneration",
        dict(
            text_config=dict(_TOWER, num_key_value_heads=2, head_dim=16, vocab_size=VOCAB),
            vision_config=dict(_TOWER, image_size=12, patch_size=4),
            mm_tokens_per_image=1,
            image_token_index=5,
        ),
        inputs="gemma3",
    ),
    "dinov3_vit": Tiny("DINOv3ViTConfig", "DINOv3ViTModel", inputs="image", identity_rope=""),
    "modernbert-decoder": Tiny("ModernBertDecoderConfig", "ModernBertDecoderForCausalLM"),
    "wav2vec2": Tiny("Wav2Vec2Config", "Wav2Vec2Model", _AUDIO, inputs="audio"),
    "wav2vec2-stable": Tiny(
        "Wav2Vec2Config", "Wav2Vec2Model", dict(_AUDIO, do_stable_layer_norm=True), inputs="audio"
    ),
    "hubert": Tiny("HubertConfig", "HubertModel", _AUDIO, inputs="audio"),
    "llama4_text": Tiny(
        "Llama4TextConfig",
        "Llama4ForCausalLM",
        dict(no_rope_layers=[1, 0], floor_scale=2, attn_temperature_tuning=True),
        scaled_queries=True,
    ),
    # multimodal decoders, both towers (an image among the text; the vision RoPE made the identity)
    "qwen2_5_vl": Tiny(
        "Qwen2_5_VLConfig",
        "Qwen2_5_VLForConditionalGeneration",
        dict(
            text_config=dict(_QWEN_VL_TEXT),
            vision_config=_QWEN2_5_VISION,
            **_QWEN_TOKENS,
        ),
        inputs="qwen_vl",
        identity_rope="visual",
    ),
    "qwen2_5_vl_text": Tiny("Qwen2_5_VLTextConfig", "Qwen2_5_VLTextModel", dict(rope_parameters=_MROPE)),
    "qwen3_vl": Tiny(
        "Qwen3VLConfig",
        "Qwen3VLForConditionalGeneration",
        dict(
            text_config=dict(_QWEN_VL_TEXT),
            vision_config=dict(_QWEN3_VISION, deepstack_visual_indexes=[0]),
            **_QWEN_TOKENS,
        ),
        inputs="qwen_vl",
        identity_rope="visual",
    ),
    "qwen3_vl_text": Tiny("Qwen3VLTextConfig", "Qwen3VLTextModel", dict(rope_parameters=_MROPE)),
    "qwen3_5": Tiny(
        "Qwen3_5Config",
        "Qwen3_5ForConditionalGeneration",
        dict(
            text_config=dict(_QWEN3_5_TEXT),
            vision_config=_QWEN3_VISION,
            **_QWEN_TOKENS,
        ),
        inputs="qwen_vl",
        identity_rope="visual",
    ),
    "qwen3_5_text": Tiny("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", _QWEN3_5_TEXT),
    "qwen3_5_moe": Tiny(
        "Qwen3_5MoeConfig",
        "Qwen3_5MoeForConditionalGeneration",
        dict(
            text_config=dict(
                _QWEN3_5_TEXT,
                num_experts=4,
                num_experts_per_tok=2,
                moe_intermediate_size=16,
                shared_expert_intermediate_size=16,
            ),
            vision_config=_QWEN3_VISION,
            **_QWEN_TOKENS,
        ),
        inputs="qwen_vl",
        identity_rope="visual",
    ),
    "qwen3_5_moe_text": Tiny("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", _QWEN3_5_TEXT),
    "mistral3": Tiny(
        "Mistral3Config",
        "Mistral3ForConditionalGeneration",
        dict(
            text_config=dict(
                _TOWER, model_type="mistral", num_key_value_heads=2, head_dim=8, vocab_size=VOCAB
            ),
            vision_config=dict(_TOWER, model_type="pixtral", head_dim=8, image_size=16, patch_size=4),
            image_token_index=5,
            spatial_merge_size=2,
        ),
        inputs="mistral3",
        identity_rope="vision_tower",  # Pixtral's 2-D RoPE; the text decoder keeps its own
    ),
    "llama4": Tiny(
        "Llama4Config",
        "Llama4ForConditionalGeneration",
        dict(
            text_config=dict(
                _TOWER,
                num_key_value_heads=2,
                head_dim=8,
                vocab_size=VOCAB,
                no_rope_layers=[1, 0],
                floor_scale=2,
                intermediate_size_mlp=64,
                num_local_experts=2,
            ),
            vision_config=dict(
                _TOWER,
                image_size=16,
                patch_size=4,
                intermediate_size=128,  # the pixel shuffle's width: hidden / ratio^2
                vision_output_dim=32,
                projector_input_dim=32,
                projector_output_dim=32,
            ),
            image_token_index=5,
        ),
        inputs="llama4",
        scaled_queries=True,
        identity_rope="vision_model",
        # transformers 5.24's Llama4ForConditionalGeneration.forward fails after its language model ran
        # (its output has no image_outputs): each tower runs on its own.
        run="vision_model,language_model",
    ),
    "unispeech": Tiny("UniSpeechConfig", "UniSpeechModel", _AUDIO, inputs="audio"),
    "unispeech-sat": Tiny("UniSpeechSatConfig", "UniSpeechSatModel", _AUDIO, inputs="audio"),
    "data2vec-audio": Tiny(
        "Data2VecAudioConfig", "Data2VecAudioModel", dict(_AUDIO, num_conv_pos_embeddings=2), inputs="audio"
    ),
    "camembert": Tiny("CamembertConfig", "CamembertModel", dict(_ENCODER, pad_token_id=1)),
    "data2vec-text": Tiny("Data2VecTextConfig", "Data2VecTextModel", dict(_ENCODER, pad_token_id=1)),
    "ernie": Tiny("ErnieConfig", "ErnieModel", _ENCODER),
    "roberta-prelayernorm": Tiny(
        "RobertaPreLayerNormConfig", "RobertaPreLayerNormModel", dict(_ENCODER, pad_token_id=1)
    ),
    "megatron-bert": Tiny("MegatronBertConfig", "MegatronBertModel", _ENCODER, scores_in_module=True),
    "deit": Tiny("DeiTConfig", "DeiTModel", _ENCODER, inputs="image"),
    "vit_mae": Tiny("ViTMAEConfig", "ViTMAEModel", dict(_ENCODER, mask_ratio=0.0), inputs="image"),
    "vit_msn": Tiny("ViTMSNConfig", "ViTMSNModel", _ENCODER, inputs="image"),
    "ijepa": Tiny("IJepaConfig", "IJepaModel", _ENCODER, inputs="image"),
    "dinov2_with_registers": Tiny(
        "Dinov2WithRegistersConfig", "Dinov2WithRegistersModel", dict(mlp_ratio=2), inputs="image"
    ),
    "granitemoehybrid": Tiny(
        "GraniteMoeHybridConfig",
        "GraniteMoeHybridForCausalLM",
        dict(mamba_n_heads=8, mamba_d_head=8, layer_types=["mamba", "attention"]),
    ),
    "granitemoehybrid-rope": Tiny(
        "GraniteMoeHybridConfig",
        "GraniteMoeHybridForCausalLM",
        dict(
            mamba_n_heads=8,
            mamba_d_head=8,
            layer_types=["mamba", "attention"],
            position_embedding_type="rope",
        ),
    ),
    "bamba": Tiny(
        "BambaConfig", "BambaForCausalLM", dict(mamba_n_heads=8, mamba_d_head=8, attn_layer_indices=[1])
    ),
    # ----------------------------------------------- issue 18, second round: towers saved on their own
    "clip_text_model": Tiny("CLIPTextConfig", "CLIPTextModel", _ENCODER),
    "clip_vision_model": Tiny("CLIPVisionConfig", "CLIPVisionModel", _ENCODER, inputs="image"),
    "siglip_text_model": Tiny("SiglipTextConfig", "SiglipTextModel", _ENCODER),
    "siglip_vision_model": Tiny("SiglipVisionConfig", "SiglipVisionModel", _ENCODER, inputs="image"),
    "siglip2_text_model": Tiny("Siglip2TextConfig", "Siglip2TextModel", _ENCODER),
    "siglip2_vision_model": Tiny(
        "Siglip2VisionConfig", "Siglip2VisionModel", dict(num_patches=16), inputs="siglip2_vision"
    ),
    "metaclip_2": Tiny(
        "MetaClip2Config", "MetaClip2Model", dict(text_config=_ENCODER, vision_config=_ENCODER), inputs="clip"
    ),
    "metaclip_2_text_model": Tiny("MetaClip2TextConfig", "MetaClip2TextModel", _ENCODER),
    "metaclip_2_vision_model": Tiny(
        "MetaClip2VisionConfig", "MetaClip2VisionModel", _ENCODER, inputs="image"
    ),
    "qwen2_5_vl_vision": Tiny(
        "Qwen2_5_VLVisionConfig",
        "Qwen2_5_VisionTransformerPretrainedModel",
        _QWEN2_5_VISION,
        inputs="qwen_vision",
        identity_rope="",
    ),
    "qwen3_vl_vision": Tiny(
        "Qwen3VLVisionConfig",
        "Qwen3VLVisionModel",
        dict(_QWEN3_VISION, deepstack_visual_indexes=[0]),
        inputs="qwen_vision",
        identity_rope="",
    ),
    "qwen3_5_vision": Tiny(
        "Qwen3_5VisionConfig", "Qwen3_5VisionModel", _QWEN3_VISION, inputs="qwen_vision", identity_rope=""
    ),
    "qwen3_5_moe_vision": Tiny(
        "Qwen3_5MoeVisionConfig",
        "Qwen3_5MoeVisionModel",
        _QWEN3_VISION,
        inputs="qwen_vision",
        identity_rope="",
    ),
    "llama4_vision_model": Tiny(
        "Llama4VisionConfig",
        "Llama4VisionModel",
        dict(
            _TOWER,
            image_size=16,
            patch_size=4,
            intermediate_size=128,
            vision_output_dim=32,
            projector_input_dim=32,
            projector_output_dim=32,
        ),
        inputs="image16",
        identity_rope="",
    ),
    "pixtral": Tiny(
        "PixtralVisionConfig",
        "PixtralVisionModel",
        dict(_TOWER, head_dim=8, image_size=16, patch_size=4),
        inputs="image16",
        identity_rope="",
    ),
    # ------------------------------------------------------------- issue 18, second round: decoders
    "gpt_bigcode": Tiny(
        "GPTBigCodeConfig", "GPTBigCodeForCausalLM", dict(n_embd=32, n_head=4, n_layer=2, n_positions=32)
    ),
    "gpt_bigcode-multi-head": Tiny(
        "GPTBigCodeConfig",
        "GPTBigCodeForCausalLM",
        dict(n_embd=32, n_head=4, n_layer=2, n_positions=32, multi_query=False),
    ),
    "openai-gpt": Tiny(
        "OpenAIGPTConfig",
        "OpenAIGPTLMHeadModel",
        dict(n_embd=32, n_head=4, n_layer=2, n_positions=32),
        scores_in_module=True,
    ),
    "xglm": Tiny(
        "XGLMConfig",
        "XGLMForCausalLM",
        dict(d_model=32, attention_heads=4, num_layers=2, ffn_dim=64),
        scores_in_module=True,
    ),
    "biogpt": Tiny("BioGptConfig", "BioGptForCausalLM"),
    "persimmon": Tiny("PersimmonConfig", "PersimmonForCausalLM"),
    "bitnet": Tiny("BitNetConfig", "BitNetForCausalLM"),
    "nanochat": Tiny("NanoChatConfig", "NanoChatForCausalLM"),
    "minicpm3": Tiny("MiniCPM3Config", "MiniCPM3ForCausalLM", _LATENT),
    "lfm2_moe": Tiny(
        "Lfm2MoeConfig",
        "Lfm2MoeForCausalLM",
        dict(layer_types=["conv", "full_attention"], num_dense_layers=1),
    ),
    # ------------------------------------------ issue 18, second round: vision-language wrappers
    "llava": Tiny("LlavaConfig", "LlavaForConditionalGeneration", _LLAVA, inputs="llava"),
    # the same wrapper over a SigLIP tower and a Qwen3 decoder (qk-norm): each tower read as its own model_type
    "llava-siglip-qwen3": Tiny(
        "LlavaConfig",
        "LlavaForConditionalGeneration",
        dict(
            _LLAVA,
            text_config=dict(_LLAVA["text_config"], model_type="qwen3"),
            vision_config=dict(_LLAVA["vision_config"], model_type="siglip_vision_model"),
            vision_feature_select_strategy="full",
        ),
        inputs="llava",
    ),
    "vipllava": Tiny(
        "VipLlavaConfig",
        "VipLlavaForConditionalGeneration",
        dict(_LLAVA, vision_feature_layers=[-2, -1]),
        inputs="llava",
    ),
    "paligemma": Tiny(
        "PaliGemmaConfig",
        "PaliGemmaForConditionalGeneration",
        dict(
            _LLAVA,
            text_config=dict(_LLAVA["text_config"], model_type="gemma"),
            vision_config=dict(_LLAVA["vision_config"], model_type="siglip_vision_model"),
            projection_dim=32,
        ),
        inputs="llava",
    ),
    "aya_vision": Tiny(
        "AyaVisionConfig",
        "AyaVisionForConditionalGeneration",
        dict(
            _LLAVA,
            text_config=dict(
                _LLAVA["text_config"],
                model_type="cohere2",
                layer_types=["sliding_attention", "full_attention"],
            ),
            vision_config=dict(_LLAVA["vision_config"], model_type="siglip_vision_model", image_size=16),
            downsample_factor=2,
        ),
        inputs="llava",
    ),
    "qwen2_vl": Tiny(
        "Qwen2VLConfig",
        "Qwen2VLForConditionalGeneration",
        dict(text_config=dict(_QWEN_VL_TEXT), vision_config=dict(_QWEN_VISION, embed_dim=32), **_QWEN_TOKENS),
        inputs="qwen_vl",
        identity_rope="visual",
    ),
    "qwen2_vl_text": Tiny("Qwen2VLTextConfig", "Qwen2VLTextModel", dict(rope_parameters=_MROPE)),
    "qwen3_vl_moe": Tiny(
        "Qwen3VLMoeConfig",
        "Qwen3VLMoeForConditionalGeneration",
        dict(
            text_config=dict(_QWEN_VL_TEXT, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16),
            vision_config=dict(_QWEN3_VISION, deepstack_visual_indexes=[0]),
            **_QWEN_TOKENS,
        ),
        inputs="qwen_vl",
        identity_rope="visual",
    ),
    "qwen3_vl_moe_text": Tiny("Qwen3VLMoeTextConfig", "Qwen3VLMoeTextModel", dict(rope_parameters=_MROPE)),
    "qwen3_vl_moe_vision": Tiny(
        "Qwen3VLMoeVisionConfig",
        "Qwen3VLMoeVisionModel",
        dict(_QWEN3_VISION, deepstack_visual_indexes=[0]),
        inputs="qwen_vision",
        identity_rope="",
    ),
    # -------------------------------------------------------------- issue 18, second round: encoders
    "xlm-roberta-xl": Tiny("XLMRobertaXLConfig", "XLMRobertaXLModel", dict(_ENCODER, pad_token_id=1)),
    "eurobert": Tiny("EuroBertConfig", "EuroBertModel"),
    "splinter": Tiny("SplinterConfig", "SplinterModel", _ENCODER),
    "rembert": Tiny(
        "RemBertConfig",
        "RemBertModel",
        dict(_ENCODER, input_embedding_size=16, output_embedding_size=16),
        scores_in_module=True,
    ),
    "layoutlm": Tiny("LayoutLMConfig", "LayoutLMModel", _ENCODER),
    "markuplm": Tiny("MarkupLMConfig", "MarkupLMModel", _ENCODER),
    "mpnet": Tiny("MPNetConfig", "MPNetModel", dict(_ENCODER, pad_token_id=1), scores_in_module=True),
    "data2vec-vision": Tiny(
        "Data2VecVisionConfig", "Data2VecVisionModel", _ENCODER, inputs="image", scores_in_module=True
    ),
    "data2vec-vision-relative": Tiny(
        "Data2VecVisionConfig",
        "Data2VecVisionModel",
        dict(_ENCODER, use_relative_position_bias=True),
        inputs="image",
        scores_in_module=True,
    ),
    "beit": Tiny(
        "BeitConfig",
        "BeitModel",
        dict(_ENCODER, use_relative_position_bias=True),
        inputs="image",
        scores_in_module=True,
    ),
    # ------------------------------------------------------ issue 18, second round: encoder-decoders
    "mbart": Tiny("MBartConfig", "MBartForConditionalGeneration", _SEQ2SEQ, inputs="seq2seq"),
    "pegasus": Tiny("PegasusConfig", "PegasusForConditionalGeneration", _SEQ2SEQ, inputs="seq2seq"),
    "m2m_100": Tiny("M2M100Config", "M2M100ForConditionalGeneration", _SEQ2SEQ, inputs="seq2seq"),
    "blenderbot": Tiny("BlenderbotConfig", "BlenderbotForConditionalGeneration", _SEQ2SEQ, inputs="seq2seq"),
    "blenderbot-small": Tiny(
        "BlenderbotSmallConfig", "BlenderbotSmallForConditionalGeneration", _SEQ2SEQ, inputs="seq2seq"
    ),
    "plbart": Tiny("PLBartConfig", "PLBartForConditionalGeneration", _SEQ2SEQ, inputs="seq2seq"),
    "marian": Tiny(
        "MarianConfig", "MarianMTModel", dict(_SEQ2SEQ, decoder_start_token_id=0), inputs="seq2seq"
    ),
    # ------------------------------------------------- issue 18, second round: more llama-like decoders
    "aria_text": Tiny("AriaTextConfig", "AriaTextForCausalLM"),
    "granite_swa": Tiny("GraniteSWAConfig", "GraniteSWAForCausalLM"),
    "granitemoe_swa": Tiny("GraniteMoeSWAConfig", "GraniteMoeSWAForCausalLM"),
    "internlm3": Tiny("InternLM3Config", "LlamaForCausalLM"),
    "iquestcoder": Tiny("IQuestCoderConfig", "LlamaForCausalLM"),
    "jais2": Tiny("Jais2Config", "Jais2ForCausalLM"),
    "exaone": Tiny("ExaoneConfig", "LlamaForCausalLM"),
    "hyperclovax": Tiny("HyperCLOVAXConfig", "HyperCLOVAXForCausalLM", dict(use_post_norm=True)),
    "flint": Tiny(
        "FlintConfig",
        "FlintForCausalLM",
        dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"]),
    ),
    "mellum": Tiny("MellumConfig", "MellumForCausalLM"),
    "kolibri1": Tiny("Kolibri1Config", "Kolibri1ForCausalLM"),
    "sarvam_mla": Tiny("SarvamMLAConfig", "DeepseekV3ForCausalLM", dict(_LATENT, q_lora_rank=None)),
    "axk1": Tiny("AXK1Config", "AXK1ForCausalLM", _LATENT),
    "bert-generation": Tiny("BertGenerationConfig", "BertGenerationDecoder", dict(_ENCODER, is_decoder=True)),
    "roc_bert": Tiny("RoCBertConfig", "RoCBertForCausalLM", dict(_ENCODER, is_decoder=True)),
    "xmod": Tiny(
        "XmodConfig",
        "XmodForCausalLM",
        dict(_ENCODER, is_decoder=True, pad_token_id=1, default_language="en_XX"),
    ),
    # ---------------------------------------------- issue 18, second round: disentangled attention
    "deberta": Tiny(
        "DebertaConfig",
        "DebertaModel",
        dict(_ENCODER, relative_attention=True, pos_att_type=["p2c", "c2p"]),
        scores_in_module=True,
    ),
    "deberta-v2": Tiny(
        "DebertaV2Config",
        "DebertaV2Model",
        dict(_ENCODER, relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=8),
        scores_in_module=True,
    ),
    # ---------------------------------------- issue 18, second round: more text and vision towers
    # (GLM's M-RoPE with partial rotary: 4 of 8 coordinates rotate, sections of 1 + 0 + 1 pairs)
    "glm4v_text": Tiny("Glm4vTextConfig", "Glm4vTextModel", dict(rope_parameters=_GLM_MROPE)),
    "glm_ocr_text": Tiny("GlmOcrTextConfig", "GlmOcrTextModel", dict(rope_parameters=_GLM_MROPE)),
    "glm4v_moe_text": Tiny(
        "Glm4vMoeTextConfig", "Glm4vMoeTextModel", dict(rope_parameters=_GLM_MROPE, first_k_dense_replace=1)
    ),
    "glm_image_text": Tiny("GlmImageTextConfig", "GlmImageTextModel", dict(rope_parameters=_GLM_MROPE)),
    "apertus1p5_text": Tiny("Apertus1p5TextConfig", "Apertus1p5TextModel"),
    "granite_docling_text": Tiny("GraniteDoclingTextConfig", "GraniteDoclingTextModel"),
    "chinese_clip": Tiny(
        "ChineseCLIPConfig",
        "ChineseCLIPModel",
        dict(text_config=_ENCODER, vision_config=_ENCODER),
        inputs="clip",
    ),
    "chinese_clip_text_model": Tiny("ChineseCLIPTextConfig", "ChineseCLIPTextModel", _ENCODER),
    "chinese_clip_vision_model": Tiny(
        "ChineseCLIPVisionConfig", "ChineseCLIPVisionModel", _ENCODER, inputs="image"
    ),
    "idefics3_vision": Tiny("Idefics3VisionConfig", "Idefics3VisionTransformer", _ENCODER, inputs="image"),
    "smolvlm_vision": Tiny("SmolVLMVisionConfig", "SmolVLMVisionTransformer", _ENCODER, inputs="image"),
    "idefics3": Tiny("Idefics3Config", "Idefics3ForConditionalGeneration", _IDEFICS3, inputs="idefics3"),
    "smolvlm": Tiny("SmolVLMConfig", "SmolVLMForConditionalGeneration", _IDEFICS3, inputs="idefics3"),
    "cohere2_moe": Tiny(
        "Cohere2MoeConfig",
        "Cohere2MoeModel",
        dict(layer_types=["sliding_attention", "full_attention"], prefix_dense_sliding_window_pattern=0),
    ),
    # -------------------------------------------------- issue 18, second round: T5-like seq2seq
    "umt5": Tiny(
        "UMT5Config", "UMT5ForConditionalGeneration", dict(_T5, num_decoder_layers=2), inputs="seq2seq"
    ),
    "switch_transformers": Tiny(
        "SwitchTransformersConfig",
        "SwitchTransformersForConditionalGeneration",
        dict(_T5, num_decoder_layers=2, num_experts=2, expert_capacity=8),
        inputs="seq2seq",
    ),
    "pop2piano": Tiny(
        "Pop2PianoConfig",
        "Pop2PianoForConditionalGeneration",
        dict(_T5, num_decoder_layers=2),
        inputs="seq2seq",
    ),
    "mvp": Tiny(
        "MvpConfig", "MvpForConditionalGeneration", _SEQ2SEQ, inputs="seq2seq", scores_in_module=True
    ),
    "fsmt": Tiny(
        "FSMTConfig",
        "FSMTForConditionalGeneration",
        dict(_SEQ2SEQ, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, langs=["en", "de"]),
        inputs="seq2seq",
        scores_in_module=True,
    ),
    "speech_to_text": Tiny(
        "Speech2TextConfig",
        "Speech2TextForConditionalGeneration",
        dict(
            _SEQ2SEQ,
            input_feat_per_channel=8,
            input_channels=1,
            conv_channels=16,
            max_source_positions=16,
            max_target_positions=16,
            decoder_start_token_id=1,
        ),
        inputs="speech_to_text",
    ),
    "qwen2_audio_encoder": Tiny(
        "Qwen2AudioEncoderConfig", "Qwen2AudioEncoder", _AUDIO_ENCODER, inputs="audio_encoder"
    ),
    "voxtral_encoder": Tiny("VoxtralEncoderConfig", "VoxtralEncoder", _AUDIO_ENCODER, inputs="audio_encoder"),
}

# ---------------------------------------------------------------- per-layer shapes and KV sharing
# gemma4: 4 layers (sliding, full, sliding, full); the full layers have heads of 16 (and one key
# head with attention_k_eq_v); layers 2 and 3 reuse the keys of layers 0 and 1.
_GEMMA4_TEXT = dict(
    num_hidden_layers=4,
    layer_types=["sliding_attention", "full_attention"] * 2,
    global_head_dim=16,
    num_global_key_value_heads=1,
    attention_k_eq_v=True,
    num_kv_shared_layers=2,
    hidden_size_per_layer_input=8,
    vocab_size_per_layer_input=VOCAB,
    sliding_window=4,
)
_GEMMA4_UNIFIED = {
    k: v
    for k, v in _GEMMA4_TEXT.items()
    if k not in ("hidden_size_per_layer_input", "vocab_size_per_layer_input")
}
_EMBEDDING_GEMMA2 = dict(
    num_hidden_layers=4,
    layer_types=["sliding_attention", "full_attention"] * 2,
    global_head_dim=16,
    num_global_key_value_heads=1,
    hidden_size_per_layer_input=8,
    sliding_window=4,
    embedding_dim=16,
)
CASES.update(
    {
        "gemma4_text": Tiny("Gemma4TextConfig", "Gemma4ForCausalLM", _GEMMA4_TEXT),
        # without attention_k_eq_v the full layers keep the stack's key heads
        "gemma4_text-kv": Tiny(
            "Gemma4TextConfig",
            "Gemma4ForCausalLM",
            dict(_GEMMA4_TEXT, attention_k_eq_v=False, num_kv_shared_layers=0),
        ),
        # both towers: the text decoder and the vision encoder (4 patches pooled 2 x 2 into one
        # image token); the audio tower is built but not run (not read)
        "gemma4": Tiny(
            "Gemma4Config",
            "Gemma4ForConditionalGeneration",
            dict(
                text_config=dict(_GEMMA4_TEXT),
                vision_config=dict(pooling_kernel_size=2, position_embedding_size=8),
                audio_config=dict(output_proj_dims=32, subsampling_conv_channels=[8, 4]),
                image_token_id=5,
            ),
            inputs="gemma4",
            identity_rope="vision_tower",
        ),
        "wavlm": Tiny(
            "WavLMConfig",
            "WavLMModel",
            dict(_AUDIO, num_buckets=8, max_bucket_distance=16),
            inputs="audio",
            mha_forward=True,
        ),
        "wavlm-stable": Tiny(
            "WavLMConfig",
            "WavLMModel",
            dict(_AUDIO, num_buckets=8, max_bucket_distance=16, do_stable_layer_norm=True),
            inputs="audio",
            mha_forward=True,
        ),
        # the two softmax maps of a head pair share q and k: two attention calls per projection
        "diffllama": Tiny("DiffLlamaConfig", "DiffLlamaForCausalLM", calls_per_projection=2),
        "recurrent_gemma": Tiny(
            "RecurrentGemmaConfig",
            "RecurrentGemmaForCausalLM",
            dict(num_hidden_layers=4, block_types=["recurrent", "attention"], lru_width=32),
        ),
        # one shared attention block (tied weights) applied at layers 1 and 3
        "zamba": Tiny(
            "ZambaConfig",
            "ZambaForCausalLM",
            dict(
                num_hidden_layers=4,
                layers_block_type=["linear_attention", "hybrid"] * 2,
                mamba_d_state=4,
                mamba_dt_rank=4,
            ),
        ),
        # the encoder-free Gemma 4: no per-layer inputs (PLE), bidirectional over image tokens only
        "gemma4_unified_text": Tiny("Gemma4UnifiedTextConfig", "Gemma4UnifiedForCausalLM", _GEMMA4_UNIFIED),
        "gemma4_unified": Tiny(
            "Gemma4UnifiedConfig",
            "Gemma4UnifiedForConditionalGeneration",
            dict(text_config=dict(_GEMMA4_UNIFIED), vision_config=None, audio_config=None),
        ),
        "embedding_gemma2_text": Tiny(
            "EmbeddingGemma2TextConfig", "EmbeddingGemma2TextModel", _EMBEDDING_GEMMA2
        ),
        "embedding_gemma2": Tiny(
            "EmbeddingGemma2Config",
            "EmbeddingGemma2Model",
            dict(
                text_config=dict(_EMBEDDING_GEMMA2),
                # an AutoConfig sub-config: the tower's type and sizes are spelled out
                vision_config=dict(
                    _TOWER,
                    model_type="gemma4_vision",
                    num_key_value_heads=2,
                    head_dim=8,
                    patch_size=4,
                    pooling_kernel_size=2,
                    position_embedding_size=8,
                ),
                audio_config=None,
                image_token_id=5,
            ),
            inputs="gemma4",
            identity_rope="vision_tower",
        ),
        # two shared blocks alternating over four hybrid layers, each application with its adapters
        "zamba2": Tiny(
            "Zamba2Config",
            "Zamba2ForCausalLM",
            dict(
                num_hidden_layers=5,
                layers_block_type=["mamba", "hybrid", "hybrid", "hybrid", "hybrid"],
                num_mem_blocks=2,
                use_shared_attention_adapter=True,
                adapter_rank=4,
                use_mem_rope=True,
                head_dim=16,  # its adapters need (key) heads x head_dim = attention_hidden_size
                num_key_value_heads=4,
                mamba_d_state=4,
                mamba_headdim=8,
                n_mamba_heads=8,
            ),
        ),
        "mimo_v2_flash": Tiny(
            "MiMoV2FlashConfig",
            "MiMoV2FlashForCausalLM",
            dict(
                num_key_value_heads=1,  # sliding layers: 2
                layer_types=["full_attention", "sliding_attention"],
                v_head_dim=4,
                sliding_window=4,
                mlp_layer_types=["dense", "sparse"],
            ),
        ),
    }
)
