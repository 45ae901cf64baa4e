"""Numeric formats: their storage size and which tensor-core rate a format computes at."""

from enum import StrEnum

__all__ = ["BYTES_PER_ELEMENT", "STORAGE_DTYPES", "DType", "compute_dtype_for"]


class DType(StrEnum):
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"
    FP4 = "fp4"


STORAGE_DTYPES: tuple[DType, ...] = (
    DType.BF16,
    DType.FP16,
    DType.FP8,
    DType.INT8,
    DType.INT4,
    DType.FP4,
)
"""Formats weights and KV caches are stored in (fp32 and tf32 are formats of computation)."""

BYTES_PER_ELEMENT: dict[DType, float] = {
    DType.FP32: 4.0,
    DType.TF32: 4.0,  # stored as fp32; only the tensor-core multiply rounds to 19 bits
    DType.BF16: 2.0,
    DType.FP16: 2.0,
    DType.FP8: 1.0,
    DType.INT8: 1.0,
    DType.INT4: 0.5,
    DType.FP4: 0.5,
}


def compute_dtype_for(weight_dtype: DType) -> DType:
    """The format the GEMMs run in for weights stored as `weight_dtype`.

    bf16/fp16/fp8/int8 weights run W8A8-style at their own tensor-core rate (as vLLM and
    TensorRT-LLM serve FP8 and SmoothQuant INT8 checkpoints); int4 weights are weight-only
    quantisation (AWQ/GPTQ, W4A16): dequantised in the kernel, multiplied in bf16. fp4 runs at the
    fp4 rate where a part has one (Blackwell NVFP4).
    """
    if weight_dtype is DType.INT4:
        return DType.BF16
    if weight_dtype is DType.FP32:
        return DType.FP32
    return weight_dtype
