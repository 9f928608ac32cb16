"""Model geometry against published parameter counts and hand-worked byte counts."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import get_args

import pytest

from tokenwatt.errors import InputError
from tokenwatt.geometry import (
    DTYPE_BITS,
    expected_unique_experts,
    geometry_from_config,
    load_geometry,
    sum_min_context,
)
from tokenwatt.schema.base import KvDtype, WeightDtype
from tokenwatt.schema.spec import GeometryOverrides

# Published totals and active parameters (billions). Sources, as read on 2026-11-29:
# - Qwen3 model cards on Hugging Face (Qwen/Qwen3-30B-A3B: "Number of Parameters: 30.5B in total
#   and 3.3B activated; Number of Parameters (Non-Embedding): 29.9B"; Qwen/Qwen3-8B: "8.2B,
#   non-embedding 6.95B"; Qwen/Qwen3-32B: "32.8B, non-embedding 31.2B").
# - Llama 3.1: Hugging Face's safetensors parameter count of meta-llama/Llama-3.1-8B (8.03B) and
#   -70B (70.6B).
# - Mixtral: Mistral AI, "Mixtral of experts" (2023-12-11): "46.7B total parameters but only uses
#   12.9B parameters per token".
# - DeepSeek-V3: technical report (arXiv 2412.19437) and README: "671B total parameters with 37B
#   activated for each token" (the 14B multi-token-prediction module is not counted).
# - gpt-oss: OpenAI's model card (arXiv 2508.10925): gpt-oss-120b 116.8B total / 5.1B active,
#   gpt-oss-20b 20.9B (21B) / 3.6B; the card counts active parameters without the input
#   embedding (the unembedding is counted).
PUBLISHED = {
    "Qwen__Qwen3-30B-A3B": (30.5, 3.3, "with_embedding"),
    "Qwen__Qwen3-30B-A3B-FP8": (30.5, 3.3, "with_embedding"),
    "Qwen__Qwen3-8B": (8.2, 8.2, "with_embedding"),
    "Qwen__Qwen3-32B": (32.8, 32.8, "with_embedding"),
    "meta-llama__Llama-3.1-8B": (8.03, 8.03, "with_embedding"),
    "meta-llama__Llama-3.1-70B": (70.6, 70.6, "with_embedding"),
    "mistralai__Mixtral-8x7B-v0.1": (46.7, 12.9, "with_embedding"),
    "deepseek-ai__DeepSeek-V3": (671.0, 37.0, "with_embedding"),
    "openai__gpt-oss-120b": (117.0, 5.1, "without_embedding"),
    "openai__gpt-oss-20b": (21.0, 3.6, "without_embedding"),
}

# Qwen model cards also give the count without both embedding tables: a finer check.
NON_EMBEDDING = {"Qwen__Qwen3-30B-A3B": 29.9, "Qwen__Qwen3-8B": 6.95, "Qwen__Qwen3-32B": 31.2}


def model_config(shared: Path, name: str) -> Path:
    return shared / "data" / "models" / name / "config.json"


def test_every_shared_config_has_a_published_figure(shared: Path):
    found = {p.parent.name for p in (shared / "data" / "models").glob("*/config.json")}
    assert found == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_published_within_2pct(shared: Path, name: str):
    total_b, active_b, convention = PUBLISHED[name]
    g = load_geometry(model_config(shared, name))
    assert g.total_params / 1e9 == pytest.approx(total_b, rel=0.02)
    active = (
        g.active_params if convention == "with_embedding" else g.active_params_without_embedding
    )
    assert active / 1e9 == pytest.approx(active_b, rel=0.02)


@pytest.mark.parametrize("name", sorted(NON_EMBEDDING))
def test_qwen_non_embedding_counts(shared: Path, name: str):
    g = load_geometry(model_config(shared, name))
    assert (g.total_params - g.embedding_params) / 1e9 == pytest.approx(
        NON_EMBEDDING[name], rel=0.01
    )


def test_expected_unique_experts_hand_values():
    assert expected_unique_experts(128, 8, 1) == pytest.approx(8.0)
    # 128 * (1 - (120/128)^2) = 128 * (1 - 0.87890625) = 15.5
    assert expected_unique_experts(128, 8, 2) == pytest.approx(15.5)
    assert expected_unique_experts(128, 8, 0) == 0.0
    assert expected_unique_experts(8, 8, 3) == 8.0
    assert expected_unique_experts(0, 0, 10) == 0.0
    assert expected_unique_experts(128, 8, 10_000) == pytest.approx(128.0)
    # Fractional batches interpolate: 128 * (1 - 0.9375^1.5)
    assert expected_unique_experts(128, 8, 1.5) == pytest.approx(128 * (1 - 0.9375**1.5))


@pytest.mark.parametrize(
    ("start", "count", "window", "expected"),
    [
        (0, 1, None, 1),
        (10, 1, None, 11),
        (0, 4, None, 1 + 2 + 3 + 4),
        (5, 3, None, 6 + 7 + 8),
        (5, 3, 7, 6 + 7 + 7),
        (100, 3, 7, 21),
        (0, 0, None, 0),
        (2, 5, 100, 3 + 4 + 5 + 6 + 7),
    ],
)
def test_sum_min_context(start, count, window, expected):
    assert sum_min_context(start, count, window) == expected


def test_kv_bytes_per_token(shared: Path):
    qwen = load_geometry(model_config(shared, "Qwen__Qwen3-30B-A3B"), kv_dtype="bf16")
    assert qwen.kv_bytes_per_token == 48 * 2 * 4 * 128 * 2  # layers x (K,V) x heads x dim x 2 B
    qwen8 = load_geometry(model_config(shared, "Qwen__Qwen3-30B-A3B"), kv_dtype="fp8")
    assert qwen8.kv_bytes_per_token == 48 * 2 * 4 * 128
    # MLA caches one latent (512) plus the rotary key (64) per layer and token.
    ds = load_geometry(model_config(shared, "deepseek-ai__DeepSeek-V3"), kv_dtype="bf16")
    assert ds.is_mla
    assert ds.kv_bytes_per_token == 61 * (512 + 64) * 2
    # gpt-oss alternates 128-token sliding windows and full attention over 24 layers.
    oss = load_geometry(model_config(shared, "openai__gpt-oss-20b"), kv_dtype="bf16")
    per_layer = 2 * 8 * 64 * 2
    assert oss.sliding_windows == {128: 12 * per_layer}
    assert oss.kv_bytes(100) == 24 * per_layer * 100
    assert oss.kv_bytes(1000) == 12 * per_layer * 1000 + 12 * per_layer * 128


def test_fp8_weight_bytes_by_hand(shared: Path):
    g = load_geometry(model_config(shared, "Qwen__Qwen3-30B-A3B-FP8"))
    assert g.weight_dtype == "fp8"
    assert g.base_dtype == "bf16"
    h, layers, vocab = 2048, 48, 151936
    attn = h * 32 * 128 * 2 + h * 4 * 128 * 2  # q, o and k, v projections
    experts = 128 * 3 * h * 768
    linear = layers * (attn + experts)  # stored as FP8 with one fp32 scale per 128x128 block
    router = layers * h * 128
    norms = layers * (2 * h + 2 * 128) + h
    embeddings = 2 * vocab * h  # input table and output head, bf16
    expected = linear * (1 + 4 / (128 * 128)) + 2 * (router + norms + embeddings)
    assert g.weight_bytes == pytest.approx(expected, rel=1e-12)


def test_mxfp4_quantizes_experts_only(shared: Path):
    g = load_geometry(model_config(shared, "openai__gpt-oss-120b"))
    assert g.weight_dtype == "mxfp4"
    assert g.quantized_groups == frozenset({"routed_experts"})
    assert g.expert_bytes == pytest.approx(g.expert_params * 4.25 / 8)
    # 116.8B parameters in about 65 GB: fits one 80 GB GPU, as OpenAI says.
    assert 60e9 < g.weight_bytes < 70e9


def test_spec_weight_dtype_wins_over_config_and_says_so(shared: Path, caplog):
    with caplog.at_level(logging.WARNING):
        g = load_geometry(model_config(shared, "Qwen__Qwen3-30B-A3B-FP8"), weight_dtype="bf16")
    assert g.weight_dtype == "bf16"
    assert g.weight_bytes == pytest.approx(2 * g.total_params)
    assert "quantization_config says fp8" in caplog.text


def test_fp8_asked_for_a_bf16_checkpoint(shared: Path):
    g = load_geometry(model_config(shared, "Qwen__Qwen3-30B-A3B"), weight_dtype="fp8")
    fp8 = load_geometry(model_config(shared, "Qwen__Qwen3-30B-A3B-FP8"))
    # Same modules quantized; only the block scales of the FP8 checkpoint differ.
    assert g.weight_bytes == pytest.approx(fp8.weight_bytes, rel=1e-3)


def test_decode_step_bytes_batch_one_dense(shared: Path):
    g = load_geometry(model_config(shared, "meta-llama__Llama-3.1-8B"))
    step = g.decode_step_bytes(batch=1, mean_context_tokens=100)
    # All weights but the embedding table, plus the one embedding row the token gathers.
    assert step.weight_bytes == pytest.approx(2 * (g.total_params - 128256 * 4096) + 2 * 4096)
    assert step.kv_bytes == 100 * 32 * 2 * 8 * 128 * 2
    assert step.expert_weight_bytes == 0.0


def test_decode_step_bytes_moe_touches_expected_experts(shared: Path):
    g = load_geometry(model_config(shared, "Qwen__Qwen3-30B-A3B-FP8"))
    one = g.decode_step_bytes(batch=1, mean_context_tokens=0)
    assert one.expert_weight_bytes == pytest.approx(8 * 48 * g.expert_bytes)
    many = g.decode_step_bytes(batch=256, mean_context_tokens=0)
    assert many.expert_weight_bytes == pytest.approx(128 * 48 * g.expert_bytes, rel=1e-6)
    assert many.dense_weight_bytes - one.dense_weight_bytes == pytest.approx(255 * 2048 * 2)


def test_first_k_dense_and_shared_experts(shared: Path):
    g = load_geometry(model_config(shared, "deepseek-ai__DeepSeek-V3"))
    assert g.num_dense_layers == 3
    assert g.num_moe_layers == 58
    assert g.num_shared_experts == 1
    assert g.shared_expert_intermediate_size == 2048


def test_overrides_replace_config_values(shared: Path):
    base = load_geometry(model_config(shared, "Qwen__Qwen3-30B-A3B"))
    g = load_geometry(
        model_config(shared, "Qwen__Qwen3-30B-A3B"),
        overrides=GeometryOverrides(num_experts=64, num_hidden_layers=24),
    )
    assert g.num_experts == 64
    assert g.num_layers == 24
    assert g.total_params < base.total_params / 2


def test_geometry_from_overrides_alone():
    g = geometry_from_config(
        {},
        where="model.geometry",
        overrides=GeometryOverrides(
            num_hidden_layers=2,
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=1000,
        ),
    )
    # 2 x (q,o 64x64 + k,v 64x32 + mlp 3x64x128 + 2 norms) + final norm + 2 embeddings
    per_layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64
    assert g.total_params == 2 * per_layer + 64 + 2 * 1000 * 64


def test_tied_embeddings_are_read_once():
    cfg = {
        "num_hidden_layers": 1,
        "hidden_size": 8,
        "intermediate_size": 16,
        "num_attention_heads": 2,
        "vocab_size": 100,
        "tie_word_embeddings": True,
    }
    g = geometry_from_config(cfg)
    assert g.embedding_params == 800
    dense, _ = g.weight_read_bytes(4)
    assert dense == pytest.approx(g.weight_bytes)  # the tied table is the output head: read whole


def test_missing_key_names_file_and_key(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4}))
    with pytest.raises(InputError) as info:
        load_geometry(path)
    msg = str(info.value)
    assert str(path) in msg
    assert "hidden_size" in msg
    assert "model.geometry" in msg


@pytest.mark.parametrize(
    ("content", "fragment"),
    [("{not json", "JSON syntax error"), ("[1, 2]", "must be a JSON object")],
)
def test_malformed_config(tmp_path: Path, content: str, fragment: str):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(InputError, match=fragment):
        load_geometry(path)


def test_missing_config_file(tmp_path: Path):
    with pytest.raises(InputError, match="model config not found"):
        load_geometry(tmp_path / "nope.json")


def test_experts_without_top_k_is_an_error():
    cfg = {
        "num_hidden_layers": 1,
        "hidden_size": 8,
        "num_attention_heads": 2,
        "vocab_size": 10,
        "num_experts": 4,
        "moe_intermediate_size": 8,
    }
    with pytest.raises(InputError, match="num_experts_per_tok"):
        geometry_from_config(cfg)


def test_shape_and_identity_ignore_storage_types(shared: Path):
    bf16 = load_geometry(model_config(shared, "Qwen__Qwen3-30B-A3B"))
    fp8 = load_geometry(model_config(shared, "Qwen__Qwen3-30B-A3B-FP8"), kv_dtype="fp8")
    assert bf16.shape == fp8.shape == "MoE"
    assert bf16.identity == fp8.identity
    assert "128 experts, top 8" in bf16.identity
    dense = load_geometry(model_config(shared, "Qwen__Qwen3-8B"))
    assert dense.shape == "Dense"
    assert dense.identity != bf16.identity
    oss = load_geometry(model_config(shared, "openai__gpt-oss-20b"))
    assert "sliding 128 on 12" in oss.identity


def test_geometry_for_spec_resolves_the_config_and_dtypes(repo: Path):
    from tokenwatt.geometry import geometry_for_spec
    from tokenwatt.store import load_spec

    path = repo / "specs" / "sim-qwen3-30b-a3b-fp8.spec.yaml"
    g = geometry_for_spec(load_spec(path))
    assert g.weight_dtype == "fp8"
    assert g.kv_dtype == "bf16"
    assert g.name == "Qwen3-30B-A3B-FP8"
    assert g.shape == "MoE"


def test_every_storage_type_a_spec_may_name_has_a_bit_width():
    assert set(DTYPE_BITS) == set(get_args(WeightDtype))
    assert set(get_args(KvDtype)) <= set(DTYPE_BITS)


def test_context_length_from_the_config_or_the_spec_else_unknown():
    cfg = {
        "num_hidden_layers": 2,
        "hidden_size": 8,
        "intermediate_size": 16,
        "num_attention_heads": 2,
        "vocab_size": 100,
    }
    assert geometry_from_config(cfg).max_position_embeddings is None
    assert (
        geometry_from_config({**cfg, "max_position_embeddings": 512}).max_position_embeddings == 512
    )
    override = GeometryOverrides(max_position_embeddings=128)
    g = geometry_from_config({**cfg, "max_position_embeddings": 512}, overrides=override)
    assert g.max_position_embeddings == 128
