"""Tiny randomly initialised causal LMs of every architecture family qdrift covers.

They need no download, build in milliseconds, and keep the dimensions that matter for
quantization (group sizes up to 128 divide every input dim; head_dim 32), so tests, benchmarks and
the offline demo exercise the same code paths a 7B model does.
"""

from __future__ import annotations

import torch

# 256 byte tokens and the three special tokens of `tiny_tokenizer`, rounded up.
VOCAB = 272
SPECIALS = ("<pad>", "<|im_start|>", "<|im_end|>")

# ChatML with Hermes-style tools: tool schemas in the system turn, calls as <tool_call> JSON,
# results as <tool_response>. Every rendering is a prefix of the rendering of a longer conversation.
# (transformers renders with trim_blocks, so a newline right after a block tag is written {{ '\\n' }}.)
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n{% endif %}"
    "Tools:{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}"
    "Call a tool as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' %}"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Special-token ids of `tiny_tokenizer` (the 256 byte tokens come first), so that a tiny model's
# generation config ends turns where its chat template does.
IDS = dict(pad_token_id=256, bos_token_id=257, eos_token_id=258)

COMMON = dict(**IDS, vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
MOE = dict(moe_intermediate_size=128, num_experts_per_tok=2)


def _configs() -> dict:
    import transformers as T

    found = {}

    def add(name, cls_name, **kw):
        cls = getattr(T, cls_name, None)
        if cls is not None:  # only the architectures this transformers provides
            found[name] = (cls, kw)

    add("llama", "LlamaConfig", **COMMON, head_dim=32)
    add("qwen2", "Qwen2Config", **COMMON)
    add("qwen3", "Qwen3Config", **COMMON, head_dim=32)
    add("mistral", "MistralConfig", **COMMON, head_dim=32, sliding_window=None)
    add("gpt2", "GPT2Config", vocab_size=VOCAB, n_embd=128, n_layer=2, n_head=4, n_positions=512, **IDS)
    add("gemma2", "Gemma2Config", **COMMON, head_dim=32, sliding_window=16, query_pre_attn_scalar=32)
    add("gemma3", "Gemma3TextConfig", **COMMON, head_dim=32, sliding_window=16, query_pre_attn_scalar=32)
    add("phi3", "Phi3Config", **COMMON)
    add("mixtral", "MixtralConfig", **COMMON, num_local_experts=4, num_experts_per_tok=2)
    add("qwen2_moe", "Qwen2MoeConfig", **COMMON, **MOE, num_experts=4, shared_expert_intermediate_size=128)
    add("qwen3_moe", "Qwen3MoeConfig", **COMMON, **MOE, num_experts=4, head_dim=32)
    add("deepseek_v3", "DeepseekV3Config", **{**COMMON, "num_key_value_heads": 4}, **MOE,
        n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
        q_lora_rank=128, kv_lora_rank=128, qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=32)
    add("glm4_moe", "Glm4MoeConfig", **COMMON, **MOE, n_routed_experts=4, n_shared_experts=1,
        first_k_dense_replace=1, n_group=1, topk_group=1, head_dim=32)
    return found


def architectures() -> list[str]:
    """The tiny architectures available with the installed transformers."""
    return list(_configs())


def tiny_config(arch: str):
    configs = _configs()
    if arch not in configs:
        import difflib

        close = difflib.get_close_matches(arch, configs, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"Unknown tiny architecture '{arch}'.{hint} Available: {', '.join(configs)}")
    cls, kw = configs[arch]
    return cls(**kw)


def tiny_tokenizer():
    """A byte-level tokenizer (no merges) with ChatML specials and a tool-calling chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIALS))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model(arch: str = "llama", *, seed: int = 0, dtype: torch.dtype = torch.float32):
    """A tiny random `AutoModelForCausalLM` of `arch`, in eval mode, with eager attention."""
    from transformers import AutoModelForCausalLM

    config = tiny_config(arch)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="eager")
    return model.eval()
