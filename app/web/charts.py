"""SVG charts of the roofline and the prefill curve, for people who would rather look than read.

matplotlib is imported on the first chart only: the JSON hot path never pays for it.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from app.engine.parallelism import layout_label
from app.engine.specs import Deployment

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from app.estimates.schemas import PrefillCurveResponse, RooflineResponse
    from app.plans.schemas import PlanRead
    from app.simulations.schemas import SimulationResponse

__all__ = [
    "SVG_MEDIA_TYPE",
    "plan_svg",
    "prefill_curve_svg",
    "roofline_svg",
    "simulation_svg",
    "wants_svg",
]

SVG_MEDIA_TYPE = "image/svg+xml"
_TERA = 1e12


def wants_svg(accept: str | None) -> bool:
    """True when the Accept header prefers SVG to JSON (by q-value, then by order)."""
    if not accept:
        return False
    ranked: list[tuple[float, int, str]] = []
    for index, part in enumerate(accept.split(",")):
        media, *params = (piece.strip() for piece in part.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        ranked.append((quality, -index, media.lower()))
    for quality, _, media in sorted(ranked, reverse=True):
        if quality <= 0:
            return False
        if media in {SVG_MEDIA_TYPE, "image/*"}:
            return True
        if media in {"application/json", "application/*", "*/*"}:
            return False
    return False


def _figure() -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure  # noqa: PLC0415

    figure = Figure(figsize=(8, 5), dpi=100, layout="constrained")
    axes: Axes = figure.subplots()
    return figure, axes


def _svg(figure: Figure) -> str:
    """The figure as SVG, its labels as text (selectable, searchable, read by screen readers)."""
    import matplotlib  # noqa: PLC0415

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def roofline_svg(answer: RooflineResponse) -> str:
    """Attainable FLOP/s against arithmetic intensity, log-log, with the ridge and each phase."""
    figure, axes = _figure()
    bandwidth = answer.memory_bandwidth_bytes_per_s / _TERA
    ridge = answer.ridge_intensity
    intensities = [p.arithmetic_intensity for p in answer.phases] + [ridge]
    low = min(0.5, *intensities) / 2
    high = max(ridge * 100, *intensities) * 2
    # One roof per format the phases compute in (fp8 attention has a higher roof than bf16 GEMMs).
    roofs = {answer.compute_dtype: ridge} | {
        p.compute_dtype: p.ridge_intensity for p in answer.phases
    }
    for dtype, ridge_of in sorted(roofs.items(), key=lambda item: item[1]):
        peak_of = ridge_of * bandwidth
        xs = [low, ridge_of, high]
        axes.plot(
            xs,
            [min(peak_of, bandwidth * x) for x in xs],
            color="#1f4e79",
            linewidth=2 if dtype == answer.compute_dtype else 1.2,
            linestyle="-" if dtype == answer.compute_dtype else "--",
            label=f"{dtype} roof ({peak_of:,.0f} TFLOP/s)",
        )
        axes.axvline(ridge_of, color="#999999", linestyle=":", linewidth=1)
        axes.text(
            ridge_of * 1.08,
            0.03,
            f"{dtype} ridge {ridge_of:,.0f} FLOP/B",
            transform=axes.get_xaxis_transform(),
            rotation=90,
            fontsize=8,
            color="#555555",
            verticalalignment="bottom",
        )
    for phase in answer.phases:
        y = phase.attainable_flops_per_s / _TERA
        color = "#c0392b" if phase.bound == "memory" else "#27ae60"
        axes.scatter([phase.arithmetic_intensity], [y], color=color, zorder=3)
        axes.annotate(
            f"{phase.name} ({phase.compute_dtype})\n{phase.arithmetic_intensity:,.4g} FLOP/B",
            (phase.arithmetic_intensity, y),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize=8,
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP per byte)")
    axes.set_ylabel("attainable TFLOP/s")
    axes.legend(loc="lower right", fontsize=8)
    title = f"Roofline: {answer.gpu}" + (f", {answer.model}" if answer.model else "")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.25)
    return _svg(figure)


def prefill_curve_svg(answer: PrefillCurveResponse) -> str:
    """TTFT against prompt length, log-log, with the attention crossover marked."""
    figure, axes = _figure()
    points = sorted(answer.points, key=lambda p: p.prompt_tokens)
    xs = [p.prompt_tokens for p in points]
    axes.plot(xs, [p.ttft_ms for p in points], marker="o", markersize=3, color="#1f4e79")
    crossover = answer.crossover_tokens
    if xs[0] <= crossover <= xs[-1]:
        axes.axvline(crossover, color="#c0392b", linestyle="--", linewidth=1)
        axes.annotate(
            f"crossover {crossover:,} tokens\n(attention FLOPs = linear FLOPs)",
            (crossover, points[0].ttft_ms),
            textcoords="offset points",
            xytext=(6, 6),
            fontsize=8,
            color="#c0392b",
        )
    else:  # beyond the lengths drawn (or the model's context): said, not drawn off the axis
        axes.annotate(
            f"attention crossover at {crossover:,} tokens, outside the lengths shown",
            (0.02, 0.95),
            xycoords="axes fraction",
            fontsize=8,
            color="#c0392b",
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("prompt tokens")
    axes.set_ylabel("TTFT (ms)")
    target = answer.target
    axes.set_title(f"Prefill: {target.model} on {target.gpu} (tp {target.tp})")
    axes.grid(True, which="both", alpha=0.25)
    return _svg(figure)


def simulation_svg(
    answer: SimulationResponse, ttft_slo_ms: float | None, tpot_slo_ms: float | None
) -> str:
    """A simulated replica: its queue over time (waiting and running requests), and its TTFT
    and TPOT percentiles with the SLOs drawn."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    figure = Figure(figsize=(8, 7), dpi=100, layout="constrained")
    queue_axes, ttft_axes, tpot_axes = figure.subplot_mosaic(
        [["queue", "queue"], ["ttft", "tpot"]]
    ).values()
    times = [point.time_s for point in answer.queue]
    queue_axes.step(
        times, [p.running_requests for p in answer.queue], where="post", label="running"
    )
    queue_axes.step(
        times, [p.waiting_requests for p in answer.queue], where="post", label="waiting"
    )
    queue_axes.set_xlabel("seconds since the first arrival")
    queue_axes.set_ylabel("requests")
    queue_axes.legend(loc="upper left", fontsize=8)
    queue_axes.grid(True, alpha=0.25)
    state = "saturated: the queue grows" if answer.saturated else "keeps up"
    target = answer.target
    queue_axes.set_title(
        f"{target.model} on {target.gpu} (tp {target.tp}): {answer.requests_per_s:.2f} req/s, "
        f"{state}"
    )
    for axes, name, latency, slo in (
        (ttft_axes, "TTFT", answer.ttft_ms, ttft_slo_ms),
        (tpot_axes, "TPOT", answer.tpot_ms, tpot_slo_ms),
    ):
        labels = ["p50", "p90", "p99"]
        values = [latency.p50, latency.p90, latency.p99]
        colors = ["#c0392b" if slo is not None and value > slo else "#1f4e79" for value in values]
        axes.bar(labels, values, color=colors)
        if slo is not None:
            axes.axhline(slo, color="#c0392b", linestyle="--", linewidth=1)
            axes.annotate(
                f"SLO {slo:g} ms",
                (0.02, slo),
                xycoords=("axes fraction", "data"),
                textcoords="offset points",
                xytext=(0, 3),
                fontsize=8,
                color="#c0392b",
            )
        axes.set_ylabel(f"{name} (ms)")
        axes.set_title(f"{name} percentiles", fontsize=10)
        axes.grid(True, axis="y", alpha=0.25)
    return _svg(figure)


