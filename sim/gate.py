"""The one gate: which fast paths a replica can take, and the reason where it cannot.

Each fast path -- the compiled steady stretch (``sim.steady``) and walk
(``sim.steady_walk``) -- asks here, once per replica, whether it can ever form that
replica's iterations; what it cannot form goes to the reference scheduler, with the same
records.
A reason is a short phrase naming the setting that keeps the replica off the path (what
``specsim bench`` prints); None means the path is open. The conditions are the fast
paths' own: each restates no rule of the scheduler, it only says which cases it leaves
to the reference path.
"""

from __future__ import annotations

from sim import steady_kernel


def shared(r, stages: bool = False) -> str | None:
    """What keeps replica ``r`` off every fast path: they are compiled kernels, and cover
    vLLM v1's order, one pipeline stage (several too with ``stages``: the walk's, which
    ``walk`` narrows) (a prefix cache keeps a replica off the steady stretch only:
    ``steady``; a draft drafting ahead, the walk only where it drafts a static chain,
    serially: ``walk``)."""
    if not steady_kernel.available():
        return "no compiled kernels (numba not installed, or SPECSIM_NUMBA=0)"
    if r.limits.recv_interval > 1:  # (the kernels admit from the waiting queue at once)
        return (f"scheduler.recv_interval {r.limits.recv_interval} (SGLang reads new "
                "requests every N-th loop: the reference loop's poll)")
    if r.stages != 1 and not stages:
        return f"{r.stages} pipeline stages"
    if r.limits.order != "vllm_v1":
        return f"scheduler.order {r.limits.order}"
    if r.limits.async_scheduling:
        return "async scheduling (a step is scheduled before the last one's outcome)"
    return None


def router(kind: str) -> str | None:
    """What keeps every replica behind a router of ``kind`` off the steady stretch, or
    None: Dynamo's KV router reads each replica's KV pool and prefix cache at every
    arrival, and llm-d's reads each replica's waiting queue and KV use at the first arrival
    of each metrics tick, while an iteration runs, where the reference path has made the
    iteration's grants and a stretch has not; the walk takes such replicas' iterations up
    to the one an arrival would come in (``Replica.strict_walk``), which the reference path
    then runs."""
    if kind == "kv_aware":
        return "a kv_aware router (it reads the KV pool while an iteration runs)"
    if kind == "llm_d":
        return "an llm_d router (it reads the queue and KV use while an iteration runs)"
    return None


def steady(r) -> str | None:
    """Why ``sim.steady`` cannot run ``r``'s decode-only stretches, or None."""
    why = _plain(r)
    if why is None and r.prefix is not None:  # (the walk takes its iterations)
        return "prefix caching (a steady stretch does not hold the cache)"
    return why


def _plain(r, stages: bool = False) -> str | None:
    """What keeps replica ``r`` off the fast paths of plain decoding, or None (``stages``:
    as ``shared``'s)."""
    if not r.path.fast:
        return "off on this engine path"
    if r.policy.uses_draft or r.pricer.draft is not None:
        return "speculation (steady stretches are for plain decoding)"
    if r.cpu_s_per_seq:
        return "host time per sequence"
    return shared(r, stages)


def walk(r) -> str | None:
    """Why the compiled walk (``sim.steady_walk``) can never take ``r``'s iterations, as
    far as the replica's settings say (``steady_walk.params`` then checks its timings and
    acceptance model have the kernels' tables)."""
    if not r.path.fast:
        return "off on this engine path"
    if not r.policy.uses_draft:
        why = _plain(r, stages=True)
        return None if why is None else f"not steady: {why}"
    policy = r.policy
    varies = (getattr(policy, "walk_smoothing", None) is not None
              or getattr(policy, "walk_ladder", None) is not None)
    if not (getattr(policy, "static", False) or varies):
        return f"a {type(policy).__name__} policy (its shape is not static, SpecSim's " \
               "adaptive one or a batch ladder)"
    lookup = r.proposal_rate is not None  # n-gram, suffix: matches drawn per step
    if r.pricer.draft is None and not lookup:
        return "speculation without a draft model"
    if getattr(r.pricer.draft, "block", False):
        return ("a block drafter (DFlash, parallel drafting: the kernels price serial "
                "passes or Medusa's heads)")
    if r.cpu_s_per_seq and not lookup:
        return "a drafter priced on the host per sequence"
    if lookup and varies:
        return "a lookup drafter with a shape that varies (adaptive or a batch ladder)"
    if lookup and r.draft_sync != "every_step":
        # (a decoder without a match lags under catch_up: sim.step.verify counts it)
        return f"draft_sync {r.draft_sync} with a lookup drafter"
    if varies and r.draft_sync != "every_step":
        return f"draft_sync {r.draft_sync} with a shape that varies"
    if r.overlap and (varies or r.pricer.draft.replicas > 1 or r.pricer.draft.one_pass):
        # (the walk prices the drafting ahead of one draft's serial passes, one chain)
        return "a draft drafting ahead of the verify with a shape that varies, on " \
               "several GPUs or in one pass"
    if r.stages > 1 and (varies or lookup or r.overlap):
        # (the walk keeps a micro-batch's shape, the one static one, in flight)
        return (f"{r.stages} pipeline stages with a shape that varies, a lookup drafter or "
                "a draft drafting ahead")
    return shared(r, stages=True)
