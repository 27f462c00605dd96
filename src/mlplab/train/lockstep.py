"""Seeds in lockstep: the seeds of one sweep point trained together as one stacked model.

The seeds of a sweep point differ only in ``run.seed`` (and the model's own ``seed``, which
follows it). Trained one after another, each pays the process start, the data load and, for the
small models of the cpu-scale experiments, thin GEMMs and the dispatch of every op on its own.
Here their models are stacked: every parameter and buffer of the K seeds' models becomes one
tensor with a leading seed dimension (``torch.func.stack_module_state``), the model's own forward
runs on all seeds at once through ``torch.func.vmap`` over ``functional_call`` (its GEMMs become
batched GEMMs, (K, B, ...) activations), one backward of the sum of the seeds' losses gives every
seed its own gradient (their parameters are disjoint), and one optimiser step updates every seed:
SGD, AdamW and LION update element by element, so a seed's slice moves as its solo run's would.

Same streams as the solo run. Each seed's model, optimiser and data come from the loop's own
``_prepare`` (``torch.manual_seed(run.seed)`` before the build, its RP / mask seed), its batches
from its own loader (order from (seed, epoch), augmentation from (seed, "augment", epoch, rank)),
its dropout and drop-path masks from its own copy of the global generator, swapped in around each
draw (:class:`_SeedMask`), in the order its solo run draws them. So each seed's trajectory is its
solo run's up to float rounding: ``tests/train/test_lockstep.py`` holds them to 1e-10 (relative)
after 200 steps in float64.

Per seed, as a solo run: its run folder (the name its solo run has), ``config.json``,
``metrics.jsonl``, checkpoint (the solo format: its weights, its slice of the optimiser state, its
generator state; a solo run resumes it and a lockstep run resumes a solo one), the NaN guard (a
diverged seed stops alone with the solo run's message; the others go on), evaluation (the seed's
weights copied into its own model and evaluated by the loop's ``evaluate``: the fused seams where
the solo run takes them) and ``results.json`` (with ``"lockstep"``: the seeds trained together;
``wall_s`` is the group's).

The stacked forward is the model's own, on the path its ``model.impl`` chooses: a Mixer's fused
CPU seams take the stack (:func:`mlplab.layers.fused._eager_function`: one kernel call per seed on
its slice; docs/kernels.md), so a stacked S-Mixer step costs about what its seeds' solo steps
cost together, not the module path's 1.5x. Whether lockstep pays for a model is measured, not
assumed (:func:`mlplab.experiments.cost.lockstep_factor`). What cannot be stacked is named by
:func:`lockstep_unsupported`; such seeds train one after another.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

from ..errors import RunFailure
from ..layers.common import DropPath
from ..layers.masked import MaskedLinear
from ..utils.interrupts import library_stop_signals, raise_if_interrupted
from ..utils.io import atomic_write_json
from ..utils.units import format_count
from .backend import describe_implementation, implementation_line, keep_freed_memory
from .config import NON_SEMANTIC, RunConfig, config_diff
from .data import RunData, eval_loader, load_run_data, train_loader
from .distributed import init_distributed
from .loggers import open_loggers
from .loop import (
    NonFiniteError,
    RunState,
    _Guard,
    _prepare,
    _results,
    _resume,
    _rng_state,
    _Run,
    _save_checkpoint,
    _set_rng_state,
    evaluate,
    train,
)
from .metrics import MatmulPeak, Progress
from .optim import build_optimizer, lr_at, set_lr
from .rundir import open_run_folder
from .runplan import RunPlan, as_plan

__all__ = ["train_lockstep", "lockstep_unsupported", "SEED_KEYS"]

#: the config keys in which the seeds of one sweep point differ (``run.name`` follows them)
SEED_KEYS = ("run.seed", "model.kwargs.seed", "run.name")


def lockstep_unsupported(cfg: RunConfig) -> str | None:
    """Why the seeds of ``cfg``'s sweep point cannot train in lockstep (None: they can)."""
    kw = cfg.model.kwargs
    if cfg.model.init_from is not None:
        return "model.init_from (each seed starts from a checkpoint's model)"
    if cfg.run.ema_decay is not None:
        return "run.ema_decay (the weight average is kept per model)"
    if kw.get("rp_blocks") not in (None, "none") or cfg.model.name.startswith("rp_"):
        return "random-permuted layers (each seed's permutations are derived gathers, not stackable tensors)"
    if kw.get("storage") == "sparse":
        return "sparse storage (each seed's mask has its own number of nonzeros)"
    if cfg.run.log_every_steps:
        return "run.log_every_steps (the per-step records are written by the solo loop)"
    if cfg.model.impl == "definition":
        return "model.impl=definition (its gathers are not batched over seeds)"
    return None


