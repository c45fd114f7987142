"""Request specs: what arrives, when, how long, and which task it belongs to.

:func:`build_requests` combines an arrival process, prompt and output length
distributions and a task mix into a list of :class:`RequestSpec` (:func:`request_columns`:
the same as :class:`RequestColumns`, arrays without an object per request), with one generator
spawned per source (arrivals, prompt lengths, output lengths, tasks) so that changing one
source never shifts the draws of another. :func:`read_request_csv` loads a recorded trace.

CSV format: a header row, then one request per row, with columns ``arrival_at`` (seconds
from the start, non-decreasing; ``arrival_s`` is accepted as a synonym), ``prompt_tokens``,
``output_tokens`` (integers >= 1) and optionally ``task``. Any malformed row is refused with
one line naming the file, the line and the column.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec.errors import UserError
from workloads.arrivals import ArrivalProcess
from workloads.lengths import LengthDistribution
from workloads.trace_rows import check_header

DEFAULT_TASK = "default"
REQUIRED_COLUMNS = ("arrival_at", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload (immutable). ``arrival_at`` is absolute seconds.

    ``hash_ids`` say which of the prompt's tokens other prompts share (for prefix caching,
    ``workloads.prefix_blocks``): id k stands for tokens [k·b, (k+1)·b) of the prompt, b =
    ``hash_block_tokens`` (the last one possibly partial), and prompts that begin with the
    same ids begin with the same tokens. A Mooncake trace gives one id per 512 tokens of the
    whole prompt; a synthetic shared system prompt one id (its group) for its
    ``shared_prefix_tokens``; tokens past what the ids cover are the request's own. None:
    the prompt shares nothing.
    """

    id: int
    arrival_at: float
    prompt_tokens: int
    output_tokens: int
    task: str = DEFAULT_TASK
    hash_ids: tuple[int, ...] | None = None
    hash_block_tokens: int | None = None


def check_task_weights(tasks: Mapping[str, float]) -> tuple[list[str], np.ndarray]:
    """Names and normalised weights of a task mix, or a UserError naming the bad entry."""
    if not tasks:
        raise UserError("tasks: need at least one task with a weight")
    names = list(tasks)
    w = []
    for name in names:
        if not isinstance(name, str) or not name:
            raise UserError(f"tasks: task names must be non-empty strings, got {name!r}")
        try:
            v = float(tasks[name])
        except (TypeError, ValueError):
            raise UserError(f"tasks.{name}: weight must be a number, got {tasks[name]!r}") from None
        if not (v > 0) or not math.isfinite(v):
            raise UserError(
                f"tasks.{name}: weight must be a finite number > 0, got {tasks[name]!r}"
            )
        w.append(v)
    weights = np.array(w)
    return names, weights / weights.sum()


@dataclass(frozen=True)
class RequestColumns:
    """A drawn workload's requests as arrays, without a Python object per request (a
    million ``RequestSpec`` objects took about 250 MB while they lived): request i is row
    i, ``task`` indexes ``task_names``, and no prompt shares tokens with another (no hash
    ids). ``specs()`` gives the same requests as ``RequestSpec`` objects."""

    arrival_at: np.ndarray  # float64 [N]
    prompt_tokens: np.ndarray  # int64 [N]
    output_tokens: np.ndarray  # int64 [N]
    task: np.ndarray  # int64 [N]
    task_names: list[str]

    def __len__(self) -> int:
        return len(self.arrival_at)

    def specs(self) -> list[RequestSpec]:
        """The requests as ``RequestSpec`` objects (what ``build_requests`` returns)."""
        names = self.task_names
        return [RequestSpec(i, float(t), int(a), int(b), names[k])
                for i, (t, a, b, k) in enumerate(zip(self.arrival_at, self.prompt_tokens,
                                                     self.output_tokens, self.task,
                                                     strict=True))]


def request_columns(
    arrivals: ArrivalProcess,
    prompt_lengths: LengthDistribution,
    output_lengths: LengthDistribution,
    rng: np.random.Generator,
    n: int | None = None,
    horizon_s: float | None = None,
    tasks: Mapping[str, float] | None = None,
) -> RequestColumns:
    """``build_requests`` without a shared prefix, as columns (the same draws: four
    generators spawned from ``rng`` -- arrivals, prompt lengths, output lengths, tasks)."""
    arr_rng, prompt_rng, output_rng, task_rng = rng.spawn(4)
    if n is not None and horizon_s is not None:  # drawn only as far as the horizon
        times_at = arrivals.sample_until(arr_rng, n, horizon_s)  # [N]
    else:
        times_at = arrivals.sample(arr_rng, n=n, horizon_s=horizon_s)  # [N]
    count = times_at.size
    prompt = prompt_lengths.sample(count, prompt_rng)  # [N]
    output = output_lengths.sample(count, output_rng)  # [N]
    if tasks is None:
        names, task_idx = [DEFAULT_TASK], np.zeros(count, dtype=np.int64)
    else:
        names, p = check_task_weights(tasks)
        task_idx = task_rng.choice(len(names), size=count, p=p)  # [N]
    return RequestColumns(np.asarray(times_at, dtype=np.float64),
                          np.asarray(prompt, dtype=np.int64),
                          np.asarray(output, dtype=np.int64),
                          np.asarray(task_idx, dtype=np.int64), names)


