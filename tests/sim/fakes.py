"""Small hand-checkable stand-ins for the cost model and the acceptance model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hardware.draft import DraftSetup
from sim.cluster import Setup
from sim.kernels.base import PARAM_NAMES
from sim.log import RequestTable
from sim.policies import NoSpeculation
from sim.scheduling import SchedulerLimits
from workloads.acceptance import KERNEL_LEVELS, KERNEL_RUNS, NO_RUNS
from workloads.prefix_blocks import prompt_block_keys
from workloads.requests import RequestSpec


@dataclass(frozen=True)
class FakeCost:
    """seconds = overhead_s + per_token_s * Σ new tokens + per_context_s * Σ context.

    With ``stages`` > 1 that time is split evenly over pipeline stages, plus ``hop_s`` per hop.
    """

    overhead_s: float = 0.010
    per_token_s: float = 0.001
    per_context_s: float = 0.0
    stages: int = 1
    hop_s: float = 0.0005

    def pass_seconds_sums(self, sum_new, sum_ctx, sum_new_ctx, sum_new_sq, sum_keys=None, *,
                          n_seqs) -> float:
        return (self.overhead_s + self.per_token_s * sum_new + self.per_context_s * sum_ctx
                + (self.stages - 1) * self.hop_s)

    def pass_seconds_at(self, new, kv, keys, n_seqs) -> float:
        return self.pass_seconds_sums(new, kv - new, 0.0, 0.0, n_seqs=n_seqs)

    def pass_seconds_bound_at(self, new, kv, keys, n_seqs):
        return self.pass_seconds_at(new, kv, keys, n_seqs), "memory"

    def pass_seconds_bound_sums(self, sum_new, sum_ctx, sum_new_ctx, sum_new_sq, sum_keys=None, *,
                                n_seqs):
        return self.pass_seconds_sums(sum_new, sum_ctx, sum_new_ctx, sum_new_sq,
                                      n_seqs=n_seqs), "memory"

    def pass_seconds(self, new_tokens, context, keys=None) -> float:
        return self.pass_seconds_sums(float(np.sum(new_tokens)), float(np.sum(context)), 0, 0,
                                      n_seqs=len(new_tokens))

    def pass_cost(self, new_tokens, context, keys=None):
        total = self.pass_seconds(new_tokens, context)
        compute = total - (self.stages - 1) * self.hop_s
        return _Cost(total, "memory", (compute / self.stages,) * self.stages, self.hop_s)

    @property
    def timing(self):
        """Itself: the compiled kernels price its passes from ``kernel_params``."""
        return self

    def kernel_params(self):
        """``MeasuredTiming.kernel_params`` for the same seconds, so the compiled kernels
        run the tests too: the pass's fixed cost (a0) and its per-token cost (a_new), the
        tables zero, a weight read (sol_weight) so its bound is "memory". None with a
        context term (the kernel's KV sum counts the new tokens, this one does not) or
        pipeline stages: the fast paths then price with this object."""
        if self.per_context_s or self.stages != 1:
            return None
        p = np.zeros(len(PARAM_NAMES))
        p[PARAM_NAMES.index("a0")] = self.overhead_s
        p[PARAM_NAMES.index("a_new")] = self.per_token_s
        p[PARAM_NAMES.index("sol_weight")] = 1.0
        empty = np.zeros(0)
        return (p, np.array([1.0, 2.0]), np.zeros(2), empty, empty, np.zeros((0, 1)),
                np.zeros(1), np.zeros(1))


@dataclass(frozen=True)
class _Cost:
    seconds: float
    bound: str
    stage_s: tuple = ()
    hop_s: float = 0.0


class AcceptAll:
    """Every guess accepted: accepted depth = the row's depth (deterministic)."""

    mean_alpha = 1.0

    def new_streams(self, n, rng):
        return np.arange(n, dtype=np.int64)

    def draw(self, streams, positions, widths, rng):
        return (widths > 0).sum(axis=1).astype(np.int64)

    def kernel_tables(self, row):
        """Nothing drawn: every row accepted to its depth (``AcceptanceModel.kernel_tables``)."""
        return _runs(len(row))


class AcceptN:
    """Exactly ``n`` guesses accepted (or all, when fewer were drafted)."""

    mean_alpha = 0.5

    def __init__(self, n: int) -> None:
        self.n = n

    def new_streams(self, n, rng):
        return np.arange(n, dtype=np.int64)

    def draw(self, streams, positions, widths, rng):
        return np.minimum((widths > 0).sum(axis=1), self.n).astype(np.int64)

    def kernel_tables(self, row):
        """Nothing drawn: ``n`` accepted, or the row's depth."""
        return _runs(self.n)


class IidChain:
    """i.i.d. α per guess for chains: accepted = leading run of successes, capped at depth."""

    def __init__(self, alpha: float) -> None:
        self.mean_alpha = alpha

    def new_streams(self, n, rng):
        return np.arange(n, dtype=np.int64)

    def draw(self, streams, positions, widths, rng):
        ok = (rng.random(widths.shape) < self.mean_alpha) & (widths > 0)  # [B, m]
        return np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64)  # leading run

    def kernel_tables(self, row):
        """One uniform per level (as ``draw`` takes them, row by row) against α; chains
        only (a tree's level of k guesses would be accepted at α too, as ``draw`` does)."""
        if (row > 1).any():
            return None
        table = np.array([[0.0, self.mean_alpha]])
        return KERNEL_LEVELS, 0.0, NO_RUNS, np.zeros(len(row), dtype=np.uint8), 1, table


