"""Structured output: requests under a grammar, and what it does to their drafts.

A request whose output a grammar constrains (a JSON schema, a regex) is sampled under the
grammar's mask, so a draft token the grammar forbids is never accepted. Each step, for each
such decoding sequence, the drafts are checked in order: a draft breaks the grammar with
probability ``invalid_draft_rate`` given that the ones before it did not, so the number of
leading drafts the grammar allows is min(depth, G - 1), G geometric. The engines differ in
what they do with the rest (scenario ``structured_output.invalid_drafts``):

- ``dropped``: vLLM without async scheduling validates the new drafts before it schedules
  them (``Scheduler.update_draft_token_ids``: ``grammar.validate_tokens`` keeps the prefix
  the grammar accepts), so the verify carries only that prefix -- fewer tokens in the
  budget, the KV and the pass -- while the draft was still run to its full depth (it is
  priced at ``Batch.drafted``);
- ``rejected``: vLLM with async scheduling has scheduled the verify's slots already
  (``update_draft_token_ids_in_output`` puts placeholders where a draft is forbidden and
  counts them in ``num_invalid_spec_tokens``), and SGLang verifies its whole draft under the
  grammar's mask (``generate_token_bitmask``): the pass is unchanged, the forbidden drafts
  and those after them are rejected (``Batch.valid`` caps the accepted depth).

Either way a forbidden draft is not counted as drafted (vLLM's ``num_draft_tokens`` leaves
it out), and the acceptance model gives the acceptance of the drafts the grammar allows.
Sources: github vllm-project/vllm vllm/v1/core/sched/scheduler.py @b4622cf9
(``update_draft_token_ids``, ``update_draft_token_ids_in_output``, ``update_from_output``'s
``num_invalid_spec_tokens``), the same in vLLM 0.33.0's wheel; github sgl-project/sglang
python/sglang/srt/speculative/spec_utils.py @2dd501d1 (``generate_token_bitmask``: a DFS over
the draft tree under the grammar). Not modelled: grammar-forced drafts (tokens the grammar
alone determines, drafted for free and always accepted: jump-forward decoding), trees, the
grammar's own CPU time (bitmask filling), and a draft model that itself decodes under the
grammar.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sim.slots import RID

__all__ = ["Grammar", "GrammarState", "grammar_for", "valid_counts"]


@dataclass
class Grammar:
    """The run's structured requests (bool [N], by request id), the rate at which a draft
    breaks the grammar and what the engine does with such drafts."""

    structured: np.ndarray
    invalid_rate: float
    mode: str  # "dropped" or "rejected"


def grammar_for(scenario, n_requests: int) -> Grammar | None:
    """The scenario's ``structured_output`` for ``n_requests`` requests (which of them a
    grammar constrains: drawn from a stream of the run's seed of its own, the same for
    every variant), or None."""
    so = scenario.structured_output
    if so is None:
        return None
    rng = np.random.default_rng(np.random.SeedSequence(scenario.run.seed, spawn_key=(4,)))
    structured = rng.random(n_requests) < so.share
    return Grammar(structured, float(so.invalid_draft_rate), scenario.invalid_drafts())


def valid_counts(rng: np.random.Generator, rate: float, structured: np.ndarray,
                 depth: int) -> np.ndarray:
    """int64 [D]: the leading drafts the grammar allows of ``depth`` drafted, for sequences
    ``structured`` (bool [D]; the others: all ``depth``)."""
    valid = np.full(len(structured), depth, dtype=np.int64)
    n = int(structured.sum())
    if n and rate > 0:
        first_bad = rng.geometric(rate, size=n)  # the first forbidden draft: 1, 2, ...
        valid[structured] = np.minimum(first_bad - 1, depth)
    return valid


class GrammarState:
    """A replica's side of the grammar: the draws of the step being formed, handed to its
    batch (``attach``) right after the scheduler formed it."""

    def __init__(self, grammar: Grammar, rng: np.random.Generator, n_slots: int) -> None:
        self.grammar = grammar
        self.rng = rng
        self._pos = np.full(n_slots, -1, dtype=np.int64)
        self._pending: tuple | None = None

    def shapes(self, r, dec: np.ndarray, row: np.ndarray) -> np.ndarray:
        """The shapes the scheduler sees for decoding slots ``dec`` whose drafts are
        ``row`` (int64 [m] or [D, m]): ``row`` itself, or with ``dropped`` each structured
        sequence's cut after its leading allowed drafts."""
        g = self.grammar
        self._pending = None
        structured = g.structured[r.state[dec, RID]]  # [D]
        if not structured.any() or g.invalid_rate == 0:
            return row
        rows = np.broadcast_to(row, (len(dec), row.shape[-1]))  # [D, m]
        depth = (rows > 0).sum(axis=1)  # [D]
        valid = np.minimum(valid_counts(self.rng, g.invalid_rate, structured,
                                        rows.shape[1]), depth)
        if (valid >= depth).all():  # nothing forbidden this step
            return row
        self._pos[dec] = np.arange(len(dec))
        self._pending = (np.array(rows), valid)
        if g.mode == "rejected":
            return row
        keep = np.arange(rows.shape[1]) < valid[:, None]  # [D, m]
        return np.where(keep, rows, 0)

    def attach(self, batch):
        """``batch`` with the drafted shapes (``dropped``) or the allowed counts
        (``rejected``) of its decoding sequences."""
        pending, self._pending = self._pending, None
        if pending is None or not len(batch.dec_slots):
            return batch
        rows, valid = pending
        at = self._pos[batch.dec_slots]
        if self.grammar.mode == "rejected":
            return replace(batch, valid=valid[at])
        drafted = rows[at]
        if drafted.shape[1] != batch.row.shape[-1]:  # (the scheduler keeps the width)
            raise AssertionError("a batch's rows changed width after the grammar cut them")
        return replace(batch, drafted=drafted)
