"""Where the draft model runs, and what drafting a chain or a token tree costs.

Two placements (``DraftSetup.placement``):

- ``"colocated"`` -- the draft runs on the target's own GPUs. Like SpecInfer's small
  speculative models it is replicated on each of the target's ``tp x pp`` GPUs and the batch's
  sequences are split over the replicas (data parallel, round-robin). The draft passes run
  *serially* with the target's verify pass (they share the GPUs), and the draft's weights and
  KV cache come out of the same GPU memory as the target's.
- ``"separate"`` -- the draft has GPUs of its own (``replicas`` of them, each holding a full
  copy, sequences split round-robin). Nothing overlaps either: an iteration's drafting needs
  the previous verify's accepted tokens and the verify needs the drafts, so draft and verify
  alternate; but the draft does not take the target's memory.

In both cases an iteration costs draft time + verify time; the replicas run in parallel, so
the slowest replica's group decides the draft time.

A ``one_pass`` drafter (Medusa's heads) proposes every position at once: one pass over one
row per sequence in the batch, whatever the chain or tree (``sim.draft_pricing``). A
``block`` one (DFlash) does too, over K + 1 queries per row (the bonus token and a mask per
draft position, K the deepest shape's depth), each attending its row's context and the
whole block (``block_pass``). vLLM's parallel drafting of a draft model or an EAGLE head
(PARD, P-EAGLE: a ``block`` setup with ``parallel`` set) is one pass too, but causal and
over each row's step tokens re-fed before its new queries (``block_pass``).

A chain of γ drafts is γ draft passes; pass i feeds each still-drafting sequence one token
at context ``ctx + i``. An expansion tree ⟨k1..km⟩ costs m draft passes, one per level: pass
j feeds each sequence that level's nodes (1 for the root, then k1, k1·k2, ...) after the
nodes of the levels before it, and produces the next level's candidates.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hardware.catalog import ModelSpec
from hardware.cost import CostModel, batch_pass
from hardware.deployment import GIB
from specdec.errors import UserError

__all__ = [
    "DraftSetup",
    "PLACEMENTS",
    "tree_level_sizes",
    "tree_nodes",
    "chain_draft_seconds",
    "head_pass",
    "block_pass",
    "block_seconds",
    "parallel_prefill_pass",
    "one_pass_seconds",
    "tree_draft_prefix_seconds",
    "tree_draft_seconds",
    "tree_rows_draft_seconds",
    "level_feeds",
    "tree_attended_keys",
    "colocated_kv_capacity_tokens",
    "check_colocated_memory",
    "check_same_vocab",
]

PLACEMENTS = ("colocated", "separate")


@dataclass(frozen=True)
class DraftSetup:
    """A draft model's cost model, its placement and how many replicas share the batch."""

    cost: CostModel
    placement: str = "colocated"
    replicas: int = 1
    one_pass: bool = False  # every draft position from one pass (Medusa heads)
    # with one_pass: that pass is a block drafter's (DFlash), K + 1 queries per row
    block: bool = False
    # with block: vLLM's parallel drafting (PARD 0, P-EAGLE 1) instead of DFlash's block:
    # each row re-feeds its step's tokens, then K - parallel new queries, one causal run
    parallel: int | None = None

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise UserError(
                f"draft placement: must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}"
            )
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, numbers.Integral) \
                or self.replicas < 1:
            raise UserError(f"draft replicas: must be an integer >= 1, got {self.replicas!r}")
        if self.block and not self.one_pass:
            raise UserError("draft block: a block drafter proposes in one pass (one_pass)")
        if self.parallel is not None and (not self.block or self.parallel not in (0, 1)):
            raise UserError(f"draft parallel: 0 (PARD) or 1 (P-EAGLE) on a block setup, got "
                            f"{self.parallel!r}")

    @classmethod
    def colocated_with(cls, draft: CostModel, target: CostModel,
                       one_pass: bool = False, block: bool = False,
                       parallel: int | None = None) -> DraftSetup:
        """The draft replicated on every GPU of ``target`` (SpecInfer's arrangement)."""
        if draft.dep.n_gpus != 1:
            raise UserError("a co-located draft runs one replica per GPU: give it tp = pp = 1")
        return cls(cost=draft, placement="colocated", replicas=target.dep.n_gpus,
                   one_pass=one_pass or block, block=block, parallel=parallel)


def tree_level_sizes(widths: Sequence[int]) -> list[int]:
    """Nodes per level of the expansion tree ⟨k1..km⟩, root first: [1, k1, k1·k2, ...]."""
    sizes = [1]
    for k in widths:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise UserError(f"tree: every expansion width must be an integer >= 1, got {k!r}")
        sizes.append(sizes[-1] * int(k))
    return sizes


