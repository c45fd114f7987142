"""Acceptance traces: measure once on real decoding runs, replay any γ or tree shape.

For greedy verification, whether the draft's guess at position t matches the target
depends only on the text up to t (DESIGN.md, "Acceptance traces"). So along the target's
own output ``x_0, x_1, ...`` (several prompts, one decoding run each) a trace stores, per
generated position t:

- ``ranks[t]`` (int32): the rank of ``x_t`` in the draft's logits given the true prefix
  ``x_<t`` — 0 is the draft's argmax, ties go to the lower token id, the order that top-k
  tree children use (:func:`specdec.drafts.rank_order`), so replay is exact;
- ``accept_prob[t, k-1]`` (float64 holding float32-rounded values, k = 1..K): the
  probability that MSS with k independent candidates from the draft's q_t accepts one,
  against the target's p_t at the run's temperature (column 0 is Σ min(p, q)); greedy
  makes both one-hot, so every column is 1 at rank 0 and 0 elsewhere;
- ``sequence[t]`` (int32): which run (prompt) position t belongs to; runs are contiguous.

Replay (vectorised over a batch; the simulator calls it every iteration):

- a chain of γ starting at t accepts ``min(γ, run0[t])``, where ``run0[t]`` is the length of
  the run of rank-0 positions starting at t — O(1) per sequence;
- an expansion tree ⟨k_1..k_m⟩ accepts the number of leading levels i with
  ``ranks[t+i-1] < k_i`` — exactly what VerifyGreedy does on the real tree.

Windows never cross a ``sequence`` boundary: a run stops at the end of its sequence, as if
the text ended there (the simulator treats the trace as a ring of sequences and moves to
the next one). For sampling, the ``*_sampled`` replays draw acceptance per level from
``accept_prob``; that treats positions as independent given the recorded text, an
approximation (after an acceptance the real text would be a fresh sample).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from specdec.decoding import pick
from specdec.drafts import DRAFT_KINDS, Drafter, make_drafter, token_ranks
from specdec.errors import UserError
from specdec.model import ModelConfig, TinyTransformer
from specdec.mss import mss_acceptance_probabilities
from specdec.sampling import probs_from_logits

TRACE_FORMAT_VERSION = 1
PROMPT_LEN = 16  # tokens per random prompt
COVERAGE_KS = (1, 2, 3, 4, 5)


@dataclass(frozen=True)
class AcceptanceTrace:
    """Per-position draft ranks and MSS acceptance probabilities along real outputs."""

    ranks: np.ndarray  # int32 [N]
    accept_prob: np.ndarray  # float64 [N, K]
    sequence: np.ndarray  # int32 [N]
    meta: dict
    run0: np.ndarray = field(init=False, repr=False, compare=False)  # int64 [N]
    seq_end: np.ndarray = field(init=False, repr=False, compare=False)  # int64 [N], exclusive

    def __post_init__(self) -> None:
        n = self.ranks.shape[0]
        if self.ranks.shape != (n,) or self.sequence.shape != (n,) or n == 0:
            raise ValueError("AcceptanceTrace: ranks and sequence must be equal-length 1-D")
        if self.accept_prob.ndim != 2 or self.accept_prob.shape[0] != n:
            raise ValueError("AcceptanceTrace: accept_prob must be [N, K]")
        idx = np.arange(n)
        # End (exclusive) of each position's sequence: the first later index with a new id.
        starts_next = np.flatnonzero(np.diff(self.sequence) != 0) + 1  # [n_seq - 1]
        bounds = np.append(starts_next, n)
        seq_end = bounds[np.searchsorted(bounds, idx, side="right")]  # [N]
        # Next index >= t whose rank is not 0 (N if none), capped at the sequence end.
        breaks = np.where(self.ranks != 0, idx, n)
        next_break = np.minimum.accumulate(breaks[::-1])[::-1]  # [N]
        object.__setattr__(self, "seq_end", seq_end.astype(np.int64))
        object.__setattr__(self, "run0", (np.minimum(next_break, seq_end) - idx).astype(np.int64))

    @property
    def positions(self) -> int:
        """Number of recorded positions N."""
        return int(self.ranks.shape[0])

    @property
    def k_max(self) -> int:
        """K: the most candidates per node the trace can replay when sampling."""
        return int(self.accept_prob.shape[1])


def _check_index(trace: AcceptanceTrace, index) -> np.ndarray:
    index = np.asarray(index, dtype=np.int64)
    if index.size and (index.min() < 0 or index.max() >= trace.positions):
        raise ValueError(f"replay: index must be in [0, {trace.positions})")
    return index


def replay_chain(trace: AcceptanceTrace, index, gamma) -> np.ndarray:
    """Accepted guesses of a greedy chain of γ starting at each index: min(γ, run0[t])."""
    index = _check_index(trace, index)
    return np.minimum(np.asarray(gamma, dtype=np.int64), trace.run0[index])  # [B]


def _windows(trace: AcceptanceTrace, index: np.ndarray, depth: int):
    """Positions t + i for i < depth, clipped, and whether each is inside t's sequence."""
    pos = index[:, None] + np.arange(depth)[None, :]  # [B, m]
    inside = pos < trace.seq_end[index][:, None]  # [B, m]
    return np.minimum(pos, trace.positions - 1), inside


