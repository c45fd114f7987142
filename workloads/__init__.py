"""Workloads: arrivals, length distributions, acceptance models (incl. trace replay) and
public request traces (Mooncake, Azure, BurstGPT, ShareGPT)."""

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
from workloads.public_traces import FORMATS, TraceFormat, read_azure, read_burstgpt, read_mooncake
from workloads.requests import (
    RequestColumns,
    RequestSpec,
    build_requests,
    read_request_csv,
    request_columns,
    write_request_csv,
)
from workloads.sharegpt import assign_conversations, read_sharegpt
from workloads.task_mix import TaskMixAcceptance
from workloads.trace_replay import replay_rows
from workloads.trace_rows import TraceCounts, TraceRow

__all__ = [
    "FORMATS",
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
    "TraceCounts",
    "TraceFormat",
    "TraceRow",
    "UniformLength",
    "assign_conversations",
    "WidthFit",
    "WidthModel",
    "build_requests",
    "request_columns",
    "RequestColumns",
    "calibrate_iid",
    "chain_widths",
    "check_widths",
    "depths",
    "fit_specinfer_table2",
    "fit_width_sweep",
    "measure_chain",
    "replay_chain",
    "read_azure",
    "read_burstgpt",
    "read_mooncake",
    "read_request_csv",
    "read_sharegpt",
    "replay_rows",
    "solve_alpha",
    "expected_iid",
    "specinfer_tree",
    "write_request_csv",
]
