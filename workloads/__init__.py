"""Workloads: arrivals, length distributions and acceptance models (incl. trace replay)."""

from workloads.acceptance import (
    AcceptanceModel,
    IIDAcceptance,
    PositionalAcceptance,
    chain_widths,
    check_widths,
    depths,
    expected_iid,
    solve_alpha,
)
from workloads.acceptance_trace import TraceAcceptance
from workloads.arrivals import (
    ArrivalProcess,
    ClosedLoop,
    GammaArrivals,
    OfflineBatch,
    OnOffArrivals,
    PoissonArrivals,
    RenewalArrivals,
    ReplayArrivals,
)
from workloads.bursty import BurstyAcceptance
from workloads.calibration import (
    SPECINFER_TABLE2,
    WidthFit,
    calibrate_iid,
    fit_specinfer_table2,
    fit_width_sweep,
    specinfer_tree,
)
from workloads.coverage import CoverageTable, PowerCoverage, WidthModel
from workloads.lengths import (
    EmpiricalLength,
    FixedLength,
    LengthDistribution,
    LogNormalLength,
    UniformLength,
)
from workloads.measure import ChainMeasurement, measure_chain, replay_chain
from workloads.requests import RequestSpec, build_requests, read_request_csv, write_request_csv
from workloads.task_mix import TaskMixAcceptance

__all__ = [
    "SPECINFER_TABLE2",
    "AcceptanceModel",
    "ArrivalProcess",
    "BurstyAcceptance",
    "ChainMeasurement",
    "ClosedLoop",
    "CoverageTable",
    "EmpiricalLength",
    "FixedLength",
    "GammaArrivals",
    "IIDAcceptance",
    "LengthDistribution",
    "LogNormalLength",
    "OfflineBatch",
    "OnOffArrivals",
    "PoissonArrivals",
    "PowerCoverage",
    "PositionalAcceptance",
    "RenewalArrivals",
    "ReplayArrivals",
    "RequestSpec",
    "TaskMixAcceptance",
    "TraceAcceptance",
    "UniformLength",
    "WidthFit",
    "WidthModel",
    "build_requests",
    "calibrate_iid",
    "chain_widths",
    "check_widths",
    "depths",
    "fit_specinfer_table2",
    "fit_width_sweep",
    "measure_chain",
    "replay_chain",
    "read_request_csv",
    "solve_alpha",
    "expected_iid",
    "specinfer_tree",
    "write_request_csv",
]
