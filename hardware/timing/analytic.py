"""The analytic timings' one stage formula: the ``roofline`` timing's and the ``paper`` GPU's.

Both price a pipeline stage from a handful of per-unit coefficients (the module notes of
``hardware.timing.roofline`` and ``hardware.timing.paper`` say where each comes from); the
paper GPU's pass is the roofline's with a sharp corner, no lm_head, per-sequence or
elementwise terms, and its weights streaming beside the host's (so the terms it lacks are
zeros here, and add exactly nothing). A stage is a vector of ``FIELDS``, and
``stage_parts`` is the formula, written once: the timings call it on a tuple of floats, the
compiled kernels (``sim.kernels.base.pass_seconds``, compiled by ``sim.steady_kernel``) on
a float64 array (``analytic_params``). It calls nothing, so that numba compiles it as it
stands.
"""

from __future__ import annotations

import numpy as np

SHARP = 64.0  # a corner exponent this large is priced as a plain max

# a stage's coefficients, in the order of its vector
FIELDS = ("per_token", "per_head_token", "per_key", "weight_s", "per_kv", "comm_fixed_s",
          "comm_per_token_s", "host_s", "fixed_s", "per_seq_s", "p", "inv_p", "overlap",
          "routed_s", "miss", "per_kv_len", "elem_per_token_s", "head_tokens_per_seq",
          "per_kv_window", "per_key_window", "window", "state_per_seq_s")
(PER_TOKEN, PER_HEAD_TOKEN, PER_KEY, WEIGHT_S, PER_KV, COMM_FIXED_S, COMM_PER_TOKEN_S, HOST_S,
 FIXED_S, PER_SEQ_S, P, INV_P, OVERLAP, ROUTED_S, MISS, PER_KV_LEN, ELEM_PER_TOKEN_S,
 HEAD_TOKENS_PER_SEQ, PER_KV_WINDOW, PER_KEY_WINDOW, WINDOW, STATE_PER_SEQ_S
 ) = range(len(FIELDS))


def stage_parts(q, new, kv, keys, n):
    """(compute_s, memory_s, comm_s, seconds) of one stage whose vector is ``q`` for a pass
    of ``new`` tokens, ``kv`` KV entries read or written, ``keys`` attended (query, key)
    pairs and ``n`` sequences; memory_s includes the elementwise kernels' traffic (it names
    the bound).

    compute = per_token·new + per_head_token·min(new, head_tokens_per_seq·n) + per_key·keys
              + per_key_window·min(keys, new·window);
    memory = weight_s + routed_s·(1 - miss^new) + per_kv·kv (+ per_kv_len·kv/n)
             + per_kv_window·(min(kv - new, n·window) + new) + state_per_seq_s·n;
    busy = (compute^p + memory^p)^(1/p) + comm + elem (a max where p >= SHARP);
    seconds = max(busy, host) (their sum without ``overlap``) + fixed_s + per_seq_s·n.
    """
    cap = q[HEAD_TOKENS_PER_SEQ] * n
    compute = q[PER_TOKEN] * new + q[PER_HEAD_TOKEN] * (new if new < cap else cap) \
        + q[PER_KEY] * keys
    memory = q[WEIGHT_S] + q[ROUTED_S] * (1.0 - q[MISS] ** new) + q[PER_KV] * kv
    if q[PER_KV_LEN] != 0.0 and n > 0:
        memory += q[PER_KV_LEN] * kv / n
    if q[WINDOW] > 0.0:  # window layers: base.windowed, written out for numba
        ctx = kv - new
        cap = n * q[WINDOW]
        keys_cap = new * q[WINDOW]
        memory += q[PER_KV_WINDOW] * ((ctx if ctx < cap else cap) + new)
        compute += q[PER_KEY_WINDOW] * (keys if keys < keys_cap else keys_cap)
    memory += q[STATE_PER_SEQ_S] * n
    comm = q[COMM_FIXED_S] + q[COMM_PER_TOKEN_S] * new
    elem = q[ELEM_PER_TOKEN_S] * new  # memory traffic of kernels of their own, after
    hi, lo = (compute, memory) if compute > memory else (memory, compute)
    if q[P] >= SHARP or hi <= 0.0:
        gpu = hi
    else:
        gpu = hi * (1.0 + (lo / hi) ** q[P]) ** q[INV_P]
    busy = gpu + comm + elem
    host = q[HOST_S]
    if q[OVERLAP] != 0.0:
        t = busy if busy > host else host
    else:
        t = busy + host
    return compute, memory + elem, comm, t + q[FIXED_S] + q[PER_SEQ_S] * n


def analytic_params(q) -> tuple:
    """A one-stage analytic timing's parameters for the compiled pricer
    (``sim.kernels.base.pass_seconds``): its vector, then the measured timing's tables
    empty -- a pricer with no token grid is an analytic stage."""
    empty = np.zeros(0)
    return (np.array(q, dtype=np.float64), empty, empty, empty, empty, np.zeros((0, 1)),
            empty, empty)
