"""Acceptance kinds: how the target accepts the draft's guesses (``acceptance: {kind: ...}``).

Each kind builds its ``workloads`` acceptance model with ``build(rng)`` (``rng`` seeds what
the model draws once, e.g. the bursty regime tape). :data:`SINGLE_KINDS` are the models a
task of a mix can use; :data:`ACCEPTANCE_KINDS` adds the mix itself.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from sim.kinds.base import (
    MAX_TOKENS,
    DataFile,
    Gamma,
    NonNeg,
    Pos,
    Prob,
    Rates,
    Shape,
    Strict,
    kind_union,
)
from sim.paths import resolve_file
from specdec.errors import UserError


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
    rates: Rates  # α_i for guess i given guesses < i accepted

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model."""
        from workloads.acceptance import PositionalAcceptance

        return PositionalAcceptance(self.rates)


class MarginalAcc(Strict):
    """vLLM-style marginal rates P(guess i accepted), converted to conditionals; on a tree
    level of k candidates 1 - (1 - α)^(k^θ) (θ 0: the width does not matter, as for an
    engine's forced acceptance, which accepts the same depth whatever the tree)."""

    kind: Literal["marginal"]
    marginals: Rates  # vLLM-style P(guess i accepted)
    theta: NonNeg = 1.0  # top-k coverage exponent for tree levels

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model."""
        from workloads.acceptance import PositionalAcceptance
        from workloads.coverage import PowerCoverage

        return PositionalAcceptance.from_marginals(self.marginals, PowerCoverage(self.theta))


class BurstyAcc(Strict):
    """Two-state easy/hard stretches with geometric lengths (lecture §4.5)."""

    kind: Literal["bursty"]
    easy_alpha: Prob = 0.95
    hard_alpha: Prob = 0.3
    easy_mean_tokens: Annotated[float, Field(ge=1, le=MAX_TOKENS)] = 32.0
    hard_mean_tokens: Annotated[float, Field(ge=1, le=MAX_TOKENS)] = 32.0

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model (its regime tape drawn from ``rng``)."""
        from workloads.bursty import BurstyAcceptance

        return BurstyAcceptance(self.easy_alpha, self.hard_alpha, self.easy_mean_tokens,
                                self.hard_mean_tokens, rng)


class CalibratedAcc(Strict):
    """i.i.d. α solved so that the shape ``expansion`` yields ``mean_tokens`` per verify."""

    kind: Literal["calibrated"]
    mean_tokens: Annotated[float, Field(ge=1, le=65)]  # published tokens per verify for this shape
    expansion: Shape  # [1]*γ for a chain

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model."""
        from workloads.calibration import calibrate_iid

        return calibrate_iid(self.mean_tokens, np.asarray(self.expansion, dtype=np.int64))


class TraceAcc(Strict):
    """Replay of a recorded acceptance trace (``specsim trace``): greedy ranks or sampling."""

    kind: Literal["trace"]
    file: DataFile  # an acceptance trace (.npz); a data file, see the top of the page
    mode: Literal["greedy", "sampling"] = "greedy"

    def build(self, rng: np.random.Generator):
        """The ``workloads`` acceptance model."""
        from workloads.acceptance_trace import TraceAcceptance
        from workloads.trace_file import load_trace

        return TraceAcceptance(load_trace(resolve_file(self.file)), self.mode)


class PresetAcc(Strict):
    """Acceptance measured for a real draft/target pair (``workloads/data/
    acceptance_presets.yaml``: per-position rates with their source, conditional or not)."""

    kind: Literal["preset"]
    name: str  # e.g. eagle3-llama-3.1-8b-mtbench-k3 (the data file lists them)

    def build(self, rng: np.random.Generator):
        """The preset's ``workloads`` acceptance model."""
        from workloads.presets import preset

        return preset(self.name).model()

    def measured_for(self):
        """The ``workloads.presets.Preset`` (what the numbers were measured for)."""
        from workloads.presets import preset

        return preset(self.name)


class VllmMetricsAcc(Strict):
    """Conditional per-position rates from a vLLM Prometheus dump (its spec-decode counters,
    ``workloads.engine_metrics``); ``model_name`` picks a model when the dump has several."""

    kind: Literal["vllm_metrics"]
    file: DataFile  # a /metrics text dump; a data file, see the top of the page
    model_name: str | None = None

    def build(self, rng: np.random.Generator):
        """A ``PositionalAcceptance`` on the dump's rates."""
        from workloads.acceptance import PositionalAcceptance
        from workloads.engine_metrics import vllm_unconditional_rates

        rates, _ = vllm_unconditional_rates(resolve_file(self.file), self.model_name)
        return PositionalAcceptance.from_marginals(rates)


class SglangMetricsAcc(Strict):
    """i.i.d. α from SGLang's mean acceptance length gauge for its chain of ``num_steps``
    (``--speculative-num-steps`` with ``--speculative-eagle-topk 1``)."""

    kind: Literal["sglang_metrics"]
    file: DataFile  # a /metrics text dump with sglang:spec_accept_length
    num_steps: Gamma

    def build(self, rng: np.random.Generator):
        """The calibrated i.i.d. model."""
        from workloads.calibration import calibrate_iid
        from workloads.engine_metrics import sglang_accept_length

        path = resolve_file(self.file)
        length = sglang_accept_length(path)
        try:
            return calibrate_iid(length, np.ones(self.num_steps, dtype=np.int64))
        except UserError as e:  # it names its own mean_tokens, which the scenario has not
            raise UserError(f"{path}: sglang:spec_accept_length with num_steps "
                            f"{self.num_steps}: {str(e).partition(': ')[2]}") from None


SINGLE_KINDS = (IidAcc, PositionalAcc, MarginalAcc, BurstyAcc, CalibratedAcc, TraceAcc,
                PresetAcc, VllmMetricsAcc, SglangMetricsAcc)
SingleAcceptance = kind_union(SINGLE_KINDS)


class TaskEntry(Strict):
    """One task of a mix: its weight among requests and its acceptance model."""

    weight: Pos
    acceptance: SingleAcceptance


class TaskMixAcc(Strict):
    """Requests belong to tasks (drawn by weight, or a replay file's task column), each
    with its own acceptance model."""

    kind: Literal["task_mix"]
    tasks: dict[str, TaskEntry] = Field(min_length=1, max_length=1024)

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
