"""The search space of ``specsim plan``: a candidates file's ``search:`` section, expanded
into named candidates.

```yaml
search:
  gpus: [h100, h200]        # with tp: every GPU x TP is a deployment, named h100-tp1 ...
  tp: [1, 2]
  # or named deployments, each a set of dotted scenario overrides:
  # deployments: [{name: big, set: {deployment.gpu: h200, deployment.tp: 2}}]
  set: {scheduler.max_num_seqs: 128}   # optional: applied to every deployment
  methods:                  # drafting methods by name: the drafter and the acceptance
    eagle3: {drafter: {method: eagle3}, acceptance: {kind: preset, name: ...}}
    draft: {}               # {}: the scenario's own models.method, draft and acceptance
  k: [1, 2, 3, 4]           # draft lengths (a chain's K, a controller's largest; default
                            # [2, 3, 4])
  trees: [[2, 1, 1]]        # expansion trees <k1..km>, drafted every step
  controllers: [fixed, vllm_ladder, trtllm, sglang_adaptive, adaptive]   # default [fixed]
  off_above: [32, 64]       # vllm_ladder, trtllm: speculation off above this batch size
```

``controllers`` may instead map each name to its own ``k`` and ``off_above`` (unset: the
section's): ``{fixed: {k: [1, 2]}, vllm_ladder: {k: [3], off_above: [32]}, adaptive:}``.

Every deployment gets one candidate without speculation (``<deployment>-off``): the
baseline a speculative candidate's crossover is measured against. Each method then runs
under each controller:

- ``fixed``: a chain of K every step, for each K (vLLM ``num_speculative_tokens``, SGLang
  ``--speculative-num-steps``, TensorRT-LLM ``max_draft_len``); and each tree;
- ``vllm_ladder``: vLLM's ``num_speculative_tokens_per_batch_size`` ``[[1, n, K], [n+1,
  max_num_seqs, 0]]`` for each K and each n of ``off_above`` below ``max_num_seqs``, as
  ``--from-vllm`` reads it back; only for methods whose K vLLM varies
  (``sim.engines.vllm.DYNAMIC_SD_METHODS``);
- ``trtllm``: TensorRT-LLM's ``max_draft_len`` K with ``max_concurrency`` n (off above n
  active requests), for methods TensorRT-LLM drafts with;
- ``sglang_adaptive``: SGLang's ``--speculative-adaptive`` with its default slots (one
  candidate per method; SGLang adapts only EAGLE and EAGLE-3, so only those);
- ``adaptive``: SpecSim's goodput-maximising γ up to K (no engine has it: its configs
  draft a fixed chain of K, and say so).

Combinations an engine cannot run (a ladder that never turns off, a controller for a method
it does not draft with) are left out, and the expansion says how many (``Space.skipped``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, model_validator

from sim.drafters import TRAITS
from sim.engines.vllm import DYNAMIC_SD_METHODS
from sim.kinds.base import Gamma, PosInt, Shape, Strict
from sim.loading import format_error
from sim.scenario import Name
from sim.studies.plan import Candidate
from specdec.errors import UserError

CONTROLLERS = ("fixed", "vllm_ladder", "trtllm", "sglang_adaptive", "adaptive")
MAX_CANDIDATES = 5000  # a space larger than this is refused before anything runs
SGLANG_ADAPTS = ("eagle", "eagle3")  # SGLang 0.5.14 adapts the steps of these only


class Deployment(Strict):
    """A named deployment: dotted scenario overrides."""

    name: Name
    set: dict[str, object] = Field(default_factory=dict)


class Method(Strict):
    """A drafting method: its drafter and acceptance (a scenario variant's fields; unset:
    the scenario's)."""

    drafter: dict | None = None
    acceptance: dict | None = None


Controller = Literal[CONTROLLERS]


class ControllerOptions(Strict):
    """A controller's own draft lengths and thresholds (unset: the section's)."""

    k: Annotated[list[Gamma], Field(min_length=1)] | None = None
    off_above: Annotated[list[PosInt], Field(min_length=1)] | None = None


class Search(Strict):
    """The ``search:`` section (see the module docstring)."""

    gpus: Annotated[list[str], Field(min_length=1)] | None = None
    tp: Annotated[list[PosInt], Field(min_length=1)] | None = None
    deployments: Annotated[list[Deployment], Field(min_length=1)] | None = None
    set: dict[str, object] = Field(default_factory=dict)
    methods: Annotated[dict[Name, Method], Field(min_length=1)]
    k: Annotated[list[Gamma], Field(min_length=1)] = [2, 3, 4]
    trees: list[Shape] = Field(default_factory=list)
    # names (each with the section's k and off_above), or names with their own
    controllers: Annotated[list[Controller], Field(min_length=1)] | \
        Annotated[dict[Controller, ControllerOptions | None], Field(min_length=1)] = ["fixed"]
    off_above: list[PosInt] = Field(default_factory=list)

    def options(self) -> dict[str, tuple[list[int], list[int]]]:
        """{controller: (its draft lengths, its off_above batch sizes)}."""
        given = self.controllers if isinstance(self.controllers, dict) else \
            dict.fromkeys(self.controllers)
        return {c: ((o and o.k) or self.k, (o and o.off_above) or self.off_above)
                for c, o in given.items()}

    @model_validator(mode="after")
    def _consistent(self):
        if self.deployments is not None and (self.gpus or self.tp):
            raise ValueError("deployments: give deployments or gpus and tp, not both")
        for key in ("k", "off_above", "controllers", "gpus", "tp"):
            values = getattr(self, key)
            if isinstance(values, list) and len(set(values)) != len(values):
                raise ValueError(f"{key}: a value given twice in {values}")
        for c, (ks, offs) in self.options().items():
            if len(set(ks)) != len(ks) or len(set(offs)) != len(offs):
                raise ValueError(f"controllers: {c}: a value given twice in {ks} or {offs}")
            if c in ("vllm_ladder", "trtllm") and not offs:
                raise ValueError(f"off_above: {c} needs the batch sizes above which it turns "
                                 "speculation off")
        names = [d.name for d in self.deployments or []]
        if len(set(names)) != len(names):
            raise ValueError(f"deployments: names must be unique, got {names}")
        return self


@dataclass(frozen=True)
class Point:
    """Where a candidate sits in the space."""

    deployment: str
    method: str | None  # None: the deployment's baseline, no speculation
    controller: str  # 'off' or one of CONTROLLERS
    k: int | None = None
    off_above: int | None = None
    tree: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Space:
    """The expanded search: candidates with their points, and what was left out."""

    candidates: list[Candidate]
    points: list[Point]
    deployments: list[str]
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count

    def baseline(self, deployment: str) -> Candidate:
        """The deployment's candidate without speculation."""
        return next(c for c, p in zip(self.candidates, self.points, strict=True)
                    if p.deployment == deployment and p.method is None)


def parse_search(section, src: str) -> Search:
    """The validated ``search:`` section of file ``src``; a problem is one line naming
    the field (``cands.yaml: search.k: ...``)."""
    if not isinstance(section, dict):
        raise UserError(f"{src}: search: must be a mapping, got {section!r}")
    try:
        return Search.model_validate(section)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = format_error({**err, "loc": ()}).removeprefix("scenario: ")
        if err["type"] == "value_error":  # our validator names its field in the message
            raise UserError(f"{src}: search.{msg}") from None
        raise UserError(f"{src}: search.{loc}: {msg}") from None


def _deployments(s: Search, base: dict) -> list[tuple[str, dict]]:
    if s.deployments is not None:
        return [(d.name, {**s.set, **d.set}) for d in s.deployments]
    gpus = s.gpus or [base["deployment"]["gpu"]]
    tps = s.tp or [base["deployment"]["tp"]]
    return [(f"{g}-tp{t}", {**s.set, "deployment.gpu": g, "deployment.tp": t})
            for g in gpus for t in tps]


def _policies(ctl: str, ks: list[int], offs: list[int], trees: list, method: str,
              top: int, skip) -> list[tuple[str, dict, dict]]:
    """(name tag, policy, point fields) of controller ``ctl`` with draft lengths ``ks`` and
    thresholds ``offs`` (and ``trees``, drafted by ``fixed``) for drafting method ``method``
    on a deployment of ``top`` = ``max_num_seqs``; ``skip(reason)`` for each combination
    left out."""
    if ctl == "sglang_adaptive":
        if method in SGLANG_ADAPTS:
            return [("sglang-adaptive", {"kind": "sglang_adaptive"}, {})]
        skip(f"sglang_adaptive: SGLang adapts only {', '.join(SGLANG_ADAPTS)}")
        return []
    if ctl == "fixed":
        return [("tree" + "-".join(map(str, t)), {"kind": "tree", "expansion": list(t)},
                 {"tree": tuple(t)}) for t in trees] + \
            [(f"k{k}", {"kind": "fixed", "gamma": k}, {"k": k}) for k in ks]
    if ctl == "adaptive":
        return [(f"adaptive-k{k}", {"kind": "adaptive", "max_gamma": k}, {"k": k}) for k in ks]
    if ctl == "trtllm" and not TRAITS[method].trtllm:
        skip(f"trtllm: TensorRT-LLM has no decoding type for {method}")
        return []
    if ctl == "vllm_ladder" and method not in DYNAMIC_SD_METHODS:
        skip(f"vllm_ladder: vLLM does not vary K for {method}")
        return []
    out = []
    for k in ks:
        for n in offs:
            if n >= top:
                skip(f"{ctl} off above {n}: never off (max_num_seqs {top})")
            elif ctl == "trtllm":
                out.append((f"trtllm-k{k}-off{n}",
                            {"kind": "trtllm", "max_draft_len": k, "max_concurrency": n},
                            {"k": k, "off_above": n}))
            else:
                out.append((f"ladder-k{k}-off{n}",
                            {"kind": "batch_ladder", "ladder": [[1, n, k], [n + 1, top, 0]],
                             "num_speculative_tokens": k}, {"k": k, "off_above": n}))
    return out


def expand(s: Search, base: dict, src: str) -> Space:
    """Every candidate of ``s`` over the resolved scenario ``base`` (its ``models.method``
    for methods that name no drafter, its ``scheduler.max_num_seqs`` for ladders)."""
    cands, points, skipped = [], [], {}

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    deployments = _deployments(s, base)
    for dep, sets in deployments:
        cands.append(Candidate(f"{dep}-off", dict(sets), {"kind": "none"},
                               f"{src} search deployment {dep}"))
        points.append(Point(dep, None, "off"))
        top = int(sets.get("scheduler.max_num_seqs", base["scheduler"]["max_num_seqs"]))
        for mname, m in s.methods.items():
            method = (m.drafter or {}).get("method", base["models"]["method"])
            if method not in TRAITS:
                raise UserError(f"{src}: search.methods.{mname}.drafter.method: one of "
                                f"{', '.join(TRAITS)}, got {method!r}")
            variant = {k: v for k, v in (("drafter", m.drafter), ("acceptance", m.acceptance))
                       if v is not None}
            for ctl, (ks, offs) in s.options().items():
                for tag, policy, fields in _policies(ctl, ks, offs, s.trees, method, top, skip):
                    cands.append(Candidate(f"{dep}-{mname}-{tag}", dict(sets), policy,
                                           f"{src} search.methods.{mname} on {dep} ({tag})",
                                           dict(variant)))
                    points.append(Point(dep, mname, ctl, **fields))
    names = [c.name for c in cands]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise UserError(f"{src}: search: candidate names {twice} come out twice (a "
                        f"deployment's and a method's names run together): rename one")
    if len(cands) > MAX_CANDIDATES:
        raise UserError(f"{src}: search: expands to {len(cands)} candidates; at most "
                        f"{MAX_CANDIDATES}")
    return Space(cands, points, [d for d, _ in deployments], skipped)


def load_search(path: str | Path, base: dict) -> Space | None:
    """The expanded ``search:`` of the candidates file at ``path`` (None if it has none)."""
    from sim.loading import display_path, read_yaml

    p = Path(path)
    src = display_path(p)
    doc = read_yaml(p, "candidates file")
    if "search" not in doc:
        return None
    if "candidates" in doc:
        raise UserError(f"{src}: give candidates or search, not both")
    return expand(parse_search(doc["search"], src), base, src)