def tree_nodes(widths: Sequence[int]) -> int:
    """Nodes of ⟨k1..km⟩ including the root -- the tokens one tree verify feeds per sequence."""
    return sum(tree_level_sizes(widths))


def _groups(n_seq: int, replicas: int) -> list[slice]:
    """Round-robin split of sequence indices over replicas (empty groups dropped)."""
    return [slice(r, None, replicas) for r in range(min(replicas, n_seq))]


def block_pass(depth, s_ctx, rows, parallel=None):
    """(Σ new, Σ KV read, attended keys, sequences) of a block drafter's pass for shapes
    ``depth`` positions deep over ``rows`` decoding rows with ``s_ctx`` context among them.
    Plain scalars, for the compiled kernels too.

    - ``parallel`` None (DFlash): ``depth`` + 1 queries per row (vLLM's ``1 +
      num_speculative_tokens``), each attending its row's context and every query of the
      block (non-causal: ``batch_pass``'s depth-``depth`` tree term);
    - ``parallel`` s (vLLM's ``parallel_drafting`` of a draft model, s = 0, PARD, or of an
      EAGLE head, s = 1, P-EAGLE): each row re-feeds the step's 1 + ``depth`` target tokens
      (vLLM's V1 proposer takes the verify's tokens, the rejected ones as padding) and then
      ``depth`` - s new queries (the bonus token and the mask tokens: vLLM's
      ``net_num_new_slots_per_request``), one causal run after its context."""
    if parallel is None:
        q = depth + 1.0
        return batch_pass(q, 0, depth, s_ctx, rows, True, 0.0, 0.0, 0.0, 0.0, 0)
    q = (1.0 + depth) + (depth - parallel)
    return batch_pass(q, 0, 0, s_ctx, rows, False, 0.0, 0.0, 0.0, 0.0, 0)


def parallel_prefill_pass(depth, parallel, p_new, p_ctx, p_new_ctx, p_sq, n_pre):
    """``block_pass``' four numbers for the prefilling rows of a parallel-drafting pass
    (``parallel`` 0 or 1): each row's chunk (sums ``p_new``, ``p_ctx``, ``p_new_ctx``,
    ``p_sq`` over ``n_pre`` rows), then ``depth`` - ``parallel`` new queries after it (vLLM's
    proposer runs every scheduled request's tokens plus its new slots)."""
    chunk = batch_pass(0, 0, 0, 0.0, 0, False, p_new, p_ctx, p_new_ctx, p_sq, n_pre)
    tail = batch_pass(depth - parallel, 0, 0, p_ctx + p_new, n_pre, False, 0.0, 0.0, 0.0,
                      0.0, 0)
    return chunk[0] + tail[0], chunk[1] + tail[1], chunk[2] + tail[2], chunk[3]


def block_seconds(setup: DraftSetup, depth: int, context: np.ndarray) -> float:
    """Seconds of a block drafter's pass for shapes ``depth`` deep over the rows of
    ``context`` (their cached tokens), split round robin over the replicas (the slowest
    group); 0 when nothing is drafted."""
    ctx = np.asarray(context, dtype=np.float64)  # [n_rows]
    if depth <= 0 or not ctx.size:
        return 0.0
    return max(setup.cost.pass_seconds_at(*block_pass(depth, float(ctx[g].sum()),
                                                      float(ctx[g].size), setup.parallel))
               for g in _groups(ctx.size, setup.replicas))


def one_pass_seconds(setup: DraftSetup, rows: int) -> float:
    """Seconds of a ``one_pass`` drafter's pass over ``rows`` sequences: one token each, no
    context and no attention (Medusa heads on the last hidden state), the rows split round
    robin over the replicas (the largest share counts)."""
    if rows <= 0:
        return 0.0
    return setup.cost.pass_seconds_at(*head_pass(int(rows), setup.replicas))


