"""Parameter sweeps: the cartesian product of scenario overrides, run in parallel.

A sweep varies dotted scenario keys (the same keys as ``specsim run --set``) over lists of
values, from ``--vary key=v1,v2,...`` flags and/or a ``sweep:`` block in the scenario file::

    sweep:
      vary:
        workload.rate_per_s: [2, 4, 8]
        variants.1.policy.gamma: [2, 4]

The scenario schema (``sim.scenario``) has no ``sweep`` section, so this module removes the
block before validating the rest. A ``--vary`` flag for a key the block also names replaces
the block's values; two ``--vary`` flags for one key are an error. A point that changes a
variant names it after the values in effect (:func:`variant_labels`).

Every point runs with its own seed, derived from the scenario's seed and the point's values
(never from the order points finish in), so the table is the same with 1 worker, N local
processes or a Dask cluster. ``same_seed=True`` gives every point the scenario's seed
instead (common random numbers across points). A point that sets ``run.seed`` itself keeps it.

A bad point is refused in one line naming its value after the file, as ``specsim run`` names
a ``--set``: ``x.yaml (--vary deployment.tp=3): deployment: ...`` (``sweep.vary`` for the
file's block), whether validating or building the scenario found it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from reports.tables import add_speedups, requests_frame, summarize_frames
from sim.limits import MAX_POINTS
from sim.loading import display_path, load_yaml_text, read_yaml, validate_overridden
from sim.pool import in_processes
from sim.runner import build_overridden, run_setups
from specdec.errors import Interrupted, UserError


@dataclass(frozen=True)
class SweepSpec:
    """A base scenario document (no ``sweep`` block), where it came from, and the axes.

    ``zipped=True`` pairs the axes' values position by position (all axes the same length)
    instead of taking their cartesian product: one point per position.
    """

    base: dict
    source: str
    vary: tuple[tuple[str, tuple], ...]
    zipped: bool = False
    # For errors that name their cause: the file's document (no sweep block), the --set
    # overrides that resolved it into ``base``, and where each axis came from (its flag).
    doc: dict | None = None
    sets: tuple[str, ...] = ()
    flags: dict = field(default_factory=dict)

    def points(self) -> list[dict]:
        """Every point: the cartesian product (first axis slowest), or the zipped values."""
        keys = [k for k, _ in self.vary]
        values = [vals for _, vals in self.vary]
        if self.zipped:
            if len({len(v) for v in values}) > 1:
                raise UserError(f"{self.source}: zipped sweep axes differ in length: "
                                + ", ".join(f"{k} has {len(v)}" for k, v in self.vary))
            combos = zip(*values, strict=True)
        else:
            combos = itertools.product(*values)
        return [dict(zip(keys, combo, strict=True)) for combo in combos]


def split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets/braces: ``'1,[2,3],4'`` -> ['1', '[2,3]', '4']."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def parse_vary(text: str) -> tuple[str, tuple]:
    """``'key=v1,v2'`` -> (key, (v1, v2)), each value parsed as YAML (lists in brackets)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip() or not raw.strip():
        raise UserError(f"--vary {text}: expected key=v1,v2,... with a dotted key")
    values = []
    for part in split_top_level(raw):
        if not part.strip():
            raise UserError(f"--vary {text}: empty value in the list")
        try:
            values.append(load_yaml_text(part))
        except yaml.YAMLError:
            raise UserError(f"--vary {text}: value {part!r} is not valid YAML") from None
        except RecursionError:  # as read_yaml: PyYAML's parser recurses once per level
            raise UserError(f"--vary {key.strip()}=...: a value nested too deeply") from None
    return key.strip(), tuple(values)


