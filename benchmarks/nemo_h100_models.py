"""The models of the DGX-H100 rows (``model_spec``), the model-card parameter counts that check them
(``MODEL_CARD``, which the specs were not derived from), and Megatron's uneven interleaved pipeline layout of the
models whose layers do not divide into pp × vp (``chunk_layers``).
"""

from __future__ import annotations

from tilewright.engine.io.presets import load_model
from tilewright.engine.ir.workload import LlamaSpec, MLASpec, MoESpec, TransformerDims


def model_spec(name: str, seq: int) -> TransformerDims:
    """The model at the published sequence length: our presets where they exist, else the Hugging Face
    config.json architecture (source in each comment)."""
    if name == "llama3-8b":
        # Llama 3 8B and 3.1 8B share every dimension (meta-llama/Meta-Llama-3-8B and Llama-3.1-8B config.json).
        spec = load_model("llama3.1-8b")
    elif name == "llama3-70b":
        spec = load_model("llama3-70b")
    elif name == "llama3.1-405b":
        spec = LlamaSpec(
            name=name, layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248, vocab=128256,
            comment="meta-llama/Llama-3.1-405B config.json: hidden 16384, 126 layers, 128 heads, 8 KV heads, "
                    "intermediate 53248, vocabulary 128,256, untied; 405,853,388,800 parameters.",
        )
    elif name == "gpt-oss-120b":
        spec = LlamaSpec(
            name=name, layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880, vocab=201088,
            qkv_bias=True, out_bias=True, mlp_bias=True, sliding_window=128, sliding_window_layers="even",
            attention_sinks=True, glu_clamp=7.0, moe=MoESpec(experts=128, top_k=4, expert_ffn=2880, router_bias=True),
            comment="openai/gpt-oss-120b config.json: hidden 2880, 36 layers, 64 heads of 64, 8 KV heads, "
                    "vocabulary 201,088, untied; attention with biases, 128-token sliding window on even "
                    "layers (layer_types alternate sliding/full); every block MoE: 128 SwiGLU experts of width "
                    "2880 with biases, top-4, router with bias; attention sinks (GptOssAttention.sinks, one learned "
                    "logit per head: 64 parameters per layer, no work); experts' gated unit clamped at swiglu_limit "
                    "7.0 (glu_clamp). Model card (arXiv 2508.10925): 116.83 B "
                    "parameters, 5.13 B active (tilewright import-hf of the config gives the same spec).",
        )
    elif name == "qwen3-30b-a3b":
        spec = LlamaSpec(
            name=name, layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, ffn=6144, vocab=151936,
            qk_norm=True, moe=MoESpec(experts=128, top_k=8, expert_ffn=768),
            comment="Qwen/Qwen3-30B-A3B config.json: hidden 2048, 48 layers, 32 heads of 128, 4 KV heads, "
                    "vocabulary 151,936, untied; every block MoE (decoder_sparse_step 1, no mlp_only_layers): "
                    "128 experts of width 768 (moe_intermediate_size), top-8, no shared expert. Model card: "
                    "30.5 B parameters, 3.3 B activated. QK-norm (Qwen3Attention q_norm, k_norm: 2 × 128 gains per "
                    "layer, an RMSNorm over each query and key head).",
        )
    elif name == "qwen3-235b-a22b":
        spec = LlamaSpec(
            name=name, layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128, ffn=12288, vocab=151936,
            qk_norm=True, moe=MoESpec(experts=128, top_k=8, expert_ffn=1536),
            comment="Qwen/Qwen3-235B-A22B config.json: hidden 4096, 94 layers, 64 heads of 128, 4 KV heads, "
                    "vocabulary 151,936, untied; every block MoE: 128 experts of width 1536, top-8, no shared "
                    "expert; QK-norm (2 × 128 gains per layer). Model card: 235 B parameters, 22 B activated.",
        )
    elif name == "deepseek-v3":
        spec = LlamaSpec(
            name=name, layers=61, hidden=7168, heads=128, ffn=18432, vocab=129280,
            mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                        v_head_dim=128),
            moe=MoESpec(experts=256, top_k=8, expert_ffn=2048, shared_experts=1, first_dense_layers=3,
                        router_bias=True, max_nodes_per_token=4),
            comment="deepseek-ai/DeepSeek-V3 config.json: hidden 7168, 61 layers, 128 heads, MLA (q_lora_rank "
                    "1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128), dense intermediate 18432 in the "
                    "first 3 blocks, then 256 routed experts of 2048 (top-8) + 1 shared, noaux_tc router bias; "
                    "vocabulary 129,280, untied. DeepSeek-V3 report (arXiv 2412.19437): 671 B parameters, 37 B "
                    "activated; the multi-token-prediction module (11.5 B unique, 14 B with its copies of the "
                    "embedding and head) is added by project_for (Recipe.mtp_layers). Node-limited routing: "
                    "topk_group 4 of n_group 8 (each token to at most 4 nodes).",
        )
    else:
        raise KeyError(name)
    return spec.model_copy(update={"seq_len": seq, "name": name})


# Model-card parameter counts (billions) and how many digits the card quotes them to: (total, active, active
# excludes the input embedding). gpt-oss counts active parameters without the embedding table (5.13 B =
# ours 5.71 B − 0.58 B of word embedding); Qwen and DeepSeek count it.
MODEL_CARD = {
    "llama3-8b": (8.03, 8.03, False),
    "llama3-70b": (70.6, 70.6, False),
    "llama3.1-405b": (405.0, 405.0, False),
    "gpt-oss-120b": (116.83, 5.13, True),
    "qwen3-30b-a3b": (30.5, 3.3, False),
    "qwen3-235b-a22b": (235.0, 22.0, False),
    "deepseek-v3": (671.0, 37.0, False),
}


def chunk_layers(model: str, layers: int, pp: int, vp: int) -> list[int]:
    """Transformer layers of each virtual stage under Megatron's interleaved layout (``mapping.pipeline_layers``),
    for the models whose layers pp × vp does not divide. DeepSeek-V3 on H100 gives it (pp_layout
    "Et|(tt|)*30mL": virtual stage 0 embedding + 1 layer, 30 of 2 layers, the last MTP + loss; the MTP depth
    rides with the head, outside the layout's count); the others count the embedding and the loss as one layer
    each (Megatron's account_for_embedding/loss_in_pipeline_split: Megatron-LM's Qwen3-235B H100 recipe sets
    both with 3 units per virtual stage; Megatron-Bridge's library recipes the performance scripts start from set
    both too, llama31_405b_pretrain_config in src/megatron/bridge/recipes/llama/llama3.py and
    qwen3_235b_a22b_pretrain_config in recipes/qwen/qwen3_moe.py, and the scripts leave them), so every chunk
    holds equal units."""
    if model == "deepseek-v3":
        chunks = [1] + [2] * 30 + [0]
    else:
        per, extra = divmod(layers + 2, pp * vp)
        if extra:
            raise ValueError(f"{model}: {layers} layers + 2 do not split into {pp * vp} chunks")
        chunks = [per] * (pp * vp)
        chunks[0] -= 1
        chunks[-1] -= 1
    assert sum(chunks) == layers and len(chunks) == pp * vp, (model, chunks)
    return chunks