def _differences(cfgs: Sequence[RunConfig]) -> list[str]:
    """The config keys that change the computation, other than :data:`SEED_KEYS`, in which the
    runs differ."""
    ignore = NON_SEMANTIC | frozenset(SEED_KEYS)
    return sorted({k for c in cfgs[1:] for k in config_diff(cfgs[0], c, ignore)})


# ----------------------------------------------------------------------------- random streams

class _Streams:
    """Each seed's copy of the global generator (what its solo run's dropout and drop-path draw
    from), swapped in around that seed's draws."""

    def __init__(self, states: list[dict[str, Any]], device: torch.device):
        self.states, self.device = states, device

    @contextlib.contextmanager
    def of(self, k: int):
        outside = _rng_state(self.device)
        _set_rng_state(self.states[k], self.device)
        try:
            yield
        finally:
            self.states[k] = _rng_state(self.device)
            _set_rng_state(outside, self.device)


class _SeedMask(torch.autograd.Function):
    """The keep-mask a dropout (``scale``: divided by ``keep``, as torch's CPU dropout makes its
    noise) or a drop-path draws, ``x.new_empty(shape).bernoulli_(keep)``; under vmap each seed's
    from its own stream, with the per-seed shape its solo run draws."""

    @staticmethod
    def forward(x, shape, keep, scale, streams):
        mask = x.new_empty(shape).bernoulli_(keep)
        return mask.div_(keep) if scale else mask

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output)

    @staticmethod
    def vmap(info, in_dims, x, shape, keep, scale, streams):
        xs = x.movedim(in_dims[0], 0)
        masks = []
        for k in range(info.batch_size):
            with streams.of(k):
                masks.append(_SeedMask.forward(xs[k], shape, keep, scale, streams))
        return torch.stack(masks), 0


class _StreamDrop(nn.Module):
    """``nn.Dropout`` (``per_sample=False``: x · bernoulli(1 − p) / (1 − p) per entry) or
    :class:`~mlplab.layers.common.DropPath` (``per_sample=True``: x · bernoulli(1 − p) / (1 − p)
    per sample), drawing from the seed's stream as its solo run's module does."""

    def __init__(self, p: float, streams: _Streams, per_sample: bool):
        super().__init__()
        self.p, self.streams, self.per_sample = p, streams, per_sample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        keep = 1.0 - self.p
        if self.per_sample:
            return x * _SeedMask.apply(x, (x.shape[0],) + (1,) * (x.ndim - 1), keep, False, self.streams) / keep
        return x * _SeedMask.apply(x, tuple(x.shape), keep, True, self.streams)


def _with_streams(template: nn.Module, streams: _Streams) -> None:
    """Replace the template's random modules by ones that draw from the seeds' streams."""
    for name, mod in list(template.named_modules()):
        for child_name, child in list(mod.named_children()):
            if isinstance(child, (nn.Dropout, DropPath)) and child.p > 0:
                setattr(mod, child_name, _StreamDrop(child.p, streams, per_sample=isinstance(child, DropPath)))


# ----------------------------------------------------------------------------- one GEMM per seed