def load_sweep(path: str | Path, vary: list[str] | None = None,
               overrides: list[str] | None = None) -> SweepSpec:
    """Read a scenario file, take its ``sweep:`` block out, merge ``--vary`` flags."""
    p = Path(path)
    source = display_path(p)
    doc = read_yaml(p)
    block = doc.pop("sweep", None)
    block = {} if block is None else block  # sweep: [] is refused below, not ignored
    axes: dict[str, tuple] = {}
    flags: dict[str, str] = {}
    if not isinstance(block, dict) or not isinstance(block.get("vary", {}), dict) \
            or set(block) - {"vary"}:
        raise UserError(f"{source}: sweep: must be a mapping with one key, vary: {{key: [values]}}")
    for key, values in (block.get("vary") or {}).items():
        if not all(part.strip() for part in str(key).split(".")):
            raise UserError(f"{source}: sweep.vary: {key!r} is not a dotted key")
        if not isinstance(values, list) or not values:
            raise UserError(f"{source}: sweep.vary.{key}: must be a non-empty list, got {values!r}")
        axes[str(key)] = tuple(values)
        flags[str(key)] = "sweep.vary"
    for text in vary or []:
        key, values = parse_vary(text)
        if flags.get(key) == "--vary":  # it would replace the first one's values
            raise UserError(f"--vary {key}: given twice; give all its values in one, "
                            f"--vary {key}=v1,v2,...")
        axes[key] = values
        flags[key] = "--vary"
    if not axes:
        raise UserError(f"{source}: nothing to sweep: give --vary key=v1,v2 or a sweep: block")
    for key, values in axes.items():
        seen = [json.dumps(v, sort_keys=True, default=str) for v in values]
        dup = next((v for v, t in zip(values, seen, strict=True) if seen.count(t) > 1), None)
        if dup is not None:
            where = f"--vary {key}" if flags[key] == "--vary" else f"{source}: sweep.vary.{key}"
            raise UserError(f"{where}: value {dup!r} is repeated (each point would run twice)")
    sets = tuple(overrides or [])
    # Axes apply to the resolved scenario, so they may reach defaults the file leaves out
    # (e.g. variants.1.policy.gamma of the default variants).
    resolved = validate_overridden(doc, list(sets), source).model_dump(mode="json")
    return SweepSpec(resolved, source, tuple(axes.items()), doc=doc, sets=sets, flags=flags)


def point_seed(base_seed: int, point: dict) -> int:
    """A seed in [0, 2**32) from the scenario seed and the point's values (order-free)."""
    digest = hashlib.sha256(json.dumps(point, sort_keys=True, default=str).encode()).digest()
    words = np.frombuffer(digest[:16], dtype=np.uint32)  # [4]
    seq = np.random.SeedSequence([int(base_seed), *(int(w) for w in words)])
    return int(seq.generate_state(1, dtype=np.uint32)[0])


def point_overrides(point: dict) -> list[str]:
    """The ``--set`` texts that realise ``point`` (values as JSON, which is YAML)."""
    return [f"{k}={json.dumps(v)}" for k, v in point.items()]


def variant_labels(base: dict, point: dict) -> dict[str, str]:
    """{variant name: the name the sweep table gives it at ``point``}: a variant whose
    fields the point changes (``variants.<i>.<field>``, the name left as it is) is named
    after the values in effect, so a name that says a value never contradicts the row.
    The old value's text is replaced where the name holds it exactly once as a whole
    number or word (``fixed-g4`` at ``policy.gamma`` 2: ``fixed-g2``); otherwise the
    field and value are appended (``eagle-gamma=2``), and so where replacing would give
    the name of another variant. ``base``: the resolved scenario (every field present)."""
    variants = base.get("variants") or []
    names = [v.get("name") for v in variants]
    labels = {n: n for n in names}
    for key, value in point.items():
        parts = key.split(".")
        if parts[0] != "variants" or len(parts) < 3 or not parts[1].isdigit() \
                or int(parts[1]) >= len(variants) or parts[2] == "name" \
                or f"variants.{parts[1]}.name" in point:
            continue
        name = names[int(parts[1])]
        old = variants[int(parts[1])]
        for k in parts[2:]:
            old = old[int(k)] if isinstance(old, list) and k.isdigit() else \
                old.get(k) if isinstance(old, dict) else None
        before, after = _value_text(old), _value_text(value)
        edge = r"[0-9.]" if isinstance(old, int | float) else r"[A-Za-z0-9]"
        pattern = f"(?<!{edge}){re.escape(before)}(?!{edge})"
        label = labels[name]
        found = list(re.finditer(pattern, label)) if before else []
        renamed = label[:found[0].start()] + after + label[found[0].end():] \
            if len(found) == 1 else None
        others = {labels[n] for n in names if n != name}
        if renamed is None or renamed in others:
            renamed = f"{label}-{parts[-1]}={after}"
        labels[name] = renamed
    return labels


