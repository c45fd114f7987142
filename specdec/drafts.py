"""Draft models behind one small interface, so decoding loops treat them alike.

The lecture builds drafts for a tiny random target (§3.3): a *perturbed copy* (target
weights plus sigma-scaled noise, "a small model trained on the same data"), a *truncated
copy* (the first layers plus the final norm and lm_head, like early exit), and a *uniform*
draft (the dumbest one). We add *prompt lookup* (an n-gram drafter, §8).

Every drafter is a :class:`Drafter`: it keeps its own state (a KV cache, or just the token
history), and

- ``extend(tokens)`` feeds tokens after that state and returns next-token logits
  ``[n_new, vocab]``, one row after each fed token;
- ``truncate(length)`` rolls the state back; ``length`` is how many tokens it holds;
- ``reset()`` empties it; ``calls`` counts ``extend`` passes (draft forward passes).

Logits, not probabilities, are the common currency: ``probs_from_logits`` turns them into
q at any temperature, and ranking by logits with ties broken by token id is the one order
used everywhere (greedy guesses, top-k tree children, trace ranks). Drafters without a
distribution of their own express one in logits: the n-gram proposal is ``0`` for the
proposed token and ``-inf`` elsewhere (one-hot at every temperature), "no idea" is all
zeros (uniform, whose greedy guess is token 0 — the lecture's uniform draft).
"""

from __future__ import annotations

import numpy as np

from specdec.errors import UserError
from specdec.model import TinyTransformer


class Drafter:
    """Interface of every draft: stateful next-token logits with rollback."""

    vocab: int
    calls: int = 0

    @property
    def length(self) -> int:
        """Number of tokens the drafter's state holds."""
        raise NotImplementedError

    def extend(self, tokens) -> np.ndarray:
        """Feed ``tokens``; logits ``[n_new, vocab]`` for the token after each of them."""
        raise NotImplementedError

    def truncate(self, length: int) -> None:
        """Forget every token after the first ``length``."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget everything."""
        self.truncate(0)


class ModelDrafter(Drafter):
    """A tiny transformer with its own KV cache (perturbed or truncated copies)."""

    def __init__(self, model: TinyTransformer):
        self.model = model
        self.vocab = model.config.vocab
        self.cache = model.new_cache()
        self.calls = 0

    @property
    def length(self) -> int:
        return self.cache.length

    def extend(self, tokens) -> np.ndarray:
        self.calls += 1
        return self.model.forward(tokens, self.cache, logits_for="all")  # [n_new, vocab]

    def truncate(self, length: int) -> None:
        self.cache.truncate(length)


class UniformDrafter(Drafter):
    """Knows nothing: equal logits everywhere (greedy always guesses token 0)."""

    def __init__(self, vocab: int):
        self.vocab = vocab
        self._length = 0
        self.calls = 0

    @property
    def length(self) -> int:
        return self._length

    def extend(self, tokens) -> np.ndarray:
        n = np.asarray(tokens).reshape(-1).size
        self._length += n
        self.calls += 1
        return np.zeros((n, self.vocab))  # [n_new, vocab]

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self._length:
            raise ValueError(f"truncate: length {length} not in [0, {self._length}]")
        self._length = int(length)


