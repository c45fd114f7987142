"""A tiny decoder-only transformer with a KV cache that can roll back (the lecture's tiny_llm).

Llama-style blocks: RMSNorm, rotary position embeddings (RoPE), grouped-query attention,
a SwiGLU MLP and an untied lm_head, all in float64 numpy with random weights from a seed.
The weights are random, so the "language" it speaks is arbitrary; what matters here is
that it is a real autoregressive model whose logits depend on the whole prefix, so that
speculative decoding, KV rollback and tree attention are exercised for real.

Why the default config looks the way it does: 48 tokens keep exact enumeration of a
two-token joint (48 x 48 cells) cheap; d_model 64 with 2 layers and 4 query / 2 KV heads
is the smallest shape that still has grouped-query attention and more than one layer (so
the truncated draft differs from the target). The lm_head is initialised so that the
logits have a standard deviation of about ``LOGIT_STD``: with the usual 1/sqrt(d) scale
the next-token distribution of a random model is almost flat and even a uniform draft is
accepted most of the time; with a larger spread the target has clear preferences, so a
draft must actually resemble it (perturbed sigma 0.1 > sigma 0.3 > uniform) to be
accepted. float64 keeps the "same maths, different summation order" differences
(chunked verify vs one token at a time, tree vs path forward) near 1e-15, so greedy
argmaxes never flip in practice.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from specdec.errors import UserError

# Target standard deviation of the logits at initialisation (see the module docstring).
LOGIT_STD = 3.0


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a tiny transformer; frozen so that a config can key caches and traces."""

    vocab: int = 48
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    d_ff: int = 128
    max_seq: int = 1024
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UserError(f"ModelConfig.{name}: must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise UserError(
                f"ModelConfig.n_heads: {self.n_heads} does not divide d_model {self.d_model}"
            )
        if self.n_heads % self.n_kv_heads:
            raise UserError(
                f"ModelConfig.n_kv_heads: {self.n_kv_heads} does not divide "
                f"n_heads {self.n_heads}"
            )
        if self.head_dim % 2:
            raise UserError(f"ModelConfig: head_dim {self.head_dim} must be even for RoPE")
        if not self.rope_theta > 1.0:
            raise UserError(f"ModelConfig.rope_theta: must be > 1, got {self.rope_theta!r}")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        """Plain JSON-able form (for trace metadata)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class KVCache:
    """Keys and values of the tokens processed so far, one slot per position.

    ``length`` is the number of valid slots. Rolling back (``truncate``) only moves
    ``length``: the stale data beyond it is overwritten by the next forward pass.
    """

    k: np.ndarray  # [n_layers, max_seq, n_kv_heads, head_dim]
    v: np.ndarray  # [n_layers, max_seq, n_kv_heads, head_dim]
    length: int = 0

    @classmethod
    def empty(cls, config: ModelConfig) -> KVCache:
        """An empty cache sized for ``config.max_seq`` positions."""
        shape = (config.n_layers, config.max_seq, config.n_kv_heads, config.head_dim)
        return cls(np.zeros(shape), np.zeros(shape), 0)

    def truncate(self, length: int) -> None:
        """Roll back to the first ``length`` positions (KVCache.truncate in the lecture)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"KVCache.truncate: length {length} not in [0, {self.length}]")
        self.length = int(length)

    def compact(self, base: int, keep: np.ndarray) -> None:
        """Keep only slots ``base + keep`` after ``base`` and make them contiguous.

        After a tree forward the cache holds every tree node after ``base``; ``keep`` lists
        the accepted path's node indices (increasing, as depth-first order guarantees). Their
        K/V move to slots ``base, base+1, ...`` (the lecture's compact_accepted); the rest is
        dropped. RoPE was applied with position = base + depth, which is exactly the slot a
        path node lands in, so the result equals a sequential forward of the path.
        """
        keep = np.asarray(keep, dtype=np.int64)
        if keep.size and (keep.min() < 0 or base + keep.max() >= self.length):
            raise ValueError(f"KVCache.compact: node index out of range for length {self.length}")
        if np.any(np.diff(keep) <= 0):
            raise ValueError("KVCache.compact: kept nodes must be strictly increasing")
        # [n_layers, n_keep, kv, hd] gathered first, so overlapping moves are safe.
        self.k[:, base : base + keep.size] = self.k[:, base + keep]
        self.v[:, base : base + keep.size] = self.v[:, base + keep]
        self.length = base + int(keep.size)

    def copy(self) -> KVCache:
        """An independent copy (tests compare caches)."""
        return KVCache(self.k.copy(), self.v.copy(), self.length)


