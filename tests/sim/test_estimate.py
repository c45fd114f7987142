"""``sim.estimate``: a run's peak memory is within its estimate; too large a run is refused
before it starts, with one line; a huge request count cut by a short horizon runs small."""

import json
import subprocess
import sys

import pytest

from sim.build import setups
from sim.cli import main
from sim.estimate import BASE_BYTES, estimate, requests_bound
from sim.limits import LAZY_REQUESTS
from sim.loading import load_scenario, repo_root

# The peak RSS of one ``specsim run`` in a fresh interpreter (one process: --workers 1):
# its memory map's high-water mark, VmHWM (ru_maxrss keeps the forking parent's peak).
PEAK = ("import json, sys; from sim.cli import main; code = main(sys.argv[1:]); "
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]; "
        "print(json.dumps([code, int(hwm.split()[1])]))")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="peaks read from /proc/self/status")

NO_DRAFT = "variants=[{name: none, policy: {kind: none}}]"
# shape: (its overrides, a tenth of its size: the same shape, the same code loaded)
SHAPES = {
    "many-short": (["workload.rate_per_s=200", "workload.prompt={kind: fixed, tokens: 64}",
                    "workload.output={kind: fixed, tokens: 16}"],
                   "run.requests=60000", "run.requests=6000"),
    "few-long": (["workload.rate_per_s=0.5", "workload.prompt={kind: fixed, tokens: 1000}",
                  "workload.output={kind: fixed, tokens: 6000}"],
                 "run.requests=20", "run.requests=2"),
    "no-draft": ([NO_DRAFT], "run.requests=10000", "run.requests=1000"),
    "light-load": (["workload.rate_per_s=0.2", NO_DRAFT], "run.requests=200",
                   "run.requests=20"),
    "horizon-cut": (["run.requests=100000000"], "run.horizon_s=200", "run.horizon_s=20"),
}


def _peak(tmp_path, sets: list[str], report: bool = False) -> int:
    """Peak RSS in bytes of ``specsim run`` with ``sets`` on one process."""
    args = ["run", "--workers", "1", "--no-progress", "--out", str(tmp_path / "run"),
            "--force", *(["--no-report"] if not report else []),
            *(x for s in sets for x in ("--set", s))]
    proc = subprocess.run([sys.executable, "-c", PEAK, *args], cwd=repo_root(),
                          capture_output=True, text=True, timeout=100)
    code, kib = json.loads(proc.stdout.strip().splitlines()[-1])
    assert code == 0, proc.stderr
    return kib * 1024


def _estimate(sets: list[str], report: bool = False):
    sc = load_scenario(None, sets)
    return estimate(sc, setups(sc), 1, report)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_peak_memory_of_a_run_is_within_its_estimate(shape, tmp_path):
    """The whole peak, and its growth over a tenth of the run (what grows with it, not the
    interpreter, numba or the timing tables), are each within the estimate's."""
    common, size, tenth = SHAPES[shape]
    sets, one = [*common, size], [*common, tenth]
    big, small = _estimate(sets), _estimate(one)
    peak, base = _peak(tmp_path, sets), _peak(tmp_path, one)
    assert peak <= big.bytes
    assert peak - base <= big.bytes - small.bytes, (peak - base, big.bytes - small.bytes)


@pytest.mark.slow
def test_the_peak_memory_of_a_run_and_its_report_is_within_its_estimate(tmp_path):
    sets, one = ["run.requests=20000"], ["run.requests=2000"]
    big, small = _estimate(sets, report=True), _estimate(one, report=True)
    peak, base = _peak(tmp_path, sets, True), _peak(tmp_path, one, True)
    assert peak <= big.bytes
    assert peak - base <= big.bytes - small.bytes


def test_a_huge_request_count_cut_by_a_short_horizon_runs_in_small_memory(tmp_path):
    """10**8 requests, 2 s: the ~16 that arrive are drawn, and the run stays small (it took
    9.4 GB when every written request was drawn)."""
    sets = ["run.requests=100000000", "run.horizon_s=2"]
    size = _estimate(sets)
    assert size.requests < 40
    assert size.bytes < BASE_BYTES + 50e6
    assert _peak(tmp_path, sets) < 300e6


def test_the_count_is_bounded_before_any_request_is_drawn():
    """Without a horizon every written request; with one, past LAZY_REQUESTS, those the
    rate brings before it (ten standard deviations over the mean)."""
    assert requests_bound(load_scenario(None, ["run.requests=100000000"])) == 10**8
    assert requests_bound(load_scenario(None, ["run.requests=500", "run.horizon_s=1"])) == 500
    cut = requests_bound(load_scenario(None, ["run.requests=100000000", "run.horizon_s=100"]))
    assert 800 + 10 * 800**0.5 <= cut <= 800 + 10 * 800**0.5 + 16  # the default 8 /s
    assert LAZY_REQUESTS < 10**8
    trace = load_scenario("scenarios/mooncake-trace.yaml", ["run.requests=null",
                                                            "run.horizon_s=10"])
    assert requests_bound(trace) is None


def test_too_large_a_run_is_refused_before_drawing_with_one_line(tmp_path, capsys):
    """10**8 requests without a horizon (about 70 GiB of table and logs): exit 2, one line
    naming the fields, before the requests are drawn (that alone took minutes), and no
    folder."""
    out = tmp_path / "run"
    code = main(["run", "--set", "run.requests=100000000", "--max-memory", "16",
                 "--no-progress", "--no-report", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("specsim run: error: scenarios/default.yaml: run.requests, "
                          "run.horizon_s: 100,000,000 requests need about ")
    assert "more than the 16.0 GiB --max-memory" in err
    assert not out.exists()


def test_a_run_over_max_memory_is_refused_once_built(tmp_path, capsys):
    """The built table's estimate (iteration rows included) against --max-memory."""
    out = tmp_path / "run"
    code = main(["run", "--set", "run.requests=200", "--max-memory", "0.2", "--no-progress",
                 "--no-report", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "run.requests, run.horizon_s: 200 requests need about " in err
    assert "more than the 0.2 GiB --max-memory" in err
    assert not out.exists()
    assert main(["run", "--max-memory", "0", "--no-progress", "--out", str(out)]) == 2
    assert "--max-memory: must be a number of GiB > 0, got 0" in capsys.readouterr().err


def test_a_large_run_says_its_size_first_and_a_small_one_does_not(capsys):
    from sim.commands.run import LOUD_BYTES, LOUD_S

    size = _estimate(["run.requests=200000", "deployment.replicas=2"])
    assert size.seconds > LOUD_S or size.bytes > LOUD_BYTES
    assert size.line().startswith("about ")
    assert size.line().endswith(" for 200,000 requests, "
                                f"{2 * size.output_tokens:,} output tokens over 2 variants "
                                "on 1 process (estimate)")
    small = _estimate(["run.requests=40"])
    assert small.seconds < LOUD_S and small.bytes < LOUD_BYTES