class NgramDrafter(Drafter):
    """Prompt lookup: propose what followed the most recent earlier match of the suffix.

    After each fed token, take the last ``n`` tokens of the history, find their most recent
    earlier occurrence, and propose the token that followed it. With no match the drafter
    backs off to ``n - 1``, ... , ``min_n`` tokens; with none at all it has no idea (uniform
    logits). The proposal is one-hot (0 / -inf logits), so it is also the greedy guess and
    a sampled draw.
    """

    def __init__(self, vocab: int, n: int = 3, min_n: int = 1):
        if not 1 <= min_n <= n:
            raise UserError(f"ngram: need 1 <= min_n <= n, got n={n}, min_n={min_n}")
        self.vocab, self.n, self.min_n = vocab, n, min_n
        self.history: list[int] = []
        self.calls = 0

    @property
    def length(self) -> int:
        return len(self.history)

    def extend(self, tokens) -> np.ndarray:
        tokens = [int(t) for t in np.asarray(tokens).reshape(-1)]
        out = np.zeros((len(tokens), self.vocab))  # [n_new, vocab]
        for i, tok in enumerate(tokens):
            self.history.append(tok)
            proposal = self.propose(self.history)
            if proposal is not None:
                out[i] = -np.inf
                out[i, proposal] = 0.0
        self.calls += 1
        return out

    def propose(self, history: list[int]) -> int | None:
        """The token after the most recent earlier match of the longest usable suffix."""
        arr = np.asarray(history, dtype=np.int64)
        for n in range(min(self.n, arr.size - 1), self.min_n - 1, -1):
            suffix = arr[-n:]
            # Windows starting at s with s + n < len(arr): an earlier match with a successor.
            windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)  # [len-n, n]
            hits = np.flatnonzero(np.all(windows == suffix, axis=1))
            if hits.size:
                return int(arr[hits[-1] + n])
        return None

    def truncate(self, length: int) -> None:
        if not 0 <= length <= len(self.history):
            raise ValueError(f"truncate: length {length} not in [0, {len(self.history)}]")
        del self.history[length:]


def perturbed_copy(target: TinyTransformer, sigma: float, seed) -> TinyTransformer:
    """Target weights plus ``sigma * std(W) * N(0, 1)`` noise on every tensor W.

    Norm gains start at exactly 1 (std 0), so they stay unperturbed; every matrix gets noise
    in proportion to its own spread, which keeps the draft's "broad direction" and spoils
    its details more as sigma grows.
    """
    if not (np.isfinite(sigma) and sigma >= 0):
        raise UserError(f"sigma: must be finite and >= 0, got {sigma!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

    def noisy(w: np.ndarray) -> np.ndarray:
        return w + sigma * w.std() * rng.normal(size=w.shape)

    layers = [
        type(layer)(**{name: noisy(w) for name, w in vars(layer).items()})
        for layer in target.layers
    ]
    return TinyTransformer(
        target.config, noisy(target.embed), layers, noisy(target.final_norm),
        noisy(target.lm_head),
    )


def truncated_copy(target: TinyTransformer, n_layers: int) -> TinyTransformer:
    """The target's first ``n_layers`` blocks, then its final RMSNorm and lm_head."""
    return target.with_layers(n_layers)


DRAFT_KINDS = ("perturbed", "truncated", "uniform", "ngram")


def make_drafter(
    kind: str,
    target: TinyTransformer,
    *,
    sigma: float = 0.1,
    layers: int = 1,
    ngram: int = 3,
    seed=0,
) -> Drafter:
    """Build a drafter of ``kind`` (one of :data:`DRAFT_KINDS`) for ``target``."""
    if kind == "perturbed":
        return ModelDrafter(perturbed_copy(target, sigma, seed))
    if kind == "truncated":
        return ModelDrafter(truncated_copy(target, layers))
    if kind == "uniform":
        return UniformDrafter(target.config.vocab)
    if kind == "ngram":
        return NgramDrafter(target.config.vocab, n=ngram)
    raise UserError(f"draft: must be one of {', '.join(DRAFT_KINDS)}, got {kind!r}")


def rank_order(logits: np.ndarray) -> np.ndarray:
    """Token ids from best to worst: descending logits, ties broken by lower token id.

    The one order used for greedy guesses (rank 0), top-k tree children and trace ranks, so
    that a replayed trace decides exactly what real decoding decides.
    """
    return np.argsort(-np.asarray(logits), axis=-1, kind="stable")  # [..., vocab]


def token_ranks(logits: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Rank of ``tokens[i]`` in row ``logits[i]`` under :func:`rank_order` (0 = argmax)."""
    logits = np.atleast_2d(logits)  # [n, vocab]
    tokens = np.asarray(tokens, dtype=np.int64).reshape(-1, 1)  # [n, 1]
    mine = np.take_along_axis(logits, tokens, axis=1)  # [n, 1]
    ids = np.arange(logits.shape[1])[None, :]  # [1, vocab]
    better = (logits > mine) | ((logits == mine) & (ids < tokens))
    return better.sum(axis=1)  # [n]