@dataclass
class Layer:
    """One transformer block's weights."""

    attn_norm: np.ndarray  # [d_model]
    wq: np.ndarray  # [d_model, n_heads*head_dim]
    wk: np.ndarray  # [d_model, n_kv_heads*head_dim]
    wv: np.ndarray  # [d_model, n_kv_heads*head_dim]
    wo: np.ndarray  # [n_heads*head_dim, d_model]
    mlp_norm: np.ndarray  # [d_model]
    w_gate: np.ndarray  # [d_model, d_ff]
    w_up: np.ndarray  # [d_model, d_ff]
    w_down: np.ndarray  # [d_ff, d_model]


def _rms_norm(x: np.ndarray, gain: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    # [n, d] -> [n, d]
    return x / np.sqrt((x * x).sum(axis=-1, keepdims=True) / x.shape[-1] + eps) * gain


def rope_tables(config: ModelConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of position * theta^(-2i/hd) for every position, ``[max_seq, hd/2]``."""
    half = config.head_dim // 2
    inv_freq = config.rope_theta ** (-np.arange(half) / half)  # [hd/2]
    angles = np.arange(config.max_seq)[:, None] * inv_freq[None, :]  # [max_seq, hd/2]
    return np.cos(angles), np.sin(angles)


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate pairs (i, i + hd/2) of each head; cos/sin are ``[n, hd/2]`` for the positions."""
    half = x.shape[-1] // 2
    cos, sin = cos[:, None, :], sin[:, None, :]  # [n, 1, hd/2]
    x1, x2 = x[..., :half], x[..., half:]  # [n, heads, hd/2] each
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


@dataclass
class TinyTransformer:
    """A decoder-only transformer; ``forward`` appends the new tokens' K/V to a cache."""

    config: ModelConfig
    embed: np.ndarray  # [vocab, d_model]
    layers: list[Layer]
    final_norm: np.ndarray  # [d_model]
    lm_head: np.ndarray  # [d_model, vocab]
    calls: int = field(default=0, compare=False)  # forward passes so far (statistics only)
    _rope: tuple | None = field(default=None, repr=False, compare=False)  # rope_tables cache

    @classmethod
    def random(cls, config: ModelConfig, seed: int | np.random.Generator) -> TinyTransformer:
        """Random weights: N(0, 1/fan_in) matrices, unit norm gains, a wide lm_head."""
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        d, hd = config.d_model, config.head_dim

        def mat(fan_in: int, fan_out: int, std: float | None = None) -> np.ndarray:
            return rng.normal(0.0, std if std is not None else fan_in**-0.5, (fan_in, fan_out))

        embed = rng.normal(0.0, 1.0, (config.vocab, d))
        layers = [
            Layer(
                attn_norm=np.ones(d),
                wq=mat(d, config.n_heads * hd),
                wk=mat(d, config.n_kv_heads * hd),
                wv=mat(d, config.n_kv_heads * hd),
                wo=mat(config.n_heads * hd, d),
                mlp_norm=np.ones(d),
                w_gate=mat(d, config.d_ff),
                w_up=mat(d, config.d_ff),
                w_down=mat(config.d_ff, d),
            )
            for _ in range(config.n_layers)
        ]
        lm_head = mat(d, config.vocab, LOGIT_STD * d**-0.5)
        return cls(config, embed, layers, np.ones(d), lm_head)

    def new_cache(self) -> KVCache:
        """An empty KV cache for this model."""
        return KVCache.empty(self.config)

    def forward(self, tokens, cache: KVCache, logits_for: str = "last") -> np.ndarray:
        """Process ``tokens`` after the cached context; returns next-token logits.

        ``logits_for="last"`` gives ``[vocab]`` (decode), ``"all"`` gives ``[n_new, vocab]``
        (verify: the distribution after each new token).
        """
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        n = tokens.size
        positions = cache.length + np.arange(n)
        causal = np.tril(np.ones((n, n), dtype=bool))  # [n_new, n_new]
        return self.forward_masked(tokens, positions, causal, cache, logits_for)

    def forward_masked(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        mask: np.ndarray,
        cache: KVCache,
        logits_for: str = "all",
    ) -> np.ndarray:
        """The general pass: explicit RoPE positions and a mask among the new tokens.

        ``mask[i, j]`` says whether new token i may attend to new token j; every new token
        sees the whole cached context. A causal ``tril`` mask is ordinary decoding; a tree's
        ancestor mask with positions by depth is tree attention (``specdec.tree``).
        """
        cfg = self.config
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        n, base = tokens.size, cache.length
        if n == 0:
            raise ValueError("forward: no tokens")
        if base + n > cfg.max_seq:
            raise ValueError(f"forward: {base + n} positions exceed max_seq {cfg.max_seq}")
        if tokens.min() < 0 or tokens.max() >= cfg.vocab:
            raise ValueError(f"forward: token ids must be in [0, {cfg.vocab})")
        if logits_for not in ("last", "all"):
            raise ValueError(f"forward: logits_for must be 'last' or 'all', got {logits_for!r}")
        positions = np.asarray(positions, dtype=np.int64)
        if positions.shape != (n,) or positions.min() < 0 or positions.max() >= cfg.max_seq:
            raise ValueError(f"forward: need {n} positions in [0, {cfg.max_seq})")
        if self._rope is None:
            self._rope = rope_tables(cfg)
        cos, sin = self._rope[0][positions], self._rope[1][positions]  # [n_new, hd/2] each
        # [n_new, base + n_new]: the cached context is visible to every new token.
        full_mask = np.concatenate([np.ones((n, base), dtype=bool), mask], axis=1)
        h_kv, g, hd = cfg.n_kv_heads, cfg.n_heads // cfg.n_kv_heads, cfg.head_dim
        x = self.embed[tokens]  # [n_new] -> [n_new, d_model]
        for li, layer in enumerate(self.layers):
            a = _rms_norm(x, layer.attn_norm)
            q = (a @ layer.wq).reshape(n, h_kv, g, hd)  # [n_new, d] -> [n_new, kv, g, hd]
            k = (a @ layer.wk).reshape(n, h_kv, hd)  # [n_new, d] -> [n_new, kv, hd]
            v = (a @ layer.wv).reshape(n, h_kv, hd)
            q = _rope(q.reshape(n, h_kv * g, hd), cos, sin).reshape(q.shape)
            cache.k[li, base : base + n] = _rope(k, cos, sin)
            cache.v[li, base : base + n] = v
            keys = cache.k[li, : base + n].transpose(1, 2, 0)  # [kv, hd, T]
            vals = cache.v[li, : base + n].transpose(1, 0, 2)  # [kv, T, hd]
            # [kv, g, n_new, hd] @ [kv, 1, hd, T] -> [kv, g, n_new, T]
            scores = (q.transpose(1, 2, 0, 3) @ keys[:, None]) / np.sqrt(hd)
            scores = np.where(full_mask, scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            weights = scores / scores.sum(axis=-1, keepdims=True)
            # [kv, g, n_new, T] @ [kv, 1, T, hd] -> [kv, g, n_new, hd] -> [n_new, kv*g*hd]
            att = (weights @ vals[:, None]).transpose(2, 0, 1, 3).reshape(n, cfg.d_model)
            x = x + att @ layer.wo  # [n_new, d_model]
            m = _rms_norm(x, layer.mlp_norm)
            # SwiGLU: [n_new, d] -> [n_new, d_ff] -> [n_new, d]
            x = x + (_silu(m @ layer.w_gate) * (m @ layer.w_up)) @ layer.w_down
        cache.length = base + n
        self.calls += 1
        if logits_for == "last":
            x = x[-1:]
        logits = _rms_norm(x, self.final_norm) @ self.lm_head  # [n, d] -> [n, vocab]
        return logits[0] if logits_for == "last" else logits

    def with_layers(self, n_layers: int) -> TinyTransformer:
        """The first ``n_layers`` blocks with the same final norm and lm_head (early exit)."""
        if not 1 <= n_layers <= self.config.n_layers:
            raise UserError(
                f"layers: must be in [1, {self.config.n_layers}] for this target, got {n_layers}"
            )
        cfg = replace(self.config, n_layers=n_layers)
        return TinyTransformer(cfg, self.embed, self.layers[:n_layers], self.final_norm,
                               self.lm_head)
