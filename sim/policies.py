"""Speculation policies: per iteration, the draft shape of every decoding sequence.

A shape is a row of widths, one entry per level: a chain of γ is ``[1]*γ``, an expansion
tree ⟨k1..km⟩ is its k's, and rows are padded with 0 (a row of zeros = no speculation this
iteration). Each iteration a policy returns one row, int64 [max_depth], for every decoding
sequence of the batch: the policies here decide per batch, as vLLM's and SGLang's do (the
engine broadcasts the row to the acceptance model's per-sequence ``widths`` [D, m], and the
acceptance of each sequence is still drawn separately); a per-sequence policy returns
int64 [D, m] instead, one row per sequence. ``shape(n, context, history)`` gets the number
of decoding sequences, their cached tokens and their history (int64 [D, 2]: accepted and
checked guesses so far), the number of running requests (``running``) and, per decoding
sequence, the number of requests the step that last scheduled it scheduled (``scheduled``,
int64 [D]: ``Replica.scheduled_in``).

- ``NoSpeculation``: plain decoding.
- ``FixedGamma``: vLLM's ``num_speculative_tokens``.
- ``TreePolicy``: SpecInfer's expansion config ⟨k1..km⟩ (SGLang's steps/topk are the
  special case ``[topk] + [1] * (steps - 1)``, see ``sglang_tree``).
- ``BatchLadder``: γ by batch size, ``[[min_batch, max_batch, γ], ...]``; γ = 0 switches
  speculation off (vLLM's ``num_speculative_tokens_per_batch_size``; sticky: v0's
  disable-by-batch-size).
- ``AdaptiveGamma``: each iteration the γ that maximises expected emitted tokens per second,
  from the cost model and a running acceptance estimate (SmartSpec's goodput).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from specdec.errors import UserError


def chain(gamma: int, depth: int) -> np.ndarray:
    """int64 [depth]: a chain of γ padded with zeros to ``depth`` levels."""
    row = np.zeros(depth, dtype=np.int64)
    row[:gamma] = 1
    return row


def sglang_tree(steps: int, topk: int) -> list[int]:
    """SGLang's EAGLE-style ``steps``/``topk`` as an expansion config: top-k at the root."""
    return [topk] + [1] * (steps - 1)


def best_chain(n, alpha, seconds):
    """(γ, its rate): the chain γ in 0..len(seconds) - 1 with the most expected emitted
    tokens per second, n·E(α, γ) / seconds[γ], the first on a tie -- ``AdaptiveGamma``'s
    choice, the compiled kernel's too (plain scalars and a sequence). E(α, γ) is
    ``specdec.expected_tokens`` by its Horner's rule E(γ) = 1 + α·E(γ − 1) from E(0) = 1
    (the same floats for γ <= 64, where it sums term by term), for an α in [0, 1]."""
    best, best_rate, expected = 0, -1.0, 1.0
    for g in range(len(seconds)):
        if g:
            expected = 1.0 + alpha * expected
        rate = n * expected / seconds[g]
        if rate > best_rate:
            best, best_rate = g, rate
    return best, best_rate


def tree_tokens(alpha, k, depth):
    """Expected tokens per verify of the tree ⟨k, 1, …, 1⟩ ``depth`` levels deep at i.i.d.
    α: what ``AdaptiveGamma`` credits a chain widened at its root with,
    ``workloads.IIDAcceptance(alpha).expected_tokens`` of that shape (coverage
    1 − (1 − α)^k at the root and 1 − (1 − α)^1 below it, ``PowerCoverage`` with θ = 1).
    Plain scalars, the same floats: the coverages' running products (``cumprod``) summed
    as numpy sums a row (term by term below 8 terms; from 8 on, up to its pairwise block
    of 128 and so for every depth up to ``sim.limits.MAX_GAMMA``, in 8 partial sums
    combined pairwise, then the rest term by term), plus 1. The compiled walk calls it too;
    tests/sim/test_policies.py checks it against the model."""
    top = 1.0 - (1.0 - alpha) ** float(k)
    one = 1.0 - (1.0 - alpha) ** 1.0
    lanes = np.zeros(8)
    blocks = depth - depth % 8 if depth >= 8 else 0  # terms summed in the 8 partial sums
    total, term = 0.0, 1.0
    for j in range(depth):
        term *= top if j == 0 else one
        if j < blocks:
            lanes[j % 8] += term  # (0.0 + the lane's first term: that term)
            if j == blocks - 1:
                total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + \
                    ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
        else:
            total += term
    return 1.0 + total