def _leading(ok: np.ndarray) -> np.ndarray:
    """Number of leading True per row of a [B, m] array."""
    return np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64)  # [B]


def replay_tree(trace: AcceptanceTrace, index, widths) -> np.ndarray:
    """Accepted depth of a greedy expansion tree ⟨k_1..k_m⟩ per row (rows padded with 0).

    Level i (1-based) is accepted while ``ranks[t+i-1] < k_i``, i.e. the target's token is
    among the draft's top-k_i children there — VerifyGreedy on the real tree.
    """
    index = _check_index(trace, index)
    widths = np.atleast_2d(np.asarray(widths, dtype=np.int64))  # [B, m]
    pos, inside = _windows(trace, index, widths.shape[1])
    return _leading(inside & (trace.ranks[pos] < widths))


def replay_chain_sampled(trace: AcceptanceTrace, index, gamma, rng: np.random.Generator):
    """Sampled chain: level i accepted with probability ``accept_prob[t+i-1, 0]``."""
    gamma = np.asarray(gamma, dtype=np.int64)
    index = _check_index(trace, index)
    depth = int(gamma.max()) if gamma.size else 0
    widths = (np.arange(depth)[None, :] < gamma.reshape(-1, 1)).astype(np.int64)  # [B, m]
    return replay_tree_sampled(trace, index, np.broadcast_to(widths, (index.size, depth)), rng)


def replay_tree_sampled(trace: AcceptanceTrace, index, widths, rng: np.random.Generator):
    """Sampled tree ⟨k_1..k_m⟩: level i accepted with probability accept_prob[t+i-1, k_i-1]."""
    index = _check_index(trace, index)
    widths = np.atleast_2d(np.asarray(widths, dtype=np.int64))  # [B, m]
    if widths.size and widths.max() > trace.k_max:
        raise ValueError(f"replay: width {widths.max()} exceeds the trace's K = {trace.k_max}")
    pos, inside = _windows(trace, index, widths.shape[1])
    prob = trace.accept_prob[pos, np.maximum(widths, 1) - 1]  # [B, m]
    ok = inside & (widths > 0) & (rng.random(widths.shape) < prob)
    return _leading(ok)


