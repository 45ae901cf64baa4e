"""A plain-text summary of a run document, for the terminal. Torch-free."""

from __future__ import annotations

from app.formats.run_document import Phase, RunDocument

__all__ = ["format_summary"]

_TERA = 1e12


def format_summary(document: RunDocument) -> str:
    """One header line, one line of microbenchmarks (when measured), one line per point."""
    env, model = document.environment, document.model
    backend = document.attention_backend.value if document.attention_backend else "unknown"
    lines = [
        f"{env.device_name} ({env.device_kind.value}), gpu {document.gpu or '-'}, "
        f"model {model.id or 'config.json'} with {model.num_layers} layers, "
        f"{document.dtype.value}, attention {backend}"
    ]
    micro = document.microbenchmarks
    if micro is not None:
        m, n, k = micro.matmul_shape
        lines.append(
            f"matmul {micro.matmul_flops_per_s / _TERA:.1f} TFLOP/s ({m}x{n}x{k}), "
            f"copy {micro.copy_bytes_per_s / _TERA:.2f} TB/s (read + write)"
        )
    for point in document.points:
        length = "n" if point.phase is Phase.PREFILL else "c"
        where = f"{point.phase.value:<7} B={point.batch_size:<4} {length}={point.tokens:<7}"
        if point.skipped is not None:
            lines.append(f"{where} skipped: {point.skipped.reason}")
        else:
            lines.append(
                f"{where} median {point.median_ms:10.3f} ms  "
                f"p10 {point.p10_ms:10.3f}  p90 {point.p90_ms:10.3f}  ({point.repeats} runs)"
            )
    return "\n".join(lines)
