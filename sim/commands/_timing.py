"""The flags that choose how passes are priced, shared by ``hw step``, ``speedup``, ``grid``."""

from __future__ import annotations

import argparse

from hardware.deployment import TIMINGS
from specdec.errors import UserError


def add_timing_flags(p: argparse.ArgumentParser, defaults: bool = True) -> None:
    """--timing, --framework and --compute-dtype (shared with speedup and grid).

    With ``defaults`` False the flags default to None (the caller fills them in, so that
    it can tell an explicit flag from none).
    """
    p.add_argument("--timing", choices=TIMINGS, default="auto" if defaults else None,
                   help="timing backend: auto (default; measured kernel tables where they "
                        "cover the GPU, framework and model, else the calibrated "
                        "roofline), measured, roofline, or paper (the lecture's paper GPU)")
    p.add_argument("--framework", default="vllm" if defaults else None,
                   help="serving framework whose kernel tables and overheads price the "
                        "pass (default vllm; see 'hw list'); <id>@<release> takes a "
                        "release's own overheads where the catalog lists it, e.g. "
                        "trtllm@1.0.0rc3")
    p.add_argument("--compute-dtype", choices=("bf16", "fp8", "fp4"),
                   help="dtype of the matrix multiplies (default the GPU's 16-bit dtype; "
                        "fp8 = FP8 W8A8, needs --weight-bits 8; fp4 = FP4 W4A4 on "
                        "Blackwell, needs FP4 weights: --weight-bits 4 and an FP4 format)")


def offload_value(text: str, flag: str = "--offload") -> float | str:
    """A --offload value: a fraction in [0, 1] or 'auto'; one-line UserError otherwise."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{flag}: must be a fraction in [0, 1] or 'auto', got {text!r}") \
            from None
    if not 0.0 <= value <= 1.0:
        raise UserError(f"{flag}: must be a fraction in [0, 1], got {value:g}")
    return value
