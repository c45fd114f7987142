"""docs/ and README.md: every ``specsim`` command they print runs as written, and prints
the numbers they show.

A command is run through ``sim.cli.main`` with its own arguments; only an ``--out`` it
writes a folder or file to is pointed into ``tmp_path`` (and given where the command would
write under ``runs/`` by default), so nothing is reduced. Its stdout is compared with the
doc's output block (the unlabelled block right after the command, or after a sentence that
introduces it) by :func:`mismatches`:

- every line the doc shows must be printed, in the doc's order; ``...`` in a line (or a
  line of its own) stands for text the doc leaves out, ``<name>`` for a path part that
  changes per run (a time stamp);
- **tolerance**: every number the doc shows equals the printed one *to the digits the doc
  shows*: |doc - printed| <= half a unit in the doc's last digit. An output block pasted
  from a run therefore matches exactly (the runs are seeded and deterministic); a number
  the prose rounds (``1.74×`` for 1.739) matches its rounding, and no other. A changed
  digit anywhere fails (``test_a_changed_digit_in_any_doc_block_fails``).

Numbers the prose quotes from a command's output are checked the same way (``_quoted``).

Left out, and why (``LEFT_OUT``; ``test_every_doc_command_is_checked_or_left_out`` keeps
this list and the docs in step):

- ``specsim sweep ... --scheduler tcp://10.0.0.5:8786`` (how-to/sweep-on-a-cluster.md):
  needs a running Dask scheduler at that address.
- ``specsim calibrate my_steps.csv --out my_gpu.yaml`` (timing.md): needs the reader's own
  measured step times.

The README's ``pip install -e . && specsim run`` is the tutorial's first command (checked
to be the same; the install is not run), and its figure caption's ``specsim grid`` is run.
The tutorial's grid tables are also compared whole by ``test_docs.py``, and its Python
snippet runs in ``test_docs.py::test_the_tutorials_python_runs_on_a_run_folder``; it is the
docs' only ``python`` block (checked below).

Commands written inline in prose are not inventoried. The ones whose figures timing.md
quotes in the sections on FP8 scales, MoE experts and the Blackwell GPUs are run below; its
other inline commands (the validation and calibration figures) are not checked here.

Marked slow, to keep the default run near 25 s on two cores: the plans (about 10 s alone,
more from a cold cache; the P/D ratio plan about 2.5 minutes) and the two 200-candidate
searches of choose-a-speculation-setup.md (about a minute each), the three claims commands
(about 35 s), the runs that show no output (the Mooncake replay, two sweeps, the
write-a-scenario runs: 3 to 7 s each) and timing.md's B200 table and served runs (4 s
each). Every test runs under pytest-timeout: the project's 120 s, or the longer limit
marked on a slow one.
"""

from __future__ import annotations

import re
import shlex
from decimal import Decimal

import pytest

from sim.cli import main
from sim.loading import repo_root

ROOT = repo_root()
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]

# Doc commands that are not run, by a part of their command line (see the docstring).
LEFT_OUT = {
    r"--scheduler tcp://": "needs a Dask scheduler",
    r"calibrate my_steps\.csv": "needs the reader's measured step times",
}

# Every doc command, as (page, a regular expression its line matches): run by a test
# below, or in LEFT_OUT.
COMMANDS = {
    ("docs/tutorial.md", r"^specsim run$"),
    ("docs/tutorial.md", r"workload\.rate_per_s=8,32,64,96"),
    ("docs/tutorial.md", r"--contexts 128,1024 --timing paper"),
    ("docs/tutorial.md", r"--tree k,1,1,1"),
    ("docs/tutorial.md", r"--method eagle3"),
    ("docs/tutorial.md", r"batch_ladder"),
    ("README.md", r"&& specsim run$"),
    ("docs/how-to/plan-capacity.md", r"^specsim plan scenarios/plan-llama70b"),
    ("docs/how-to/plan-capacity.md", r"^specsim plan scenarios/pd-deepseek"),
    ("docs/how-to/choose-a-speculation-setup.md", r"--top 10$"),
    ("docs/how-to/choose-a-speculation-setup.md", r"tpot_p99=30ms$"),
    ("docs/how-to/simulate-an-engine-deployment.md", r'--from-vllm "\$SERVE"'),
    ("docs/how-to/simulate-an-engine-deployment.md", r'--from-vllm "\$FORCED"'),
    ("docs/how-to/simulate-an-engine-deployment.md", r"--from-sglang"),
    ("docs/how-to/simulate-an-engine-deployment.md", r'--from-trtllm "\$TRT"'),
    ("docs/how-to/replay-a-public-trace.md", r"^specsim run scenarios/mooncake-trace\.yaml$"),
    ("docs/how-to/replay-a-public-trace.md", r"workload\.time_scale=1,2,4"),
    ("docs/how-to/record-a-trace.md", r"--out runs/my-trace\.npz"),
    ("docs/how-to/record-a-trace.md", r"--k-max 5"),
    ("docs/how-to/check-paper-claims.md", r"^specsim claims #"),
    ("docs/how-to/check-paper-claims.md", r"--only leviathan"),
    ("docs/how-to/check-paper-claims.md", r"--quick"),
    ("docs/how-to/sweep-on-a-cluster.md", r"--out runs/gamma-vs-load"),
    ("docs/how-to/sweep-on-a-cluster.md", r"--scheduler tcp://"),
    ("docs/how-to/write-a-scenario.md", r"# the summary table"),
    ("docs/how-to/write-a-scenario.md", r"--set workload\.cv=1"),
    ("docs/timing.md", r"calibrate my_steps\.csv"),
}


