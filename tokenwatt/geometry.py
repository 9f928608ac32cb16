"""Model geometry: parameter counts, weight bytes, KV bytes and the bytes a decode step reads.

One module serves both the MBU estimate (:mod:`tokenwatt.mbu`) and the embedded simulator
(:mod:`tokenwatt.sim`), so the estimate and the simulator's ground truth use the same formulas.

Geometry is read from a Hugging Face ``config.json`` and may be overridden field by field
(``model.geometry`` in a spec). Supported shapes:

- dense decoders with grouped-query attention (Llama, Qwen3, Mistral);
- mixture-of-experts with routed experts, shared experts (DeepSeek, Qwen2-MoE) and the first
  ``k`` layers dense (DeepSeek ``first_k_dense_replace``, Qwen ``mlp_only_layers`` /
  ``decoder_sparse_step``);
- multi-head latent attention (DeepSeek-V2/V3: ``kv_lora_rank``, ``qk_rope_head_dim``), whose
  KV cache holds one compressed latent plus the rotary key per token and layer;
- sliding-window layers (gpt-oss ``layer_types``, Mistral-style ``sliding_window``), whose KV
  cache stops growing at the window;
- tied input/output embeddings.

Weights: the spec's ``weight_dtype`` applies to the linear layers the quantization scheme covers.
Embeddings, the output head, norms, biases and MoE routers stay in the checkpoint's own type
(``torch_dtype``), as vLLM's FP8 and MXFP4 checkpoints store them. Where the config carries a
``quantization_config``, its method picks the weight type when the spec does not set one, and
``modules_to_not_convert`` removes attention or shared experts from the quantized set; MXFP4
(gpt-oss) quantizes the routed experts only.

Bytes a decode step reads, for ``T`` tokens in the step (``B`` running sequences in a pure
decode step): every weight that is not a routed expert (the input embedding table contributes
only the ``T`` rows it gathers), plus, in each MoE layer, the expected number of *distinct*
routed experts the tokens touch, ``E * (1 - (1 - k/E) ** T)`` for ``k`` of ``E`` experts per
token (tokens routed independently and uniformly), plus the KV cache of each sequence's context.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from tokenwatt import bounded
from tokenwatt.errors import InputError
from tokenwatt.schema.spec import GeometryOverrides, LoadedSpec

__all__ = [
    "DTYPE_BITS",
    "ModelGeometry",
    "StepBytes",
    "expected_unique_experts",
    "geometry_for_spec",
    "geometry_from_config",
    "load_geometry",
    "sum_min_context",
]

logger = logging.getLogger(__name__)

DTYPE_BITS: dict[str, float] = {
    "fp32": 32.0,
    "bf16": 16.0,
    "fp16": 16.0,
    "fp8": 8.0,
    "int8": 8.0,
    # GPTQ/AWQ style: group size 128 with one fp16 scale per group.
    "int4": 4.0 + 16.0 / 128.0,
    "fp4": 4.0,
    # OCP microscaling: one 8-bit shared exponent per 32 values.
    "mxfp4": 4.0 + 8.0 / 32.0,
    # NVIDIA NVFP4: one FP8 scale per 16 values (the per-tensor FP32 scale is negligible).
    "nvfp4": 4.0 + 8.0 / 16.0,
}
"""Storage bits per weight, scale factors included, by dtype name."""

_TORCH_DTYPES = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
}

_QUANT_METHODS = {
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "mxfp4": "mxfp4",
    "nvfp4": "nvfp4",
    "modelopt_fp4": "nvfp4",
    "awq": "int4",
    "gptq": "int4",
    "bitsandbytes": "int8",
}

_LINEAR_GROUPS = ("attention", "dense_mlp", "routed_experts", "shared_experts")


def expected_unique_experts(num_experts: int, top_k: int, tokens: float) -> float:
    """Expected number of distinct experts ``tokens`` tokens touch, each picking ``top_k``.

    ``E * (1 - (1 - k/E) ** T)``: an expert is missed by one token with probability
    ``1 - k/E`` (routing assumed uniform and independent across tokens), so by all ``T`` tokens
    with probability ``(1 - k/E) ** T``. One token touches exactly ``k``; many touch all ``E``.
    ``tokens`` may be fractional (a mean batch).
    """
    if num_experts <= 0 or top_k <= 0 or tokens <= 0:
        return 0.0
    if top_k >= num_experts:
        return float(num_experts)
    missed: float = (1.0 - top_k / num_experts) ** tokens
    return num_experts * (1.0 - missed)


def sum_min_context(start: int, count: int, window: int | None) -> int:
    """Sum over ``count`` new tokens of the context each one attends to.

    Token ``j`` (1-based) of a chunk that starts after ``start`` cached tokens sees
    ``start + j`` positions (itself included), capped at ``window`` for a sliding layer.
    """
    if count <= 0:
        return 0
    full = count * start + count * (count + 1) // 2
    if window is None or start + count <= window:
        return full
    if start >= window:
        return count * window
    # The first (window - start) tokens are below the cap, the rest sit at it.
    below = window - start
    return below * start + below * (below + 1) // 2 + (count - below) * window


@dataclass(frozen=True)
class StepBytes:
    """Bytes one engine step reads from memory, by origin."""

    dense_weight_bytes: float
    """Weights read whatever the routing: attention, dense MLPs, shared experts, head, norms."""
    expert_weight_bytes: float
    """Routed-expert weights of the distinct experts the step's tokens touch."""
    kv_bytes: float
    """KV cache of the contexts the step attends over."""

    @property
    def weight_bytes(self) -> float:
        """Dense plus touched expert weights."""
        return self.dense_weight_bytes + self.expert_weight_bytes

    @property
    def total_bytes(self) -> float:
        """Everything the step reads."""
        return self.dense_weight_bytes + self.expert_weight_bytes + self.kv_bytes