def _value_text(value) -> str:
    """A value as a variant label writes it (YAML/JSON flow style, no spaces)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def run_point(base: dict, source: str, point: dict, same_seed: bool = False,
              doc: dict | None = None, sets: tuple[str, ...] = (),
              flags: dict | None = None) -> list[dict]:
    """Run one point; one row per variant: the point's values, seed, variant and summary.

    A bad point names its value after the file, ``x.yaml (--vary key=value): field: problem``
    (``flags[key]`` instead of ``--vary``; ``sweep.vary`` for the file's block). Given ``doc``
    and ``sets`` (the file's document and the ``--set`` overrides that resolved it into
    ``base``), a problem they brought in is traced to them too.
    """
    texts = point_overrides(point)
    labels = [f"{(flags or {}).get(k, '--vary')} {t}" for k, t in zip(point, texts, strict=True)]
    if doc is None:
        doc, resolve_at = base, None
    else:
        texts, resolve_at = [*sets, *texts], len(sets)
        labels = [*(f"--set {t}" for t in sets), *labels]
    prepare = None
    if "run.seed" not in point and not same_seed:
        seed = point_seed(validate_overridden(doc, texts, source, labels, resolve_at).run.seed,
                          point)

        def prepare(sc):
            return sc.model_copy(update={"run": sc.run.model_copy(update={"seed": seed})})

    scenario, built = build_overridden(doc, texts, source, labels, resolve_at, prepare)
    result = run_setups(scenario, built, iteration_rows=False)  # rows summarised, not kept
    slo = scenario.slo.model_dump()
    rows = [summarize_frames(v.name, requests_frame(v.requests), asdict(v.totals),
                             v.end_at, slo) for v in result.variants]
    kinds = {v.name: v.policy.kind for v in scenario.variants}
    base_name = next((n for n, k in kinds.items() if k == "none"), None)
    table = add_speedups(pd.DataFrame(rows), base_name)
    table.insert(0, "variant", table.pop("name"))
    table.insert(1, "policy", [kinds[n] for n in table["variant"]])
    shown = variant_labels(base, point)
    table["variant"] = [shown.get(n, n) for n in table["variant"]]
    table.insert(0, "seed", scenario.run.seed)
    for i, (k, v) in enumerate(point.items()):
        table.insert(i, k, [v if not isinstance(v, list | dict) else json.dumps(v)] * len(table))
    return table.to_dict("records")


class SweepInterrupted(Interrupted):
    """Ctrl-C or SIGTERM midway through a sweep; the message says which points had
    finished, ``table`` holds their rows (in point order, as ``run_sweep`` returns them),
    ``finished`` their indices and ``points`` how many the sweep has."""

    def __init__(self, message: str, table: pd.DataFrame, finished: list[int],
                 points: int) -> None:
        super().__init__(message)
        self.table, self.finished, self.points = table, finished, points


def run_sweep(spec: SweepSpec, workers: int = 1, scheduler: str | None = None,
              same_seed: bool = False, progress: Callable[[], None] | None = None
              ) -> pd.DataFrame:
    """Run every point; one combined table in point order, whatever ran where.

    ``workers`` > 1 uses that many local processes; ``scheduler`` (a Dask scheduler address,
    or a ``dask.distributed.Client``) runs the points on that cluster. ``progress()`` is called
    once per finished point. An interrupt raises ``SweepInterrupted`` with the finished
    points' rows, so that what finished can still be written.
    """
    if workers < 1:
        raise UserError(f"--workers: must be >= 1, got {workers}")
    points = spec.points()
    if len(points) > MAX_POINTS:
        raise UserError(f"{spec.source}: the sweep has {len(points)} points; at most "
                        f"{MAX_POINTS} (split it, or vary fewer values)")
    args = [(spec.base, spec.source, p, same_seed, spec.doc, spec.sets, spec.flags)
            for p in points]
    results: list = [None] * len(args)
    try:
        if scheduler is not None:
            _on_dask(scheduler, args, progress, results)
        elif workers == 1:
            for i, a in enumerate(args):
                results[i] = run_point(*a)
                if progress:
                    progress()
        else:
            _on_processes(workers, args, progress, results)
    except KeyboardInterrupt:
        done = [i for i, r in enumerate(results) if r is not None]
        raise SweepInterrupted(
            f"{len(done)} of {len(args)} sweep points had finished"
            + (f" (points {', '.join(map(str, done[:20]))}{' ...' if len(done) > 20 else ''})"
               if done else ""),
            pd.DataFrame([row for rows in results if rows is not None for row in rows]),
            done, len(args)) from None
    return pd.DataFrame([row for rows in results for row in rows])


def _on_processes(workers: int, args: list[tuple], progress, results: list) -> list:
    def done(i: int, rows) -> None:
        results[i] = rows
        if progress:
            progress()

    in_processes(run_point, args, workers, done)
    return results


def _on_dask(scheduler, args: list[tuple], progress, results: list) -> list:
    from dask.distributed import Client, as_completed

    own = not isinstance(scheduler, Client)
    try:
        client = Client(scheduler) if own else scheduler
    except (OSError, ValueError) as e:  # ValueError: an address Dask cannot parse ('')
        raise UserError(f"--scheduler {scheduler!r}: cannot connect: {e}") from None
    try:
        futures = [client.submit(run_point, *a, pure=False) for a in args]
        index = {f.key: i for i, f in enumerate(futures)}
        for fut in as_completed(futures):
            results[index[fut.key]] = fut.result()
            if progress:
                progress()
        return results
    finally:
        if own:
            client.close()
