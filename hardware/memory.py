"""Memory: the one-line refusal of a deployment that does not fit, and auto offloading."""

from __future__ import annotations

import math

from hardware.deployment import GIB, Deployment
from specdec.errors import UserError


def _gib_formatter(need: float, available: float):
    """A bytes -> 'GiB' formatter with 1-3 decimals: the fewest that tell need from available."""
    digits = 3
    for d in (1, 2):
        if f"{need / GIB:.{d}f}" != f"{available / GIB:.{d}f}":
            digits = d
            break
    return lambda n: f"{n / GIB:.{digits}f}"


def fit_error(dep: Deployment, stage: int, weight_bytes: float, kv_tokens: int,
              kv_bytes: float, reserve_bytes: int, subject: str = "") -> UserError:
    """The error for stage ``stage`` of ``dep`` needing more than its usable bytes per GPU.

    The message shows the need (weights + KV + reserve) against what is available, with as
    many decimals as it takes for "needs" to read larger than "available" (exact bytes if
    three are not enough). ``subject`` replaces the model id that starts it (e.g. a draft
    that does not fit next to its target).
    """
    where = f" (pipeline stage {stage})" if dep.pp > 1 else ""
    total = weight_bytes + kv_bytes + reserve_bytes
    available = dep.usable_bytes_per_gpu
    gib = _gib_formatter(total, available)
    exact = "" if gib(total) != gib(available) else (
        f" ({int(math.ceil(total))} > {available} bytes)"
    )
    return UserError(
        f"{subject or dep.model.id} does not fit on {dep.tp}x{dep.pp} "
        f"{dep.gpu.id}{where}: needs {gib(total)} GiB per GPU (weights "
        f"{gib(weight_bytes)} GiB at {dep.weight_label}"
        + (" with the embedding and lm_head at 16" if dep.weight_bits < 16 else "")
        + f" + KV for {kv_tokens} tokens "
        f"{gib(kv_bytes)} GiB"
        + (f" + reserved {gib(reserve_bytes)} GiB" if reserve_bytes else "")
        + f"), available {gib(available)} GiB{exact} of "
        f"{dep.gpu.hbm_capacity_gib:g} GiB after a "
        f"{dep.workspace_fraction:.0%} workspace margin"
    )


# offload_fraction "auto": the reserve it keeps (stated in docs/timing.md).
AUTO_BUFFER_LAYERS = 2  # streamed layers double-buffered in GPU memory
AUTO_KV_FRACTION = 0.2  # of usable memory kept for the KV cache at least


def auto_offload(dep: Deployment, counts) -> tuple[float, tuple[int, ...]]:
    """(fraction, buffer bytes per stage) for ``offload_fraction: auto``.

    Per stage, the fewest whole blocks go to host memory so that the remaining weights,
    ``AUTO_BUFFER_LAYERS`` blocks of streaming buffer and a KV cache of ``dep.kv_tokens``
    tokens -- at least ``AUTO_KV_FRACTION`` of the usable memory -- fit one GPU; the
    tightest stage's share of its stored weights is the fraction every stage offloads.
    Nothing is offloaded (fraction 0, no buffer) when everything fits. A deployment that
    does not fit even with every block offloaded is left to the memory check to refuse.
    """
    usable = dep.usable_bytes_per_gpu
    fraction = 0.0
    for c in counts:
        layer_bytes = (c.body_wide_bytes + c.body_narrow_bytes + c.routed_bytes) / c.layers
        kv = max(dep.kv_tokens * c.kv_bytes_per_token, AUTO_KV_FRACTION * usable)
        excess = c.stored_bytes + kv - usable
        if excess <= 0:
            continue
        blocks = min(math.ceil((excess + AUTO_BUFFER_LAYERS * layer_bytes) / layer_bytes),
                     c.layers)
        fraction = max(fraction, blocks * layer_bytes / c.stored_bytes)
    if fraction == 0.0:
        return 0.0, tuple(0 for _ in counts)
    return fraction, tuple(int(AUTO_BUFFER_LAYERS * (c.body_wide_bytes + c.body_narrow_bytes
                                                     + c.routed_bytes) / c.layers)
                           for c in counts)