@dataclass(frozen=True)
class _Attention:
    kind: str  # "gqa" or "mla"
    window: int | None  # sliding window in tokens; None = full attention


@dataclass(frozen=True)
class ModelGeometry:
    """The shape of a decoder-only transformer, as far as memory traffic and FLOPs go.

    Parameter counts are exact sums over the modules of the architecture (linear weights,
    biases, norms, routers, embeddings); MTP/next-token-prediction heads
    (DeepSeek ``num_nextn_predict_layers``) are not served by default and are left out.
    """

    name: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    intermediate_size: int
    """Dense FFN width (layers without experts)."""
    num_experts: int
    """Routed experts per MoE layer (0 = dense model)."""
    experts_per_token: int
    moe_intermediate_size: int
    num_shared_experts: int
    shared_expert_intermediate_size: int
    moe_layers: tuple[bool, ...]
    """For each layer, whether its FFN is a mixture of experts."""
    attention: tuple[_Attention, ...] = field(repr=False)
    kv_lora_rank: int | None
    q_lora_rank: int | None
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    attention_bias: bool
    expert_bias: bool
    qk_norm: bool
    attention_sinks: bool
    max_position_embeddings: int | None
    """The model's context length; None where neither the config nor the spec states it."""
    base_dtype: str
    """Dtype of unquantized tensors (the checkpoint's ``torch_dtype``)."""
    weight_dtype: str
    """Dtype of the quantized linear layers."""
    kv_dtype: str
    quantized_groups: frozenset[str]
    """Which linear groups are stored in ``weight_dtype``: attention, dense_mlp, routed_experts,
    shared_experts."""
    weight_block_scale_bits: float = 0.0
    """Extra bits per quantized weight for block scales (FP8 ``weight_block_size``)."""
    notes: tuple[str, ...] = ()
    """How ambiguous config values were read (stated with the MBU estimate)."""

    # ----------------------------------------------------------------------------------------
    # Parameter counts

    @property
    def is_moe(self) -> bool:
        """Whether any layer has routed experts."""
        return self.num_experts > 0 and any(self.moe_layers)

    @property
    def is_mla(self) -> bool:
        """Whether attention is multi-head latent attention."""
        return self.kv_lora_rank is not None

    @property
    def num_moe_layers(self) -> int:
        """Layers whose FFN has routed experts."""
        return sum(self.moe_layers) if self.num_experts > 0 else 0

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense FFN."""
        return self.num_layers - self.num_moe_layers

    def _attention_params(self) -> tuple[int, int]:
        """Linear weights and small parameters (biases, norms, sinks) of one attention block."""
        h = self.hidden_size
        heads = self.num_attention_heads
        if self.kv_lora_rank is not None:
            qk_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
            small = self.kv_lora_rank  # kv_a_layernorm
            if self.q_lora_rank:
                linear = h * self.q_lora_rank + self.q_lora_rank * heads * qk_dim
                small += self.q_lora_rank  # q_a_layernorm
            else:
                linear = h * heads * qk_dim
            linear += h * (self.kv_lora_rank + self.qk_rope_head_dim)
            linear += self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
            linear += heads * self.v_head_dim * h
            return linear, small
        q_dim = heads * self.head_dim
        kv_dim = self.num_kv_heads * self.head_dim
        linear = h * q_dim + 2 * h * kv_dim + q_dim * h
        small = 0
        if self.attention_bias:
            small += q_dim + 2 * kv_dim + h
        if self.qk_norm:
            small += 2 * self.head_dim
        if self.attention_sinks:
            small += heads
        return linear, small

    def _expert_params(self, width: int) -> int:
        """One gated FFN (gate, up, down) of width ``width``, with biases if the model has them."""
        params = 3 * self.hidden_size * width
        if self.expert_bias:
            params += 2 * width + self.hidden_size
        return params

    def _router_params(self) -> int:
        params = self.hidden_size * self.num_experts
        if self.expert_bias or self.model_type.startswith("deepseek"):
            params += self.num_experts  # gpt-oss router bias; DeepSeek e_score_correction_bias
        return params

    def _shared_params(self) -> int:
        if self.shared_expert_intermediate_size <= 0:
            return 0
        params = 3 * self.hidden_size * self.shared_expert_intermediate_size
        if self.model_type.startswith("qwen2_moe"):
            params += self.hidden_size  # shared_expert_gate
        return params

    def _groups(self) -> dict[str, float]:
        """Parameters by storage group, summed over the model."""
        attn_linear, attn_small = self._attention_params()
        n_moe = self.num_moe_layers
        n_dense = self.num_dense_layers
        embed = self.vocab_size * self.hidden_size
        return {
            "attention": float(attn_linear * self.num_layers),
            "dense_mlp": float(3 * self.hidden_size * self.intermediate_size * n_dense),
            "routed_experts": float(
                self._expert_params(self.moe_intermediate_size) * self.num_experts * n_moe
            ),
            "shared_experts": float(self._shared_params() * n_moe),
            "router": float(self._router_params() * n_moe),
            # Two norms per layer, the final norm, and the attention's small parameters.
            "small": float(
                (2 * self.hidden_size + attn_small) * self.num_layers + self.hidden_size
            ),
            "embedding": float(embed),
            "lm_head": 0.0 if self.tie_word_embeddings else float(embed),
        }

    @property
    def total_params(self) -> float:
        """Every parameter of the served model."""
        return sum(self._groups().values())

    @property
    def expert_params(self) -> float:
        """Parameters of one routed expert (one layer)."""
        return float(self._expert_params(self.moe_intermediate_size)) if self.is_moe else 0.0

    @property
    def active_params(self) -> float:
        """Parameters used per token, counting the input embedding table in full.

        This is the convention of the Qwen and Mixtral model cards (Qwen3-30B-A3B "3.3B
        activated"); routed experts count ``k`` per MoE layer.
        """
        g = self._groups()
        routed_active = (
            self._expert_params(self.moe_intermediate_size)
            * self.experts_per_token
            * self.num_moe_layers
        )
        return sum(v for k, v in g.items() if k != "routed_experts") + routed_active

    @property
    def embedding_params(self) -> float:
        """Input embedding table plus output head (once if tied)."""
        tables = 1 if self.tie_word_embeddings else 2
        return float(tables * self.vocab_size * self.hidden_size)

    @property
    def active_params_without_embedding(self) -> float:
        """Active parameters without the input embedding table (an output head is counted).

        The convention of OpenAI's gpt-oss model card ("5.1B active" for gpt-oss-120b).
        """
        return self.active_params - self.vocab_size * self.hidden_size

    # ----------------------------------------------------------------------------------------
    # Bytes

    def _bits(self, group: str) -> float:
        base = DTYPE_BITS[self.base_dtype]
        if group in self.quantized_groups:
            return DTYPE_BITS[self.weight_dtype] + self.weight_block_scale_bits
        return base

    @cached_property
    def _group_bytes_cached(self) -> dict[str, float]:
        return {name: count * self._bits(name) / 8.0 for name, count in self._groups().items()}

    def _group_bytes(self) -> dict[str, float]:
        return self._group_bytes_cached

    @property
    def weight_bytes(self) -> float:
        """Bytes the weights occupy in memory (all experts, the whole embedding table)."""
        return sum(self._group_bytes().values())

    @cached_property
    def expert_bytes(self) -> float:
        """Bytes of one routed expert in one layer."""
        if not self.is_moe:
            return 0.0
        return self.expert_params * self._bits("routed_experts") / 8.0

    @cached_property
    def dense_read_bytes(self) -> float:
        """Weight bytes every step reads regardless of routing and batch (no embedding table)."""
        gb = self._group_bytes()
        skip = {"routed_experts"}
        if not self.tie_word_embeddings:
            skip.add("embedding")  # a gather: only the rows of the step's tokens are read
        return sum(v for k, v in gb.items() if k not in skip)

    def weight_read_bytes(self, tokens: float) -> tuple[float, float]:
        """Weight bytes a step over ``tokens`` tokens reads: (dense, touched routed experts)."""
        dense = self.dense_read_bytes
        if not self.tie_word_embeddings:
            dense += tokens * self.hidden_size * DTYPE_BITS[self.base_dtype] / 8.0
        experts = 0.0
        if self.is_moe:
            unique = expected_unique_experts(self.num_experts, self.experts_per_token, tokens)
            experts = unique * self.expert_bytes * self.num_moe_layers
        return dense, experts

    def step_bytes(self, *, tokens: float, kv_bytes: float) -> StepBytes:
        """Bytes a step reads for ``tokens`` tokens attending over ``kv_bytes`` of KV cache."""
        dense, experts = self.weight_read_bytes(tokens)
        return StepBytes(dense_weight_bytes=dense, expert_weight_bytes=experts, kv_bytes=kv_bytes)

    def decode_step_bytes(self, *, batch: float, mean_context_tokens: float) -> StepBytes:
        """Bytes a pure decode step reads for ``batch`` sequences of a mean context.

        KV bytes are ``batch * kv_bytes(mean context)``: exact for full attention, where KV grows
        linearly with context; for sliding-window layers it assumes contexts close to the mean.
        """
        kv = batch * self.kv_bytes(mean_context_tokens)
        return self.step_bytes(tokens=batch, kv_bytes=kv)

    @property
    def kv_element_bytes(self) -> float:
        """Bytes of one KV-cache element."""
        return DTYPE_BITS[self.kv_dtype] / 8.0

    def _layer_kv_bytes_per_token(self, attn: _Attention) -> float:
        if attn.kind == "mla":
            assert self.kv_lora_rank is not None
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_element_bytes
        return 2.0 * self.num_kv_heads * self.head_dim * self.kv_element_bytes

    @cached_property
    def kv_bytes_per_token(self) -> float:
        """KV bytes one token adds over all layers (while inside every sliding window)."""
        return sum(self._layer_kv_bytes_per_token(a) for a in self.attention)

    @cached_property
    def kv_bytes_per_token_full_layers(self) -> float:
        """KV bytes per token of the full-attention layers only (the part that keeps growing)."""
        return sum(self._layer_kv_bytes_per_token(a) for a in self.attention if a.window is None)

    @cached_property
    def sliding_windows(self) -> dict[int, float]:
        """Sliding window (tokens) -> KV bytes per token of the layers using it."""
        out: dict[int, float] = {}
        for a in self.attention:
            if a.window is not None:
                out[a.window] = out.get(a.window, 0.0) + self._layer_kv_bytes_per_token(a)
        return out

    @cached_property
    def _window_terms(self) -> tuple[tuple[int, float], ...]:
        return tuple(self.sliding_windows.items())

    def kv_bytes(self, context_tokens: float) -> float:
        """KV-cache bytes of one sequence holding ``context_tokens`` tokens."""
        if context_tokens <= 0:
            return 0.0
        total = self.kv_bytes_per_token_full_layers * context_tokens
        for window, per_token in self._window_terms:
            total += per_token * (context_tokens if context_tokens < window else window)
        return total

    # ----------------------------------------------------------------------------------------
    # FLOPs

    @cached_property
    def linear_flops_per_token(self) -> float:
        """Matrix-multiply FLOPs per token outside attention scores and the output head."""
        g = self._groups()
        linear = g["attention"] + g["dense_mlp"] + g["shared_experts"] + g["router"]
        if self.is_moe:
            linear += (
                self._expert_params(self.moe_intermediate_size)
                * self.experts_per_token
                * self.num_moe_layers
            )
        return 2.0 * linear

    @property
    def head_flops_per_token(self) -> float:
        """FLOPs of the output head (logits) for one sampled token."""
        return 2.0 * self.vocab_size * self.hidden_size

    @cached_property
    def _attention_groups(self) -> tuple[tuple[int | None, float], ...]:
        """(window, FLOPs per attended position and token summed over the layers using it)."""
        if self.kv_lora_rank is not None:
            per = 2.0 * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
        else:
            per = 4.0 * self.head_dim
        per *= self.num_attention_heads
        groups: dict[int | None, float] = {}
        for a in self.attention:
            groups[a.window] = groups.get(a.window, 0.0) + per
        return tuple(groups.items())

    def attention_flops(self, *, start: int, count: int) -> float:
        """FLOPs of attention scores and weighted values for ``count`` new tokens of a sequence.

        ``start`` tokens are already cached. Per layer and token with context ``c``: ``2 c d``
        for Q.K and ``2 c d`` for P.V per head (MLA in its absorbed form: ``d`` = latent plus
        rotary dimension for Q.K, latent for P.V).
        """
        return sum(
            per * sum_min_context(start, count, window) for window, per in self._attention_groups
        )

    @property
    def shape(self) -> Literal["Dense", "MoE"]:
        """``"MoE"`` or ``"Dense"``, as result pages write it."""
        return "MoE" if self.is_moe else "Dense"

    @property
    def identity(self) -> str:
        """The architecture in one line, without storage types.

        Equal for two runs that served the same model, whatever their weight or KV dtypes.
        """
        parts = [
            f"{self.model_type}: {self.num_layers} layers",
            f"hidden {self.hidden_size}",
            f"heads {self.num_attention_heads}/{self.num_kv_heads}x{self.head_dim}",
            f"vocab {self.vocab_size}",
        ]
        if self.num_dense_layers:
            parts.append(f"FFN {self.intermediate_size}")
        if self.is_moe:
            moe = (
                f"{self.num_moe_layers} MoE layers: {self.num_experts} experts, top"
                f" {self.experts_per_token}, width {self.moe_intermediate_size}"
            )
            if self.shared_expert_intermediate_size:
                moe += f", shared {self.shared_expert_intermediate_size}"
            parts.append(moe)
        if self.is_mla:
            parts.append(f"MLA latent {self.kv_lora_rank}+{self.qk_rope_head_dim}")
        if self.sliding_windows:
            windows = "/".join(str(w) for w in sorted(self.sliding_windows))
            layers = sum(a.window is not None for a in self.attention)
            parts.append(f"sliding {windows} on {layers}")
        if self.tie_word_embeddings:
            parts.append("tied embeddings")
        return ", ".join(parts)

    def describe(self) -> str:
        """One line for logs and pages."""
        shape = "MoE" if self.is_moe else "dense"
        if self.is_mla:
            shape += ", MLA"
        if self.sliding_windows:
            shape += ", sliding window " + "/".join(str(w) for w in self.sliding_windows)
        return (
            f"{self.name}: {shape}, {self.total_params / 1e9:.1f}B params"
            f" ({self.active_params / 1e9:.2f}B active), weights {self.weight_dtype}"
            f" ({self.weight_bytes / 1e9:.1f} GB), KV {self.kv_dtype}"
            f" ({self.kv_bytes_per_token / 1024:.1f} KiB/token)"
        )


# --------------------------------------------------------------------------------------------
# Reading config.json


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    return None


def _int(config: Mapping[str, Any], where: str, *keys: str, default: int | None = None) -> int:
    value = _first(config, *keys)
    if value is None:
        if default is not None:
            return default
        names = " / ".join(repr(k) for k in keys)
        raise InputError(
            f"{where}: has no {names}; add it, or set model.geometry.{keys[0]} in the spec"
        )
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise InputError(f"{where}: {keys[0]!r} must be a non-negative integer, got {value!r}")
    return int(value)


def _quantization(
    config: Mapping[str, Any], where: str
) -> tuple[str | None, frozenset[str] | None, float]:
    """(weight dtype, quantized groups, block-scale bits) from ``quantization_config``."""
    q = config.get("quantization_config")
    if not isinstance(q, Mapping):
        return None, None, 0.0
    method = str(q.get("quant_method", "")).lower()
    dtype = _QUANT_METHODS.get(method)
    if dtype is None:
        bits = q.get("bits")
        if bits in (4, 8):
            dtype = "int4" if bits == 4 else "int8"
        else:
            logger.warning(
                "%s: unknown quant_method %r; weights read as unquantized", where, method
            )
            return None, None, 0.0
    groups = set(_LINEAR_GROUPS)
    if dtype == "mxfp4":
        groups = {"routed_experts"}  # gpt-oss: attention, router, embeddings stay bf16
    skip = q.get("modules_to_not_convert") or q.get("ignored_layers") or []
    if isinstance(skip, list):
        names = [str(s) for s in skip]
        if any("self_attn" in s or s.endswith(".attn") for s in names):
            groups.discard("attention")
        if any("shared_expert" in s for s in names):
            groups.discard("shared_experts")
    scale_bits = 0.0
    block = q.get("weight_block_size")
    if (
        dtype == "fp8"
        and isinstance(block, list)
        and len(block) == 2
        and all(isinstance(b, int) and b > 0 for b in block)
    ):
        scale_bits = 32.0 / (block[0] * block[1])  # one fp32 scale per block
    return dtype, frozenset(groups), scale_bits


def _apply_overrides(config: dict[str, Any], overrides: GeometryOverrides) -> None:
    """Write the spec's geometry overrides over every config key they stand for."""
    aliases: dict[str, tuple[str, ...]] = {
        "num_experts": ("num_experts", "num_local_experts", "n_routed_experts"),
        "num_experts_per_tok": ("num_experts_per_tok", "experts_per_token"),
        "num_shared_experts": ("n_shared_experts", "num_shared_experts"),
    }
    for name, value in overrides.model_dump(exclude_none=True).items():
        for key in aliases.get(name, (name,)):
            config[key] = value


def geometry_from_config(
    config: Mapping[str, Any],
    *,
    where: str = "config.json",
    overrides: GeometryOverrides | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    name: str | None = None,
) -> ModelGeometry:
    """Build the geometry from a parsed ``config.json``.

    Args:
        config: The parsed config.
        where: How to name the config in error messages (its path).
        overrides: Values that replace the config's (``model.geometry`` of a spec).
        weight_dtype: Storage type of the quantized linear layers; None = the config's
            ``quantization_config`` method, else its ``torch_dtype``.
        kv_dtype: Storage type of the KV cache; None = the config's ``torch_dtype``.
        name: Display name; None = ``_name_or_path`` or the model type.

    Raises:
        InputError: naming the config and the missing or malformed key.
    """
    cfg: dict[str, Any] = dict(config)
    # Multimodal wrappers keep the language model under text_config.
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and "hidden_size" not in cfg:
        cfg = {**cfg, **text}
    if overrides is not None:
        _apply_overrides(cfg, overrides)
    notes: list[str] = []

    model_type = str(cfg.get("model_type", "unknown"))
    layers = _int(cfg, where, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(cfg, where, "hidden_size", "n_embd", "d_model")
    heads = _int(cfg, where, "num_attention_heads", "n_head")
    kv_heads = _int(cfg, where, "num_key_value_heads", default=heads)
    head_dim_default = hidden // heads if heads else 0
    head_dim = _int(cfg, where, "head_dim", default=head_dim_default)
    vocab = _int(cfg, where, "vocab_size")
    if layers < 1 or hidden < 1 or heads < 1 or vocab < 1:
        raise InputError(f"{where}: layers, hidden_size, heads and vocab_size must be positive")

    num_experts = _int(
        cfg, where, "num_experts", "num_local_experts", "n_routed_experts", default=0
    )
    top_k = _int(cfg, where, "num_experts_per_tok", "experts_per_token", default=0)
    if num_experts > 0 and top_k <= 0:
        raise InputError(f"{where}: {num_experts} experts but no 'num_experts_per_tok'")
    if top_k > num_experts > 0:
        raise InputError(
            f"{where}: num_experts_per_tok ({top_k}) exceeds the number of experts ({num_experts})"
        )
    intermediate = _int(cfg, where, "intermediate_size", "ffn_dim", default=0)
    moe_inter = _int(cfg, where, "moe_intermediate_size", default=intermediate)
    if num_experts > 0 and moe_inter <= 0:
        raise InputError(f"{where}: MoE model without 'moe_intermediate_size'")
    n_shared = _int(cfg, where, "n_shared_experts", "num_shared_experts", default=0)
    shared_inter = _int(cfg, where, "shared_expert_intermediate_size", default=n_shared * moe_inter)

    # Which layers carry experts.
    first_dense = _int(cfg, where, "first_k_dense_replace", default=0)
    freq = max(1, _int(cfg, where, "moe_layer_freq", default=1))
    sparse_step = max(1, _int(cfg, where, "decoder_sparse_step", default=1))
    mlp_only = cfg.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list):
        raise InputError(f"{where}: 'mlp_only_layers' must be a list of layer indices")
    moe_layers = tuple(
        num_experts > 0
        and i >= first_dense
        and i % freq == 0
        and (i + 1) % sparse_step == 0
        and i not in mlp_only
        for i in range(layers)
    )
    if num_experts > 0 and any(not m for m in moe_layers) and intermediate <= 0:
        raise InputError(f"{where}: dense layers in an MoE model need 'intermediate_size'")
    if num_experts == 0 and intermediate <= 0:
        raise InputError(f"{where}: has no 'intermediate_size'")

    # Attention kind and windows, per layer.
    kv_lora = cfg.get("kv_lora_rank")
    kv_lora_rank = int(kv_lora) if isinstance(kv_lora, int) and kv_lora > 0 else None
    rope_dim = _int(cfg, where, "qk_rope_head_dim", default=0)
    nope_dim = _int(cfg, where, "qk_nope_head_dim", default=head_dim)
    v_head = _int(cfg, where, "v_head_dim", default=head_dim)
    q_lora = cfg.get("q_lora_rank")
    q_lora_rank = int(q_lora) if isinstance(q_lora, int) and q_lora > 0 else None
    window_raw = cfg.get("sliding_window")
    window = int(window_raw) if isinstance(window_raw, int) and window_raw > 0 else None
    layer_types = cfg.get("layer_types")
    windows: list[int | None]
    if isinstance(layer_types, list) and len(layer_types) == layers:
        windows = [window if str(t) == "sliding_attention" else None for t in layer_types]
        if any(str(t) == "sliding_attention" for t in layer_types) and window is None:
            raise InputError(f"{where}: 'layer_types' names sliding layers but no 'sliding_window'")
    elif window is not None and cfg.get("use_sliding_window", True) is not False:
        # Qwen2-style: layers from max_window_layers on use the window; Mistral: all layers.
        start = _int(cfg, where, "max_window_layers", default=0)
        if "max_window_layers" in cfg and "use_sliding_window" in cfg:
            windows = [window if i >= start else None for i in range(layers)]
        else:
            windows = [window] * layers
    else:
        windows = [None] * layers
    kind = "mla" if kv_lora_rank is not None else "gqa"
    attention = tuple(_Attention(kind=kind, window=w) for w in windows)

    # Storage types.
    torch_dtype = str(_first(cfg, "torch_dtype", "dtype") or "bfloat16")
    base = _TORCH_DTYPES.get(torch_dtype.lower().removeprefix("torch."))
    if base is None:
        notes.append(f"torch_dtype {torch_dtype!r} read as bf16")
        base = "bf16"
    q_dtype, q_groups, scale_bits = _quantization(cfg, where)
    if weight_dtype is None:
        wdt = q_dtype or base
        groups = q_groups if (q_dtype and q_groups) else frozenset(_LINEAR_GROUPS)
        if q_dtype:
            notes.append(f"weights: {q_dtype} from the config's quantization_config")
    else:
        if weight_dtype not in DTYPE_BITS:
            raise InputError(f"unknown weight dtype {weight_dtype!r}")
        wdt = weight_dtype
        if q_dtype is not None and q_dtype != weight_dtype:
            logger.warning(
                "%s: quantization_config says %s weights but %s was asked for; using %s",
                where,
                q_dtype,
                weight_dtype,
                weight_dtype,
            )
            notes.append(
                f"weights: {weight_dtype} (the config's quantization_config says {q_dtype})"
            )
        groups = q_groups if (q_dtype == weight_dtype and q_groups) else frozenset(_LINEAR_GROUPS)
        if q_dtype != weight_dtype:
            scale_bits = 0.0
    if wdt == base:
        groups = frozenset(_LINEAR_GROUPS)
        scale_bits = 0.0
    kvdt = kv_dtype or base
    if kvdt not in DTYPE_BITS:
        raise InputError(f"unknown KV dtype {kvdt!r}")

    display = name or str(cfg.get("_name_or_path") or model_type)
    return ModelGeometry(
        name=display,
        model_type=model_type,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        intermediate_size=intermediate,
        num_experts=num_experts,
        experts_per_token=top_k,
        moe_intermediate_size=moe_inter,
        num_shared_experts=n_shared,
        shared_expert_intermediate_size=shared_inter if num_experts > 0 else 0,
        moe_layers=moe_layers,
        attention=attention,
        kv_lora_rank=kv_lora_rank,
        q_lora_rank=q_lora_rank,
        qk_rope_head_dim=rope_dim,
        qk_nope_head_dim=nope_dim,
        v_head_dim=v_head,
        attention_bias=bool(cfg.get("attention_bias", False)),
        expert_bias=model_type == "gpt_oss",
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
        attention_sinks=model_type == "gpt_oss",
        max_position_embeddings=(
            _int(cfg, where, "max_position_embeddings")
            if cfg.get("max_position_embeddings") is not None
            else None
        ),
        base_dtype=base,
        weight_dtype=wdt,
        kv_dtype=kvdt,
        quantized_groups=groups,
        weight_block_scale_bits=scale_bits,
        notes=tuple(notes),
    )


def load_geometry(
    path: Path | None,
    *,
    overrides: GeometryOverrides | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    name: str | None = None,
) -> ModelGeometry:
    """Read ``config.json`` at ``path`` (None: geometry from ``overrides`` alone).

    Raises:
        InputError: naming the file and what is wrong with it.
    """
    config: dict[str, Any] = {}
    where = "model.geometry"
    if path is not None:
        where = str(path)
        if not path.exists():
            raise InputError(f"{path}: model config not found (model.config in the spec)")
        data = bounded.parse_json(bounded.read_text(path), where=path)
        if not isinstance(data, dict):
            raise InputError(f"{path}: the top level must be a JSON object")
        config = data
    return geometry_from_config(
        config,
        where=where,
        overrides=overrides,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        name=name,
    )


def geometry_for_spec(loaded: LoadedSpec) -> ModelGeometry:
    """The geometry a spec describes: its config, geometry overrides and storage types.

    A ``weight_dtype`` or ``kv_dtype`` the spec does not set is left to the config
    (:meth:`~tokenwatt.schema.spec.ModelSpec.storage_types_set`), exactly as the simulator reads
    it, so the MBU estimate and the simulator agree on the bytes.
    """
    model = loaded.spec.model
    weight_dtype, kv_dtype = model.storage_types_set()
    return load_geometry(
        loaded.config_file,
        overrides=model.geometry,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        name=model.name,
    )