PRIOR_GUESSES = 8  # weight of α̂ in a sequence's own estimate, in guesses (AdaptiveGamma)


def cost_ratio(seconds):
    """c = (T(γ=1) − T(γ=0)) / T(γ=0) from the seconds of each chain γ = 0, 1, ...: the
    draft-to-verify cost ratio a per-sequence ``AdaptiveGamma`` takes this batch's, or 0
    where measured kernel times make T(γ=1) the smaller (a one-guess chain's marginal cost
    is then nothing, not negative: Theorem 3.8 needs c >= 0). Plain scalars: the compiled
    walk calls it too."""
    t0 = seconds[0]
    return max(seconds[1] - t0, 0.0) / t0


def sequence_gamma(accepted, checked, alpha, c, gamma_max):
    """One sequence's γ_i under a per-sequence ``AdaptiveGamma``: ``specdec.optimal_gamma``
    (the γ in 1..``gamma_max`` maximising S = E(α_i, γ) / (γc + 1), the first on a tie; 0
    unless α_i > c) at its own α_i = (accepted + 8 α̂) / (checked + 8), its history
    shrunk toward the batch's estimate ``alpha``. Plain scalars, the same floats as
    ``optimal_gamma`` over an array (E by Horner's rule from E(0) = 1, S as
    ``walltime_speedup`` divides): the compiled walk's choice, checked against the policy's
    own in tests/sim/test_policies.py."""
    a = (accepted + PRIOR_GUESSES * alpha) / (checked + PRIOR_GUESSES)
    if not a > c:
        return 0
    best, best_s, expected = 1, -1.0, 1.0
    for g in range(1, gamma_max + 1):
        expected = 1.0 + a * expected
        s = expected / (g * c + 1.0)
        if s > best_s:
            best, best_s = g, s
    return best


class NoSpeculation:
    """No draft: every decoding sequence verifies just its last token."""

    max_depth = 0
    max_nodes = 0  # the most draft nodes one sequence verifies (tree_nodes of its shapes)
    uses_draft = False
    # the same shape whatever the batch, and observe() learns nothing (what a compiled
    # walk of many iterations, sim.steady_walk, needs)
    static = True

    row = np.zeros(0, dtype=np.int64)

    def shape(self, n: int, context: np.ndarray | None = None,
              history: np.ndarray | None = None, running: int | None = None,
              scheduled: np.ndarray | None = None) -> np.ndarray:
        """int64 [0]: no levels."""
        return self.row

    def observe(self, accepted: np.ndarray, row: np.ndarray) -> None:
        """Nothing to learn."""


class _Static:
    """A policy whose shape never changes."""

    uses_draft = True
    static = True  # (see NoSpeculation)

    def __init__(self, row: Sequence[int]) -> None:
        self.row = np.asarray(row, dtype=np.int64)
        self.max_depth = len(self.row)
        self.max_nodes = int(np.cumprod(self.row).sum())

    def shape(self, n: int, context: np.ndarray | None = None,
              history: np.ndarray | None = None, running: int | None = None,
              scheduled: np.ndarray | None = None) -> np.ndarray:
        """int64 [m]: always the same row."""
        return self.row

    def observe(self, accepted: np.ndarray, row: np.ndarray) -> None:
        """Nothing to learn."""


class FixedGamma(_Static):
    """A chain of γ draft tokens for every decoding sequence."""

    def __init__(self, gamma: int) -> None:
        if gamma < 1:
            raise UserError(f"policy.gamma: must be >= 1, got {gamma}")
        super().__init__([1] * gamma)


class TreePolicy(_Static):
    """An expansion tree ⟨k1..km⟩ for every decoding sequence."""

    def __init__(self, expansion: Sequence[int]) -> None:
        if not expansion or min(expansion) < 1:
            raise UserError(
                f"policy.expansion: must be a non-empty list of ints >= 1, got {list(expansion)}"
            )
        super().__init__(expansion)