def plan_svg(answer: PlanRead) -> str:
    """A plan's planned candidates as cost per hour against predicted p99 TTFT, the SLO drawn,
    the cheapest marked; the infeasible and pruned ones counted in the title."""
    figure, axes = _figure()
    slo = answer.request.get("slo", {}).get("ttft_p99_ms")
    planned = [c for c in answer.plans if c.feasible and c.predicted and c.cost_per_hour_usd]
    for rank, candidate in enumerate(planned):
        assert candidate.predicted is not None and candidate.cost_per_hour_usd is not None
        best = rank == 0
        axes.scatter(
            candidate.predicted.ttft_p99_ms,
            candidate.cost_per_hour_usd,
            s=80 if best else 40,
            color="#1e8449" if best else "#1f4e79",
            zorder=3,
        )
        layout = layout_label(
            Deployment(tp=candidate.tp, pp=candidate.pp, dp=candidate.dp, ep=candidate.ep)
        )
        axes.annotate(
            f"{candidate.gpu} {layout}, {candidate.replicas} replica(s)"
            + (" (cheapest)" if best else ""),
            (candidate.predicted.ttft_p99_ms, candidate.cost_per_hour_usd),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize=8,
        )
    axes.margins(x=0.1, y=0.15)  # room for the labels inside the axes
    if slo is not None:
        axes.axvline(slo, color="#c0392b", linestyle="--", linewidth=1)
        axes.annotate(
            f"TTFT p99 SLO {slo:g} ms",
            (slo, 0.02),
            xycoords=("data", "axes fraction"),
            textcoords="offset points",
            xytext=(-4, 0),
            ha="right",
            fontsize=8,
            color="#c0392b",
        )
    infeasible = sum(1 for c in answer.plans if not c.feasible)
    axes.set_xlabel("predicted TTFT p99 at the planned load (ms)")
    axes.set_ylabel("cost (USD per hour)")
    model = answer.request.get("model", "")
    axes.set_title(
        f"Plan for {model}: {len(planned)} planned, {infeasible} infeasible, "
        f"{len(answer.pruned)} pruned",
        fontsize=10,
    )
    axes.grid(True, alpha=0.25)
    return _svg(figure)
