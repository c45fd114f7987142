"""Figures (matplotlib, Agg backend, PNG): each function returns a Figure ready to save.

Every figure has a title, axes labelled with units and a caption line at the bottom that
says what was plotted and under which assumptions. ``save`` refuses to write a figure whose
axes hold no data, so an empty plot can never pass silently.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from reports.tables import load_column, make_dir  # noqa: E402


def caption(fig: Figure, text: str) -> Figure:
    """Put ``text`` as a caption under the axes, with room below the axis labels for as
    many lines as it wraps to (~19 characters per inch of figure width at 7.5 pt)."""
    width_in, height_in = fig.get_size_inches()
    lines = max(1, -(-len(text) // int(19 * width_in)))
    fig.text(0.01, 0.01, text, fontsize=7.5, ha="left", va="bottom", wrap=True)
    fig.subplots_adjust(bottom=min(0.45, (0.62 + 0.14 * lines) / height_in))
    return fig


def has_data(fig: Figure) -> bool:
    """True when some axes draw non-empty lines, bars, images or scatter points."""
    for ax in fig.axes:
        if any(len(line.get_xdata()) for line in ax.lines):
            return True
        if any(im.get_array() is not None and np.size(im.get_array()) for im in ax.images):
            return True
        if any(p.get_height() != 0 for p in ax.patches if hasattr(p, "get_height")):
            return True
        if any(len(c.get_offsets()) for c in ax.collections):
            return True
    return False


def check_data(fig: Figure, path: str | Path) -> None:
    """A ValueError naming ``path`` when ``fig`` holds no data (``save`` refuses it)."""
    if not has_data(fig):
        raise ValueError(f"{path}: refusing to save a figure with no data")


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG and close it; a figure without data is a ValueError."""
    check_data(fig, path)
    path = Path(path)
    try:
        make_dir(path.parent)
    except Exception:
        plt.close(fig)
        raise
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def close(fig: Figure) -> None:
    """Free ``fig`` without saving it (one saved elsewhere, e.g. by a worker process)."""
    plt.close(fig)


# A large grid's heatmap stays a sane picture: past LABELLED_CELLS cells its cells carry
# no text (unreadable, and a 10,000-cell grid made a 10 MB PNG), each side is at most
# MAX_SIDE_IN inches and each axis names at most MAX_TICKS of its values; the caption says so.
LABELLED_CELLS = 400
MAX_SIDE_IN = 20.0
MAX_TICKS = 20