def head_pass(rows, replicas):
    """(Σ new, Σ KV read, attended keys, sequences) of a ``one_pass`` drafter's pass over
    ``rows`` sequences split round robin over ``replicas`` (the largest share): one token
    each, no context, no attention (``hardware.cost.batch_pass``'s four numbers; plain
    scalars, for the compiled kernels too)."""
    n = float(-(-rows // replicas))
    return n, 0.0 + n, 0.0, n


def chain_draft_seconds(
    setup: DraftSetup, gamma: int | np.ndarray, context: np.ndarray
) -> float:
    """Seconds to draft a chain of ``gamma`` tokens per sequence (scalar or per sequence).

    Sequences with fewer drafts drop out of later passes; a sequence with γ = 0 costs nothing.
    """
    ctx = np.asarray(context, dtype=np.float64)  # [n_seq]
    gam = np.broadcast_to(np.asarray(gamma), ctx.shape)  # [n_seq]
    if ctx.ndim != 1 or (gam < 0).any():
        raise UserError("draft chain: context must be 1-D and gamma >= 0")
    if setup.block:  # one block for every sequence, as deep as the deepest chain
        return block_seconds(setup, int(gam.max(initial=0)), ctx)
    if setup.one_pass:  # every position at once, for every sequence
        return one_pass_seconds(setup, ctx.size) if (gam > 0).any() else 0.0
    worst = 0.0
    for group in _groups(ctx.size, setup.replicas):
        c, g = ctx[group], gam[group]
        total = 0.0
        for i in range(int(g.max(initial=0))):
            active = g > i  # [n_group]
            m = float(active.sum())
            # one new token per active sequence after the i each drafted before
            total += setup.cost.pass_seconds_at(*batch_pass(
                1, i, i, float(c[active].sum()), m, False, 0.0, 0.0, 0.0, 0.0, 0))
        worst = max(worst, total)
    return worst


def tree_draft_seconds(setup: DraftSetup, widths: Sequence[int], context: np.ndarray) -> float:
    """Seconds to draft the expansion tree ⟨k1..km⟩ for every sequence: m passes.

    Pass j feeds level j's nodes; each attends its context and its j ancestors and itself
    (tree mask), while the KV of every node fed before is in the cache (read, as a tree
    kernel reads the whole tree's KV).
    """
    return tree_draft_prefix_seconds(setup, widths, context)[-1]


def tree_draft_prefix_seconds(setup: DraftSetup, widths: Sequence[int],
                              context: np.ndarray) -> list[float]:
    """:func:`tree_draft_seconds` of the first j levels of ⟨k1..km⟩, for j = 0..m: the
    replica sums of the passes in order, so entry j is exactly the tree ⟨k1..kj⟩'s seconds
    (the adaptive policy prices every chain depth from the deepest one's passes)."""
    sizes = tree_level_sizes(widths)
    ctx = np.asarray(context, dtype=np.float64)  # [n_seq]
    if setup.block:  # a block as deep as the first j levels
        return [block_seconds(setup, j, ctx) for j in range(len(sizes))]
    if setup.one_pass:  # head i's top-k_i: the whole tree from one pass
        one = one_pass_seconds(setup, ctx.size)
        return [0.0] + [one] * (len(sizes) - 1)
    worst = [0.0] * len(sizes)
    for group in _groups(ctx.size, setup.replicas):
        b, sum_c = float(ctx[group].size), float(ctx[group].sum())
        total, before = 0.0, 0
        for depth, n in enumerate(sizes[:-1]):  # the last level is produced, not fed
            total += setup.cost.pass_seconds_at(*batch_pass(
                n, before, depth, sum_c, b, True, 0.0, 0.0, 0.0, 0.0, 0))
            before += n
            worst[depth + 1] = max(worst[depth + 1], total)
    return worst


def level_feeds(widths: np.ndarray) -> np.ndarray:
    """int64 [n, m]: the nodes each serial draft pass feeds per sequence, for a tree shape
    per row (int64 widths [n, m], 0-padded past each row's depth): the root in the first
    pass, then each level's nodes; 0 once a row's tree has ended."""
    has = widths > 0
    feed = np.zeros_like(widths)
    feed[:, 0] = has[:, 0]
    feed[:, 1:] = np.cumprod(widths, axis=1)[:, :-1] * has[:, 1:]
    return feed


def tree_rows_draft_seconds(setup: DraftSetup, widths: np.ndarray, context: np.ndarray) -> float:
    """Seconds to draft a tree per sequence -- int64 widths [n_seq, m], each row 0-padded
    past its depth (the shapes a token budget cut) -- on the setup's replicas: sequences
    split round robin, the slowest replica's passes. Pass j feeds each sequence its
    level-j nodes (the root first), which attend their context, their j ancestors and
    themselves (the tree mask), the nodes fed before in the cache; a sequence whose tree
    is shallower drops out. Rows all alike give :func:`tree_draft_seconds`'s passes."""
    w = np.asarray(widths, dtype=np.int64)
    ctx = np.asarray(context, dtype=np.float64)  # [n_seq]
    if w.ndim != 2 or w.shape[0] != ctx.size or (w < 0).any():
        raise UserError("draft trees: widths must be [n_seq, m] and >= 0")
    if setup.block:  # one block as deep as the deepest tree
        return block_seconds(setup, int((w > 0).sum(axis=1).max(initial=0)), ctx)
    if setup.one_pass:  # every position of every tree from one pass
        return one_pass_seconds(setup, ctx.size) if (w[:, :1] > 0).any() else 0.0
    feed = level_feeds(w)  # [n, m]
    before = np.cumsum(feed, axis=1) - feed  # [n, m]: nodes fed before pass j
    worst = 0.0
    for group in _groups(ctx.size, setup.replicas):
        f, b, c = feed[group], before[group], ctx[group]
        total = 0.0
        for j in range(w.shape[1]):
            live = f[:, j] > 0
            if not live.any():
                break
            new = f[live, j].astype(np.float64)
            total += setup.cost.pass_seconds_sums(
                float(new.sum()), float((c[live] + b[live, j]).sum()), 0.0, 0.0,
                sum_keys=float((new * (c[live] + (j + 1))).sum()), n_seqs=float(live.sum()))
        worst = max(worst, total)
    return worst


def tree_attended_keys(widths: Sequence[int], context: float | np.ndarray) -> float | np.ndarray:
    """(query, key) pairs one sequence's tree verify attends: Σ_levels nodes x (ctx + depth + 1).

    The verify feeds the root and every node of ⟨k1..km⟩; under the tree's topology-aware
    mask a node at depth l sees the ``context`` cached tokens, its l ancestors and itself,
    not the n(n+1)/2 keys of a causal run of n tokens. A chain ⟨1,..,1⟩ gives the causal
    count. Pass the result as ``keys`` to :meth:`hardware.cost.CostModel.pass_cost`.
    """
    ctx = np.asarray(context, dtype=np.float64)
    total = sum(n * (ctx + depth + 1) for depth, n in enumerate(tree_level_sizes(widths)))
    return float(total) if total.ndim == 0 else total


def _draft_per_gpu(draft: DraftSetup) -> tuple[int, float]:
    """Draft weight bytes on each GPU and its KV bytes per (target) token per GPU."""
    weights = max(draft.cost.resident_weight_bytes())
    dep = draft.cost.dep
    if dep.n_gpus > 1 and dep.model.shape.n_experts:  # DeepSeek's MTP module, sharded like
        return weights, max(draft.cost.stage_kv_bytes_per_token)  # its target: per GPU
    return weights, draft.cost.kv_bytes_per_token / draft.replicas


def colocated_kv_capacity_tokens(target: CostModel, draft: DraftSetup) -> int:
    """Cached tokens that fit when a co-located draft shares the target's GPUs.

    Every token is cached by both models: the target's share on each GPU plus the draft's
    (each replica caches only its own sequences, 1/replicas of the tokens).
    """
    if draft.placement != "colocated":
        return target.kv_capacity_tokens()
    d_weights, d_kv = _draft_per_gpu(draft)
    usable = target.dep.usable_bytes_per_gpu - d_weights
    tokens = min(target.stage_tokens_that_fit(s, usable - w, d_kv)
                 for s, w in enumerate(target.resident_weight_bytes()))
    return max(int(tokens), 0)


def check_colocated_memory(target: CostModel, draft: DraftSetup | None, kv_tokens: int) -> None:
    """Refuse (UserError with GiB) if target + draft weights and both KV caches do not fit
    (``draft`` None: a CPU drafter, the target alone).

    The target is checked alone first, so a message that names the draft means the target
    would fit without it; the draft's message names the target deployment it was paired with.
    """
    t = target.dep
    target.check_memory(kv_tokens)
    if draft is None:
        return
    paired = f"{t.model.id} on {t.tp}x{t.pp} {t.gpu.id}"
    if draft.placement != "colocated":
        draft.cost.check_memory(
            -(-kv_tokens // draft.replicas),
            subject=f"draft {draft.cost.dep.model.id} (separate GPUs, for target {paired})",
        )
        return
    d_weights, d_kv = _draft_per_gpu(draft)
    reserve = d_weights + int(kv_tokens * d_kv)
    name = draft.cost.dep.model.id
    try:
        target.check_memory(kv_tokens, reserve_bytes=reserve,
                            subject=f"draft {name} (co-located) next to target {t.model.id}")
    except UserError as err:
        raise UserError(
            f"{err} (reserved = draft {name} weights {d_weights / GIB:.1f} GiB + its KV)"
        ) from None


def check_same_vocab(target: ModelSpec, draft: ModelSpec) -> None:
    """Refuse a draft whose vocabulary size differs from the target's.

    Speculation needs the draft to propose the target's own token ids, i.e. a shared
    tokenizer; the configs do not name the tokenizer, so equal ``vocab_size`` is the check
    made (necessary, not sufficient).
    """
    tv, dv = target.config.vocab_size, draft.config.vocab_size
    if tv != dv:
        raise UserError(
            f"draft {draft.id} cannot speculate for target {target.id}: draft vocab_size {dv}, "
            f"target vocab_size {tv}; the draft must share the target's tokenizer (equal "
            f"vocab_size is the check made)"
        )
