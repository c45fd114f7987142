"""Speculative decoding (Leviathan et al., Algorithm 1) on the tiny transformer, with KV rollback.

One iteration (lecture §3.1), with the prefix ``x`` whose last token is not yet cached:

1. the draft guesses γ tokens autoregressively: ``q_i = M_q(x + x_1..x_{i-1})``, ``x_i ~ q_i``;
2. the target computes ``p_1 .. p_{γ+1}`` in ONE forward over ``[last] + x_1..x_γ``;
3. ``x_i`` is accepted with probability ``min(1, p_i(x_i) / q_i(x_i))`` front to back; the
   first rejected index is ``n + 1``;
4. if ``n < γ`` draw ``t`` from the residual ``norm(max(0, p_{n+1} - q_{n+1}))``, else
   draw ``t`` from ``p_{γ+1}`` (the free token);
5. return ``x + x_1..x_n + t``.

Greedy decoding is the same code with one-hot ``p`` and ``q`` (lecture §2.7): accept iff
the draft's argmax is the target's argmax; the residual is the target's one-hot.

KV invariant (lecture §3.2): between iterations both caches hold every token but the last.
The target's cache grows by ``γ + 1`` during step 2 and is truncated to ``n + 1`` more than
before (the last token and the n accepted guesses); the draft has never seen its own last
guess, so after a full accept it owes that guess plus the new token ("pending"), fed at the
start of the next step 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specdec.drafts import Drafter
from specdec.errors import UserError
from specdec.model import TinyTransformer
from specdec.sampling import probs_from_logits, sample, speculative_sample


@dataclass(frozen=True)
class IterationStats:
    """One verify step: what it accepted and how the two caches moved."""

    position: int  # tokens generated before this iteration
    guesses: int  # γ, or the number of tree nodes below the root
    accepted: int  # n: draft tokens accepted
    emitted: int  # n + 1 (before cutting at max_new_tokens)
    draft_calls: int  # draft forward passes in step 1
    target_before: int  # target cache length before step 2
    target_verify: int  # ... right after step 2
    target_after: int  # ... after rollback / compaction
    draft_before: int  # draft cache length before step 1
    draft_after: int  # ... after rollback
    pending: int  # tokens the draft owes besides the last one


@dataclass
class DecodeResult:
    """Generated tokens and per-iteration statistics of one decoding run."""

    tokens: list[int]
    iterations: list[IterationStats] = field(default_factory=list)
    target_calls: int = 0  # target forward passes after the prefill
    draft_calls: int = 0  # draft forward passes after the prefill

    @property
    def tokens_per_verify(self) -> float:
        """Mean tokens emitted per target call (the lecture's "tokens per verify")."""
        return sum(it.emitted for it in self.iterations) / max(1, len(self.iterations))

    @property
    def acceptance_rate(self) -> float:
        """α̂: accepted guesses / checked guesses (chain decoding)."""
        checked = sum(min(it.guesses, it.accepted + 1) for it in self.iterations)
        return sum(it.accepted for it in self.iterations) / max(1, checked)


def check_decode_args(
    target: TinyTransformer, prompt, max_new_tokens: int, temperature: float, rng,
    lookahead: int = 1,
) -> list[int]:
    """Validate the shared arguments of the decoding loops; return the prompt as a list.

    ``lookahead`` is the most positions one verify pass writes (γ + 1, or the tree's node
    count): the last pass starts with at most ``len(prompt) + max_new_tokens - 2`` tokens
    cached, so that plus ``lookahead`` must fit in the target's ``max_seq``.
    """
    prompt = [int(t) for t in np.asarray(prompt).reshape(-1)]
    if not prompt:
        raise UserError("prompt: needs at least one token")
    vocab = target.config.vocab
    if min(prompt) < 0 or max(prompt) >= vocab:
        bad = next(t for t in prompt if not 0 <= t < vocab)
        raise UserError(f"prompt: token ids must be in [0, {vocab}), got {bad}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
        raise UserError(f"max_new_tokens: must be an integer >= 1, got {max_new_tokens!r}")
    if max_new_tokens < 1:
        raise UserError(f"max_new_tokens: must be >= 1, got {max_new_tokens}")
    needed = len(prompt) + max_new_tokens - 2 + lookahead
    if needed > target.config.max_seq:
        raise UserError(
            f"max_new_tokens: prompt ({len(prompt)}) + {max_new_tokens} new tokens + the verify "
            f"lookahead need {needed} positions, beyond the model's max_seq {target.config.max_seq}"
        )
    if not temperature >= 0:
        raise UserError(f"temperature: must be >= 0, got {temperature!r}")
    if temperature > 0 and rng is None:
        raise UserError("rng: sampling (temperature > 0) needs a numpy Generator")
    return prompt


def pick(probs: np.ndarray, rng: np.random.Generator | None) -> int:
    """Draw from ``probs``; a one-hot (greedy) distribution needs no randomness."""
    if rng is None:
        return int(np.argmax(probs))
    return sample(probs, rng)


def prefill(target: TinyTransformer, drafters, prompt: list[int]):
    """Start the invariant: caches hold the prompt but its last token.

    ``drafters`` is one :class:`Drafter`, a list of them (merge-based trees) or None; each
    is reset and fed the same context. Returns the target's new cache.
    """
    cache = target.new_cache()
    if len(prompt) > 1:
        target.forward(prompt[:-1], cache, logits_for="last")
    if drafters is None:
        drafters = []
    elif isinstance(drafters, Drafter):
        drafters = [drafters]
    for drafter in drafters:
        drafter.reset()
        if len(prompt) > 1:
            drafter.extend(prompt[:-1])
    return cache


def record_iteration(
    result: DecodeResult,
    position: int,
    guesses: int,
    accepted: int,
    draft_calls: int,
    before: tuple[int, int, int],
    cache,
    drafter: Drafter,
) -> None:
    """Append one verify step's :class:`IterationStats`, read after rollback / compaction.

    ``before`` is ``(target length before, target length right after the verify pass,
    draft length before)``; ``drafter`` is the one whose debt ``pending`` reports.
    """
    target_before, target_verify, draft_before = before
    result.iterations.append(
        IterationStats(
            position=position,
            guesses=guesses,
            accepted=accepted,
            emitted=accepted + 1,
            draft_calls=draft_calls,
            target_before=target_before,
            target_verify=target_verify,
            target_after=cache.length,
            draft_before=draft_before,
            draft_after=drafter.length,
            pending=cache.length - drafter.length,
        )
    )


def finish(result: DecodeResult, seq: list[int], n_prompt: int, max_new_tokens: int):
    """Cut the output at ``max_new_tokens`` and total the calls; returns ``result``."""
    result.tokens = seq[n_prompt : n_prompt + max_new_tokens]
    result.target_calls = len(result.iterations)
    result.draft_calls = sum(it.draft_calls for it in result.iterations)
    return result


def autoregressive_decode(
    target: TinyTransformer,
    prompt,
    max_new_tokens: int,
    temperature: float = 0.0,
    rng: np.random.Generator | None = None,
) -> DecodeResult:
    """Plain decoding for reference: one target call per generated token."""
    prompt = check_decode_args(target, prompt, max_new_tokens, temperature, rng)
    cache = prefill(target, None, prompt)
    out, last = [], prompt[-1]
    for _ in range(max_new_tokens):
        logits = target.forward([last], cache)  # [vocab]
        last = pick(probs_from_logits(logits, temperature), rng)
        out.append(last)
    return DecodeResult(out, [], target_calls=max_new_tokens, draft_calls=0)


def speculative_decode(
    target: TinyTransformer,
    drafter: Drafter,
    prompt,
    max_new_tokens: int,
    gamma: int,
    temperature: float = 0.0,
    rng: np.random.Generator | None = None,
) -> DecodeResult:
    """Algorithm 1 with γ guesses per iteration, greedy (T = 0) or sampling (T > 0)."""
    if isinstance(gamma, bool) or not isinstance(gamma, (int, np.integer)) or gamma < 1:
        raise UserError(f"gamma: must be an integer >= 1, got {gamma!r}")
    prompt = check_decode_args(target, prompt, max_new_tokens, temperature, rng, gamma + 1)
    # Greedy needs no randomness, but speculative_sample wants a generator: with one-hot
    # p and q no draw it makes can change the outcome.
    draw_rng = rng if rng is not None else np.random.default_rng(0)
    cache = prefill(target, drafter, prompt)
    seq = list(prompt)
    result = DecodeResult([])
    while len(seq) - len(prompt) < max_new_tokens:
        base, draft_before, calls_before = cache.length, drafter.length, drafter.calls
        # Step 1: γ guesses; the first pass also feeds what the draft owes (incl. the last).
        feed, guesses, qs = seq[drafter.length :], [], []
        for _ in range(gamma):
            logits_q = drafter.extend(feed)[-1]  # [vocab]
            q = probs_from_logits(logits_q, temperature)
            guesses.append(pick(q, rng))
            qs.append(q)
            feed = [guesses[-1]]
        # Step 2: one target pass over [last] + guesses -> p_1 .. p_{γ+1}, [γ+1, vocab].
        # Indexing is 0-based here: ps[i] is the lecture's p_{i+1}, qs[i] its q_{i+1}.
        ps = probs_from_logits(target.forward([seq[-1]] + guesses, cache, "all"), temperature)
        verify_len = cache.length
        # Step 3: accept front to back until the first rejection.
        n, t = 0, None
        for i in range(gamma):
            ok, token = speculative_sample(ps[i], qs[i], guesses[i], draw_rng)
            if not ok:
                t = token  # Step 4 (n < γ): speculative_sample drew it from the residual.
                break
            n += 1
        if t is None:
            t = pick(ps[gamma], rng)  # Step 4 (n = γ): the free token from p_{γ+1}.
        # Rollback: keep [last] + n accepted guesses; the draft drops what it saw beyond.
        cache.truncate(base + 1 + n)
        drafter.truncate(min(drafter.length, base + 1 + n))
        record_iteration(result, len(seq) - len(prompt), gamma, n, drafter.calls - calls_before,
                         (base, verify_len, draft_before), cache, drafter)
        seq += guesses[:n] + [t]  # Step 5.
    return finish(result, seq, len(prompt), max_new_tokens)
