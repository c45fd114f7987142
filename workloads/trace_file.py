"""The on-disk acceptance-trace format: save, load and validate ``.npz`` files.

A trace file is a NumPy ``.npz`` archive (``numpy.savez_compressed``, no pickled objects)
holding exactly these arrays:

==================  =========  ========  ====================================================
name                dtype      shape     meaning
==================  =========  ========  ====================================================
``format_version``  int64      ``()``    ``1`` (:data:`specdec.traces.TRACE_FORMAT_VERSION`)
``ranks``           int32      ``[N]``   rank of the target's token in the draft's logits
                                         (0 = argmax, ties to the lower id); ``>= 0``
``accept_prob``     float64    ``[N,K]`` P(MSS with k candidates accepts), column k-1; in
                                         [0, 1], non-decreasing in k (recorded values are
                                         rounded to float32 precision)
``sequence``        int32      ``[N]``   decoding run of each position; ``>= 0``, each run
                                         contiguous (non-decreasing ids)
``meta_json``       str        ``()``    JSON object: ``format_version``, ``target`` (model
                                         config), ``draft`` (kind, sigma, layers, ngram),
                                         ``temperature``, ``seed``, ``prompts`` (one per
                                         sequence), ``tokens_per_prompt`` (each
                                         sequence's length), ``tokens`` (N), ``k_max`` (K)
==================  =========  ========  ====================================================

The committed traces in ``workloads/traces/`` were written by::

    specsim trace --draft perturbed --sigma 0.1 --temperature 0   --tokens 2000 --prompts 16 \
        --k-max 5 --seed 0 --out workloads/traces/perturbed-0.1-greedy.npz
    specsim trace --draft perturbed --sigma 0.3 --temperature 0   ... perturbed-0.3-greedy.npz
    specsim trace --draft perturbed --sigma 0.3 --temperature 0.5 ... perturbed-0.3-t0.5.npz

and a test regenerates each from its own metadata and demands identical arrays. The
recorder rounds ``accept_prob`` to float32 precision (relative step 2^-24 ≈ 6e-8): that
absorbs the 1e-16-level noise of BLAS summation order (thread counts, CPU kernels) unless a
value lies within that noise of a float32 rounding boundary, odds of a few in 1e9 per value
(~1e-4 for a 10,000-value trace), the same order as a near-tie flipping an argmax or a rank.
Greedy traces hold exact 0s and 1s. A real change to the model's or the sampler's arithmetic
still shows up in the test: then rerun these commands and commit the new files.

``load_trace`` refuses anything else with a one-line :class:`UserError` naming the file and
the field. The semantics of the arrays are in :mod:`specdec.traces`.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from specdec.drafts import DRAFT_KINDS
from specdec.errors import UserError
from specdec.traces import TRACE_FORMAT_VERSION, AcceptanceTrace

ARRAYS = ("format_version", "ranks", "accept_prob", "sequence", "meta_json")
META_KEYS = (
    "format_version",
    "target",
    "draft",
    "temperature",
    "seed",
    "prompts",
    "tokens_per_prompt",
    "tokens",
    "k_max",
)
DRAFT_KEYS = ("kind", "sigma", "layers", "ngram")
# Rounding slack for "non-decreasing in k" and "within [0, 1]".
_PROB_TOL = 1e-12


def save_trace(path, trace: AcceptanceTrace) -> Path:
    """Write ``trace`` to ``path`` (``.npz``); returns the path written."""
    path = Path(path)
    try:
        _write(path, trace)
    except OSError as e:
        raise UserError(f"{path}: cannot write the trace: {e.strerror}") from None
    return path


def _write(path: Path, trace: AcceptanceTrace) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:  # a file object stops numpy from appending ".npz"
        np.savez_compressed(
            fh,
            format_version=np.array(TRACE_FORMAT_VERSION, dtype=np.int64),
            ranks=np.asarray(trace.ranks, dtype=np.int32),
            accept_prob=np.asarray(trace.accept_prob, dtype=np.float64),
            sequence=np.asarray(trace.sequence, dtype=np.int32),
            meta_json=np.array(json.dumps(trace.meta, sort_keys=True)),
        )


def load_trace(path) -> AcceptanceTrace:
    """Read and validate a trace file; raise a one-line :class:`UserError` if malformed."""
    path = Path(path)
    where = str(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            data = {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise UserError(f"{where}: trace file not found") from None
    except IsADirectoryError:
        raise UserError(f"{where}: is a folder, not a trace file") from None
    except PermissionError as err:
        raise UserError(f"{where}: cannot read the trace: {err.strerror}") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        # numpy's own text for a non-archive suggests allow_pickle=True: wrong advice here.
        raise UserError(f"{where}: not a valid trace file (expected a .npz archive written "
                        "by specsim trace)") from None
    for name in ARRAYS:
        if name not in data:
            raise UserError(f"{where}: {name}: missing array")
    version = data["format_version"]
    if version.shape != () or version.dtype.kind not in "iu":
        raise UserError(f"{where}: format_version: must be an integer scalar")
    if int(version) != TRACE_FORMAT_VERSION:
        raise UserError(
            f"{where}: format_version: unknown version {int(version)} "
            f"(this SpecSim reads {TRACE_FORMAT_VERSION})"
        )
    ranks, accept, seq = data["ranks"], data["accept_prob"], data["sequence"]
    _check(where, "ranks", ranks, np.int32, 1)
    n = ranks.shape[0]
    if n == 0:
        raise UserError(f"{where}: ranks: the trace has no positions")
    _check(where, "accept_prob", accept, np.float64, 2)
    _check(where, "sequence", seq, np.int32, 1)
    if accept.shape[0] != n or accept.shape[1] < 1:
        raise UserError(f"{where}: accept_prob: shape {accept.shape}, expected ({n}, K >= 1)")
    if seq.shape != (n,):
        raise UserError(f"{where}: sequence: shape {seq.shape}, expected ({n},)")
    if ranks.min() < 0:
        raise UserError(f"{where}: ranks: must be >= 0, found {int(ranks.min())}")
    if not np.all(np.isfinite(accept)) or accept.min() < -_PROB_TOL or accept.max() > 1 + _PROB_TOL:
        raise UserError(f"{where}: accept_prob: probabilities must lie in [0, 1]")
    if accept.shape[1] > 1 and np.diff(accept, axis=1).min() < -_PROB_TOL:
        bad = int(np.argwhere(np.diff(accept, axis=1) < -_PROB_TOL)[0, 0])
        raise UserError(f"{where}: accept_prob: decreases in k at position {bad}")
    if seq.min() < 0 or np.any(np.diff(seq) < 0):
        raise UserError(f"{where}: sequence: ids must be >= 0 and non-decreasing (contiguous runs)")
    _, seq_lengths = np.unique(seq, return_counts=True)  # [n_seq] positions per sequence
    meta = _meta(where, data["meta_json"], accept.shape[1], [int(c) for c in seq_lengths], n)
    return AcceptanceTrace(ranks, accept, seq, meta)


def _check(where: str, name: str, arr: np.ndarray, dtype, ndim: int) -> None:
    if arr.dtype != dtype:
        raise UserError(f"{where}: {name}: dtype {arr.dtype}, expected {np.dtype(dtype)}")
    if arr.ndim != ndim:
        raise UserError(f"{where}: {name}: {arr.ndim}-D array, expected {ndim}-D")


def _meta(where: str, raw: np.ndarray, k: int, seq_lengths: list[int], n: int) -> dict:
    n_seq = len(seq_lengths)
    if raw.shape != () or raw.dtype.kind != "U":
        raise UserError(f"{where}: meta_json: must be a string scalar")
    try:
        meta = json.loads(str(raw))
    except json.JSONDecodeError as err:
        raise UserError(f"{where}: meta_json: invalid JSON ({err.msg})") from None
    if not isinstance(meta, dict):
        raise UserError(f"{where}: meta_json: must be a JSON object")
    for key in META_KEYS:
        if key not in meta:
            raise UserError(f"{where}: meta_json.{key}: missing")
    if meta["format_version"] != TRACE_FORMAT_VERSION:
        raise UserError(
            f"{where}: meta_json.format_version: {meta['format_version']!r} "
            f"differs from the file's {TRACE_FORMAT_VERSION}"
        )
    if meta["k_max"] != k:
        raise UserError(
            f"{where}: meta_json.k_max: {meta['k_max']!r}, but accept_prob has {k} columns"
        )
    if not isinstance(meta["prompts"], list) or len(meta["prompts"]) != n_seq:
        raise UserError(f"{where}: meta_json.prompts: expected one prompt per sequence ({n_seq})")
    per_prompt = meta["tokens_per_prompt"]
    if not isinstance(per_prompt, list) or not all(isinstance(x, int) for x in per_prompt):
        raise UserError(f"{where}: meta_json.tokens_per_prompt: must be a list of integers")
    if meta["tokens"] != n or sum(per_prompt) != n:
        raise UserError(
            f"{where}: meta_json.tokens: {meta['tokens']!r}, but the trace has {n} positions"
        )
    if per_prompt != seq_lengths:
        raise UserError(
            f"{where}: meta_json.tokens_per_prompt: {per_prompt!r} differs from the "
            f"sequence lengths {seq_lengths!r}"
        )
    draft = meta["draft"]
    if not isinstance(draft, dict) or any(key not in draft for key in DRAFT_KEYS):
        raise UserError(
            f"{where}: meta_json.draft: must be an object with {', '.join(DRAFT_KEYS)}"
        )
    if draft["kind"] not in DRAFT_KINDS:
        raise UserError(
            f"{where}: meta_json.draft.kind: {draft['kind']!r} is not one of "
            f"{', '.join(DRAFT_KINDS)}"
        )
    if not isinstance(meta["target"], dict):
        raise UserError(f"{where}: meta_json.target: must be an object (a model config)")
    temperature = meta["temperature"]
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
        np.isfinite(temperature) and temperature >= 0
    ):
        raise UserError(f"{where}: meta_json.temperature: must be a number >= 0")
    if isinstance(meta["seed"], bool) or not isinstance(meta["seed"], int) or meta["seed"] < 0:
        raise UserError(f"{where}: meta_json.seed: must be an integer >= 0")
    return meta
