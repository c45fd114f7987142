"""sim.studies.sweep: axes, seeds derived from the point, identical tables on any executor."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from sim.studies.sweep import (
    SweepSpec,
    load_sweep,
    parse_vary,
    point_seed,
    run_sweep,
    split_top_level,
)
from specdec.errors import UserError


def test_parse_vary_values_are_yaml_and_lists_stay_whole():
    assert parse_vary("workload.rate_per_s=2,4.5") == ("workload.rate_per_s", (2, 4.5))
    key, vals = parse_vary("variants.1.policy.expansion=[2,1],[3,1,1]")
    assert vals == ([2, 1], [3, 1, 1])
    assert split_top_level("a,{b: 1, c: 2},d") == ["a", "{b: 1, c: 2}", "d"]


@pytest.mark.parametrize("bad", ["rate", "=1,2", "k=", "k=1,,2", "k=[1,"])
def test_parse_vary_rejects(bad):
    with pytest.raises(UserError, match="--vary"):
        parse_vary(bad)


def test_point_seed_depends_on_values_not_order():
    a = point_seed(7, {"x": 1, "y": 2})
    assert a == point_seed(7, {"y": 2, "x": 1})
    assert a != point_seed(7, {"x": 1, "y": 3})
    assert a != point_seed(8, {"x": 1, "y": 2})
    assert 0 <= a < 2**32


def test_points_product_or_zipped():
    axes = (("a", (1, 2)), ("b", (10, 20)))
    assert SweepSpec({}, "s", axes).points() == [
        {"a": 1, "b": 10}, {"a": 1, "b": 20}, {"a": 2, "b": 10}, {"a": 2, "b": 20}]
    assert SweepSpec({}, "s", axes, zipped=True).points() == [
        {"a": 1, "b": 10}, {"a": 2, "b": 20}]
    with pytest.raises(UserError, match="a has 2, b has 1"):
        SweepSpec({}, "s", (("a", (1, 2)), ("b", (10,))), zipped=True).points()


def test_sweep_block_and_vary_merge(small_scenario):
    doc = yaml.safe_load(small_scenario.read_text())
    doc["sweep"] = {"vary": {"workload.rate_per_s": [2, 4], "run.requests": [10]}}
    small_scenario.write_text(yaml.safe_dump(doc))
    spec = load_sweep(small_scenario, ["workload.rate_per_s=3,5,7"])
    assert dict(spec.vary) == {"workload.rate_per_s": (3, 5, 7), "run.requests": (10,)}
    assert "sweep" not in spec.base
    assert len(spec.points()) == 3


def test_bad_sweep_block_is_one_line(small_scenario):
    doc = yaml.safe_load(small_scenario.read_text())
    doc["sweep"] = {"vary": {"workload.rate_per_s": 3}}
    small_scenario.write_text(yaml.safe_dump(doc))
    with pytest.raises(UserError, match=r"sweep.vary.workload.rate_per_s: must be a non-empty"):
        load_sweep(small_scenario)


def test_bad_point_names_the_point(small_scenario):
    spec = load_sweep(small_scenario, ["workload.rate_per_s=-1"])
    with pytest.raises(UserError, match=r"rate_per_s.*-1"):
        run_sweep(spec)


def _spec(small_scenario):
    return load_sweep(small_scenario, ["workload.rate_per_s=4,8", "variants.1.policy.gamma=2,3"],
                      ["run.requests=30"])


def test_table_shape_and_columns(small_scenario):
    table = run_sweep(_spec(small_scenario))
    assert len(table) == 4 * 2  # points x variants
    for col in ("workload.rate_per_s", "variants.1.policy.gamma", "seed", "variant", "policy",
                "ttft_p99_s", "tpot_p50_s", "goodput_requests_per_s", "mean_batch_size",
                "acceptance_rate", "speedup_tpot", "draft_time_share"):
        assert col in table.columns
    assert list(table["workload.rate_per_s"]) == [4, 4, 4, 4, 8, 8, 8, 8]
    assert (table.loc[table["variant"] == "none", "speedup_tpot"] == 1.0).all()
    # Different points draw different arrivals: the seeds differ.
    assert table["seed"].nunique() == 4


def test_same_table_with_one_two_workers_and_dask(small_scenario):
    from dask.distributed import Client, LocalCluster

    spec = _spec(small_scenario)
    one = run_sweep(spec, workers=1)
    two = run_sweep(spec, workers=2)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        dask = run_sweep(spec, scheduler=client)
    pd.testing.assert_frame_equal(one, two)
    pd.testing.assert_frame_equal(one, dask)


def test_same_seed_gives_common_arrivals(small_scenario):
    spec = load_sweep(small_scenario, ["variants.1.policy.gamma=2,3"], ["run.requests=20"])
    table = run_sweep(spec, same_seed=True)
    assert set(table["seed"]) == {7}
    none = table[table["variant"] == "none"]
    # The 'none' variant does not depend on γ: identical rows at both points.
    assert none["tpot_mean_s"].nunique() == 1
