"""How a run computes its iterations: by the reference scheduler one at a time, or by the
fast paths (numpy, then the compiled kernels). Never *what* they are: every path gives
the same records, and tests run the hand-checked semantic tests on each.

A path is an input of one run (``sim.runner.simulate(..., path=...)``, ``specsim run
--engine-path``), held by each replica. Its switches:

- ``decode_step``: a decode-only iteration formed with array operations
  (``sim.decode_step``) instead of the full scheduler;
- ``steady``: a replica without speculation runs its steady stretches several
  iterations at once (``sim.steady``); its walks (``sim.steady_walk``) need it too;
- ``spec_stretch``: a speculating decode-only batch runs on its own rows
  (``sim.spec_stretch``);
- ``walk``: the compiled walk of vLLM v1 iterations (``sim.steady_walk``);
- ``kernels_after``: how many times a replica looks for a stretch or a walk with numpy
  before it takes the compiled kernels (``sim.steady.use_kernels``): 0 from the start,
  ``inf`` never, None (``auto``): from the start in a run of ``steady.KERNEL_REQUESTS``
  requests or more, else once this process has looked ``steady.KERNEL_AFTER`` times (the
  one process-wide count: a sweep's small runs share the kernels' load; it decides how
  fast a run goes, never its records).

Without numba (or with ``SPECSIM_NUMBA=0``) there are no compiled kernels: ``compiled``
then plans with numpy, as ``numpy`` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class EnginePath:
    """Which fast paths a run may take (all: ``auto``; none: ``reference``)."""

    decode_step: bool = True
    steady: bool = True
    spec_stretch: bool = True
    walk: bool = True
    kernels_after: float | None = None  # 0: compiled from the start; inf: never; None: auto


AUTO = EnginePath()
PATHS = {
    "auto": AUTO,
    "reference": EnginePath(False, False, False, False, math.inf),
    "numpy": EnginePath(kernels_after=math.inf),
    "compiled": EnginePath(kernels_after=0),
}
HELP = {
    "auto": "the fast paths, compiled kernels once they pay for themselves (default)",
    "reference": "the reference scheduler, one iteration at a time (slowest)",
    "numpy": "the fast paths with numpy only",
    "compiled": "the fast paths with the compiled kernels from the first iteration",
}
