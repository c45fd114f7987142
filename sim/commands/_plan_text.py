"""How ``specsim plan`` prints its intervals (``sim.studies.plan_interval``)."""

from __future__ import annotations


def ranges(table, low: str, high: str) -> list[str]:
    """``low``-``high`` of each row, as printed ('' where the row has none)."""
    return ["" if lo != lo else f"{lo:.3g}-{hi:.3g}"
            for lo, hi in zip(table[low], table[high], strict=True)]


def needed(table) -> list[str]:
    """The GPUs a target rate needs, with the interval's range where the row has one."""
    out = []
    for n, lo, hi in zip(table["gpus_for_target"], table["gpus_for_target_low"],
                         table["gpus_for_target_high"], strict=True):
        text = "-" if n == float("inf") else f"{n:.0f}"
        if lo == lo:
            text += " (" + "-".join("-" if x == float("inf") else f"{x:.0f}"
                                    for x in (lo, hi)) + ")"
        out.append(text)
    return out


def interval_note(spread: float) -> str:
    """What the printed ranges are."""
    acc = f"acceptance x (1 -/+ {spread:g})" if spread else \
        "acceptance as given (a task mix: its least/most accepting task)"
    return (f"ranges: the limit with step times x (1 +/- the timing's held-out error on "
            f"speculative runs, column timing_error) and {acc}; not a confidence interval")


def pool_lines(command: str) -> str:
    """A command after its label: a P/D candidate's lines (``sim.pd_pools.pool_commands``:
    one per pool, joined by " ; ") a line each, indented; another's on the label's line."""
    if " ; " in command:
        return "\n    ".join(["", *command.split(" ; ")])
    return f" {command}"
