"""SVG charts of the roofline and the prefill curve, for people who would rather look than read.

matplotlib is imported on the first chart only: the JSON hot path never pays for it.
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

from app.engine.parallelism import layout_label
from app.engine.specs import Deployment
from app.web.negotiation import JSON, SVG, preferred

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from app.estimates.schemas import PrefillCurveResponse, RooflineResponse
    from app.plans.schemas import PlanRead
    from app.simulations.schemas import SimulationResponse, SweepResponse
    from app.validation.schemas import ValidationRecord

__all__ = [
    "SVG_MEDIA_TYPE",
    "plan_svg",
    "prefill_curve_svg",
    "roofline_svg",
    "simulation_svg",
    "sweep_svg",
    "validation_svg",
    "wants_svg",
]

SVG_MEDIA_TYPE = SVG
_TERA = 1e12


def wants_svg(accept: str | None) -> bool:
    """True when the Accept header prefers SVG to JSON (by q-value, then by order)."""
    return preferred(accept, (JSON, SVG_MEDIA_TYPE)) == SVG_MEDIA_TYPE


def _figure(height: float = 5.0) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure  # noqa: PLC0415

    figure = Figure(figsize=(8, height), dpi=100, layout="constrained")
    axes: Axes = figure.subplots()
    return figure, axes


def _svg(figure: Figure) -> str:
    """The figure as SVG, its labels as text (selectable, searchable, read by screen readers)."""
    import matplotlib  # noqa: PLC0415

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


_PHASE_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")


def roofline_svg(answer: RooflineResponse) -> str:
    """Attainable FLOP/s against arithmetic intensity, log-log, with the ridge and each phase.

    Every label lives in the legend beside the axes (roofs with their ridge, phases with their
    intensity and bound): phases a few percent apart in intensity would otherwise print their
    labels over each other. Each phase has its own marker shape; memory-bound ones are red,
    compute-bound ones green."""
    figure, axes = _figure(height=6.0)
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
        main = dtype == answer.compute_dtype
        axes.plot(
            xs,
            [min(peak_of, bandwidth * x) for x in xs],
            color="#1f4e79",
            linewidth=2 if main else 1.2,
            linestyle="-" if main else "--",
            label=f"{dtype} roof {peak_of:,.0f} TFLOP/s, ridge {ridge_of:,.0f} FLOP/B",
        )
        axes.axvline(ridge_of, color="#999999", linestyle=":", linewidth=1)
    for index, phase in enumerate(answer.phases):
        y = phase.attainable_flops_per_s / _TERA
        color = "#c0392b" if phase.bound == "memory" else "#27ae60"
        axes.scatter(
            [phase.arithmetic_intensity],
            [y],
            color=color,
            marker=_PHASE_MARKERS[index % len(_PHASE_MARKERS)],
            s=42,
            zorder=3,
            label=f"{phase.name} ({phase.compute_dtype}): "
            f"{phase.arithmetic_intensity:,.4g} FLOP/B, {phase.bound}-bound",
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP per byte)")
    axes.set_ylabel("attainable TFLOP/s")
    title = f"Roofline: {answer.gpu}" + (f", {answer.model}" if answer.model else "")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.25)
    figure.legend(loc="outside lower center", fontsize=8, ncols=2, frameon=False)
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
        # The label on the side of the line with more room, so it stays inside the axes.
        right_half = xs[-1] > xs[0] and math.log(crossover / xs[0]) > 0.5 * math.log(xs[-1] / xs[0])
        axes.annotate(
            f"crossover {crossover:,} tokens\n(attention FLOPs = linear FLOPs)",
            (crossover, points[0].ttft_ms),
            textcoords="offset points",
            xytext=(-6, 6) if right_half else (6, 6),
            horizontalalignment="right" if right_half else "left",
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


_PERCENTILE_STYLES = (
    ("p50", "-", "o", "#1f4e79"),
    ("p90", "--", "s", "#d68910"),
    ("p99", ":", "^", "#7d3c98"),
)


def sweep_svg(answer: SweepResponse, ttft_slo_ms: float | None, tpot_slo_ms: float | None) -> str:
    """TTFT and TPOT percentiles (p50, p90, p99) against the load (offered rate or users), the
    SLOs drawn, the saturated loads shaded and the rate found to saturate marked. Legends sit beside
    the axes, so no label covers another."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    figure = Figure(figsize=(9, 7), dpi=100, layout="constrained")
    ttft_axes, tpot_axes = figure.subplots(2, 1, sharex=True)
    open_loop = answer.axis == "requests_per_s"
    points = sorted(
        answer.points,
        key=lambda p: (p.requests_per_s_offered if open_loop else p.concurrency) or 0,
    )
    loads = [float((p.requests_per_s_offered if open_loop else p.concurrency) or 0) for p in points]
    # Shade from halfway between the last load that keeps up and the first that saturates.
    first = next((i for i, p in enumerate(points) if p.saturated), None)
    shade_from = None
    if first is not None:
        shade_from = loads[first] if first == 0 else (loads[first - 1] + loads[first]) / 2
    for axes, name, field, slo in (
        (ttft_axes, "TTFT", "ttft_ms", ttft_slo_ms),
        (tpot_axes, "TPOT", "tpot_ms", tpot_slo_ms),
    ):
        for quantile, style, marker, color in _PERCENTILE_STYLES:
            axes.plot(
                loads,
                [getattr(getattr(p, field), quantile) for p in points],
                linestyle=style,
                marker=marker,
                markersize=4,
                color=color,
                label=f"{name} {quantile}",
            )
        if slo is not None:
            axes.axhline(slo, color="#c0392b", linestyle="--", linewidth=1, label=f"SLO {slo:g} ms")
        if shade_from is not None:
            axes.axvspan(shade_from, max(loads), color="#c0392b", alpha=0.1, label="saturated")
        if open_loop and answer.saturation_requests_per_s:
            axes.axvline(
                answer.saturation_requests_per_s,
                color="#555555",
                linestyle="-.",
                linewidth=1,
                label=f"saturates at {answer.saturation_requests_per_s:.3g} req/s",
            )
        values = [
            getattr(getattr(p, field), q) for p in points for q, _, _, _ in _PERCENTILE_STYLES
        ]
        positive = [v for v in values if v > 0]
        if positive and max(positive) > 20 * min(positive):
            axes.set_yscale("log")  # latency explodes past saturation: keep the knee visible
        axes.set_ylabel(f"{name} (ms)")
        axes.grid(True, which="both", alpha=0.25)
        axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    tpot_axes.set_xlabel("offered load (requests/s)" if open_loop else "concurrent users")
    if not open_loop:
        from matplotlib.ticker import StrMethodFormatter  # noqa: PLC0415

        tpot_axes.set_xscale("log", base=2)
        tpot_axes.xaxis.set_major_formatter(StrMethodFormatter("{x:g}"))  # 64, not 2^6
    target = answer.target
    figure.suptitle(
        f"{target.model} on {target.gpu} (tp {target.tp}): latency against load, "
        f"{answer.num_requests:,} requests per point",
        fontsize=11,
    )
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


