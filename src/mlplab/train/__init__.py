"""Training: the run config, optimisers and schedules, the loop, checkpoints, several processes.

``train(make_config("fmnist_s_mixer", ["optim.lr=1e-3"]))`` runs one experiment and returns its
results (``train("fmnist_s_mixer")`` for a named config as it is); ``mlplab train`` is the same
from the command line. ``plan_run(cfg)`` resolves a run once (:mod:`mlplab.train.runplan`).
"""
import sys
import types

from .config import RunConfig, from_dict, make_config, parse_overrides, run_name, to_dict
from .evaluation import evaluate_checkpoint
from .loop import NonFiniteError, RunExistsError, RunLockedError, evaluate, train
from .presets import CONFIGS
from .runplan import RunPlan, plan_run

__all__ = ["RunConfig", "make_config", "from_dict", "to_dict", "parse_overrides", "run_name", "RunPlan", "plan_run",
           "train", "evaluate", "evaluate_checkpoint", "NonFiniteError", "RunExistsError", "RunLockedError", "CONFIGS"]


class _CallablePackage(types.ModuleType):
    """This package called as its function: ``mlplab.train(cfg)`` is :func:`mlplab.train.loop.train`.
    A parent package's attribute is its subpackage once that is imported, so the name can be both
    only by the subpackage being callable."""

    def __call__(self, cfg, **kwargs):
        return train(cfg, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
