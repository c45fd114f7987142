"""Timing backends: how many seconds one forward pass of a deployed model takes.

``deployment.timing`` chooses (``Deployment.timing``, ``--timing``):

- ``paper``    -- the lecture's paper GPU (:mod:`hardware.timing.paper`), bit for bit;
- ``roofline`` -- the analytic model with the GPU's calibrated parameters, α-β collectives
  and the framework's overheads (:mod:`hardware.timing.roofline`);
- ``measured`` -- measured kernel tables summed over the pass, plus the framework's
  overheads (:mod:`hardware.timing.measured`; tables from :mod:`hardware.timing.aic`);
- ``auto``     -- ``measured`` where the tables cover the GPU, framework, dtypes and model
  shape, else ``roofline``; the backend's ``note`` says which and why.

:func:`make_timing` builds the backend for one deployment; ``hardware.cost.CostModel`` is
the only caller and the one entry point the rest of SpecSim uses.
"""

from __future__ import annotations

from hardware.timing.base import TIMINGS, Breakdown, StageCounts, stage_counts
from specdec.errors import UserError

__all__ = ["TIMINGS", "Breakdown", "StageCounts", "gpu_timing_data", "make_timing",
           "stage_counts"]


def make_timing(dep, counts, tp_link, pp_link, host_link, offload_fraction: float,
                framework, ep_link=None):
    """The timing backend ``dep.timing`` asks for (``auto``: measured, else roofline).

    ``ep_link`` carries an MoE model's all-to-all (expert parallelism over data-parallel
    attention groups; default the TP link). ``measured`` asked for explicitly but not
    covered is a UserError saying why.
    """
    from hardware.timing.paper import PaperTiming

    args = (dep, counts, tp_link, pp_link, host_link, offload_fraction)
    if dep.timing == "paper":
        return PaperTiming(*args, ep_link=ep_link or tp_link)
    from hardware.timing.roofline import RooflineTiming

    if dep.timing == "roofline":
        return RooflineTiming(*args, framework, ep_link=ep_link)
    from hardware.timing.aic import TablesUnavailable
    from hardware.timing.measured import MeasuredTiming

    try:
        return MeasuredTiming(*args, framework)
    except TablesUnavailable as why:
        if dep.timing == "measured":
            raise UserError(f"timing: measured: {why}") from None
        fallback = RooflineTiming(*args, framework, ep_link=ep_link)
        fallback.note = f"auto: roofline, because {why}; {fallback.note}"
        return fallback


def gpu_timing_data(gpu) -> dict[str, str | None]:
    """What stands behind a GPU's timing: measured tables, calibrated roofline, datasheet.

    ``tables`` is the measured-table system (or None) and ``tables_here`` says whether this
    installation can read them (``"yes"`` or why not); ``roofline`` is ``calibrated``,
    ``borrowed`` (values of another GPU) or ``datasheet only``, with its ``source``.
    """
    from hardware.timing.aic import TablesUnavailable, _package

    here = None
    if gpu.tables is not None:
        try:
            _package()
            here = "yes"
        except TablesUnavailable as why:
            here = str(why)
    rp = gpu.roofline
    kind = "datasheet only" if rp is None else "calibrated" if rp.calibrated else "borrowed"
    return {"tables": gpu.tables, "tables_here": here, "roofline": kind,
            "source": rp.source if rp is not None else gpu.source}
