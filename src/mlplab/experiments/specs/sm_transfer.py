"""sm-transfer: Scaling MLPs (Bachmann et al. 2023, docs/science.md §7) Tables 2–3 — pre-train an
inverted-bottleneck MLP, then fine-tune it (a new head, SGD 0.01 head / 0.001 body) or fit a linear
probe on its frozen pre-logit features, on data it was not trained on.

Like sm-batch-size (``specs/sm_batch_size.py``, Fig. 4; the shared pieces: ``specs/pretraining.py``)
it runs in two stages: the pre-training sweep, then sweeps that read its runs by folder (the
``finetune`` and ``linear_eval`` tasks, :mod:`mlplab.experiments.tasks`), each point naming its
pre-trained run through the ``match`` derived key over the pre-training sweep's expanded runs
(:func:`~mlplab.experiments.specs.pretraining.pretrained_rows`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..aggregate import RunRecord, group_runs, loss_change, select
from ..claims import Analysis, ClaimSpec, Need
from ..derived import derive
from ..measures import seed_mean, seed_sd
from ..plan import Plan, experiment
from ..plots import Bars, draw
from ..recipes import Scale, preset
from ..sweep import Sweep, product
from ..verdicts import all_of, compare
from .common import trained
from .pretraining import (
    FM_DOWN,
    FM_PRE,
    IN21K,
    bottleneck,
    downstream_error,
    downstream_errors,
    lion_probe_sweep,
    pretrained_rows,
    probe_sweep,
)

__all__ = ["TRANSFER", "TABLE2", "TABLE3", "DOWNSTREAM"]

# Published Table 2 (fine-tune) and Table 3 (linear probe), test accuracy %: docs/science.md §7
DOWNSTREAM = ["C-10", "C-100", "STL-10", "TinyIN", "IN-1k"]
TABLE2 = {"B-6/Wi-1024": [69.9, 43.0, 51.5, 47.1, 15.2], "B-6/Wi-1024 + DA": [91.5, 76.4, 85.0, 62.7, 38.7],
          "B-12/Wi-1024 + DA": [93.6, 79.2, 88.9, 69.9, 42.5]}
TABLE3 = {"B-6/Wi-1024": [65.1, 41.3, 53.4, 45.6, 13.0], "B-6/Wi-1024 + DA": [87.8, 73.2, 85.2, 61.3, 39.2],
          "B-12/Wi-1024 + DA": [90.6, 74.5, 88.3, 68.5, 40.7]}


@dataclass(frozen=True)
class Transfer:
    width: int  # bottleneck MLP B-depth/Wi-width (paper: the registered B-6/Wi-1024)
    depth: int
    model: str | None  # a registered Scaling-MLPs size (paper scale), else bottleneck_mlp of width × depth
    pretrain: dict[str, Any]  # data overrides of the pre-training data
    downstream: dict[str, Any]  # data overrides of the downstream data
    sizes: list[int]  # pre-training set sizes N; the largest is the whole pre-training split
    pretrain_epochs: float  # at the largest N; a smaller N gets epochs × N_max / N (the same examples seen)
    finetune_epochs: float  # fine-tuning and from scratch on the downstream data (the same budget)
    finetune_batch: int | None  # fine-tuning batch (None: the published 2048)
    downstream_n: int | None  # downstream training examples (a seeded random subset; None: all)
    seeds: int
    da: dict[str, Any]  # augment overrides of "+ DA" pre-training ("no DA": none)
    probe: str  # "ridge": closed-form ridge on frozen features (linear_eval); "lion": the paper's LION probe
    note: str  # how the setting departs from the paper


TRANSFER = {
    "smoke": Transfer(width=16, depth=1, model=None, pretrain=FM_PRE, downstream=FM_DOWN, sizes=[32, 64],
                      pretrain_epochs=1, finetune_epochs=1, finetune_batch=8, downstream_n=64, seeds=1,
                      da={"augment.crop_padding": 1, "augment.hflip": True},
                      probe="ridge", note="synthetic data: runs every stage, decides nothing"),
    # classes 0–4 → 5–9; two pre-training sizes a factor 4 apart at the same examples seen (6 → 24
    # epochs), so that data size, not compute, differs; the larger is all 30,000 images of classes
    # 0–4, 10× the 3,000 downstream images (the regime: ≥ 10×, BIG_ENOUGH); "+ DA" = crop (padding 2)
    # + flip (random-resized crop and mixup need more epochs);
    # fine-tuning at batch 32 for 13 epochs: 1,219 SGD steps, as many as the paper's 50 CIFAR epochs
    # at batch 2048 (~1,220) with its lrs
    "cpu": Transfer(width=128, depth=4, model=None, pretrain=FM_PRE, downstream=FM_DOWN, sizes=[7500, 30000],
                    pretrain_epochs=6, finetune_epochs=13, finetune_batch=32, downstream_n=3000, seeds=3,
                    da={"augment.crop_padding": 2, "augment.hflip": True}, probe="ridge",
                    note="Fashion-MNIST classes 0–4 (7,500 or 30,000 images) → 5–9 (3,000 images) at 28×28 instead "
                         "of ImageNet-21k → CIFAR/STL/TinyIN/IN-1k at 64×64; B-4/Wi-128 instead of B-6/Wi-1024; "
                         "pre-training with AdamW (lr 3e-3, the cpu "
                         "default, not tuned) for 180,000 examples instead of LION 1e-5 for 800 epochs; "
                         "fine-tuning 13 epochs at batch 32 (as many SGD steps as the paper's 50 epochs at batch 2048) "
                         "with the published lrs (0.01 head / 0.001 body); the linear probe is the closed-form ridge "
                         "probe of the linear_eval task (λ chosen on 10% of the downstream training split) instead of "
                         "LION 1e-5 for 50 epochs; \"+ DA\" is crop + flip, not random-resized crop + flip + mixup"),
    "paper": Transfer(width=1024, depth=6, model="bottleneck_mlp_b6_wi1024",
                      pretrain=IN21K, downstream={},
                      sizes=[1_200_000, 12_000_000], pretrain_epochs=800, finetune_epochs=50, finetune_batch=None,
                      downstream_n=None,
                      seeds=3,
                      da={"augment.random_resized_crop": True, "augment.hflip": True, "augment.mixup": 0.8},
                      probe="lion",
                      note="ImageNet-21k pack (data.root) at 64×64, pre-training as the in21k_b6_wi1024 preset "
                           "(the released checkpoints' 800 epochs); the smaller size, a random tenth, is this "
                           "toolkit's addition (Table 2 has one size); fine-tuning as in21k_finetune_*; the "
                           "downstream set is the one asked for (--dataset, default cifar10)"),
}


def _downstream_data(s: Transfer) -> dict[str, Any]:
    """Data overrides of every downstream run (fine-tuned, from scratch, probed): the same classes and,
    seed for seed, the same random subset."""
    sub = {"data.train_subset": s.downstream_n, "data.subset": "random"} if s.downstream_n else {}
    return {**s.downstream, **sub}


def _pretrain_sweep(sc: Scale, s: Transfer) -> Sweep:
    if sc.paper:
        base = {k: v for k, v in preset(f"in21k_{s.model.removeprefix('bottleneck_mlp_')}").items()
                if not k.startswith("augment.") or k == "augment.label_smoothing"}
        base.update(s.pretrain)
        n_max = max(s.sizes)
    else:
        base = sc.recipe(epochs=s.pretrain_epochs, cpu_epochs=s.pretrain_epochs, augment="none")
        base.update({**bottleneck(s.width, s.depth), **s.pretrain, "run.checkpoint_every": 1})
        n_max = max(s.sizes)
    points = []
    for n in s.sizes:
        ep = s.pretrain_epochs * n_max / n
        for da in (False, True):
            o = {"meta.n": n, "meta.da": da, "schedule.epochs": ep, **(s.da if da else {})}
            if n != n_max:
                o.update({"data.train_subset": n, "data.subset": "random"})
            points.append(o)
    if sc.smoke:
        for o in points:  # smoke: the recipe's tiny training set is the largest size
            o.setdefault("data.train_subset", n_max)
    return Sweep("pretrain", base, [product(("meta.n", s.sizes), ("meta.da", [False, True]))],
                 seeds=sc.seeds(s.seeds),
                 derived=[derive("match", keys=["meta.n", "meta.da"], rows=points), *trained(sc)],
                 name_keys=["meta.n", "meta.da", "run.seed"], epochs=s.pretrain_epochs,
                 description="pre-training with and without DA at two data sizes")


def _downstream_base(sc: Scale, s: Transfer) -> dict[str, Any]:
    """The fine-tuning recipe: the published one (in21k_finetune_*) at paper scale; at cpu and smoke
    its optimiser (SGD momentum 0.9, lr 0.01 head / 0.001 body, clipping 1) on the cpu recipe's
    batch, epochs and light augmentation."""
    ft = preset("in21k_finetune_cifar10")
    if sc.paper:
        base = {k: v for k, v in ft.items() if k != "data.dataset"}
        base.update({"data.dataset": sc.dataset, "schedule.epochs": s.finetune_epochs, "model.new_head": True,
                     **_downstream_data(s)})
        return base
    base = sc.recipe(epochs=s.finetune_epochs, cpu_epochs=s.finetune_epochs, cpu_optim=None,
                     optim="sgd", lr=ft["optim.lr"])
    base.update({k: ft[k] for k in ("optim.head_lr", "optim.momentum", "optim.nesterov", "optim.weight_decay",
                                    "optim.grad_clip")})
    base.update({"model.new_head": True, **_downstream_data(s)})
    base["run.batch_size"] = s.finetune_batch
    return base


PRETRAIN_RATIO = 10.0  # the regime: the pre-training set at least this many times the downstream one (paper ~240×)
BIG_ENOUGH = Need("pretrain_ratio", ">=", PRETRAIN_RATIO,
                  f"the regime: the pre-training set is ≥ {PRETRAIN_RATIO:g}× the "
                  "downstream training set (ImageNet-21k → CIFAR: ~240×); below it pre-training is a second look at "
                  "similar data, not transfer")
TRANSFERS = Need("transfers", ">=", 1, "the premise: pre-training helps at all — the fine-tuned N = max + DA model "
                 "beats training from scratch (the first claim HELD); without it, which pre-training helps more is "
                 "moot",
                 kind="premise")
U = "points of downstream test error"
TRANSFER_CLAIM = ClaimSpec("transfer", "pre-trained features transfer: fine-tuning the largest + DA model beats "
                           "training from scratch (with DA) on the same downstream data and epochs", "trained",
                           "paired t-test over seeds on the downstream test error", needs=(BIG_ENOUGH,),
                           effect=None, effect_source="")
DA_FT = ClaimSpec("da-finetune", "DA in pre-training matters: the fine-tuned error with DA in pre-training is below "
                  "the one without, at every pre-training size", "trained",
                  "per size a paired t-test over seeds (+DA < no DA), all sizes must hold (``verdicts.all_of``)",
                  needs=(BIG_ENOUGH, TRANSFERS),
                  effect=69.9 - 91.5, effect_source="Table 2, CIFAR-10 (69.9 → 91.5 %)")
DA_PROBE = ClaimSpec("da-probe", "DA in pre-training matters: the linear-probe error with DA in pre-training is "
                     "below the one without, at every pre-training size", "trained",
                     "per size a paired t-test over seeds (+DA < no DA), all sizes must hold (``verdicts.all_of``)",
                     needs=(BIG_ENOUGH, TRANSFERS),
                     effect=65.1 - 87.8, effect_source="Table 3, CIFAR-10 (65.1 → 87.8 %)")
DA_OVER_SIZE = ClaimSpec("da-over-size", "DA matters more than data size: the largest model without DA, fine-tuned, "
                         "loses to the smallest with DA", "trained", "paired t-test over seeds on the fine-tuned "
                         "downstream test error", needs=(BIG_ENOUGH, TRANSFERS))
DA_OVER_SCRATCH = ClaimSpec("no-da-vs-scratch", "DA matters more than data size: the largest model without DA, "
                            "fine-tuned, loses to training from scratch with DA", "trained", "paired t-test over seeds "
                            "on the downstream test error", needs=(BIG_ENOUGH, TRANSFERS))


def _analyse_transfer(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    ft, scratch, probe = select(runs, "finetune"), select(runs, "scratch"), select(runs, "probe")
    sizes = sorted({r.get("meta.n") for r in select(runs, "pretrain")} | {r.get("meta.n") for r in ft})
    rows = []
    by = {"stage": lambda r: r.sweep, "N": lambda r: r.get("meta.n"), "DA": lambda r: r.get("meta.da")}
    for sweep in ("finetune", "probe", "scratch", "pretrain"):
        rows += group_runs(select(runs, sweep), by, {"test_error": downstream_error, "loss_change": loss_change})
    if not sizes:
        return Analysis(rows, None, {}, [])
    big, small = max(sizes), min(sizes)
    err = {(n, da): downstream_errors(ft, meta__n=n, meta__da=da) for n in sizes for da in (False, True)}
    perr = {(n, da): downstream_errors(probe, meta__n=n, meta__da=da) for n in sizes for da in (False, True)}
    scr = downstream_errors(scratch)
    pre = select(runs, "pretrain")
    n_pre = max((r.results.get("train_examples", 0) for r in pre if r.results), default=0)
    n_down = max((r.results.get("train_examples", 0) for r in scratch if r.results), default=0)
    first = compare(err[big, True], scr, what="fine-tuned − from scratch", unit=U)
    transfers = {True: 1.0, False: 0.0, None: float("nan")}[first.held]  # undecided: the premise is unknown
    measured = {"pretrain_ratio": n_pre / n_down if n_down else float("nan"), "transfers": transfers}
    claims = [TRANSFER_CLAIM.decide(first, label=f"N = {big}", measured=measured, runs=pre)]
    for spec, tab in ((DA_FT, err), (DA_PROBE, perr)):
        parts = {f"N = {n}": compare(tab[n, True], tab[n, False], what="+DA − no DA", unit=U) for n in sizes}
        claims.append(spec.decide(all_of(parts, what="every pre-training size", unit=U), measured=measured, runs=pre))
    if big != small:
        v = compare(err[small, True], err[big, False], what=f"N = {small} + DA − N = {big} no DA", unit=U)
        claims.append(DA_OVER_SIZE.decide(v, measured=measured, runs=pre))
    v = compare(scr, err[big, False], what=f"from scratch + DA − N = {big} no DA fine-tuned", unit=U)
    claims.append(DA_OVER_SCRATCH.decide(v, measured=measured, runs=pre))
    notes = [f"pre-training set {n_pre} images, downstream training set {n_down} ({measured['pretrain_ratio']:.3g}×)"]
    published = _published_transfer(err, perr, big)
    fig = _figure_transfer(err, perr, scr, sizes)
    return Analysis(rows, ["stage", "N", "DA", "test_error", "test_error_std", "loss_change", "n"],
                    {"sm-transfer": fig}, claims, published, notes=notes)


def _published_transfer(err, perr, big) -> list[dict[str, Any]]:
    """Tables 2–3 rows beside ours (test accuracy %): ours is the N = max, B-4/Wi-128-sized proxy."""
    ours = {"B-6/Wi-1024": False, "B-6/Wi-1024 + DA": True}
    out = []
    for what, table, tab in (("fine-tune (Table 2)", TABLE2, err), ("linear probe (Table 3)", TABLE3, perr)):
        for model, accs in table.items():
            row = {"what": what, "model": model, **dict(zip(DOWNSTREAM, accs))}
            da = ours.get(model)
            row["ours"] = round(100.0 - seed_mean(tab[big, da]), 2) if da is not None and (big, da) in tab else "–"
            out.append(row)
    return out


def _figure_transfer(err, perr, scr, sizes):
    """Mean ± sd over seeds of the downstream error, fine-tuned (with from scratch) and probed."""
    labels = [f"N={n}{' +DA' if da else ''}" for n in sizes for da in (False, True)]
    cells = [(n, da) for n in sizes for da in (False, True)]
    panels = [Bars("fine-tuned (Table 2 proxy)", "downstream test error (%)", labels + ["scratch +DA"],
                   [seed_mean(err[c]) for c in cells] + [seed_mean(scr)],
                   [seed_sd(err[c]) for c in cells] + [seed_sd(scr)]),
              Bars("linear probe (Table 3 proxy)", "downstream test error (%)", labels,
                   [seed_mean(perr[c]) for c in cells], [seed_sd(perr[c]) for c in cells])]
    return draw(panels, "Scaling MLPs Tables 2–3 in miniature: transfer with and without DA in pre-training")


@experiment("sm-transfer", "Scaling MLPs Tables 2–3: fine-tune and linear probe, with and without DA in pre-training",
            analyse=_analyse_transfer, default_dataset="cifar10", aliases=("sm-table2", "sm-table3"),
            claims=(TRANSFER_CLAIM, DA_FT, DA_PROBE, DA_OVER_SIZE, DA_OVER_SCRATCH))
def sm_transfer(sc: Scale) -> Plan:
    """Scaling MLPs Tables 2–3: pre-trained MLP features transfer, and DA in pre-training matters more than data size.

    Command: ``mlplab reproduce sm-transfer --scale cpu``.
    Tests: an inverted-bottleneck MLP pre-trained with and without DA at two pre-training sizes
    (``meta.n``), then per pre-trained run (i) fine-tuned on the downstream data with a new head
    (SGD momentum 0.9, lr 0.01 head / 0.001 body, ``finetune`` task) and (ii) a linear probe on its
    frozen pre-logit features (``linear_eval``, closed-form ridge; paper scale: LION 1e-5, body
    frozen); plus the same model from scratch with DA on the downstream data for the same epochs.
    Published: Table 2 fine-tune B-6/Wi-1024 C-10 69.9%, + DA 91.5%; Table 3 probe 65.1%, + DA 87.8%;
    pre-training without DA loses to training from scratch with DA.
    Verdict: paired t-tests over seeds on the downstream test error (every size must hold); NOT
    TESTABLE below a 10× pre-training set, and the DA claims unless pre-training transfers at all.
    Time: paper 4 IN-21k pre-trainings × 800 epochs × 3 seeds (GPU months); cpu 12 pre-trainings
    + 15 fine-tunings + 12 probes on Fashion-MNIST 0–4 → 5–9 (``reproduce --list``); smoke seconds.
    """
    s = sc.settings(TRANSFER)
    seeds = sc.seeds(s.seeds)
    pre = _pretrain_sweep(sc, s)
    keys = ["meta.n", "meta.da", "run.seed"]
    name = s.model or "bottleneck_mlp"
    model = {"model.name": name} if s.model else bottleneck(s.width, s.depth)
    ft_base = {**_downstream_base(sc, s), **model}
    ft = Sweep("finetune", ft_base, [product(("meta.n", s.sizes), ("meta.da", [False, True]))], seeds=seeds,
               derived=[derive("match", keys=keys, rows=pretrained_rows(pre, keys, "pretrained"))],
               name_keys=keys, task="finetune", epochs=s.finetune_epochs,
               description="fine-tuning each pre-trained model on the downstream data (new head)")
    if sc.paper:  # the from-scratch recipe of sm-table1 (docs/science.md §7) for the same epochs
        scratch_base = sc.recipe(epochs=s.finetune_epochs, optim="lion", lr=5e-5, batch_size=1024,
                                 extra={"data.image_size": 64, "augment.label_smoothing": 0.3})
        scratch_base.update(bottleneck(s.width, s.depth))
    else:
        scratch_base = sc.recipe(epochs=s.finetune_epochs, cpu_epochs=s.finetune_epochs)
        scratch_base.update({**model, **_downstream_data(s)})
    scratch = Sweep("scratch", scratch_base, [], seeds=seeds, derived=trained(sc), name_keys=["run.seed"],
                    epochs=s.finetune_epochs, description="the same model from scratch with DA, same downstream epochs")
    if s.probe == "ridge":
        probe = probe_sweep(sc, pretrained_rows(pre, keys, "run"), _downstream_data(s), keys,
                             "closed-form ridge probe on frozen features")
    else:
        lion = {**ft_base, "optim.name": "lion", "optim.lr": 1e-5, "optim.freeze": "body", "optim.head_lr": None,
                "optim.momentum": 0.9, "schedule.epochs": 50}
        probe = lion_probe_sweep(pretrained_rows(pre, keys, "pretrained"), lion, keys,
                                  "linear probe: body frozen, LION 1e-5, 50 epochs")
    return Plan([[pre], [ft, scratch, probe]],
                settings={"model": name if s.model else f"B-{s.depth}/Wi-{s.width}", "pre-training N": s.sizes,
                          "pre-training epochs at max N": s.pretrain_epochs, "downstream epochs": s.finetune_epochs,
                          "+ DA": s.da, "probe": s.probe},
                notes=[s.note, "pre-training and from-scratch runs at cpu scale use the cpu recipe (AdamW, batch 256, "
                               "cosine); fine-tuning keeps the paper's SGD optimiser and lrs"])
