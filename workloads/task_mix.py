"""A task mix: requests of different tasks see different acceptance models.

Acceptance depends strongly on the task (Leviathan et al. Table 3: α 0.5–0.9 across
tasks; copy-heavy tasks such as summarisation accept more). A :class:`TaskMixAcceptance`
maps task names, each with a weight, to acceptance models. Its stream ids encode the task
in the low 8 bits and the task model's own stream id above them, so a stream carries its
task through every verify and batches that mix tasks are served by one call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from specdec.errors import UserError
from workloads.acceptance import AcceptanceModel
from workloads.requests import check_task_weights

TASK_BITS = 8
MAX_TASKS = 1 << TASK_BITS


class TaskMixAcceptance(AcceptanceModel):
    """Per-task acceptance models with weights: ``{name: (weight, model)}``."""

    def __init__(self, tasks: Mapping[str, tuple[float, AcceptanceModel]]) -> None:
        if not tasks:
            raise UserError("tasks: need at least one task")
        if len(tasks) > MAX_TASKS:
            raise UserError(f"tasks: at most {MAX_TASKS} tasks, got {len(tasks)}")
        for name, entry in tasks.items():
            if not (isinstance(entry, tuple) and len(entry) == 2) or not isinstance(
                entry[1], AcceptanceModel
            ):
                raise UserError(f"tasks.{name}: must be a (weight, AcceptanceModel) pair")
        self.names, self.weights = check_task_weights({k: v[0] for k, v in tasks.items()})
        self.models = [tasks[name][1] for name in self.names]
        self._index = {name: i for i, name in enumerate(self.names)}

    def task_index(self, task_names: Sequence[str]) -> np.ndarray:
        """int64 [n]: the index of each task name (UserError on an unknown name)."""
        try:
            return np.array([self._index[t] for t in task_names], dtype=np.int64)
        except KeyError as e:
            raise UserError(f"task: unknown task {e.args[0]!r} (known: {self.names})") from None

    def streams_for_tasks(self, task_names: Sequence[str], rng: np.random.Generator) -> np.ndarray:
        """int64 [n]: new streams for requests whose tasks are already known."""
        return self._encode(self.task_index(task_names), rng)

    def new_streams(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """int64 [n]: a task drawn by weight per request, then that task's stream."""
        task = rng.choice(len(self.names), size=int(n), p=self.weights)  # [n]
        return self._encode(task.astype(np.int64), rng)

    def _encode(self, task: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        out = np.zeros(task.size, dtype=np.int64)
        for i, model in enumerate(self.models):  # a loop over tasks, not sequences
            mask = task == i
            if mask.any():
                inner = model.new_streams(int(mask.sum()), rng)
                if inner.size and (inner.min() < 0 or inner.max() >= 1 << (63 - TASK_BITS)):
                    raise UserError(f"tasks.{self.names[i]}: stream ids out of range")
                out[mask] = (inner << TASK_BITS) | i
        return out

    def tasks_of(self, streams: np.ndarray) -> list[str]:
        """The task name of each stream."""
        return [self.names[i] for i in (np.asarray(streams) & (MAX_TASKS - 1)).tolist()]

    def draw(self, streams, positions, widths, rng):
        """Accepted depth per sequence, each task's rows answered by its own model."""
        task = streams & (MAX_TASKS - 1)  # [B]
        inner = streams >> TASK_BITS  # [B]
        out = np.zeros(streams.size, dtype=np.int64)
        for i in np.unique(task).tolist():
            if i >= len(self.models):
                raise UserError(f"streams: task index {i} is not in this mix")
            mask = task == i
            out[mask] = self.models[i].draw(inner[mask], positions[mask], widths[mask], rng)
        return out

    def kernel_tasks(self, row: np.ndarray) -> tuple | None:
        """What a compiled engine needs to give :meth:`draw`'s depths for shape ``row``: each
        task's model's ``kernel_tables``, in task order, and ``TASK_BITS`` (a stream's task
        is its low bits, the task model's stream the rest); None where a task's model has
        none. :meth:`draw` asks the tasks in order, each for its rows in batch order, so a
        compiled engine draws the batch's depths task after task."""
        tables = tuple(m.kernel_tables(row) for m in self.models)
        if any(t is None for t in tables):
            return None
        return tables, TASK_BITS

    @property
    def mean_alpha(self) -> float:
        """Weight-averaged per-task mean α."""
        return float(sum(w * m.mean_alpha for w, m in zip(self.weights, self.models, strict=True)))

    def expected_tokens(self, widths) -> float:
        """Weight-averaged exact expected tokens per verify of the task models."""
        return float(
            sum(
                w * m.expected_tokens(widths)
                for w, m in zip(self.weights, self.models, strict=True)
            )
        )