class BatchLadder:
    """γ chosen by the batch size: vLLM's ``num_speculative_tokens_per_batch_size``.

    ``ladder`` rows are ``[min_batch, max_batch, γ]`` (inclusive bounds), read as vLLM 0.33
    reads them (github vllm-project/vllm vllm/v1/spec_decode/dynamic/utils.py, 0.33.0 wheel:
    ``validate_and_normalize_dynamic_sd_schedule`` and ``build_dynamic_sd_schedule_lookup``):
    sorted by their first size, the first starting at 1, none overlapping; a size between
    two rows takes the γ of the row below it, a size past the last row that row's γ; every
    γ is capped at ``num_speculative_tokens`` (vLLM's K, the most a sequence drafts; the
    ladder's largest γ when not given), which also sets the KV lookahead slots every
    scheduled request reserves, whatever γ the ladder gives it (vLLM's
    ``num_lookahead_tokens`` stays K).

    The batch size (``key``):
    - ``scheduled`` (vLLM 0.33): the requests scheduled by the step that last scheduled the
      sequence, prefill chunks included. vLLM's scheduler looks the size up after forming
      a step (``dynamic_sd_lookup[len(num_scheduled_tokens)]``,
      vllm/v1/core/sched/scheduler.py), the worker proposes that many drafts for each
      request it scheduled at the step's end (the async scheduler sizes the placeholders
      so, vllm/v1/core/sched/async_scheduler.py), and the next step that schedules the
      request verifies them; so a sequence's γ is the size of the step before, or of the
      last one that scheduled it if the step before left it out;
    - ``running``: the requests running as the step starts;
    - ``decoding``: the sequences decoding in it.

    With ``sticky`` a request the ladder once gives γ = 0 never speculates again (vLLM v0's
    ``speculative_disable_by_batch_size``: "once disabled, disabled for the request"; the
    replica keeps that per request).
    """

    uses_draft = True
    pads_admissions = False  # vLLM pads a one-token admission only without a ladder
    KEYS = ("scheduled", "running", "decoding")

    def __init__(self, ladder: Sequence[Sequence[int]], key: str = "scheduled",
                 sticky: bool = False, num_speculative_tokens: int | None = None) -> None:
        if key not in self.KEYS:
            raise UserError(f"policy.key: one of {', '.join(self.KEYS)}, got {key!r}")
        self.key = key
        self.sticky = bool(sticky)
        rows = sorted((int(a), int(b), int(g)) for a, b, g in ladder)
        if not rows:
            raise UserError("policy.ladder: at least one row [min_batch, max_batch, γ]")
        end = 0
        for lo, hi, g in rows:
            if lo < 1 or hi < lo or g < 0:
                raise UserError(f"policy.ladder: a row is [min_batch, max_batch, γ] with "
                                f"1 <= min_batch <= max_batch and γ >= 0, got {[lo, hi, g]}")
            if lo <= end:
                raise UserError(f"policy.ladder: rows overlap at {[lo, hi, g]} (vLLM refuses "
                                "overlapping batch-size ranges)")
            end = hi
        if rows[0][0] != 1:
            raise UserError(f"policy.ladder: the first row must start at batch size 1 (as "
                            f"vLLM requires), got {list(rows[0])}")
        most = max(g for _, _, g in rows)
        k = most if num_speculative_tokens is None else int(num_speculative_tokens)
        if most > k:
            raise UserError(f"policy.num_speculative_tokens: {k}, but the ladder drafts up "
                            f"to {most} tokens (it must be at least every γ)")
        self.max_batch = rows[-1][1]
        self.max_depth = self.max_nodes = k
        # gamma_by_batch[b] for b = 0..max_batch; 0 sequences need no shape. A size
        # between rows takes the γ of the row below it.
        self.gamma_by_batch = np.zeros(self.max_batch + 1, dtype=np.int64)
        starts = [lo for lo, _, _ in rows[1:]] + [self.max_batch + 1]
        for (lo, _, g), nxt in zip(rows, starts, strict=True):
            self.gamma_by_batch[lo:nxt] = g
        self._rows = [chain(g, k) for g in range(k + 1)]
        self._table = np.array(self._rows)  # [k + 1, k]: the chain of each γ

    def shape(self, n: int, context: np.ndarray | None = None,
              history: np.ndarray | None = None, running: int | None = None,
              scheduled: np.ndarray | None = None) -> np.ndarray:
        """int64 [num_speculative_tokens]: the ladder's γ for this batch size; keyed on
        ``scheduled`` (int64 [D]: the size of the step that last scheduled each decoding
        sequence) int64 [D, num_speculative_tokens] where their steps' γ differ (a
        sequence that step left out drafted at the γ of the one before)."""
        if self.key == "scheduled" and scheduled is not None and len(scheduled):
            gammas = self.gamma_by_batch[np.minimum(scheduled, self.max_batch)]
            first = gammas[0]
            if (gammas == first).all():
                return self._rows[first]
            return self._table[gammas]
        size = running if self.key == "running" and running is not None else n
        gamma = int(self.gamma_by_batch[min(size, self.max_batch)])
        return self._rows[gamma]

    def observe(self, accepted: np.ndarray, row: np.ndarray) -> None:
        """Nothing to learn."""

    @property
    def walk_ladder(self) -> tuple[np.ndarray, str]:
        """(γ by batch size, what the size counts: ``key``) where ``sim.steady_walk`` can
        compute this policy's shapes itself (sticky or not: the walk's rows carry whether
        a sticky ladder switched a request off, ``Replica.draft_shapes``' ``SPEC_OFF``)."""
        return self.gamma_by_batch, self.key

    @property
    def deepest_row(self) -> np.ndarray:
        """int64 [num_speculative_tokens]: the deepest chain this policy drafts."""
        return self._rows[-1]


