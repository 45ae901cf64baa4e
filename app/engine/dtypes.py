"""Numeric formats: their storage size and which tensor-core rate a format computes at."""

from __future__ import annotations

from collections.abc import Container
from enum import StrEnum

__all__ = [
    "BLOCK_SCALED_DTYPES",
    "BYTES_PER_ELEMENT",
    "STORAGE_DTYPES",
    "DType",
    "compute_dtype_for",
]


class DType(StrEnum):
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"
    FP4 = "fp4"
    FP8_BLOCK = "fp8-block"
    """FP8 weights with one fp32 scale per 128 x 128 block (DeepSeek-V3's `weight_block_size`)."""
    NVFP4 = "nvfp4"
    """NVIDIA's FP4: E2M1 values, one FP8 (E4M3) scale per 16, a per-tensor fp32 scale."""
    MXFP4 = "mxfp4"
    """OCP microscaling FP4: E2M1 values, one E8M0 scale byte per 32 (gpt-oss's experts)."""


STORAGE_DTYPES: tuple[DType, ...] = (
    DType.BF16,
    DType.FP16,
    DType.FP8,
    DType.INT8,
    DType.INT4,
    DType.FP4,
    DType.FP8_BLOCK,
    DType.NVFP4,
    DType.MXFP4,
)
"""Formats weights and KV caches are stored in (fp32 and tf32 are formats of computation)."""

BLOCK_SCALED_DTYPES: frozenset[DType] = frozenset({DType.FP8_BLOCK, DType.NVFP4, DType.MXFP4})
"""Weight formats whose scales are stored beside the values: formats of weights only."""

BYTES_PER_ELEMENT: dict[DType, float] = {
    DType.FP32: 4.0,
    DType.TF32: 4.0,  # stored as fp32; only the tensor-core multiply rounds to 19 bits
    DType.BF16: 2.0,
    DType.FP16: 2.0,
    DType.FP8: 1.0,
    DType.INT8: 1.0,
    DType.INT4: 0.5,
    DType.FP4: 0.5,
    # Values plus their scales, per element:
    DType.FP8_BLOCK: 1.0 + 4.0 / (128 * 128),  # one fp32 scale per 128 x 128 block
    DType.NVFP4: 0.5 + 1.0 / 16,  # one E4M3 byte per 16 (the per-tensor fp32 is negligible)
    DType.MXFP4: 0.5 + 1.0 / 32,  # one E8M0 byte per 32
}


def compute_dtype_for(weight_dtype: DType, peaks: Container[DType] | None = None) -> DType:
    """The format the GEMMs run in for weights stored as `weight_dtype` on a GPU with tensor-core
    `peaks` (None: as if it had every one).

    bf16/fp16/fp8/int8 weights run W8A8-style at their own tensor-core rate (as vLLM and
    TensorRT-LLM serve FP8 and SmoothQuant INT8 checkpoints), fp8 with block scales at the fp8
    rate (DeepGEMM); int4 weights are weight-only quantisation (AWQ/GPTQ, W4A16): dequantised in
    the kernel, multiplied in bf16. fp4 and NVFP4 run at the fp4 rate (Blackwell; a GPU without
    it cannot run them). MXFP4 runs at the fp4 rate where a part has one, else weight-only:
    dequantised to bf16 in the kernel, as Hopper serves gpt-oss (Marlin, Triton MoE kernels).
    """
    if weight_dtype is DType.INT4:
        return DType.BF16
    if weight_dtype is DType.FP32:
        return DType.FP32
    if weight_dtype is DType.FP8_BLOCK:
        return DType.FP8
    if weight_dtype is DType.NVFP4:
        return DType.FP4
    if weight_dtype is DType.MXFP4:
        return DType.FP4 if peaks is None or DType.FP4 in peaks else DType.BF16
    return weight_dtype
