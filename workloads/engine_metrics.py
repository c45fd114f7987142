"""Acceptance from a real deployment's metrics: a vLLM Prometheus dump or SGLang's gauge.

vLLM (``vllm/v1/spec_decode/metrics.py``; labels ``model_name``, ``engine``) exposes
counters, on the wire with a ``_total`` suffix:

- ``vllm:spec_decode_num_drafts_total``: verify steps that carried a draft;
- ``vllm:spec_decode_num_draft_tokens_total``, ``vllm:spec_decode_num_accepted_tokens_total``;
- ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``: drafts whose token
  at position i (0-based) was accepted -- which needs every earlier position accepted, so
  u_i = per_pos[i] / drafts is the *unconditional* P(position i accepted).

The conditional rates SpecSim replays are α_1 = u_1, α_i = u_i / u_{i-1}; vLLM's mean
acceptance length is 1 + accepted / drafts = 1 + Σ u_i. Samples of several engines are
summed; a dump holding several models needs ``model_name``.

SGLang publishes only the mean acceptance length (``sglang:spec_accept_length``: accepted
drafts + the bonus token per verify step, averaged), so the model is the i.i.d. α that
gives it for a chain of the server's ``--speculative-num-steps``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from specdec.errors import UserError

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
VLLM = "vllm:spec_decode_num_"


def read_prometheus(path: Path) -> list[tuple[str, dict[str, str], float, int]]:
    """(metric, labels, value, line number) of every sample in a Prometheus text dump."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{path}: cannot read the metrics file: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file (a Prometheus text dump)") from None
    out, seen = [], {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise UserError(f"{path}: line {n}: not a Prometheus sample 'name{{labels}} "
                            f"value': {line[:60]!r}")
        name, raw, value = m.group(1), m.group(2), m.group(3)
        labels = _labels(raw[1:-1], path, n) if raw else {}
        try:
            v = float(value)
        except ValueError:
            raise UserError(f"{path}: line {n}: {name}: value is not a number, got "
                            f"{value!r}") from None
        series = (name, tuple(sorted(labels.items())))
        if series in seen:  # a dump holds each series once; which one would count?
            raise UserError(f"{path}: line {n}: {name}: the same series as line "
                            f"{seen[series]} (same labels)")
        seen[series] = n
        out.append((name, labels, v, n))
    return out


def _labels(text: str, path, n: int) -> dict[str, str]:
    labels, pos = {}, 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None:
            raise UserError(f"{path}: line {n}: malformed labels {{{text}}}")
        labels[m.group(1)] = m.group(2)
        pos = m.end()
    return labels


def vllm_unconditional_rates(path: Path, model_name: str | None = None
                             ) -> tuple[list[float], dict]:
    """(u_i per position, totals) from a vLLM metrics dump; see the module docstring."""
    samples = [s for s in read_prometheus(path) if s[0].startswith(VLLM)]
    models = {s[1].get("model_name") for s in samples}
    if model_name is not None:
        samples = [s for s in samples if s[1].get("model_name") == model_name]
        if not samples:
            raise UserError(f"{path}: no spec-decode samples for model_name {model_name!r}; "
                            f"the dump has {sorted(m for m in models if m)}")
    elif len(models) > 1:
        raise UserError(f"{path}: spec-decode samples of several models {sorted(models)}: "
                        "give model_name")
    totals = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}
    per_pos: dict[int, float] = {}
    for name, labels, value, n in samples:
        key = name.removeprefix(VLLM).removesuffix("_total")
        if (key in totals or key == "accepted_tokens_per_pos") and not 0 <= value < math.inf:
            raise UserError(f"{path}: line {n}: {name}: a counter, must be a finite number "
                            f">= 0, got {value:g}")
        if key == "accepted_tokens_per_pos":
            try:
                pos = int(labels["position"])
            except (KeyError, ValueError):
                raise UserError(f"{path}: line {n}: {name}: needs an integer position "
                                "label") from None
            per_pos[pos] = per_pos.get(pos, 0.0) + value
        elif key in totals:
            totals[key] += value
    if not totals["drafts"] > 0:
        raise UserError(f"{path}: vllm:spec_decode_num_drafts_total: needs a count > 0 "
                        "(no drafts were measured)")
    if not per_pos or sorted(per_pos) != list(range(len(per_pos))):
        raise UserError(f"{path}: vllm:spec_decode_num_accepted_tokens_per_pos_total: needs "
                        f"positions 0..k-1, got {sorted(per_pos)}")
    rates = [per_pos[i] / totals["drafts"] for i in range(len(per_pos))]
    for i, u in enumerate(rates):
        if not 0 <= u <= 1 or (i and u > rates[i - 1] + 1e-12):
            raise UserError(f"{path}: position {i}: accepted per draft {u:.4g} must lie in "
                            "[0, 1] and not exceed the previous position's (a later token "
                            "is accepted only after the earlier ones)")
    if totals["accepted_tokens"] and not math.isclose(sum(per_pos.values()),
                                                      totals["accepted_tokens"], rel_tol=1e-9):
        raise UserError(f"{path}: the per-position accepted tokens sum to "
                        f"{sum(per_pos.values()):g}, but "
                        f"vllm:spec_decode_num_accepted_tokens_total is "
                        f"{totals['accepted_tokens']:g}")
    return rates, totals


def sglang_accept_length(path: Path) -> float:
    """The latest ``sglang:spec_accept_length`` of a SGLang metrics dump (one series)."""
    values = [v for name, _, v, _ in read_prometheus(path) if name == "sglang:spec_accept_length"]
    if not values:
        raise UserError(f"{path}: no sglang:spec_accept_length sample (start the server with "
                        "--enable-metrics)")
    if len(values) > 1:
        raise UserError(f"{path}: {len(values)} sglang:spec_accept_length series: keep the "
                        "one of the deployment to model")
    return values[0]