_FAMILY_COLOURS = {"dense": "#1f4e79", "moe": "#b9770e", "mla": "#c0392b", "gpt-oss": "#1e8449"}
_METRIC_MARKERS = {"ttft_ms": "o", "tpot_ms": "s", "e2e_ms": "^"}


def validation_svg(record: ValidationRecord) -> str:
    """Every published latency against Ridgeline's answer for its run, log-log: a colour per
    architecture family, a marker per metric, the diagonal where they agree and the band within
    25 % of it (throughput, in other units, is in the record, not drawn)."""
    figure, axes = _figure(height=6.0)
    latencies = [p for p in record.points if p.metric in _METRIC_MARKERS]
    values = [v for p in latencies for v in (p.measured, p.estimated)]
    low, high = min(values) / 1.5, max(values) * 1.5
    axes.plot([low, high], [low, high], color="#555555", linewidth=1)
    axes.fill_between(
        [low, high], [low * 0.75, high * 0.75], [low * 1.25, high * 1.25], color="#dddddd"
    )
    for family, colour in _FAMILY_COLOURS.items():
        for metric, marker in _METRIC_MARKERS.items():
            chosen = [p for p in latencies if p.family == family and p.metric == metric]
            if chosen:
                axes.scatter(
                    [p.measured for p in chosen],
                    [p.estimated for p in chosen],
                    color=colour,
                    marker=marker,
                    s=30,
                    zorder=3,
                    label=f"{family} {metric.removesuffix('_ms').upper()} ({len(chosen)})",
                )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(low, high)
    axes.set_ylim(low, high)
    axes.set_xlabel("measured in the published run (ms)")
    axes.set_ylabel("Ridgeline's answer (ms)")
    coverage = record.held_out_coverage
    inside = "" if coverage is None else f"; {100 * coverage:.0f} % inside their interval held out"
    sources = len({p.source for p in latencies})
    axes.set_title(
        f"Ridgeline against {len(latencies)} published latencies of {sources} sources{inside}",
        fontsize=10,
    )
    axes.legend(fontsize=7, loc="upper left")
    axes.grid(True, alpha=0.25, which="both")
    return _svg(figure)
