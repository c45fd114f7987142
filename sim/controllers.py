"""The serving engines' own speculation controllers, as policies (``sim.policies``' protocol:
``shape``, ``observe``, ``max_depth``, ``max_nodes``, ``uses_draft``).

- ``SglangAdaptive``: SGLang's ``--speculative-adaptive``, the number of EAGLE steps per
  decode batch from an EMA of accepted drafts kept per batch-size slot.
- ``TrtllmSpeculation``: TensorRT-LLM's speculative config's controls: ``draft_len_schedule``
  (batch size to draft length), ``max_concurrency`` and the acceptance-rate gate that
  switches speculation off for good.

vLLM's Dynamic SD (``num_speculative_tokens_per_batch_size``) is ``sim.policies.BatchLadder``.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Mapping, Sequence

import numpy as np

from sim.policies import chain
from specdec.errors import UserError

# SGLang 0.5.14's DEFAULT_ADAPTIVE_CONFIG (the sglang 0.5.14 wheel on PyPI,
# sglang/srt/speculative/adaptive_spec_params.py): a slot per smallest batch size, its
# candidate step counts (0: no speculation) and thresholds; shared defaults below
SGLANG_DEFAULT_SLOTS: dict[str, dict] = {
    "1": {"candidate_steps": [1, 3, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25,
          "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
          "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
}
# AdaptiveStepSlot's defaults for what a slot's entry and the file's top level leave out
SGLANG_SLOT_DEFAULTS = {"ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10,
                        "down_hysteresis": -0.25, "up_hysteresis": 0.0, "ceiling_coeff": 0}
MAX_STEPS = 64


def sglang_initial_steps(slots: Mapping[str, Mapping]) -> int:
    """The steps a slot starts from when ``--speculative-num-steps`` is unset: the middle
    of every slot's candidates together (SGLang 0.5.14's
    ``_init_adaptive_speculative_params``, arg_groups/speculative_hook.py)."""
    every = sorted({s for v in slots.values() for s in v["candidate_steps"]})
    return every[len(every) // 2]


def sglang_deepest(slots: Mapping[str, Mapping]) -> int:
    """The most steps any slot may draft."""
    return max(max(v["candidate_steps"]) for v in slots.values())


def sglang_capture_sizes(max_running: int) -> list[int]:
    """The decode batch sizes SGLang 0.5.14 captures CUDA graphs for with speculation
    (``ServerArgs._generate_decode_cuda_graph_batch_sizes``, its speculative list: 1-8,
    10-32 by 2, 40-64 by 4, 72-256 by 8, then by 16), cut at ``max_running`` requests and
    with ``max_running`` added (``get_batch_sizes_to_capture`` in
    model_executor/runner/base_cuda_graph_runner.py). SpecSim assumes the GPU's graph limit
    (``cuda_graph_max_bs``, set by GPU memory) is at least ``max_running``."""
    sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8),
             *range(272, max(max_running, 272) + 1, 16)]
    return sorted({s for s in sizes if s <= max_running} | {max_running})


class _Slot:
    """One batch-size slot: SGLang's ``AdaptiveStepSlot``."""

    def __init__(self, initial_steps: int, cfg: Mapping) -> None:
        self.candidates = sorted(set(cfg["candidate_steps"]))
        self.ema_alpha = float(cfg["ema_alpha"])
        self.update_interval = int(cfg["update_interval"])
        self.warmup_batches = int(cfg["warmup_batches"])
        self.down_hysteresis = float(cfg["down_hysteresis"])
        self.up_hysteresis = float(cfg["up_hysteresis"])
        self.ceiling_coeff = float(cfg["ceiling_coeff"])
        self.steps = initial_steps if initial_steps in self.candidates \
            else self.candidates[len(self.candidates) // 2]
        self.ema = float(self.steps - 1)  # a neutral start
        self.batches = 0

    def update(self, accepted: np.ndarray) -> None:
        """One verified batch's accepted drafts per request: the EMA (while it drafts),
        then, after the warm-up and every ``update_interval`` batches, the steps."""
        if not len(accepted):
            return
        if self.steps > 0:
            mean = float(accepted.sum()) / len(accepted)
            self.ema = (1 - self.ema_alpha) * self.ema + self.ema_alpha * mean
        self.batches += 1
        if self.batches <= self.warmup_batches:
            return
        if (self.batches - self.warmup_batches) % self.update_interval:
            return
        self.steps = self._target()

    def _target(self) -> int:
        """``AdaptiveStepSlot._recompute_params``: from no speculation, probe the next
        candidate up; else step down while the EMA is at or below the step below's
        threshold (its count - 0.5, 0.5 for 0, plus ``down_hysteresis``), and if it did
        not, up while it is above this one's (its count - 0.5 + ``up_hysteresis``); with
        ``ceiling_coeff`` a decision that does not raise the steps is capped at
        ceil(EMA x coeff), at least 1."""
        c = self.candidates
        old = self.steps
        i = c.index(old)
        if old == 0:
            i = min(i + 1, len(c) - 1)
            if c[i] > 0 and self.ema < 0:
                self.ema = float(c[i] - 1)
            return c[i]
        start = i
        while i > 0:
            below = c[i - 1]
            if self.ema <= (0.5 if below == 0 else below - 0.5) + self.down_hysteresis:
                i -= 1
            else:
                break
        if i == start:
            while i < len(c) - 1 and self.ema > c[i] - 0.5 + self.up_hysteresis:
                i += 1
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema * self.ceiling_coeff))
            if ceiling < c[i] <= old:
                while i > 0 and c[i] > ceiling:
                    i -= 1
        return c[i]


