"""Experiments: sweeps as data, executors, the published experiments by id, aggregation,
figures and reports.

    from mlplab.experiments import Sweep, product, run_sweep, reproduce
    sweep = Sweep("lr", base={"model.name": "s_mixer", "data.dataset": "fashion_mnist"},
                  axes=[product(("optim.lr", [0.01, 0.1]))], seeds=[0, 1])
    run_sweep(sweep, "runs/lr", jobs=2, executor="local")
    reproduce("fig6", scale="cpu")   # runs, then writes runs/experiments/fig6-cpu/report.md
"""
from .aggregate import RunRecord, group_runs, load_runs, mean_std
from .claims import Analysis, Claim
from .executors import EXECUTORS, SweepResult, execute_run, run_specs, run_sweep
from .registry import (
    EXPERIMENTS,
    Experiment,
    Plan,
    estimate_cost,
    experiment,
    format_list,
    get_experiment,
    list_experiments,
    plan_experiment,
    report_experiment,
    reproduce,
)
from .report import write_report
from .sweep import Axis, RunSpec, Sweep, expand, product, run_name, zip_axes
from .verdicts import Verdict

__all__ = [
    "Sweep", "Axis", "RunSpec", "product", "zip_axes", "expand", "run_name",
    "run_sweep", "run_specs", "execute_run", "SweepResult", "EXECUTORS",
    "Experiment", "Plan", "experiment", "EXPERIMENTS", "get_experiment", "list_experiments",
    "plan_experiment", "reproduce", "report_experiment", "estimate_cost", "format_list",
    "RunRecord", "load_runs", "group_runs", "mean_std", "Analysis", "Claim", "Verdict", "write_report",
]