class AdaptiveGamma:
    """Goodput-maximising draft shape per iteration (SmartSpec's idea).

    For each candidate chain γ in 0..max_gamma it prices the decoding part of the iteration
    (draft passes + verify) with ``price(row, context) -> seconds`` (set by the replica) and
    takes the shape with the most expected emitted tokens per second, D·E(α̂, γ) / seconds.
    With ``max_width`` > 1 it then also tries trees ⟨k,1,…,1⟩ (k = 2..max_width, the best
    chain's depth; SpecInfer §6.7: widen where acceptance is likeliest), their expected
    tokens from the i.i.d. model at α̂ with top-k coverage 1 − (1 − α̂)^k
    (``workloads.IIDAcceptance``).

    α̂ is an exponential moving average (weight ``smoothing`` per iteration) of accepted /
    checked single-candidate guesses, starting from the acceptance model's prior
    ``mean_alpha``; after a tree verify only its chain levels (2 and deeper) count.

    With ``per_sequence`` (chains only) each sequence then gets its own γ_i ≤ the batch's
    best γ (the draft passes are shared by the whole batch, so the batch-level search
    fixes how many there are; a sequence can only drop out early): the lecture's optimum
    (Theorem 3.8, ``specdec.optimal_gamma``) at its own α_i = (accepted_i + 8 α̂) /
    (checked_i + 8) — its history shrunk toward the batch estimate — and at this batch's
    draft-to-verify cost ratio c = (T(γ=1) − T(γ=0)) / T(γ=0), or 0 where measured kernel
    times make T(γ=1) the smaller. Hard requests guess less
    (exercise 9(c)) and stop spending verify tokens on guesses that will be rejected.
    """

    PRIOR_GUESSES = PRIOR_GUESSES  # weight of α̂ in a sequence's own estimate, in guesses

    uses_draft = True

    def __init__(self, max_gamma: int, prior_alpha: float, smoothing: float = 0.1,
                 max_width: int = 1, per_sequence: bool = False) -> None:
        if max_gamma < 1:
            raise UserError(f"policy.max_gamma: must be >= 1, got {max_gamma}")
        if not 0.0 < smoothing <= 1.0:
            raise UserError(f"policy.smoothing: must be in (0, 1], got {smoothing}")
        if max_width < 1:
            raise UserError(f"policy.max_width: must be >= 1, got {max_width}")
        if per_sequence and max_width > 1:
            raise UserError("policy.per_sequence: per-sequence shapes are chains; "
                            f"use max_width 1, got {max_width}")
        self.per_sequence = bool(per_sequence)
        self.max_depth = int(max_gamma)
        self.max_width = int(max_width)
        # the widest candidate: <max_width, 1, ..., 1> at full depth
        self.max_nodes = self.max_width * self.max_depth
        self.alpha = float(prior_alpha)
        self.smoothing = float(smoothing)
        # price(row, context) -> seconds of the decoding part; set by the replica, with
        # price_chains(context, depth) -> the same for chain(γ, depth), γ = 0..depth.
        self.price: Callable[[np.ndarray, np.ndarray], float] | None = None
        self.price_chains: Callable[[np.ndarray, int], list[float]] | None = None
        self._rows = [chain(g, self.max_depth) for g in range(self.max_depth + 1)]
        self.last_row = self._rows[0]

    def shape(self, n: int, context: np.ndarray | None = None,
              history: np.ndarray | None = None, running: int | None = None,
              scheduled: np.ndarray | None = None) -> np.ndarray:
        """int64 [max_gamma]: the goodput-best shape for this batch."""
        if n == 0 or self.price is None:
            return self._rows[0]
        seconds = self._chain_seconds(context)  # [γ = 0..max_gamma]
        g, best_rate = best_chain(n, self.alpha, seconds)
        best = self._rows[g]
        depth = int((best > 0).sum())
        if self.max_width > 1 and depth:
            for k in range(2, self.max_width + 1):
                row = best.copy()
                row[0] = k
                rate = n * tree_tokens(self.alpha, k, depth) / self.price(row, context)
                if rate > best_rate:
                    best, best_rate = row, rate
        if self.per_sequence and depth and history is not None:
            best = self._per_sequence(n, history, depth, seconds)
        self.last_row = best
        return best

    @property
    def walk_smoothing(self) -> float:
        """α̂'s EMA weight: ``sim.steady_walk`` computes this policy's shapes itself (one
        chain for the batch, with ``max_width`` > 1 perhaps widened at its root,
        ``tree_tokens``; or with ``per_sequence`` each sequence's own, ``sequence_gamma``)."""
        return self.smoothing

    @property
    def deepest_row(self) -> np.ndarray:
        """int64 [max_gamma]: the deepest chain this policy drafts."""
        return self._rows[-1]

    def _chain_seconds(self, context) -> list[float]:
        """Seconds of the decoding part with each chain γ = 0..max_gamma."""
        if self.price_chains is not None:  # all at once, the same floats
            return self.price_chains(context, self.max_depth)
        return [self.price(row, context) for row in self._rows]

    def _per_sequence(self, n, history, gamma_max: int, seconds: list[float]) -> np.ndarray:
        """int64 [n, max_gamma]: chains of γ_i <= gamma_max, from each sequence's own α_i."""
        from specdec import optimal_gamma

        k = self.PRIOR_GUESSES
        alpha = (history[:, 0] + k * self.alpha) / (history[:, 1] + k)  # [n]
        # measured kernel tables are not monotone in the token count at small batches (an
        # m = 4 GEMM can be timed faster than an m = 2 one), so a one-guess chain can price
        # below no chain: its marginal cost is then nothing (cost_ratio), and every sequence
        # may take the batch's depth
        c = cost_ratio(seconds)
        gamma = np.asarray(optimal_gamma(alpha, c, max_gamma=gamma_max), dtype=np.int64)
        return (np.arange(self.max_depth) < gamma[:, None]).astype(np.int64)  # [n, m]

    def observe(self, accepted: np.ndarray, row: np.ndarray) -> None:
        """Fold one iteration's accepted depths (int64 [D]) under shape ``row`` into α̂.

        ``row`` is the batch's shape [m], or one chain per sequence [D, m].
        """
        if row.ndim == 2:
            depths = (row > 0).sum(axis=1)  # [D]
            checked = int((accepted + (accepted < depths)).sum())
            if checked > 0:
                self.alpha += self.smoothing * (int(accepted.sum()) / checked - self.alpha)
            return
        depth = int((row > 0).sum())
        if depth == 0 or len(accepted) == 0:
            return
        if row[0] > 1:  # a tree: only levels 2.. are single-candidate guesses
            passed = accepted[accepted >= 1] - 1  # [D'] accepted among levels 2..depth
            depth -= 1
        else:
            passed = accepted
        if depth == 0:
            return
        checked = int((passed + (passed < depth)).sum())
        if checked > 0:
            self.alpha += self.smoothing * (int(passed.sum()) / checked - self.alpha)