class SglangAdaptive:
    """SGLang's ``--speculative-adaptive`` (0.5.14: sglang/srt/speculative/
    adaptive_spec_params.py ``AdaptiveSpeculativeParams`` and adaptive_runtime_state.py
    ``AdaptiveController``; the EAGLE worker asks for a decode batch's steps with its
    number of requests, ``eagle_worker_v2.py``, and feeds each verify's accepted drafts per
    request back with the batch's size, ``batch_result_processor.py``).

    Each decode batch of n requests goes to a slot: n padded up to the next CUDA-graph
    batch size (``capture_sizes``), then the slot of the largest key at or below it (the
    first slot below every key). The batch drafts a chain of that slot's steps (top-k 1;
    0 steps: no drafts); its verify's accepted drafts update the slot's EMA
    (``_Slot.update``). ``slots`` maps a smallest batch size (an integer string) to
    ``candidate_steps`` and optional thresholds; ``shared`` holds the file's other keys
    (``ema_alpha``, ``update_interval``, ``warmup_batches``, the hysteresis, the ceiling),
    which a slot's own keys override. ``initial_steps`` is ``--speculative-num-steps``.

    SGLang's overlap scheduler hands a verify's result to the controller one batch late;
    SpecSim updates before the next batch (it does not model the overlap scheduler)."""

    uses_draft = True
    pads_admissions = False

    def __init__(self, initial_steps: int, slots: Mapping[str, Mapping] | None = None,
                 shared: Mapping | None = None, capture_sizes: Sequence[int] = ()) -> None:
        slots = SGLANG_DEFAULT_SLOTS if slots is None else slots
        cfg = {**SGLANG_SLOT_DEFAULTS, **(shared or {})}
        if not slots:
            raise UserError("policy.slots: at least one batch-size slot, e.g. "
                            "{'1': {candidate_steps: [1, 3, 7]}}")
        self._keys = sorted(int(k) for k in slots)
        self._slots = [_Slot(initial_steps, {**cfg, **slots[str(k)]}) for k in self._keys]
        self.max_depth = self.max_nodes = sglang_deepest(slots)
        self._capture = sorted(capture_sizes)
        self._rows = [chain(g, self.max_depth) for g in range(self.max_depth + 1)]

    def slot_for(self, n: int) -> int:
        """The index of the slot a decode batch of ``n`` requests goes to."""
        cap = self._capture
        if cap:
            i = bisect.bisect_left(cap, n)
            if i < len(cap):
                n = cap[i]
        return max(0, bisect.bisect_right(self._keys, n) - 1)

    def steps(self, n: int) -> int:
        """The steps a decode batch of ``n`` requests drafts now."""
        return self._slots[self.slot_for(n)].steps

    def shape(self, n: int, context: np.ndarray | None = None,
              history: np.ndarray | None = None, running: int | None = None,
              scheduled: np.ndarray | None = None) -> np.ndarray:
        """int64 [max_depth]: the chain of the batch's slot's steps."""
        return self._rows[self.steps(n)]

    def observe(self, accepted: np.ndarray, row: np.ndarray) -> None:
        """The verify's accepted drafts per request, to the slot of the batch's size."""
        self._slots[self.slot_for(len(accepted))].update(accepted)

    @property
    def deepest_row(self) -> np.ndarray:
        """int64 [max_depth]: the deepest chain this policy drafts."""
        return self._rows[-1]


