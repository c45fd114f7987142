"""Acceptance kinds: how the target accepts the draft's guesses (``acceptance: {kind: ...}``).

Each kind builds its ``workloads`` acceptance model with ``build(rng)`` (``rng`` seeds what
the model draws once, e.g. the bursty regime tape). :data:`SINGLE_KINDS` are the models a
task of a mix can use; :data:`ACCEPTANCE_KINDS` adds the mix itself.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from sim.kinds.base import Pos, PosInt, Prob, Strict, kind_union
from sim.paths import resolve_file


class IidAcc(Strict):
    """Each guess accepted with probability ``alpha``, independently (lecture §4.1)."""

    kind: Literal["iid"]
    alpha: Prob
    theta: Pos = 1.0  # top-k coverage exponent for tree levels, 1 - (1 - α)^(k^θ)

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model."""
        from workloads.acceptance import IIDAcceptance
        from workloads.coverage import PowerCoverage

        return IIDAcceptance(self.alpha, PowerCoverage(self.theta))


class PositionalAcc(Strict):
    """Per-guess conditional rates: guess i accepted with ``rates[i]`` given guesses < i were."""

    kind: Literal["positional"]
    rates: list[Prob] = Field(min_length=1)  # α_i for guess i given guesses < i accepted

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model."""
        from workloads.acceptance import PositionalAcceptance

        return PositionalAcceptance(self.rates)


class MarginalAcc(Strict):
    """vLLM-style marginal rates P(guess i accepted), converted to conditionals."""

    kind: Literal["marginal"]
    marginals: list[Prob] = Field(min_length=1)  # vLLM-style P(guess i accepted)

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model."""
        from workloads.acceptance import PositionalAcceptance

        return PositionalAcceptance.from_marginals(self.marginals)


class BurstyAcc(Strict):
    """Two-state easy/hard stretches with geometric lengths (lecture §4.5)."""

    kind: Literal["bursty"]
    easy_alpha: Prob = 0.95
    hard_alpha: Prob = 0.3
    easy_mean_tokens: Annotated[float, Field(ge=1)] = 32.0
    hard_mean_tokens: Annotated[float, Field(ge=1)] = 32.0

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model (its regime tape drawn from ``rng``)."""
        from workloads.bursty import BurstyAcceptance

        return BurstyAcceptance(self.easy_alpha, self.hard_alpha, self.easy_mean_tokens,
                                self.hard_mean_tokens, rng)


class CalibratedAcc(Strict):
    """i.i.d. α solved so that the shape ``expansion`` yields ``mean_tokens`` per verify."""

    kind: Literal["calibrated"]
    mean_tokens: Annotated[float, Field(ge=1)]  # published tokens per verify for this shape
    expansion: list[PosInt] = Field(min_length=1)  # [1]*γ for a chain

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model."""
        from workloads.calibration import calibrate_iid

        return calibrate_iid(self.mean_tokens, np.asarray(self.expansion, dtype=np.int64))


class TraceAcc(Strict):
    """Replay of a recorded acceptance trace (``specsim trace``): greedy ranks or sampling."""

    kind: Literal["trace"]
    file: str  # an acceptance trace (.npz), relative to the repository root or absolute
    mode: Literal["greedy", "sampling"] = "greedy"

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model."""
        from workloads.acceptance_trace import TraceAcceptance
        from workloads.trace_file import load_trace

        return TraceAcceptance(load_trace(resolve_file(self.file)), self.mode)


SINGLE_KINDS = (IidAcc, PositionalAcc, MarginalAcc, BurstyAcc, CalibratedAcc, TraceAcc)
SingleAcceptance = kind_union(SINGLE_KINDS)


class TaskEntry(Strict):
    """One task of a mix: its weight among requests and its acceptance model."""

    weight: Pos
    acceptance: SingleAcceptance


class TaskMixAcc(Strict):
    """Requests belong to tasks (drawn by weight, or a replay file's task column), each
    with its own acceptance model."""

    kind: Literal["task_mix"]
    tasks: dict[str, TaskEntry] = Field(min_length=1)

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model: one model per task, each from its own rng."""
        from workloads.task_mix import TaskMixAcceptance

        rngs = rng.spawn(len(self.tasks))
        return TaskMixAcceptance({
            name: (entry.weight, entry.acceptance.build(r))
            for (name, entry), r in zip(self.tasks.items(), rngs, strict=True)
        })

    def task_weights(self) -> dict[str, float]:
        """Task name -> weight, for drawing each request's task."""
        return {k: e.weight for k, e in self.tasks.items()}


ACCEPTANCE_KINDS = (*SINGLE_KINDS, TaskMixAcc)
Acceptance = kind_union(ACCEPTANCE_KINDS)
