"""Model catalog schemas."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import ConfigDict, Field

from app.engine.specs import FfnType
from app.web.schemas import (
    ENTRY_ID,
    Format,
    Input,
    Lax,
    Output,
    SourceRef,
    StorageFormat,
    merge_patch_model,
)

__all__ = [
    "ModelArchitecture",
    "ModelCreate",
    "ModelFields",
    "ModelImportRead",
    "ModelPatch",
    "ModelRead",
    "MoeFields",
]


class MoeFields(Input):
    """A mixture-of-experts FFN."""

    num_experts: int = Field(
        gt=0, le=4096, description="Routed experts per MoE layer `E`.", examples=[8]
    )
    experts_per_token: int = Field(
        gt=0, le=4096, description="Routed experts each token uses `k`.", examples=[2]
    )
    expert_intermediate_size: int = Field(
        gt=0, le=2**20, description="FFN width of one expert.", examples=[14336]
    )
    num_shared_experts: int = Field(
        default=0, ge=0, le=64, description="Always-on experts per layer.", examples=[0]
    )
    shared_expert_intermediate_size: int = Field(
        default=0, ge=0, le=2**20, description="Width of a shared expert; 0: the expert width."
    )
    num_dense_layers: int = Field(
        default=0, ge=0, le=1000, description="Leading layers with a dense FFN (DeepSeek)."
    )


class ModelArchitecture(Input):
    """A model's architecture, as its Hugging Face `config.json` gives it, in our names. Estimates
    take one inline wherever they take a catalog model id."""

    num_layers: int = Field(gt=0, le=1000, description="Decoder layers `L`.", examples=[32])
    hidden_size: int = Field(gt=0, le=2**17, description="Model width `d`.", examples=[4096])
    num_attention_heads: int = Field(gt=0, le=1024, description="Query heads `H`.", examples=[32])
    num_kv_heads: int = Field(
        gt=0, le=1024, description="Key/value heads `K` (`H` for MHA, 1 for MQA).", examples=[8]
    )
    head_dim: int = Field(gt=0, le=1024, description="Per-head width `h`.", examples=[128])
    intermediate_size: int = Field(
        gt=0, le=2**20, description="FFN width `f` of dense layers.", examples=[14336]
    )
    ffn_type: Annotated[FfnType, Lax] = Field(
        description="`gated` (SwiGLU, 3 matrices) or `mlp` (2 matrices)."
    )
    vocab_size: int = Field(gt=0, le=2**22, description="Vocabulary `V`.", examples=[128256])
    max_context_tokens: int = Field(
        gt=0, le=2**24, description="Longest context the model takes.", examples=[8192]
    )
    tie_word_embeddings: bool = Field(default=False, description="LM head shares the embedding.")
    attention_bias: bool = Field(default=False, description="Q/K/V projections have biases.")
    moe: MoeFields | None = Field(default=None, description="Mixture-of-experts FFN, if any.")
    checkpoint_dtype: Format = Field(
        default=StorageFormat.BF16,
        description=(
            "The format the published weights are in (its config's `torch_dtype`, or its "
            "quantisation). Plans serve it unless `weight_dtypes` asks for others."
        ),
    )


class ModelFields(ModelArchitecture):
    """What a client writes about a model: its architecture, and what it is."""

    name: str = Field(
        min_length=1, max_length=200, description="Display name.", examples=["Meta Llama 3 8B"]
    )
    family: str = Field(
        pattern=r"^[a-z0-9][a-z0-9._-]{0,31}$", description="Model family.", examples=["llama"]
    )
    hf_repo: str | None = Field(
        default=None,
        max_length=200,
        description="Hugging Face repository.",
        examples=["meta-llama/Meta-Llama-3-8B"],
    )
    published_params: int | None = Field(
        default=None, gt=0, le=10**15, description="The parameter count its publisher states."
    )
    sources: list[SourceRef] = Field(
        default_factory=list, max_length=64, description="Where each figure comes from."
    )


class ModelCreate(ModelFields):
    """A new model (POST), or every writable field of one (PUT; `id` must match the path)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "mistral-nemo-12b",
                    "name": "Mistral NeMo 12B",
                    "family": "mistral",
                    "hf_repo": "mistralai/Mistral-Nemo-Base-2407",
                    "num_layers": 40,
                    "hidden_size": 5120,
                    "num_attention_heads": 32,
                    "num_kv_heads": 8,
                    "head_dim": 128,
                    "intermediate_size": 14336,
                    "ffn_type": "gated",
                    "vocab_size": 131072,
                    "max_context_tokens": 131072,
                    "sources": [
                        {
                            "title": "config.json",
                            "url": "https://huggingface.co/mistralai/Mistral-Nemo-Base-2407/blob/main/config.json",
                        }
                    ],
                }
            ]
        }
    )

    id: ENTRY_ID


ModelPatch = merge_patch_model(ModelFields, "ModelPatch", example={"max_context_tokens": 65536})


class ModelRead(ModelFields, Output):
    """A model as stored, with its parameter counts computed from the architecture."""

    id: str = Field(description="Catalog id.", examples=["llama-3-8b"])
    params_total: int = Field(description="Parameters, computed from the architecture.")
    params_active: int = Field(description="Parameters one token passes through (MoE: k experts).")
    origin: str = Field(description="`bundled` (shipped with Ridgeline) or `user`.")
    user_modified: bool = Field(description="A bundled entry a user has edited.")
    version: int = Field(description="Increments on every write; the ETag carries it.")
    created_at: datetime = Field(description="When the entry was created (UTC).")
    updated_at: datetime = Field(description="When the entry last changed (UTC).")


class ModelImportRead(ModelRead):
    """A model created from a `config.json`, with what the config declares that the catalog
    does not model yet (a sliding window, say) and what that means for the estimates."""

    notes: list[str] = Field(description="Declared but not modelled, and its effect.")