def build_requests(
    arrivals: ArrivalProcess,
    prompt_lengths: LengthDistribution,
    output_lengths: LengthDistribution,
    rng: np.random.Generator,
    n: int | None = None,
    horizon_s: float | None = None,
    tasks: Mapping[str, float] | None = None,
    shared_prefix_tokens: int = 0,
    shared_prefix_groups: int = 1,
) -> list[RequestSpec]:
    """Requests for a count ``n`` or a horizon ``horizon_s``; with both, those of the first
    ``n`` that arrive before the horizon (``ArrivalProcess.sample_until``), so a count far
    past the horizon draws no more than the horizon holds.

    ``tasks`` maps task names to weights (default: every request is task 'default').
    ``shared_prefix_tokens`` > 0 puts a system prompt of that many tokens before every
    drawn prompt (vLLM's ``vllm bench serve --random-prefix-len``: the prompt is the prefix
    plus the drawn length), one of ``shared_prefix_groups`` distinct ones (SGLang's
    ``generated-shared-prefix`` dataset's ``--gsp-num-groups``), drawn uniformly per request;
    it is described by ``hash_ids = (group,)`` over ``hash_block_tokens =
    shared_prefix_tokens``. Four generators are spawned from ``rng``: arrivals, prompt
    lengths, output lengths, tasks — in that order, whatever is used — and a fifth for the
    groups when there are several.
    """
    if shared_prefix_tokens < 0 or shared_prefix_groups < 1:
        raise ValueError("shared_prefix_tokens must be >= 0 and shared_prefix_groups >= 1")
    cols = request_columns(arrivals, prompt_lengths, output_lengths, rng, n, horizon_s, tasks)
    if not shared_prefix_tokens:
        return cols.specs()
    count, names = len(cols), cols.task_names
    group = np.zeros(count, dtype=np.int64)
    if shared_prefix_groups > 1:
        group = rng.spawn(1)[0].integers(shared_prefix_groups, size=count)  # [N]
    return [
        RequestSpec(i, float(t), shared_prefix_tokens + int(a), int(b), names[k], (int(g),),
                    shared_prefix_tokens)
        for i, (t, a, b, k, g) in enumerate(zip(cols.arrival_at, cols.prompt_tokens,
                                                cols.output_tokens, cols.task, group,
                                                strict=True))
    ]


def _number(path: Path, line: int, column: str, cell: str | None, integer: bool) -> float:
    if cell is None or cell.strip() == "":
        raise UserError(f"{path}: line {line}: column '{column}': missing value")
    text = cell.strip()
    try:
        v = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise UserError(f"{path}: line {line}: column '{column}': not {kind}: {text!r}") from None
    if not math.isfinite(v):
        raise UserError(f"{path}: line {line}: column '{column}': not finite: {text!r}")
    if integer and v < 1:
        raise UserError(f"{path}: line {line}: column '{column}': must be >= 1, got {text}")
    if v < 0:
        raise UserError(f"{path}: line {line}: column '{column}': must be >= 0, got {text}")
    return v


def read_request_csv(path: str | Path) -> list[RequestSpec]:
    """Load a recorded request trace (format in the module docstring); ids are row order."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{p}: cannot read: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise UserError(f"{p}: cannot read: {e.strerror}") from None
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    if not header:
        raise UserError(f"{p}: empty file (expected a header {','.join(REQUIRED_COLUMNS)})")
    rename = {"arrival_s": "arrival_at"}
    header = [rename.get(h, h) for h in header]
    check_header(p, header, (*REQUIRED_COLUMNS, "task"), REQUIRED_COLUMNS)
    reader.fieldnames = header
    specs: list[RequestSpec] = []
    prev_at = 0.0
    for i, row in enumerate(reader):
        line = reader.line_num
        if None in row:  # more cells than header columns
            raise UserError(
                f"{p}: line {line}: {len(header) + len(row[None])} cells for {len(header)} columns"
            )
        at = _number(p, line, "arrival_at", row["arrival_at"], integer=False)
        if at < prev_at:
            raise UserError(
                f"{p}: line {line}: column 'arrival_at': times must not decrease, "
                f"got {at:g} after {prev_at:g}"
            )
        prev_at = at
        prompt = int(_number(p, line, "prompt_tokens", row["prompt_tokens"], integer=True))
        output = int(_number(p, line, "output_tokens", row["output_tokens"], integer=True))
        task = (row.get("task") or "").strip() or DEFAULT_TASK
        specs.append(RequestSpec(i, at, prompt, output, task))
    if not specs:
        raise UserError(f"{p}: no requests after the header")
    return specs


def write_request_csv(path: str | Path, specs: list[RequestSpec]) -> None:
    """Write specs in the format :func:`read_request_csv` reads (times with repr precision)."""
    with Path(path).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*REQUIRED_COLUMNS, "task"])
        for s in specs:
            w.writerow([repr(s.arrival_at), s.prompt_tokens, s.output_tokens, s.task])
