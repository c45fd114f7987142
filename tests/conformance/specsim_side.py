"""A workload run through SpecSim's reference scheduler, one ``Step`` per batch it forms.

The batches are read where the replica forms them: the ``vllm_v1`` entry of
``sim.scheduling.ORDERS`` (which ``Replica`` looks up when it is built) and
``Replica.preempt`` are wrapped for the run and put back after it. A P/D decode replica's
workload (``Workload.remote_s``) runs on one ``sim.disagg.DecodeReplica`` fed its requests
as prefilled elsewhere.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import simpy

from sim import scheduling
from sim.disagg import DecodeReplica, Incoming, Link, PdRun, PdSetup
from sim.drafters import Drafter
from sim.engine_path import PATHS
from sim.log import RunLog
from sim.offload import TierSpec
from sim.policies import BatchLadder, FixedGamma, NoSpeculation
from sim.pricing import IterationPricer
from sim.replica import Replica
from sim.runner import simulate
from sim.slots import N_COUNTERS
from tests.conformance.workload import BLOCK, Step, Workload
from tests.sim.fakes import FakeCost, setup, table


class TableAcceptance:
    """Accepted drafts read from a fixed table by (stream = request id, output tokens so
    far), at most the row's depth: the same numbers the fake vLLM model step accepts."""

    mean_alpha = 0.5

    def __init__(self, accepted: np.ndarray) -> None:
        self.accepted = accepted  # int64 [requests, positions]

    def new_streams(self, n, rng):
        return np.arange(n, dtype=np.int64)

    def draw(self, streams, positions, widths, rng):
        depth = (widths > 0).sum(axis=1)  # [B]: chains only
        return np.minimum(self.accepted[streams, positions], depth).astype(np.int64)

    def kernel_tables(self, row):
        """None: the compiled walk never runs these (the reference path does)."""
        return None


def specsim_setup(w: Workload):
    """SpecSim's ``Setup`` for ``w``: one second per iteration whatever it holds."""
    tab = table(w.arrival_at, w.prompt, w.output,
                hash_ids=None if w.hash_ids is None else
                [None if ids is None else tuple(ids) for ids in w.hash_ids],
                hash_block_tokens=BLOCK, block_size=BLOCK)
    policy = NoSpeculation
    if w.ladder is not None:
        def policy():
            return BatchLadder(w.ladder, key="scheduled", num_speculative_tokens=w.k)
    elif w.k:
        def policy():
            return FixedGamma(w.k)
    s = setup(tab, policy=policy,
              draft=FakeCost(0.0, 0.0) if w.k else None,
              acceptance=TableAcceptance(w.accepted()), blocks=w.blocks - 1,
              max_num_seqs=w.max_num_seqs, max_batched_tokens=w.max_batched_tokens,
              chunked=w.chunked, chunk=w.chunk or w.max_batched_tokens,
              cost=FakeCost(overhead_s=1.0, per_token_s=0.0), prefix_caching=w.prefix_caching,
              vllm_release="0.33", async_scheduling=w.async_scheduling)
    if w.k and w.method == "eagle":
        s = replace(s, drafter=Drafter("eagle", s.draft))
    if w.cpu_blocks:  # a CPU tier of cpu_blocks blocks, each load taking load_s on its link
        tier = TierSpec(gib=0.0, capacity_blocks=w.cpu_blocks, link="conformance",
                        bytes_per_s=1.0, latency_s=w.load_s, bytes_per_token=0.0)
        s = replace(s, limits=replace(s.limits, offload=tier))
    return s


@contextmanager
def _recording(steps: list[Step]):
    plan = scheduling.ORDERS["vllm_v1"]
    preempt = Replica.preempt
    victims: list[int] = []

    def recording_preempt(r, s):
        victims.append(int(r.rid[s]))
        preempt(r, s)

    def recording_plan(r):
        victims.clear()
        batch = plan(r)
        tokens, drafts = {}, {}
        rows = np.broadcast_to(batch.row, (len(batch.dec_slots), batch.row.shape[-1])) \
            if batch.row.ndim == 1 else batch.row  # [D, m]
        for s, row in zip(batch.dec_slots.tolist(), rows, strict=True):
            nodes = int(np.cumprod(row).sum())
            tokens[int(r.rid[s])] = 1 + nodes
            if nodes:
                drafts[int(r.rid[s])] = nodes
        pads = batch.pads.tolist() if len(batch.pads) else [0] * len(batch.pre_slots)
        for s, c, p in zip(batch.pre_slots.tolist(), batch.chunks.tolist(), pads, strict=True):
            tokens[int(r.rid[s])] = int(c) + p
            if p:
                drafts[int(r.rid[s])] = p
        if tokens or victims:  # (an async replica may schedule an empty step: vLLM too)
            steps.append(Step(tokens, drafts, tuple(victims), float(r.env.now)))
        return batch

    scheduling.ORDERS["vllm_v1"] = recording_plan
    Replica.preempt = recording_preempt
    try:
        yield
    finally:
        scheduling.ORDERS["vllm_v1"] = plan
        Replica.preempt = preempt


def run_specsim(w: Workload) -> list[Step]:
    """SpecSim's steps for ``w`` on the reference path, until every request finished."""
    steps: list[Step] = []
    with _recording(steps):
        if w.remote_s:
            finished = _run_decode_replica(w)
        else:
            res = simulate(specsim_setup(w), path=PATHS["reference"])
            finished = res.requests.column("finished")
    if not bool(np.all(finished)):
        raise RuntimeError(f"{w.name}: SpecSim left requests unfinished")
    return steps


def _run_decode_replica(w: Workload) -> np.ndarray:
    """A P/D decode replica (``sim.disagg.DecodeReplica``) given each request at its
    arrival as prefilled elsewhere, its KV loading ``w.remote_s`` seconds over a link no
    other load shares (the connector vLLM runs with here has no link): whether each
    finished."""
    s = specsim_setup(w)
    env = simpy.Environment()
    log = RunLog(len(s.table), True, s.kv_capacity_blocks)
    pd = PdSetup(None, Link("conformance", 1.0, w.remote_s), 0.0, 0.0)
    run = PdRun(env, pd, s.table, None)
    pricer = IterationPricer(s.target_cost, s.draft, False, False, s.spec)
    r = DecodeReplica(env, 0, s.limits, s.kv_capacity_blocks, pricer, s.make_policy(),
                      s.acceptance, np.random.default_rng(0), s.table, log, s.draft_sync,
                      False, s.drafter, path=PATHS["reference"], pd=run)
    run.add([], [r])
    run.egress = [simpy.Resource(env, capacity=w.n)]  # no queue for the link
    run.ingress = [simpy.Resource(env, capacity=w.n)]

    def hand_offs():
        for rid in np.argsort(s.table.arrival_at, kind="stable").tolist():
            yield env.timeout(float(s.table.arrival_at[rid]) - env.now)
            r.remote[rid] = Incoming(0, int(s.table.prompt_tokens[rid]),
                                     np.zeros(N_COUNTERS, dtype=np.int64), env.now)
            r.submit(rid)

    env.process(hand_offs())
    env.run()
    return ~np.isnan(log.finished_at)