def _runs(n: int):
    """``kernel_tables`` of a model that draws nothing and accepts ``n`` (at most the
    depth): the run lengths of a one-position tape."""
    return (KERNEL_RUNS, 0.0, np.array([n], dtype=np.int64), np.zeros(1, dtype=np.uint8), 1,
            np.zeros((1, 1)))


def table(arrival_at, prompt, output, hash_ids=None, hash_block_tokens=16,
          block_size=16) -> RequestTable:
    """A request table; ``hash_ids`` (one tuple or None per request, each id covering
    ``hash_block_tokens`` prompt tokens) give it prefix-cache block keys."""
    n = len(arrival_at)
    keys = starts = None
    if hash_ids is not None:
        specs = [RequestSpec(i, 0.0, int(p), 1, hash_ids=None if ids is None else tuple(ids),
                             hash_block_tokens=hash_block_tokens)
                 for i, (p, ids) in enumerate(zip(prompt, hash_ids, strict=True))]
        keys, starts = prompt_block_keys(specs, block_size)
    return RequestTable(
        arrival_at=np.asarray(arrival_at, dtype=float),
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=np.asarray(output, dtype=np.int64),
        task=np.zeros(n, dtype=np.int64),
        stream=np.arange(n, dtype=np.int64),
        block_keys=keys,
        block_starts=starts,
    )


def setup(tab, *, policy=NoSpeculation, draft=None, acceptance=None, blocks=10_000,
          max_num_seqs=8, max_batched_tokens=100, chunked=False, chunk=64, seed=0,
          replicas=1, router="round_robin", cost=None, order="vllm_v1",
          draft_sync="every_step", overlap=False, placement="colocated",
          prefix_caching=False, vllm_release="0.33", async_scheduling=False) -> Setup:
    return Setup(
        table=tab,
        limits=SchedulerLimits(max_num_seqs, max_batched_tokens, chunked, chunk, 16, order,
                               prefix_caching, vllm_release,
                               async_scheduling=async_scheduling),
        kv_capacity_blocks=blocks,
        target_cost=cost or FakeCost(),
        draft=None if draft is None else DraftSetup(cost=draft, placement=placement),
        make_policy=policy,
        acceptance=acceptance or AcceptAll(),
        seed=np.random.SeedSequence(seed),
        replicas=replicas,
        router=router,
        draft_sync=draft_sync,
        draft_overlap=overlap,
    )