def _ticks(ax_set, ticks) -> None:
    """Name at most MAX_TICKS of ``ticks`` (every k-th) with ``ax_set`` (set_xticks/yticks)."""
    step = -(-len(ticks) // MAX_TICKS)
    at = range(0, len(ticks), step)
    ax_set(list(at), [str(ticks[i]) for i in at])


def _heatmap(values: np.ndarray, labels: np.ndarray, xticks, yticks, *, xlabel: str,
             ylabel: str, cbar: str, title: str, text: str) -> Figure:
    """An annotated heatmap centred on 1.0 (speedup: red below, green above), rows =
    ``yticks`` from the bottom, columns = ``xticks``; ``text`` is the caption. Past
    ``LABELLED_CELLS`` cells they are left unlabelled, and the caption says so."""
    finite = values[np.isfinite(values)]
    span = max(abs(finite.max() - 1.0), abs(1.0 - finite.min()), 0.05) if len(finite) else 1.0
    width_in = min(MAX_SIDE_IN, max(6.5, 1.2 * len(xticks) + 2.5))  # room for the title
    height_in = min(MAX_SIDE_IN, 0.6 * len(yticks) + 2.2)
    fig, ax = plt.subplots(figsize=(width_in, height_in))
    im = ax.imshow(values, cmap="RdYlGn", vmin=1.0 - span, vmax=1.0 + span, aspect="auto",
                   origin="lower")
    _ticks(ax.set_xticks, xticks)
    _ticks(ax.set_yticks, yticks)
    if values.size <= LABELLED_CELLS:
        for i in range(values.shape[0]):
            for j in range(values.shape[1]):
                ax.text(j, i, labels[i, j], ha="center", va="center", fontsize=7)
    else:
        text = (f"{values.size} cells, past {LABELLED_CELLS}: cells are not labelled (the "
                f"table holds every value). ") + text
    fig.colorbar(im, ax=ax, label=cbar)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(textwrap.fill(title, int(8 * width_in)))
    return caption(fig, text)


def _matrix(grid: pd.DataFrame, row_key: str, col_key: str, cell
            ) -> tuple[np.ndarray, np.ndarray, list, list]:
    """(values [rows, cols], labels, row ticks, column ticks) of a long-format grid, each
    cell's (value, label) from ``cell(row)``; cells the grid lacks stay nan and blank."""
    rows = sorted(grid[row_key].unique())
    cols = sorted(grid[col_key].unique())
    values = np.full((len(rows), len(cols)), np.nan)  # [row, col]
    labels = np.full(values.shape, "", dtype=object)
    for r in grid.itertuples():
        i, j = rows.index(getattr(r, row_key)), cols.index(getattr(r, col_key))
        values[i, j], labels[i, j] = cell(r)
    return values, labels, rows, cols


def _chain_cell(r) -> tuple[float, str]:
    if np.isnan(r.best_speedup):
        return np.nan, "no fit"
    g = "none" if r.best_gamma == 0 else f"γ={int(r.best_gamma)}"
    return r.best_speedup, f"{r.best_speedup:.2f}×\n{g}" + ("" if r.fits else "\nno fit")


def speedup_heatmap(grid: pd.DataFrame, title: str, note: str = "") -> Figure:
    """Batch × context grid of the best speedup, each cell annotated with its best γ.

    ``grid`` has columns batch, context, best_gamma, best_speedup, fits
    (``sim.studies.grid.chain_grid``). Cells that do not fit the GPU are marked 'no fit'.
    """
    values, labels, batches, contexts = _matrix(grid, "batch", "context", _chain_cell)
    return _heatmap(values, labels, contexts, batches,
                    xlabel="context (cached tokens per sequence)",
                    ylabel="batch size (sequences)",
                    cbar="best speedup vs no speculation (×)", title=title,
                    text="Each cell: the best speedup over plain decoding and the γ that "
                         "gives it (none = do not speculate). " + note)


def tree_heatmap(grid: pd.DataFrame, title: str, note: str = "") -> Figure:
    """Tree width × batch grid of speedups (``sim.studies.grid.tree_grid``); best width starred."""
    values, labels, widths, batches = _matrix(
        grid, "width", "batch", lambda r: (r.speedup, f"{r.speedup:.2f}×" + (" *" if r.best
                                                                            else "")))
    return _heatmap(values, labels, batches, widths, xlabel="batch size (sequences)",
                    ylabel="tree width k (nodes at the expanded level)",
                    cbar="speedup vs no speculation (×)", title=title,
                    text="* = best width at that batch (none starred: no tree beats plain "
                         "decoding). " + note)


def baseline_variant(load: pd.DataFrame) -> str | None:
    """The variant of a load table that never speculates (policy 'none'), if any."""
    for v in dict.fromkeys(load["variant"]):
        if (load.loc[load["variant"] == v, "policy"] == "none").all():
            return v
    return None


def _diffs(load: pd.DataFrame, metric: str, base: str, other: str
           ) -> tuple[list[float], list[float]]:
    """(loads both variants ran at, ``other``'s ``metric`` minus ``base``'s at each)."""
    x = load_column(load)
    a = load[load["variant"] == base].set_index(x)[metric]
    b = load[load["variant"] == other].set_index(x)[metric]
    rates = sorted(set(a.index) & set(b.index))
    return rates, [float(b[r] - a[r]) for r in rates]


def crossover(load: pd.DataFrame, metric: str, base: str, other: str) -> float | None:
    """The offered load (rate or users) where ``other``'s ``metric`` first rises above
    ``base``'s (linear interpolation between measured loads); None if it never does (or is
    above throughout)."""
    rates, diff = _diffs(load, metric, base, other)
    for k in range(1, len(rates)):
        if diff[k - 1] < 0 <= diff[k]:
            r0, r1 = rates[k - 1], rates[k]
            return r0 + (r1 - r0) * (-diff[k - 1]) / (diff[k] - diff[k - 1])
    return None


def compare_curves(load: pd.DataFrame, metric: str, base: str, other: str) -> str:
    """How ``other``'s ``metric`` compares with ``base``'s over the loads tried, as a clause:
    lower throughout, never lower, or lower up to the crossover and higher above."""
    rates, diff = _diffs(load, metric, base, other)
    unit = "req/s" if load_column(load) == "rate_per_s" else "users"
    tried = f"{rates[0]:g}–{rates[-1]:g} {unit}" if rates else "no common load"
    if rates and all(d < 0 for d in diff):
        return f"{other} is lower than {base} at every load tried ({tried}; no crossover)"
    if rates and all(d >= 0 for d in diff):
        return f"{other} is not lower than {base} at any load tried ({tried}; no crossover)"
    x = crossover(load, metric, base, other)
    if x is None:
        return f"{other} is higher than {base} at light load, lower at heavy load ({tried})"
    again = any(d < 0 for r, d in zip(rates, diff, strict=True) if r > x)
    return (f"{other} is lower than {base} up to ≈ {x:.3g} {unit}, higher above"
            + (" (lower again at a heavier load)" if again else ""))


def _metric_name(metric: str) -> str:
    """'tpot_p50_s' -> 'TPOT p50'."""
    name, _, pct = metric.removesuffix("_s").partition("_")
    return f"{name.upper()} {pct}".strip()


def latency_vs_load(load: pd.DataFrame, metrics=("tpot_p50_s", "ttft_p99_s"), title: str = "",
                    note: str = "") -> Figure:
    """Latency against offered load per variant, the crossover with 'none' marked.

    ``load`` has columns rate_per_s (or users, for a closed loop), variant, policy and the
    metric columns (seconds). A panel whose values span more than 20× (an overloaded queue)
    gets a log y axis so the light-load points stay readable. The caption says, per panel,
    where each speculating variant crosses plain decoding, or that it does not in range.
    """
    xcol = load_column(load)
    xlabel = ("offered load (requests/s)" if xcol == "rate_per_s"
              else "closed-loop users (concurrent clients)")
    xunit = " req/s" if xcol == "rate_per_s" else " users"
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 4.2), squeeze=False)
    variants = list(dict.fromkeys(load["variant"]))
    base = baseline_variant(load)
    said, drawn = [], False
    for ax, metric in zip(axes[0], metrics, strict=True):
        values = load[metric].to_numpy(dtype=float) * 1e3  # [rows] ms
        positive = values[values > 0]
        log = len(positive) and positive.max() > 20 * positive.min()
        for v in variants:
            d = load[load["variant"] == v].sort_values(xcol)
            ax.plot(d[xcol], d[metric] * 1e3, marker="o", label=v)
        if log:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        if load[xcol].min() > 0 and load[xcol].max() >= 8 * load[xcol].min():
            ax.set_xscale("log", base=2)  # the loads are multiples of the scenario's
            ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        for v in variants:
            if base is None or v == base:
                continue
            said.append(f"{_metric_name(metric)}: {compare_curves(load, metric, base, v)}.")
            x = crossover(load, metric, base, v)
            if x is not None:
                drawn = True
                ax.axvline(x, ls="--", color="grey", lw=1)
                # Label on the side of the line with more room.
                right = ax.transAxes.inverted().transform(ax.transData.transform((x, 0)))[0]
                ax.annotate(f"{v} higher\nabove {x:.3g}{xunit}", (x, 0.97),
                            xycoords=("data", "axes fraction"), fontsize=7,
                            ha="right" if right > 0.6 else "left", va="top",
                            xytext=(-3 if right > 0.6 else 3, 0), textcoords="offset points")
        ax.set_xlabel(xlabel + (", log scale" if ax.get_xscale() == "log" else ""))
        ax.set_ylabel(f"{_metric_name(metric)} (ms" + (", log scale)" if log else ")"))
        ax.legend(fontsize=8, loc="lower right" if log else "best")
    fig.suptitle(title or "Latency vs offered load: speculation vs none")
    if base is None:
        head = "No variant without speculation: no crossover to mark."
    elif drawn:
        head = (f"Dashed line: the load above which the speculative variant's latency exceeds "
                f"{base}'s (interpolated between loads).")
    else:
        head = f"No crossover with {base} inside the loads tried (no dashed line)."
    return caption(fig, " ".join([head, *said, note]).strip())