def record_trace(
    target: TinyTransformer,
    drafter: Drafter,
    prompts: list[list[int]],
    tokens_per_prompt: list[int],
    temperature: float,
    k_max: int,
    rng: np.random.Generator | None,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode each prompt with the target alone and score the draft along the output.

    Returns ``(ranks, accept_prob, sequence)``. The target generates by plain decoding
    (greedy, or sampling with ``rng``); the draft is then run over prompt + output in one
    teacher-forced pass, which gives its logits given every true prefix. ``progress`` is
    called with the number of newly recorded positions.
    """
    ranks, probs, seqs = [], [], []
    for s, (prompt, n_new) in enumerate(zip(prompts, tokens_per_prompt, strict=True)):
        cache = target.new_cache()
        if len(prompt) > 1:
            target.forward(prompt[:-1], cache)
        last, out, p_rows = prompt[-1], [], []
        for i in range(n_new):
            p = probs_from_logits(target.forward([last], cache), temperature)  # [vocab]
            last = pick(p, rng if temperature > 0 else None)
            out.append(last)
            p_rows.append(p)
            if progress is not None and (i + 1) % 100 == 0:
                progress(100)
        if progress is not None and n_new % 100:
            progress(n_new % 100)
        drafter.reset()
        # [len(prompt) + n_new - 1, vocab]; row len(prompt) - 1 + t predicts out[t].
        q_logits = drafter.extend(prompt + out[:-1])[len(prompt) - 1 :]
        q_rows = probs_from_logits(q_logits, temperature)
        ranks.append(token_ranks(q_logits, np.asarray(out)))
        probs.append(np.stack([mss_acceptance_probabilities(p, q, k_max)
                               for p, q in zip(p_rows, q_rows, strict=True)]))
        seqs.append(np.full(n_new, s))
    # Rounded to float32 precision (~7 digits), stored as float64: BLAS kernels and thread
    # counts reorder float64 sums at the 1e-16 level, and this rounding absorbs that, so a
    # trace regenerates bit-identically from its metadata on any machine (almost surely).
    accept = np.concatenate(probs).astype(np.float32).astype(np.float64)
    return (np.concatenate(ranks).astype(np.int32), accept,
            np.concatenate(seqs).astype(np.int32))


def build_models(meta: dict) -> tuple[TinyTransformer, Drafter]:
    """The target and drafter a trace's metadata describes (seeded as in record_settings)."""
    weights_ss, draft_ss, _, _ = np.random.SeedSequence(meta["seed"]).spawn(4)
    config = ModelConfig(**meta["target"])
    target = TinyTransformer.random(config, np.random.default_rng(weights_ss))
    d = meta["draft"]
    drafter = make_drafter(d["kind"], target, sigma=d["sigma"], layers=d["layers"],
                           ngram=d["ngram"], seed=np.random.default_rng(draft_ss))
    return target, drafter


def record_settings(
    *,
    draft: str = "perturbed",
    sigma: float = 0.1,
    layers: int = 1,
    ngram: int = 3,
    temperature: float = 0.0,
    tokens: int = 5000,
    prompts: int = 4,
    k_max: int = 5,
    seed: int = 0,
    config: ModelConfig | None = None,
    progress: Callable[[int], None] | None = None,
) -> AcceptanceTrace:
    """Record a trace from settings alone; everything random derives from ``seed``.

    ``SeedSequence(seed).spawn(4)`` seeds, in order: the target's weights, the draft's
    noise, the prompts (``PROMPT_LEN`` uniform tokens each) and the target's sampling.
    ``tokens`` positions are split over ``prompts`` runs as evenly as possible.
    """
    config = config or ModelConfig(max_seq=2048)
    if draft not in DRAFT_KINDS:
        raise UserError(f"draft: must be one of {', '.join(DRAFT_KINDS)}, got {draft!r}")
    if prompts < 1 or tokens < prompts:
        raise UserError(f"tokens: need tokens >= prompts >= 1, got {tokens} and {prompts}")
    if k_max < 1:
        raise UserError(f"k_max: must be >= 1, got {k_max}")
    if not (np.isfinite(temperature) and temperature >= 0):
        raise UserError(f"temperature: must be finite and >= 0, got {temperature!r}")
    per_prompt = [tokens // prompts + (i < tokens % prompts) for i in range(prompts)]
    if PROMPT_LEN + per_prompt[0] > config.max_seq:
        raise UserError(
            f"tokens: {per_prompt[0]} per prompt plus a {PROMPT_LEN}-token prompt exceeds the "
            f"model's max_seq {config.max_seq}; use more --prompts"
        )
    _, _, prompt_ss, sample_ss = np.random.SeedSequence(seed).spawn(4)
    prompt_rng = np.random.default_rng(prompt_ss)
    prompt_list = [[int(t) for t in prompt_rng.integers(0, config.vocab, PROMPT_LEN)]
                   for _ in range(prompts)]
    meta = {
        "format_version": TRACE_FORMAT_VERSION,
        "target": config.to_dict(),
        "draft": {"kind": draft, "sigma": float(sigma), "layers": int(layers),
                  "ngram": int(ngram)},
        "temperature": float(temperature),
        "seed": int(seed),
        "prompts": prompt_list,
        "tokens_per_prompt": per_prompt,
        "tokens": int(tokens),
        "k_max": int(k_max),
    }
    target, drafter = build_models(meta)
    arrays = record_trace(target, drafter, prompt_list, per_prompt, temperature, k_max,
                          np.random.default_rng(sample_ss), progress)
    return AcceptanceTrace(*arrays, meta)


def regenerate(meta: dict) -> AcceptanceTrace:
    """Record again from a trace's own metadata (committed traces must come out identical)."""
    d = meta["draft"]
    return record_settings(
        draft=d["kind"], sigma=d["sigma"], layers=d["layers"], ngram=d["ngram"],
        temperature=meta["temperature"], tokens=meta["tokens"],
        prompts=len(meta["prompts"]), k_max=meta["k_max"], seed=meta["seed"],
        config=ModelConfig(**meta["target"]),
    )


def trace_summary(trace: AcceptanceTrace) -> dict:
    """Headline numbers: positions, α̂, top-k coverage, mean greedy run length.

    ``alpha_hat`` is the mean of ``accept_prob[:, 0]``; ``coverage_top{k}`` the share of
    positions whose target token is in the draft's top-k; ``mean_run_length`` the mean of
    ``run0`` — what an unbounded greedy chain accepts from a random position.
    """
    out = {
        "positions": trace.positions,
        "sequences": int(np.unique(trace.sequence).size),
        "alpha_hat": float(trace.accept_prob[:, 0].mean()),
    }
    for k in COVERAGE_KS:
        out[f"coverage_top{k}"] = float(np.mean(trace.ranks < k))
    out["mean_run_length"] = float(trace.run0.mean())
    return out