class _SeedLinear(torch.autograd.Function):
    """``F.linear(x, w, b)``; under vmap one ``F.linear`` per seed on its slice, as its solo run
    computes it (under autocast too), outputs stacked. vmap's own rule for a batched weight (a
    batched GEMM, the bias added apart, the weight and activations copied to fit) made the
    256 -> 1024 layer of fmnist_fast's MLP 1.66x slower than five solo layers in bf16 and 1.10x in
    fp32 (forward and backward, 1 thread); one GEMM per seed 1.10x and 1.08x."""

    @staticmethod
    def forward(x, w, b):
        return F.linear(x, w, b)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):  # pragma: no cover - only called under vmap, through the per-seed ops
        raise RuntimeError("_SeedLinear is differentiated through its per-seed linears")

    @staticmethod
    def vmap(info, in_dims, x, w, b):
        k = info.batch_size
        per = [t.unbind(d) if d is not None else (t,) * k for t, d in zip((x, w, b), in_dims)]
        return torch.stack([F.linear(*(p[i] for p in per)) for i in range(k)]), 0


class _SeedwiseLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SeedLinear.apply(x, self.weight, self.bias)


class _SeedwiseMasked(MaskedLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SeedLinear.apply(x, self.effective_weight(), self.bias)


def _with_seedwise_gemms(template: nn.Module) -> None:
    """The template's linear layers (``nn.Linear``, the SW-MLP's ``MaskedLinear``) compute one
    GEMM per seed (:class:`_SeedLinear`); same parameters, same names."""
    for mod in template.modules():
        if type(mod) is nn.Linear:
            mod.__class__ = _SeedwiseLinear
        elif type(mod) is MaskedLinear:
            mod.__class__ = _SeedwiseMasked


# ----------------------------------------------------------------------------- the stack

def _same(a: Any, b: Any) -> bool:
    """Whether two seeds' values of a module attribute are the same; a model config's ``seed`` may
    differ (what it seeds, RP permutations and masks, lives in buffers or is checked apart)."""
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        fields = [f.name for f in dataclasses.fields(a) if f.name != "seed"]
        return all(_same(getattr(a, f), getattr(b, f)) for f in fields)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape \
            and bool(torch.equal(a.cpu(), b.cpu()))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # an object without a meaningful equality
        return a is b


_MODULE_STATE = {"_parameters", "_buffers", "_modules", "training"}


def not_stackable(models: Sequence[nn.Module]) -> str | None:
    """Why these models (one per seed) cannot be stacked: tensors of different shapes, or state
    outside their parameters and buffers that differs between them (vmap shares it); None: they can."""
    first = dict(models[0].named_modules())
    shapes = {k: v.shape for k, v in models[0].state_dict().items()}
    for m in models[1:]:
        if {k: v.shape for k, v in m.state_dict().items()} != shapes:
            return "the seeds' models hold tensors of different shapes"
        for name, mod in m.named_modules():
            ref = first.get(name)
            if type(ref) is not type(mod):
                return f"the seeds' models differ in structure at {name or 'the top'}"
            for attr, v in vars(mod).items():
                if attr not in _MODULE_STATE and "hook" not in attr and not _same(v, vars(ref).get(attr)):
                    return f"{name or 'the model'}.{attr} differs between the seeds and is not a parameter or buffer"
    return None


class _Stack:
    """K seeds' models as one: stacked parameters (leaves with a leading seed dimension) and
    buffers, a template module (the first model's structure on the meta device, its random
    modules drawing from :class:`_Streams`) and the optimiser over the stacked parameters."""

    def __init__(self, runs: list[_Run], streams: _Streams):
        models = [r.model for r in runs]
        params, buffers = stack_module_state(models)
        self.params = {k: nn.Parameter(v.detach(), requires_grad=models[0].get_parameter(k).requires_grad)
                       for k, v in params.items()}
        self.buffers = buffers
        self.template = copy.deepcopy(models[0]).to("meta")
        self.streams = streams
        _with_streams(self.template, streams)
        _with_seedwise_gemms(self.template)
        self.optimizer = build_optimizer(models[0], runs[0].cfg.optim, stacked=self.params)
        self._stack_state([r.optimizer for r in runs], models)

    @property
    def size(self) -> int:
        return next(iter(self.params.values())).shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(K, B, ...) images -> (K, B, classes) logits, each seed through its own weights."""
        def one(params, buffers, xk):
            return functional_call(self.template, (params, buffers), (xk,))
        return vmap(one, randomness="error")(self.params, self.buffers, x)

    def train(self, mode: bool = True) -> None:
        self.template.train(mode)

    def trainable(self) -> list[nn.Parameter]:
        return [p for p in self.params.values() if p.requires_grad]

    # -- between the stack and the seeds' own models and optimisers (checkpoints, resume)
    def _pairs(self, model: nn.Module, optimizer: torch.optim.Optimizer):
        """(stacked parameter, the seed's parameter) in the optimiser's order."""
        name = {id(p): n for n, p in model.named_parameters()}
        return [(self.params[name[id(p)]], p) for g in optimizer.param_groups for p in g["params"]]

    def _stack_state(self, optimizers: list[torch.optim.Optimizer], models: list[nn.Module]) -> None:
        """The seeds' optimiser states (a resumed run's) stacked into the stack's optimiser."""
        pairs = [self._pairs(m, o) for m, o in zip(models, optimizers)]
        for i, (stacked, _) in enumerate(pairs[0]):
            states = [o.state.get(pr[i][1]) for o, pr in zip(optimizers, pairs)]
            if not states[0]:
                continue
            self.optimizer.state[stacked] = {
                key: torch.stack([s[key] for s in states]) if _per_seed(v, pairs[0][i][1]) else v.clone()
                for key, v in states[0].items()}

    @torch.no_grad()
    def unstack(self, k: int, run: _Run) -> None:
        """Seed ``k``'s weights and optimiser state into its own model and optimiser."""
        for name, p in run.model.named_parameters():
            p.copy_(self.params[name][k])
        for name, b in run.model.named_buffers():
            b.copy_(self.buffers[name][k])
        for g_stack, g_seed in zip(self.optimizer.param_groups, run.optimizer.param_groups):
            g_seed.update({key: v for key, v in g_stack.items() if key != "params"})
        for stacked, p in self._pairs(run.model, run.optimizer):
            st = self.optimizer.state.get(stacked)
            if st:
                run.optimizer.state[p] = {key: v[k].clone() if _per_seed(v, stacked, stacked=True) else v.clone()
                                          for key, v in st.items()}

    @torch.no_grad()
    def keep(self, idx: list[int]) -> None:
        """Drop the seeds not in ``idx`` (a diverged seed stops alone)."""
        sel = torch.tensor(idx, device=next(iter(self.params.values())).device)
        for p in self.params.values():
            st = self.optimizer.state.get(p, {})
            for key, v in list(st.items()):
                if _per_seed(v, p, stacked=True):
                    st[key] = v.index_select(0, sel)
            p.data = p.data.index_select(0, sel)
            p.grad = None
        self.buffers = {k: v.index_select(0, sel) for k, v in self.buffers.items()}
        self.streams.states = [self.streams.states[k] for k in idx]


def _per_seed(v: Any, param: torch.Tensor, stacked: bool = False) -> bool:
    """Whether an optimiser state entry is per element of ``param`` (stacked: of the stack)."""
    return isinstance(v, torch.Tensor) and v.shape == param.shape and (not stacked or v.ndim > 0)


# ----------------------------------------------------------------------------- one group's training

@dataclass
class _Member:
    """One seed: its run (model, optimiser, data, durations), folder, position and outcome."""
    plan: RunPlan
    run: _Run
    rng: dict[str, Any]  # its global generator state (dropout / drop-path stream)
    folder: Any = None
    state: RunState = field(default_factory=RunState)
    guard: _Guard | None = None
    loggers: Any = None
    exits: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    outcome: Any = None  # results dict or the exception that stopped it

    @property
    def path(self):
        return self.folder.path


def _step(stack: _Stack, x: torch.Tensor, y: torch.Tensor, k: int, autocast: Callable
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward of every seed's batch ((K, B, ...) ``x``, ``y``) in ``k`` micro-batches,
    as :func:`mlplab.train.loop.accumulated_backward` does for one seed: per-seed mean losses (K,)
    and logits (K, B, classes), detached."""
    losses, logits_all = [], []
    for xj, yj in zip(x.chunk(k, dim=1), y.chunk(k, dim=1)):
        with autocast():
            logits = stack.forward(xj)
        loss = vmap(lambda lg, t: F.cross_entropy(lg.float(), t))(logits, yj)
        (loss.sum() / k if k > 1 else loss.sum()).backward()
        losses.append(loss.detach())
        logits_all.append(logits.detach())
    if k == 1:
        return losses[0], logits_all[0]
    return torch.stack(losses).mean(0), torch.cat(logits_all, dim=1)


def _clip_per_seed(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``nn.utils.clip_grad_norm_`` for each seed's slice of the stacked gradients: returns the
    (K,) total norms before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads], dim=1)  # (K, tensors)
    total = torch.linalg.vector_norm(norms, dim=1)
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.ndim - 1))).to(g.dtype))
    return total



def _train_epoch(members: list[_Member], stack: _Stack, guard: _Guard, epoch: int) -> list[dict[str, Any]]:
    """One epoch of every seed in the stack (as the loop's ``_train_epoch`` for one); returns the
    training record of each seed still training, in ``members``' order (a seed that diverged
    leaves ``members`` with its outcome set)."""
    run0 = members[0].run
    cfg, dur, dist, device = run0.cfg, run0.dur, run0.dist, run0.device
    t_epoch = time.perf_counter()
    stack.train()
    loaders = [train_loader(m.run.data, epoch, dur.batch_per_rank, m.run.cfg.run.seed, dist) for m in members]
    sums = torch.zeros(len(members), 2, dtype=torch.float64, device=device)  # per seed: loss·n, correct
    seen = 0  # examples per seed this epoch (host int: no sync)
    step0 = members[0].state.step
    steps_this_epoch = min(dur.steps_per_epoch, dur.total_steps - step0)
    params = stack.trainable()
    for i, batches in enumerate(zip(*loaders)):
        if i >= steps_this_epoch:
            break
        x = torch.stack([b[0] for b in batches]).to(device, non_blocking=True)  # (K, B, ch, H, W)
        y = torch.stack([b[1] for b in batches]).to(device, non_blocking=True)  # (K, B) or (K, B, classes)
        set_lr(stack.optimizer, lr_at(step0 + i, dur.total_steps, dur.warmup_steps, dur.peak_lr, cfg.schedule))
        stack.optimizer.zero_grad(set_to_none=True)
        loss, logits = _step(stack, x, y, cfg.run.accumulate_steps, run0.autocast)
        gnorm = _clip_per_seed(params, cfg.optim.grad_clip) if cfg.optim.grad_clip is not None else None
        stack.optimizer.step()
        guard.fold(loss, gnorm)
        labels = y.argmax(-1) if y.ndim == 3 else y
        sums += torch.stack([loss.double() * labels.shape[1], (logits.argmax(-1) == labels).sum(1).double()], dim=1)
        seen += labels.shape[1]
        for m in members:
            m.state.step += 1
        if members[0].state.step % cfg.run.nan_check_every == 0:
            keep = _check(members, stack, guard)
            sums = sums[keep]
            if not members:
                return []
        raise_if_interrupted()  # Ctrl-C that Python swallowed where it landed (utils.interrupts)
    keep = _check(members, stack, guard)
    sums = sums[keep]
    train_time = time.perf_counter() - t_epoch
    lr = stack.optimizer.param_groups[0]["lr"]
    return [{"epoch": epoch + 1, "step": m.state.step, "lr": lr, "train_loss": loss_sum / max(seen, 1),
             "train_acc": correct / max(seen, 1), "train_time_s": train_time,
             "images_per_s": seen / max(train_time, 1e-9)}
            for m, (loss_sum, correct) in zip(members, sums.tolist())]


def _check(members: list[_Member], stack: _Stack, guard: _Guard) -> list[int]:
    """Read every seed's NaN/divergence flags (one host sync). A seed with a bad step stops alone
    with its solo run's message (raised by its own :class:`_Guard`) and leaves the stack; returns
    the positions of the seeds that go on."""
    codes = guard.code.tolist()
    for k, code in enumerate(codes):
        if code:
            m = members[k]
            m.guard.code, m.guard.first = guard.code[k], guard.first[k]
            try:
                m.guard.check(m.state.checkpoint_epoch)
            except NonFiniteError as e:
                _stop(m, e)
    return _drop(members, stack, guard)


def _stop(m: _Member, e: BaseException) -> None:
    """``m`` ends with ``e``: its loggers and its folder's lock are released now."""
    m.outcome = e
    m.exits.close()


def _drop(members: list[_Member], stack: _Stack, guard: _Guard | None = None) -> list[int]:
    """Take the members that ended out of ``members`` and of the stack; the positions kept."""
    keep = [k for k, m in enumerate(members) if m.outcome is None]
    if len(keep) < len(members):
        stack.keep(keep)
        if guard is not None:
            guard.code, guard.first = guard.code[keep], guard.first[keep]
        members[:] = [members[k] for k in keep]
    return keep


def _evaluate(m: _Member, split) -> dict[str, float]:
    """The loop's evaluation of the seed's own (unstacked) model on ``split``."""
    run = m.run
    return evaluate(run.model, eval_loader(split, run.data, run.dur.eval_batch_per_rank, run.dist), run.dist,
                    run.autocast, run.cfg.augment.test_hflip)


def _end_epoch(m: _Member, k: int, stack: _Stack, rec: dict[str, Any], epoch: int, peak: MatmulPeak, t_start: float,
               t_epoch: float, on_epoch_end: Callable | None) -> None:
    """What the loop does after a seed's epoch: its periodic evaluation, record, log, checkpoint."""
    run, r, state = m.run, m.run.cfg.run, m.state
    data, dur = run.data, run.dur
    last = epoch + 1 == dur.total_epochs
    stack.unstack(k, run)
    if (r.eval_every and (epoch + 1) % r.eval_every == 0) or last:
        split, name = (data.val, "val") if data.val is not None else (data.test, "test")
        ev = _evaluate(m, split)
        rec.update({f"{name}_{key}": v for key, v in ev.items()})
        if not ev["loss"] <= m.guard.limit:  # NaN, inf or diverged: no checkpoint from these weights
            m.guard.stop(f"{name} loss {ev['loss']:.4g} (non-finite or above run.divergence_factor "
                         f"x ln K = {m.guard.limit:.4g}) after step {state.step} (epoch {epoch + 1})",
                         state.checkpoint_epoch)
    rec["epoch_time_s"] = time.perf_counter() - t_epoch
    if run.train_fpe:
        rec["flops_per_s"] = run.train_fpe * rec["images_per_s"]
        rec["mfu"] = peak.mfu(rec["flops_per_s"], run.dist.world_size)
    state.history.append(rec)
    state.epoch = epoch + 1
    m.loggers.log(rec, state.step)
    if (r.checkpoint_every and (epoch + 1) % r.checkpoint_every == 0) or last:
        with stack.streams.of(k):  # the checkpoint records the seed's own generator state
            _save_checkpoint(run, state, m.path, m.guard, t_start)
    if on_epoch_end is not None:
        on_epoch_end(rec)


def _finish(m: _Member, stack: _Stack, peak: MatmulPeak, t_start: float, seeds: list[int],
            cpu_before: float) -> dict[str, Any]:
    """The seed's final test evaluation and ``results.json``, as the loop writes them; its ``cpu_s``
    is the group's up to now (``cpu_before``: up to the previous seed's)."""
    run, state = m.run, m.state
    hist = state.history
    if run.data.val is None and hist and "test_acc" in hist[-1]:
        final = {key: hist[-1][f"test_{key}"] for key in ("acc", "top5", "loss")}  # just evaluated
    else:
        final = _evaluate(m, run.data.test)
    results = _results(run, state, final, m.path, peak, t_start, m.folder.data)
    results["implementation"] = {**describe_implementation(stack.template, run.device, run.precision, False),
                                 "lockstep": len(seeds)}
    results["compiled"] = False
    results["cpu_s"] += cpu_before
    results["lockstep"] = {"seeds": seeds, "note": "trained in lockstep with these seeds; wall_s and cpu_s are "
                                                   "the group's"}
    atomic_write_json(m.path / "results.json", results)
    m.loggers.finish(results)
    return results


def _run_line(members: list[_Member], stack: _Stack) -> str:
    run0 = members[0].run
    cfg, r, dur = run0.cfg, run0.cfg.run, run0.dur
    desc = describe_implementation(stack.template, run0.device, run0.precision, False)
    return (f"lockstep of {len(members)} seeds ({', '.join(str(m.run.cfg.run.seed) for m in members)}) in "
            f"{members[0].path.parent}: {cfg.model.name} {format_count(run0.n_params)} params each, "
            f"{len(run0.data.train)} train examples, {dur.total_steps} steps ({dur.steps_per_epoch}/epoch) of batch "
            f"{r.batch_size}, peak lr {dur.peak_lr:.3g}, {run0.device.type} {implementation_line(desc)}, stacked (vmap)"
            + (f", resumed at epoch {members[0].state.epoch}" if members[0].state.epoch else ""))


def _train_group(members: list[_Member], t_start: float, on_epoch_end: Callable | None) -> None:
    """Train ``members`` (all at the same step) together to the end; sets each one's outcome."""
    run0 = members[0].run
    seeds = [m.run.cfg.run.seed for m in members]
    stack = _Stack([m.run for m in members], _Streams([m.rng for m in members], run0.device))
    peak = MatmulPeak(run0.device, torch.bfloat16 if run0.precision == "bf16" else torch.float32)
    progress = Progress(run0.cfg.run.log)
    progress.line(_run_line(members, stack))
    guard = _Guard(run0, members[0].state.step, members[0].path)  # the stack's flags: one per seed
    guard.code = torch.zeros(len(members), dtype=torch.long, device=run0.device)
    guard.first = torch.full((len(members),), -1, dtype=torch.long, device=run0.device)
    for epoch in range(members[0].state.epoch, run0.dur.total_epochs):
        t_epoch = time.perf_counter()
        records = _train_epoch(members, stack, guard, epoch)
        for k, (m, rec) in enumerate(zip(list(members), records)):
            try:
                _end_epoch(m, k, stack, rec, epoch, peak, t_start, t_epoch, on_epoch_end)
            except NonFiniteError as e:
                _stop(m, e)
        _drop(members, stack, guard)
        if not members:
            return
        progress.line(f"epoch {epoch + 1}/{run0.dur.total_epochs} step {members[0].state.step} " +
                      "; ".join(f"seed {m.run.cfg.run.seed}: " +
                                " ".join(f"{key} {v:.4f}" for key, v in m.state.history[-1].items()
                                         if key.endswith(("loss", "acc"))) for m in members) +
                      f"; {sum(m.state.history[-1]['images_per_s'] for m in members):.0f} img/s "
                      f"{members[0].state.history[-1]['epoch_time_s']:.1f}s")
    cpu = 0.0
    for k, m in enumerate(members):
        m.outcome = _finish(m, stack, peak, t_start, seeds, cpu)
        cpu = m.outcome["cpu_s"]
        progress.line(f"test acc {m.outcome['test_acc']:.4f} top5 {m.outcome['test_top5']:.4f} loss "
                      f"{m.outcome['test_loss']:.4f} ({m.outcome['wall_s']:.1f}s) -> {m.path}")
        m.exits.close()


# ----------------------------------------------------------------------------- the entry point

def train_lockstep(cfgs: Sequence[RunConfig | RunPlan], *, resume: bool | Sequence[bool] = False,
                   overwrite: bool = False, on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
                   ) -> list[dict[str, Any] | BaseException]:
    """Train the seeds of one sweep point together; each one's results (as :func:`mlplab.train.train`
    returns them, also written to its ``results.json``) or the exception that stopped it (a
    diverged seed's :class:`~mlplab.train.NonFiniteError`), in the order given.

    ``cfgs``: the runs' configs (or plans), differing only in :data:`SEED_KEYS`. ``resume`` and
    ``overwrite`` as for :func:`~mlplab.train.train` (``resume``: for every run, or one per run);
    seeds resumed at different epochs train in one group per epoch, one group after another. Runs that cannot be stacked
    (:func:`lockstep_unsupported`, or models whose state outside their weights differs) train
    one after another, as :func:`~mlplab.train.train` trains them, after a line saying why.
    Ctrl-C as for :func:`~mlplab.train.train`."""
    t_start = time.perf_counter()
    plans = [as_plan(c) for c in cfgs]
    resume = [resume] * len(plans) if isinstance(resume, bool) else list(resume)
    why = _group_unsupported([p.cfg for p in plans])
    if why is None:
        with library_stop_signals():
            return _train_stacked(plans, resume, overwrite, on_epoch_end, t_start)
    Progress(plans[0].cfg.run.log).line(f"mlplab: training {len(plans)} seeds one after another, "
                                        f"not in lockstep: {why}")
    return [_solo(p, res, overwrite, on_epoch_end) for p, res in zip(plans, resume)]


def _group_unsupported(cfgs: list[RunConfig]) -> str | None:
    differ = _differences(cfgs)
    if differ:
        return f"the runs differ in more than their seed ({', '.join(differ[:4])})"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return "several processes (torchrun) share each run"
    return lockstep_unsupported(cfgs[0])


def _solo(plan: RunPlan, resume: bool, overwrite: bool,
          on_epoch_end: Callable | None) -> dict[str, Any] | BaseException:
    try:
        return train(plan, resume=resume, overwrite=overwrite, on_epoch_end=on_epoch_end)
    except RunFailure as e:
        return e


def _shared_data(plans: list[RunPlan], device: torch.device) -> RunData | None:
    """One copy of the data for every seed, unless a random subset of it depends on the seed."""
    d = plans[0].data_cfg.data
    if (d.train_subset is not None or d.test_subset is not None) and d.subset != "first":
        return None
    return load_run_data(plans[0].data_cfg, device)


def _train_stacked(plans: list[RunPlan], resume: list[bool], overwrite: bool, on_epoch_end: Callable | None,
                   t_start: float) -> list[dict[str, Any] | BaseException]:
    r = plans[0].cfg.run
    if r.threads:
        torch.set_num_threads(r.threads)
    keep_freed_memory()
    dist = init_distributed("cuda" if r.device != "cpu" and torch.cuda.is_available() else "cpu")
    data = _shared_data(plans, plans[0].device)
    members = []
    for plan in plans:  # each seed's model, optimiser and generators exactly as its solo run's
        run = _prepare(plan, dist, data)
        members.append(_Member(plan, run, _rng_state(run.device)))
    why = not_stackable([m.run.model for m in members])
    if why is not None:
        Progress(r.log).line(f"mlplab: training {len(plans)} seeds one after another, not in lockstep: {why}")
        return [_solo(p, res, overwrite, on_epoch_end) for p, res in zip(plans, resume)]
    with contextlib.ExitStack() as outer:
        for m, res in zip(members, resume):
            outer.enter_context(m.exits)  # closed early when the seed ends
            m.folder = m.exits.enter_context(open_run_folder(m.run.cfg, dist, res, overwrite, m.run.dur.total_epochs))
            if m.folder.finished is not None:
                m.outcome = m.folder.finished
                m.exits.close()
                continue
            _set_rng_state(m.rng, m.run.device)
            m.state = _resume(m.run, m.folder)  # sets a resumed run's generator to its checkpoint's
            m.rng = _rng_state(m.run.device)
            m.guard = _Guard(m.run, m.state.step, m.path)
            m.loggers = m.exits.enter_context(open_loggers(m.path, m.run.cfg))
        todo = [m for m in members if m.outcome is None]
        for step in sorted({m.state.step for m in todo}):  # seeds resumed at different points: one group each
            _train_group([m for m in todo if m.state.step == step], t_start, on_epoch_end)
    return [m.outcome for m in members]