def latency_cdfs(frames: dict[str, pd.DataFrame], title: str = "", note: str = "") -> Figure:
    """Empirical CDFs of TTFT and TPOT per variant (``frames``: name -> requests frame)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, col, label in ((axes[0], "ttft_s", "TTFT"), (axes[1], "tpot_s", "TPOT")):
        drawn = 0
        for name, df in frames.items():
            x = np.sort(df[col].dropna().to_numpy()) * 1e3  # [n] ms
            if len(x):
                ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=name)
                drawn += 1
        if not drawn:  # (no request with a TPOT: one output token each)
            ax.text(0.5, 0.5, f"no request has a {label}", ha="center", va="center",
                    transform=ax.transAxes)
            continue
        ax.set_xlabel(f"{label} (ms, log scale)")
        ax.set_ylabel("fraction of requests ≤ x")
        ax.set_xscale("log")
        # Plain numbers (3, 4, 6 ms), not 3×10^0; minor ticks labelled only as far as they
        # fit (a subset over 1-2 decades, none beyond).
        fmt = matplotlib.ticker.LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5))
        lo, hi = ax.get_xlim()
        if hi < 10 * lo:  # under a decade: label every minor tick (2.5-7.5 ms: 3, 4, ..., 7)
            fmt = matplotlib.ticker.FormatStrFormatter("%g")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(fmt)
        ax.legend(fontsize=8)
    fig.suptitle(title or "Latency distributions (finished requests)")
    return caption(fig, "TTFT over requests that got a first token; TPOT over finished "
                        "requests with more than one output token. " + note)


def tokens_per_verify_hist(hist: pd.DataFrame, title: str = "", note: str = "") -> Figure:
    """Measured vs i.i.d.-formula distribution of tokens per verify (``reports.bursty``).

    ``hist`` has columns tokens, measured, iid (probabilities) and optionally variant.
    """
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    x = hist["tokens"].to_numpy()
    ax.bar(x - 0.2, hist["measured"], width=0.4, label="measured (acceptance model replay)")
    ax.bar(x + 0.2, hist["iid"], width=0.4, label="i.i.d. formula at measured α̂")
    ax.set_xlabel("tokens per verify (accepted + 1)")
    ax.set_ylabel("fraction of verifies")
    ax.set_xticks(x)
    ax.legend(fontsize=8)
    ax.set_title(title or "Tokens per verify: measured vs i.i.d. formula")
    return caption(fig, note)


def batch_over_time(series: dict[str, pd.DataFrame], title: str = "", note: str = "") -> Figure:
    """Batch size of each iteration of the first replica against simulated time
    (``series``: variant name -> iterations frame)."""
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for name, it in series.items():
        it = it[it["replica"] == it["replica"].min()] if len(it) else it  # one replica
        ax.plot(it["start_at"], it["batch_size"], lw=0.8, label=name, drawstyle="steps-post")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("batch size (sequences)")
    ax.legend(fontsize=8)
    ax.set_title(title or "Batch size over time")
    return caption(fig, "Sequences in each target pass (prefilling and decoding) of the first "
                        "replica. " + note)


def pareto_front(plan: pd.DataFrame, title: str = "", note: str = "") -> Figure:
    """Throughput per GPU against per-user tokens/s (1 / mean TPOT) of a capacity plan's
    candidates at their highest passing rate; the front (``pareto``) joined and labelled."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ok = plan.dropna(subset=["output_tokens_per_s_per_gpu", "user_tokens_per_s"])
    ax.scatter(ok["user_tokens_per_s"], ok["output_tokens_per_s_per_gpu"], color="0.6",
               label="candidates")
    front = ok[ok["pareto"]].sort_values("user_tokens_per_s")
    ax.plot(front["user_tokens_per_s"], front["output_tokens_per_s_per_gpu"], "o-",
            color="C0", label="Pareto front")
    for _, r in ok.iterrows():
        ax.annotate(r["candidate"], (r["user_tokens_per_s"], r["output_tokens_per_s_per_gpu"]),
                    textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("per-user output tokens/s (1 / mean TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(title or "Capacity plan: throughput per GPU vs per-user speed")
    ax.legend(loc="best", fontsize=8)
    return caption(fig, note or "Each candidate at the highest request rate that meets the "
                   "SLO; a point on the front is beaten on neither axis by another.")