# --- reading the docs -------------------------------------------------------------------

def _fences(text: str):
    """(language, body, text before the fence since the previous one) per fenced block."""
    end = 0
    for m in re.finditer(r"^ *```(\w*)\n(.*?)^ *```\n", text, flags=re.S | re.M):
        yield m.group(1), m.group(2), text[end:m.start()]
        end = m.end()


def _shell_lines(body: str) -> list[str]:
    """A bash block's commands: continued lines joined, a quote open over lines kept whole."""
    lines, buf = [], ""
    for line in body.replace("\\\n", " ").splitlines():
        buf = f"{buf}\n{line}" if buf else line
        try:
            shlex.split(buf, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        lines.append(buf)
        buf = ""
    assert not buf, f"unclosed quote: {buf}"
    return lines


def doc_commands(page) -> list[tuple[str, list[str], str | None]]:
    """Each ``specsim`` command in the page's bash blocks: (the line as written, its argv
    after ``specsim`` with the block's shell variables substituted, the output block shown
    after it or None). Shell variables carry over from one block to the next, as in a
    terminal."""
    env: dict[str, str] = {}
    found: list[tuple[str, list[str], str | None]] = []
    pending: list[tuple[str, list[str]]] = []
    for lang, body, before in _fences(page.read_text()):
        # The output block: right after the command, or after one paragraph ending in ':'.
        intro = before.strip()
        shown = (body if lang == "" and pending
                 and (not intro or ("\n\n" not in intro and intro.endswith(":"))) else None)
        found += [(line, argv, shown if i == len(pending) - 1 else None)
                  for i, (line, argv) in enumerate(pending)]
        pending = []
        if lang != "bash":
            continue
        for line in _shell_lines(body):
            m = re.fullmatch(r"([A-Z_]+)=(.*)", line.strip(), flags=re.S)
            if m:
                env[m.group(1)] = shlex.split(m.group(2))[0]
                continue
            for part in line.split("&&"):
                if part.strip().startswith("specsim "):
                    sub = re.sub(r'"\$([A-Z_]+)"', lambda v: shlex.quote(env[v.group(1)]), part)
                    pending.append((" ".join(line.split()),
                                    shlex.split(sub, comments=True)[1:]))
    return found + [(line, argv, None) for line, argv in pending]


def _command(page: str, part: str) -> tuple[list[str], str | None]:
    """The argv and shown output of the one command on ``page`` whose line matches the
    regular expression ``part``."""
    hits = [(argv, shown) for line, argv, shown in doc_commands(ROOT / page)
            if re.search(part, line)]
    assert len(hits) == 1, (page, part, len(hits))
    return hits[0]


# --- comparing numbers ------------------------------------------------------------------

_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_TOKEN = re.compile(rf"(?P<skip>\.\.\.|<[\w-]+>)|(?P<num>(?<![\w.]){_NUMBER})|(?P<space>\s+)")


def _template(line: str) -> tuple[re.Pattern, list[str]]:
    """A doc line as a pattern (numbers as groups, ``...`` and ``<name>`` as any text) and
    the numbers it shows, as written."""
    parts, numbers, end = [], [], 0
    for m in _TOKEN.finditer(line):
        parts.append(re.escape(line[end:m.start()]))
        if m.group("skip"):
            parts.append(".*?")
        elif m.group("num"):
            parts.append(f"({_NUMBER})")
            numbers.append(m.group("num"))
        else:
            parts.append(r"\s+")
        end = m.end()
    parts.append(re.escape(line[end:]))
    if re.search(r"\.\.\.\)?$", line):
        parts.append(".*")  # "..." or "(...)" ends the line: what follows is left out too
    return re.compile("".join(parts)), numbers


def _agrees(shown: str, printed: str, rel: float = 0.0) -> bool:
    """``printed`` rounds to ``shown`` at the doc's digits (or is within ``rel`` of it)."""
    half_unit = Decimal(5) * Decimal(10) ** (Decimal(shown).as_tuple().exponent - 1)
    diff = abs(Decimal(shown) - Decimal(str(printed)))
    return diff <= half_unit or diff <= Decimal(str(rel)) * abs(Decimal(printed))


def mismatches(shown: str, printed: str, rel: float = 0.0) -> list[str]:
    """What of the doc's ``shown`` output ``printed`` does not bear out: each doc line is
    looked for among the printed lines after the last one found, as the first line of the
    same text whose numbers agree (``_agrees``); [] when all are found."""
    lines = [ln.strip() for ln in printed.splitlines()]
    problems, at = [], 0
    for want in (ln.strip() for ln in shown.splitlines()):
        if not want or want == "...":
            continue
        pattern, numbers = _template(want)
        same_text = [(i, m) for i in range(at, len(lines))
                     if (m := pattern.fullmatch(lines[i]))]
        good = [i for i, m in same_text
                if all(_agrees(n, g, rel) for n, g in zip(numbers, m.groups(), strict=True))]
        if good:
            at = good[0] + 1
        elif same_text:
            i, m = same_text[0]
            problems.append(f"doc: {want}\nran: {lines[i]}")
            at = i + 1
        else:
            problems.append(f"doc: {want}\nran: (no such line)")
    return problems


def _quoted(page: str, phrase: str) -> list[str]:
    """The numbers the prose of ``page`` writes where ``phrase`` has ``{}`` (whitespace and
    line breaks as one space, thousands commas dropped); the phrase must occur once."""
    text = " ".join((ROOT / page).read_text().split())
    pattern = re.escape(phrase).replace(r"\{\}", r"(-?\d[\d,]*(?:\.\d+)?)")
    hits = re.findall(pattern, text)
    assert len(hits) == 1, (page, phrase, hits)
    found = hits[0] if isinstance(hits[0], tuple) else (hits[0],)
    return [n.replace(",", "") for n in found]


def _cells(printed: str, label: str) -> list[str]:
    """The numbers on the printed line that starts with ``label``, after it."""
    line = next(" ".join(ln.split()) for ln in printed.splitlines()
                if " ".join(ln.split()).startswith(label))
    return re.findall(rf"(?<![\w.]){_NUMBER}", line[len(label):])


def _check_quotes(page: str, quotes: dict[str, list]) -> None:
    """Each phrase's numbers in the prose agree with the printed ones given for it."""
    for phrase, values in quotes.items():
        doc = _quoted(page, phrase)
        assert len(doc) == len(values), (phrase, doc, values)
        bad = [(d, v) for d, v in zip(doc, values, strict=True) if not _agrees(d, v)]
        assert not bad, f"{page}: {phrase!r}: doc, printed: {bad}"


# --- running ----------------------------------------------------------------------------

def _run(argv: list[str], capsys, monkeypatch, out=None, shown_out: str | None = None,
         cwd=ROOT) -> str:
    """Run ``argv`` (its ``--out`` replaced by ``out``, or ``--out out`` added where the
    command writes a folder by default) from ``cwd``; its stdout, with ``out`` written as
    ``shown_out``."""
    argv = list(argv)
    if out is not None:
        if "--out" in argv:
            argv[argv.index("--out") + 1] = str(out)
        else:
            argv += ["--out", str(out)]
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    assert main(argv) == 0, argv
    printed = capsys.readouterr().out
    return printed.replace(str(out), shown_out) if shown_out else printed


def _run_and_compare(page, part, tmp_path, capsys, monkeypatch, shown_out=None) -> str:
    argv, shown = _command(page, part)
    assert shown, (page, part, "shows no output")
    printed = _run(argv, capsys, monkeypatch, tmp_path / "out", shown_out)
    problems = mismatches(shown, printed)
    assert not problems, f"{page}: {part}:\n" + "\n".join(problems)
    return printed


# --- the comparison itself ----------------------------------------------------------------

def _shown_blocks():
    for page in PAGES:
        for line, _, shown in doc_commands(page):
            if shown:
                yield pytest.param(shown, id=f"{page.relative_to(ROOT)}:{line[:40]}")


@pytest.mark.parametrize("shown", list(_shown_blocks()))
def test_a_changed_digit_in_any_doc_block_fails(shown):
    """A copy of the block with any one number's last digit changed no longer agrees with
    the block; the block itself does."""
    assert mismatches(shown, shown) == []
    numbers = list(_TOKEN.finditer(shown))
    changed = 0
    for m in numbers:
        if not m.group("num"):
            continue
        i = m.end("num") - 1
        digit = "1" if shown[i] != "1" else "2"
        assert mismatches(shown[:i] + digit + shown[i + 1:], shown), (m.group(0), shown)
        changed += 1
    assert changed > 3


def test_mismatches_reads_excerpts_and_rounding():
    printed = "a 1.2345 b\nc 7\nTPOT (ms) 9.61 / 10.5\ntiming: x (long text); more\n"
    assert mismatches("a 1.23 b\n...\ntiming: x (...)\n", printed) == []
    assert mismatches("TPOT (ms) 9.6 / 10.5", printed) == []
    assert mismatches("TPOT (ms) 9.7 / 10.5", printed)
    assert mismatches("c 7\na 1.2345 b", printed)  # out of order
    assert mismatches("d 7", printed)
    assert _agrees("1.74", "1.7449") and not _agrees("1.74", "1.7451")
    assert _agrees("1.74", "1.7451", rel=0.01)


def test_every_doc_command_is_checked_or_left_out():
    """A command added to a doc needs a test here (or a reason in LEFT_OUT); so does every
    Python snippet."""
    seen = set()
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        for line, _, _ in doc_commands(page):
            keys = {(p, part) for p, part in COMMANDS if p == name and re.search(part, line)}
            assert len(keys) == 1, (name, line, keys)
            seen |= keys
    assert seen == COMMANDS, COMMANDS - seen
    assert all(any(part == k for _, k in COMMANDS) for part in LEFT_OUT)
    snippets = [(page.name, block) for page in PAGES
                for lang, block, _ in _fences(page.read_text()) if lang == "python"]
    assert snippets and all(name == "tutorial.md" and "runs/default-<timestamp>" in block
                            for name, block in snippets), snippets


# --- the tutorial -------------------------------------------------------------------------

TUTORIAL = "docs/tutorial.md"


def test_tutorial_run(tmp_path, capsys, monkeypatch):
    printed = _run_and_compare(TUTORIAL, r"^specsim run$", tmp_path, capsys, monkeypatch,
                               shown_out="runs/default-<timestamp>")
    mean, p99 = (_cells(printed, f"speedup vs none ({k} TPOT)")[1] for k in ("mean", "p99"))
    _check_quotes(TUTORIAL, {
        "speculation cuts the mean time per output token by {}× (the p99 by {}×)": [mean, p99]})
    # The README's quick start runs the same command.
    assert _command("README.md", r"&& specsim run$")[0] == _command(TUTORIAL, r"^specsim run$")[0]


def test_tutorial_sweep(tmp_path, capsys, monkeypatch):
    printed = _run_and_compare(TUTORIAL, r"rate_per_s=8,32,64,96", tmp_path, capsys,
                               monkeypatch)
    goodput = {f"{r} {v}": _cells(printed, f"{r} {v}")[5] for r in (32, 64, 96)
               for v in ("none", "fixed-g4")}  # goodput_requests_per_s
    _check_quotes(TUTORIAL, {
        "The gain shrinks with the load: {}× at 8 requests/s, {}× at 32":
            [_cells(printed, "8 fixed-g4")[-1], _cells(printed, "32 fixed-g4")[-1]],
        "and {}× past 64, where the replica is overloaded": [_cells(printed, "64 fixed-g4")[-1]],
        "rising with speculation at 32 requests/s ({} → {}) and falling from 64 on ({} → {}, "
        "{} → {} at 96)": list(goodput.values())})


def test_tutorial_grid_on_the_paper_gpu(tmp_path, capsys, monkeypatch):
    printed = _run_and_compare(TUTORIAL, r"--contexts 128,1024 --timing paper", tmp_path,
                               capsys, monkeypatch)
    _check_quotes(TUTORIAL, {
        "at small batch γ = 4 gives {}×": [_cells(printed, "1 128")[1]],
        "so speculation still pays there ({}× at batch 256, context 1024)":
            [_cells(printed, "256 1024")[1]]})


def test_readme_grid_caption(tmp_path, capsys, monkeypatch):
    """The README's figure caption gives its command and the speedup at small batch."""
    text = (ROOT / "README.md").read_text()
    (command,) = re.findall(r"\*`(specsim grid [^`]*)`", text)
    printed = _run(command.split()[1:], capsys, monkeypatch, tmp_path / "out")
    _check_quotes("README.md", {"pays ≈{}× at small batch": [_cells(printed, "1 128")[1]]})


def test_tutorial_tree_grid_runs(tmp_path, capsys, monkeypatch):
    argv, shown = _command(TUTORIAL, r"--tree k,1,1,1")
    assert shown is None
    assert "speedup" in _run(argv, capsys, monkeypatch, tmp_path / "out")


def test_tutorial_eagle3_grid(tmp_path, capsys, monkeypatch):
    printed = _run_and_compare(TUTORIAL, r"--method eagle3", tmp_path, capsys, monkeypatch)
    row = _cells(printed, "1 128")
    _check_quotes(TUTORIAL, {
        "so at this α the best γ there is {}, at {}×": row[:2]})


def test_tutorial_ladder_and_adaptive(tmp_path, capsys, monkeypatch):
    argv, shown = _command(TUTORIAL, r"batch_ladder")
    printed = _run(argv, capsys, monkeypatch, tmp_path / "out")
    speedups = _cells(printed, "speedup vs none (mean TPOT)")
    _check_quotes(TUTORIAL, {
        "gives mean-TPOT speedups of {}× (ladder) and {}× (adaptive) at 64 requests/s":
            speedups[1:]})


# --- how-to guides ------------------------------------------------------------------------

PLAN = "docs/how-to/plan-capacity.md"
ENGINE = "docs/how-to/simulate-an-engine-deployment.md"
REPLAY = "docs/how-to/replay-a-public-trace.md"
TRACE = "docs/how-to/record-a-trace.md"
CLAIMS = "docs/how-to/check-paper-claims.md"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_plan_capacity(tmp_path, capsys, monkeypatch):
    printed = _run_and_compare(PLAN, r"^specsim plan scenarios/plan-llama70b", tmp_path,
                               capsys, monkeypatch, shown_out="runs/plan-plan-llama70b-<time>")
    # rank, candidate, gpu, gpus, policy, max_rate_per_s
    rate = dict(re.findall(r"^[* ] +\d+ +(\S+) +\S+ +\d+ +\S+ +(\S+)", printed, flags=re.M))
    _check_quotes(PLAN, {
        "the adaptive policy, which drafts less as the batch grows, sustains {} requests/s":
            [rate["h100-tp4-adaptive"]],
        "a fixed chain of 4 sustains {}, against {} without speculation":
            [rate["h100-tp4-chain4"], rate["h100-tp4-none"]],
        "({} and {} against {} on the H200 TP2)":
            [rate["h200-tp2-adaptive"], rate["h200-tp2-chain4"], rate["h200-tp2-none"]]})


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_plan_a_pd_ratio(tmp_path, capsys, monkeypatch):
    printed = _run_and_compare(PLAN, r"^specsim plan scenarios/pd-deepseek", tmp_path,
                               capsys, monkeypatch,
                               shown_out="runs/plan-pd-deepseek-v3-mtp-<time>")
    # rank, candidate, gpu, gpus, [pd,] policy, max_rate_per_s
    rate = dict(re.findall(r"^[* ] +\d+ +(\S+) +\S+ +\d+ +(?:\d+:\d+ +)?\S+ +(\S+)", printed,
                           flags=re.M))
    assert float(rate["1p1d-mtp"]) < float(rate["1p2d-mtp"])  # the page: "buys a little"
    assert float(rate["2p2d-mtp"]) > 2 * float(rate["1p1d-mtp"])  # "more than twice 1:1"
    _check_quotes(PLAN, {
        "1:1 sustains {} requests/s and 1:2 {}": [rate["1p1d-mtp"], rate["1p2d-mtp"]],
        "2:2 more than twice 1:1 ({})": [rate["2p2d-mtp"]],
        "the same 24 GPUs sustain {} requests/s": [rate["agg3-mtp"]],
        "TPOT p99 is at 20 ms already at {} requests/s": [rate["1p2d-off"]]})


CHOOSE = "docs/how-to/choose-a-speculation-setup.md"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("part", [r"--top 10$", r"tpot_p99=30ms$"])
def test_choose_a_speculation_setup(part, tmp_path, capsys, monkeypatch):
    """The 200-candidate search, as the page runs it (about a minute each on two cores)."""
    printed = _run_and_compare(CHOOSE, part, tmp_path, capsys, monkeypatch,
                               shown_out="runs/plan-plan-llama8b-<time>")
    if part == r"--top 10$":
        top = re.search(r"turn speculation off above (\S+) req/s", printed).group(1)
        _check_quotes(CHOOSE, {
            "EAGLE-3 with K = 2 beats plain decoding's TPOT p99 on one H100 up to {} "
            "requests/s": [top]})


def test_vllm_command_line(tmp_path, capsys, monkeypatch):
    _run_and_compare(ENGINE, r'--from-vllm "\$SERVE"', tmp_path, capsys, monkeypatch)


def test_sglang_command_line(tmp_path, capsys, monkeypatch):
    """(Its report once failed to write: the resolved scenario's default
    ``scheduler.vllm_release`` beside SGLang's order did not validate again.)"""
    _run_and_compare(ENGINE, r"--from-sglang", tmp_path, capsys, monkeypatch)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_trtllm_command_line(tmp_path, capsys, monkeypatch):
    """The page's TensorRT-LLM config, written where its command reads it, runs."""
    config = next(body for _, body, _ in _fences((ROOT / ENGINE).read_text())
                  if body.startswith("# trt.yaml"))
    (tmp_path / "trt.yaml").write_text(config)
    argv, _ = _command(ENGINE, r'--from-trtllm "\$TRT"')
    printed = _run(argv, capsys, monkeypatch, tmp_path / "out", cwd=tmp_path)
    assert "with TensorRT-LLM's controls" in printed


def test_vllm_forced_acceptance(tmp_path, capsys, monkeypatch):
    argv, _ = _command(ENGINE, r'--from-vllm "\$FORCED"')
    printed = _run(argv, capsys, monkeypatch, tmp_path / "out")
    _check_quotes(ENGINE, {
        "prints a mean acceptance length of {} for the `eagle3` variant":
            _cells(printed, "mean acceptance length (vLLM)")})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_mooncake_trace_run(tmp_path, capsys, monkeypatch):
    argv, shown = _command(REPLAY, r"^specsim run scenarios/mooncake-trace\.yaml$")
    assert shown is None
    assert "fixed-g4" in _run(argv, capsys, monkeypatch, tmp_path / "out")


def test_deepseek_v3_numbers(tmp_path, capsys, monkeypatch):
    """The guide quotes ``specsim run scenarios/deepseek-v3-mtp.yaml`` in its prose."""
    printed = _run(["run", "scenarios/deepseek-v3-mtp.yaml"], capsys, monkeypatch,
                   tmp_path / "out")
    ttft, tpot = (_cells(printed, f"{k} p50 / p90 / p99 (ms)") for k in ("TTFT", "TPOT"))
    _check_quotes(REPLAY, {
        "prefix hit rate {} ({} of the prompt tokens cached; {} with MTP":
            _cells(printed, "prefix cache hit rate (cached tokens)")[:3],
        "TTFT p50 {} ms without speculation and {} ms with, TPOT p50 {} ms without and {} ms "
        "with one MTP guess per step ({}× on mean TPOT, {} tokens per verify at the "
        "preset's {} acceptance)":
            [ttft[0], ttft[3], tpot[0], tpot[3],
             _cells(printed, "speedup vs none (mean TPOT)")[1],
             _cells(printed, "tokens/verify measured")[1],
             *_cells(printed, "acceptance rate (vLLM)")]})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_mooncake_time_scale_sweep(tmp_path, capsys, monkeypatch):
    argv, _ = _command(REPLAY, r"workload\.time_scale=1,2,4")
    assert "table:" in _run(argv, capsys, monkeypatch, tmp_path / "out")


def test_record_a_trace(tmp_path, capsys, monkeypatch):
    argv, _ = _command(TRACE, r"--out runs/my-trace\.npz")
    _run(argv, capsys, monkeypatch, tmp_path / "my-trace.npz")
    assert (tmp_path / "my-trace.npz").exists()


def test_the_shipped_trace_is_what_its_command_records(tmp_path, capsys, monkeypatch):
    """The guide says the command regenerates ``workloads/traces/perturbed-0.1-greedy.npz``:
    it writes the same arrays."""
    import numpy as np

    argv, _ = _command(TRACE, r"--k-max 5")
    shipped = ROOT / argv[argv.index("--out") + 1]
    _run(argv, capsys, monkeypatch, tmp_path / "trace.npz")
    with np.load(shipped) as want, np.load(tmp_path / "trace.npz") as got:
        assert sorted(want.files) == sorted(got.files)
        for name in want.files:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_claims_and_quick_claims_give_the_same_verdicts(tmp_path, capsys, monkeypatch):
    """``specsim claims --quick``: "half the requests, same verdicts"."""
    import pandas as pd

    full, _ = _command(CLAIMS, r"^specsim claims #")
    quick, _ = _command(CLAIMS, r"--quick")
    _run(full, capsys, monkeypatch, tmp_path / "full")
    _run(quick, capsys, monkeypatch, tmp_path / "quick")
    verdicts = [pd.read_csv(tmp_path / d / "claims.csv")[["claim", "verdict"]]
                for d in ("full", "quick")]
    pd.testing.assert_frame_equal(*verdicts)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_claims_only_as_json(tmp_path, capsys, monkeypatch):
    import json

    argv, _ = _command(CLAIMS, r"--only leviathan")
    printed = _run(argv, capsys, monkeypatch, tmp_path / "out")
    rows = json.loads(printed)
    assert rows and all(r["verdict"] for r in rows)
    (large,) = [r["assumptions"] for r in rows if "T5-LARGE draft" in r["claim"]]
    implied = re.search(r"c implied by the measured speedups: ([\d.]+)", large).group(1)
    _check_quotes(CLAIMS, {"The measured 1.7× of T5-large on EnDe implies c ≈ {}":
                                    [implied]})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sweep_gamma_against_load(tmp_path, capsys, monkeypatch):
    argv, _ = _command("docs/how-to/sweep-on-a-cluster.md", r"--out runs/gamma-vs-load")
    assert "table:" in _run(argv, capsys, monkeypatch, tmp_path / "out")
    assert (tmp_path / "out" / "sweep.csv").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("part", [r"# the summary table", r"--set workload\.cv=1"])
def test_write_a_scenario(part, tmp_path, capsys, monkeypatch):
    """The guide's scenario, saved as the file its commands name, runs under both."""
    page = ROOT / "docs/how-to/write-a-scenario.md"
    (block,) = [b for lang, b, _ in _fences(page.read_text()) if lang == "yaml"]
    argv, _ = _command("docs/how-to/write-a-scenario.md", part)
    (tmp_path / argv[1]).write_text(block)
    printed = _run(argv, capsys, monkeypatch, tmp_path / "out", cwd=tmp_path)
    assert "adaptive" in printed and "SLO (p99 TTFT, TPOT)" in printed


# --- timing.md: figures its prose quotes from `specsim hw step` and `specsim run` ----------

TIMING = "docs/timing.md"


def _inline(page: str, command: str) -> list[str]:
    """The argv of ``command`` (after ``specsim``), which the page's prose writes (line breaks
    aside)."""
    assert command in " ".join((ROOT / page).read_text().split()), (page, command)
    return command.split()[1:]


def _step_ms(argv: list[str], capsys, monkeypatch) -> dict[str, float]:
    """``specsim hw step``'s pass time and its measured terms (ms), by name."""
    printed = _run(argv, capsys, monkeypatch)
    terms = re.search(r"measured terms (.*) ms", printed)  # none on the roofline
    named = re.findall(r"(\w+) ([\d.]+)", terms.group(1)) if terms else []
    return {"pass": float(_cells(printed, "pass")[0]), **{k: float(v) for k, v in named}}


def test_timing_fp8_dynamic_scales(capsys, monkeypatch):
    argv = _inline(TIMING, "specsim hw step --model llama-3.1-70b --gpu h100 --tp 2 "
                           "--weight-bits 8 --compute-dtype fp8 --batch 32 --context 1024 "
                           "--fp8-scales dynamic")
    dynamic = _step_ms(argv, capsys, monkeypatch)
    plain = _step_ms(argv[:-2], capsys, monkeypatch)  # the model's own scales: per tensor
    _check_quotes(TIMING, {
        "it adds {}% to a decode step of 32 sequences, {}% to its GEMMs":
            [f"{100 * (dynamic[k] / plain[k] - 1):.6f}" for k in ("pass", "gemm")],
        "--fp8-scales dynamic`: {} ms against {})": [dynamic["pass"], plain["pass"]]})


def test_timing_deepseek_v3_experts(capsys, monkeypatch):
    argv = _inline(TIMING, "specsim hw step --model deepseek-v3 --gpu h200 --tp 8 --batch 1 "
                           "--context 1024 --tokens 4")
    one = [*argv[:-1], "1"]
    ms = [_step_ms(a + t, capsys, monkeypatch)["pass"]
          for t in (["--timing", "roofline"], []) for a in (one, argv)]
    _check_quotes(TIMING, {"`: {} and {} ms roofline; {} and {} ms measured)": ms})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_timing_b200_against_h200(capsys, monkeypatch):
    """The B200 table: each pass on both GPUs and their ratio, the GEMMs at batch 1."""
    _inline(TIMING, "specsim hw step --model llama-3-8b --gpu b200 --batch 1 --context 1024 "
                    "--tokens 1")
    shapes = {"decode, batch 1, context 1024": "--batch 1 --context 1024 --tokens 1",
              "decode, batch 64, context 2048": "`--batch 64 --context 2048 --tokens 1`",
              "prefill, 4 × 2048 tokens": "`--batch 4 --context 0 --tokens 2048`"}

    def step(gpu: str, shape: str) -> dict[str, float]:
        argv = ["hw", "step", "--model", "llama-3-8b", "--gpu", gpu, *shape.strip("`").split()]
        return _step_ms(argv, capsys, monkeypatch)

    quotes = {}
    for row, shape in shapes.items():
        _inline(TIMING, shape)
        h200, b200 = step("h200", shape), step("b200", shape)
        quotes[f"| {row} | {{}} ms | {{}} ms | {{}}× |"] = [
            h200["pass"], b200["pass"], h200["pass"] / b200["pass"]]
        if row.startswith("decode, batch 1"):
            quotes["| GEMMs {} → {} ms ({}×,"] = [h200["gemm"], b200["gemm"],
                                                   h200["gemm"] / b200["gemm"]]
            assert h200["overhead"] == b200["overhead"]
            quotes["the {} ms framework overhead is the same on both"] = [b200["overhead"]]
    quotes["B300, GB200 and GB300 price the batch-1 decode at {}, {} and {} ms"] = [
        step(gpu, shapes["decode, batch 1, context 1024"])["pass"]
        for gpu in ("b300", "gb200", "gb300")]
    _check_quotes(TIMING, quotes)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_timing_b200_served(tmp_path, capsys, monkeypatch):
    argv = _inline(TIMING, "specsim run --set deployment.gpu=b200 --set run.requests=300")
    runs = {}
    for gpu in ("b200", "h200"):
        printed = _run([a.replace("b200", gpu) for a in argv], capsys, monkeypatch,
                       tmp_path / gpu)
        runs[gpu] = (_cells(printed, "TPOT p50 / p90 / p99 (ms)")[::3],
                     _cells(printed, "TTFT p50 / p90 / p99 (ms)")[0])
    (b_none, b_spec), b_ttft = runs["b200"]
    (h_none, h_spec), h_ttft = runs["h200"]
    _check_quotes(TIMING, {
        "gives a median TPOT of {} ms without speculation and {} ms with γ = 4 on the B200, "
        "against {} and {} ms on the H200 ({}× and {}×), and a median TTFT of {} against {} ms":
            [b_none, b_spec, h_none, h_spec, float(h_none) / float(b_none),
             float(h_spec) / float(b_spec), b_ttft, h_ttft]})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_background_routing_numbers(tmp_path, capsys, monkeypatch):
    """docs/background.md, Routing across replicas, quotes four runs of
    ``scenarios/shared-prefix-routing.yaml`` (about 8 s each) and two of the Mooncake
    sessions."""
    def run(*sets):
        argv = ["run", "scenarios/shared-prefix-routing.yaml"]
        for s in sets:
            argv += ["--set", s]
        return _run(argv, capsys, monkeypatch, tmp_path / f"out{len(list(tmp_path.iterdir()))}")

    rr, kv = run("deployment.router=round_robin"), run()
    rr40 = run("deployment.router=round_robin", "workload.rate_per_s=40")
    kv40 = run("workload.rate_per_s=40")
    hit = "prefix cache hit rate (cached tokens)"
    ttft, tpot = "TTFT p50 / p90 / p99 (ms)", "TPOT p50 / p90 / p99 (ms)"
    sets = ["--set", "deployment.replicas=4", "--set", "scheduler.prefix_caching=true",
            "--set", "workload.time_scale=4", "--set"]
    turns = [_run(["run", "scenarios/mooncake-trace.yaml", *sets, f"deployment.router={r}"],
                  capsys, monkeypatch, tmp_path / f"turns-{r}")
             for r in ("round_robin", "kv_aware")]
    _check_quotes("docs/background.md", {
        "without speculation: a prefix hit rate of {} round robin against {} `kv_aware`, "
        "TTFT p50 {} against {} ms": [_cells(turns[0], hit)[0], _cells(turns[1], hit)[0],
                                      _cells(turns[0], ttft)[0], _cells(turns[1], ttft)[0]]})
    _check_quotes("docs/background.md", {
        "a prefix hit rate of {} against {}, TTFT p50 {} against {} ms and p99 {} against {} "
        "ms": [_cells(rr, hit)[0], _cells(kv, hit)[0], _cells(rr, ttft)[0],
               _cells(kv, ttft)[0], _cells(rr, ttft)[2], _cells(kv, ttft)[2]],
        "TPOT p50 {} against {} ms. At 40": [_cells(rr, tpot)[0], _cells(kv, tpot)[0]],
        "is overloaded, TTFT p50 {} ms, and `kv_aware` is not, {} ms":
            [_cells(rr40, ttft)[0], _cells(kv40, ttft)[0]]})
