"""The inputs and the write-only log of one simulated run.

``RequestTable`` holds what is known about every request before the run (arrival time,
lengths, task, acceptance stream); ``RunLog`` accumulates what happens, as numpy arrays
indexed by request id and one tuple per iteration, and turns them into flat records at the
end. The engine writes the log and never reads it back to make decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.records import IterationRecord, RequestRecord


@dataclass(frozen=True)
class RequestTable:
    """Every request of a run, sorted by arrival; request ``i`` is row ``i``.

    arrival_at float64 [N]; prompt_tokens, output_tokens, task, stream int64 [N].
    """

    arrival_at: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    task: np.ndarray
    stream: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_at)


class RunLog:
    """Per-request counters and timestamps plus iteration rows, written by the replicas."""

    def __init__(self, n_requests: int) -> None:
        nan = np.full(n_requests, np.nan)
        self.replica = np.full(n_requests, -1, dtype=np.int64)
        self.first_scheduled_at = nan.copy()
        self.first_token_at = nan.copy()
        self.finished_at = nan.copy()
        self.emitted = np.zeros(n_requests, dtype=np.int64)
        # [N, 6]: verify steps, draft steps, drafted, accepted, checked tokens, preemptions
        self.counts = np.zeros((n_requests, 6), dtype=np.int64)
        self.iterations: list[tuple] = []

    def request_records(self, table: RequestTable, arrived: int) -> list[RequestRecord]:
        """One record per request that arrived (the first ``arrived`` rows)."""
        done = ~np.isnan(self.finished_at)
        cols = (
            range(arrived),
            self.replica.tolist(),
            table.task.tolist(),
            table.arrival_at.tolist(),
            self.first_scheduled_at.tolist(),
            self.first_token_at.tolist(),
            self.finished_at.tolist(),
            table.prompt_tokens.tolist(),
            table.output_tokens.tolist(),
            self.emitted.tolist(),
            *self.counts.T.tolist(),
            done.tolist(),
        )
        return [RequestRecord(*row) for row in zip(*cols, strict=False)]

    def iteration_records(self) -> list[IterationRecord]:
        """One record per replica iteration, in the order they started per replica."""
        return [IterationRecord(*row) for row in self.iterations]