def check_sglang_slots(slots: Mapping, what: str) -> None:
    """Refuse a ``--speculative-adaptive-config`` SGLang would refuse, in one line (its
    ``_load_adaptive_config``: integer-string keys are slots, each with a non-empty list
    of non-negative ``candidate_steps``; at least one slot)."""
    if not slots:
        raise UserError(f"{what}: at least one integer-string batch-size key, e.g. "
                        '{"1": {"candidate_steps": [1, 3, 7]}}')
    for key, entry in slots.items():
        steps = entry.get("candidate_steps") if isinstance(entry, Mapping) else None
        if not isinstance(steps, list) or not steps or not all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_STEPS
                for s in steps):
            raise UserError(f"{what}: {key}: candidate_steps must be a non-empty list of "
                            f"integers 0..{MAX_STEPS}, got {steps!r}")


class TrtllmSpeculation:
    """TensorRT-LLM's speculation controls (its LLM API ``DecodingBaseConfig`` fields, as
    the TensorRT-LLM 1.3.0rc29 LLM API reference describes them; github NVIDIA/TensorRT-LLM
    PR #10860, merged 2026-03-13, "Dynamic draft length on spec decode one-model path"):

    - ``draft_len_schedule`` {batch size: draft length}: a batch of b requests drafts the
      length of the first key at or above b; past the largest key it drafts none (its
      example {4: 4, 8: 2, 32: 1}: 1-4 draft 4, 5-8 2, 9-32 1, 33 on 0);
    - ``max_concurrency`` M: speculation off above M requests (the schedule {M:
      max_draft_len});
    - ``acceptance_rate_threshold`` with ``acceptance_rate_window_size`` N: once the mean
      acceptance rate (accepted / drafted tokens) of the last N iterations that drafted
      falls below the threshold, speculation is off for good.

    The batch size is the executor's active requests (``len(active_requests)``, prefills
    included), SpecSim's running requests as the step starts."""

    uses_draft = True
    pads_admissions = False

    def __init__(self, max_draft_len: int, schedule: Mapping[int, int] | None = None,
                 max_concurrency: int | None = None, window: int = 0,
                 threshold: float | None = None) -> None:
        if schedule is not None and max_concurrency is not None:
            raise UserError("policy: draft_len_schedule and max_concurrency are exclusive "
                            "(TensorRT-LLM refuses both)")
        if max_concurrency is not None:
            schedule = {int(max_concurrency): max_draft_len}
        self.max_draft_len = int(max_draft_len)
        self._keys: list[int] = []
        self._lengths: list[int] = []
        if schedule is not None:
            keys = sorted(int(k) for k in schedule)
            if not keys or keys[0] < 1:
                raise UserError(f"policy.draft_len_schedule: batch sizes >= 1, got {keys}")
            lengths = [int(schedule[k]) for k in keys]
            if any(not 0 <= v <= max_draft_len for v in lengths):
                raise UserError(f"policy.draft_len_schedule: draft lengths 0..max_draft_len "
                                f"({max_draft_len}), got {lengths}")
            if lengths[0] != max_draft_len:
                raise UserError(f"policy.draft_len_schedule: the smallest batch size must "
                                f"draft max_draft_len ({max_draft_len}), got {lengths[0]}")
            self._keys, self._lengths = keys, lengths
        self.window = int(window)
        self.threshold = threshold
        self._rates: deque = deque(maxlen=max(self.window, 1))
        self.disabled = False  # the acceptance gate closed, for good
        self.max_depth = self.max_nodes = self.max_draft_len
        self._rows = [chain(g, self.max_depth) for g in range(self.max_depth + 1)]

    def draft_len(self, batch: int) -> int:
        """The draft length for ``batch`` active requests (0 once the gate closed)."""
        if self.disabled:
            return 0
        if not self._keys:
            return self.max_draft_len
        i = bisect.bisect_left(self._keys, batch)
        return self._lengths[i] if i < len(self._keys) else 0

    def shape(self, n: int, context: np.ndarray | None = None,
              history: np.ndarray | None = None, running: int | None = None,
              scheduled: np.ndarray | None = None) -> np.ndarray:
        """int64 [max_draft_len]: the chain of this batch's draft length."""
        return self._rows[self.draft_len(n if running is None else running)]

    def observe(self, accepted: np.ndarray, row: np.ndarray) -> None:
        """An iteration's acceptance rate into the gate's window (iterations that drafted)."""
        if self.threshold is None or self.window <= 0 or self.disabled:
            return
        drafted = int((row > 0).sum()) if row.ndim == 2 else int((row > 0).sum()) * len(
            accepted)
        if drafted == 0:
            return
        self._rates.append(float(accepted.sum()) / drafted)
        if len(self._rates) == self.window and \
                sum(self._rates) / self.window < self.threshold:
            self.disabled = True

    @property
    def deepest_row(self) -> np.ndarray:
        """int64 [max_draft_len]: the deepest chain this policy drafts."""
        return self._rows[-1]
