"""sm-table1: Scaling MLPs (Bachmann et al. 2023) Table 1 trained from scratch — data augmentation,
the inverted bottleneck and longer training each help a plain MLP. Its models and recipes are
shared with sm-weights (``specs/sm_weights.py``, Figs. 10–11).

The two models (docs/science.md §2, ``models/mlp.py``):

    MLP      z ↦ W σ(LN(z)), σ = GELU     registry ``mlp`` with norm_position="pre": the official code's
                                          ``StandardMLP``; the paper's text writes σ(W LN(z))
    MLP-Inv  z ↦ z + W_c σ(W_e LN(z))     registry ``bottleneck_mlp``, W_e ∈ R^{km×m}, k = 4

both with a linear embedding of the flattened image to width m before the blocks and a linear head.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..aggregate import RunRecord, select
from ..claims import Analysis, ClaimSpec, Need
from ..derived import derive
from ..plan import Plan, experiment
from ..plots import Bars, Panel, Series, draw
from ..recipes import Scale
from ..sweep import Sweep, product
from ..verdicts import all_of, compare
from .common import TRAIN_COLUMNS, TRAIN_METRICS, err_rows, seed_table, trained

__all__ = ["table1_models", "MLP", "INV", "TABLE1", "NO_DA", "CPU_DA", "PAPER_DA", "CPU_RECIPE", "PAPER_RECIPE"]

MLP, INV = "MLP", "MLP-Inv"


def _model(name: str, width: int, depth: int, expansion: float) -> dict[str, Any]:
    """Overrides of the standard MLP or MLP-Inv of width m and L blocks (``meta.lr_key``: their
    held-out lr entry at cpu scale)."""
    if name == MLP:
        return {"model.name": "mlp", "model.kwargs.width": width, "model.kwargs.depth": depth,
                "model.kwargs.norm_position": "pre", "model.kwargs.act": "gelu", "meta.lr_key": "sm-table1 mlp"}
    return {"model.name": "bottleneck_mlp", "model.kwargs.width": width, "model.kwargs.depth": depth,
            "model.kwargs.expansion": expansion, "meta.lr_key": "sm-table1 inv"}


def table1_models(width: int, depth: int, expansion: float = 4.0) -> dict[str, dict[str, Any]]:
    """The two models of Table 1 by name."""
    return {n: _model(n, width, depth, expansion) for n in (MLP, INV)}


@dataclass(frozen=True)
class SmTable1:
    width: int  # m of both models (the paper: the same width for both)
    depth: int  # blocks L
    expansion: float  # k of MLP-Inv
    epochs: int  # the 2×2 table's budget (paper: 100)
    longer: list[int]  # MLP-Inv + DA also trained this long, each budget its own sweep (paper: 1000, 5000)
    train_subset: int | None  # training examples (None: all)
    seeds: int
    da: dict[str, Any]  # the augmentation overrides of "DA"
    recipe: dict[str, Any]  # Scale.recipe keywords besides the epochs


NO_DA = {"augment.crop_padding": 0, "augment.hflip": False, "augment.mixup": 0.0}
PAPER_DA = {"augment.crop_padding": 4, "augment.hflip": True, "augment.mixup": 0.8}  # crop + flip + mixup 0.8
PAPER_RECIPE = dict(optim="lion", lr=5e-5, batch_size=1024, weight_decay=0.0, augment="none",
                    extra={"data.image_size": 64, "augment.label_smoothing": 0.3, "schedule.schedule": "constant"})
CPU_DA = {"augment.crop_padding": 1, "augment.hflip": True, "augment.mixup": 0.0}  # crop (padding 1 on 28×28) + flip
CPU_RECIPE = dict(augment="none", extra={"augment.label_smoothing": 0.3})

TABLE1 = {
    "smoke": SmTable1(width=16, depth=1, expansion=4.0, epochs=1, longer=[3], train_subset=None, seeds=1,
                      da=CPU_DA, recipe=CPU_RECIPE),
    # Fashion-MNIST 28×28, m = 128, L = 6 (the paper's depth); 3 000 training images for 32 epochs, so
    # that the models without DA fit their training set: the paper's regime (hundreds of epochs on
    # CIFAR), where augmentation can help; with a few passes over many images it only slows the fit;
    # MLP-Inv + DA also at 4× the epochs; AdamW at each model's held-out lr (lr_search.json
    # "sm-table1 mlp" / "sm-table1 inv"), cosine; no mixup
    "cpu": SmTable1(width=128, depth=6, expansion=4.0, epochs=32, longer=[128], train_subset=3000, seeds=3,
                    da=CPU_DA, recipe=CPU_RECIPE),
    "paper": SmTable1(width=1024, depth=6, expansion=4.0, epochs=100, longer=[1000, 5000], train_subset=None,
                      seeds=3, da=PAPER_DA, recipe=PAPER_RECIPE),
}

# Table 1 of Scaling MLPs: test accuracy (%) from scratch at 64×64
TABLE1_PUBLISHED = [
    {"row": "MLP @100E", "key": (MLP, False, "short"), "cifar10": 47.1, "cifar100": 16.5, "tinyimagenet": 7.3,
     "imagenet": 4.7},
    {"row": "MLP + DA", "key": (MLP, True, "short"), "cifar10": 49.3, "cifar100": 18.0, "tinyimagenet": 8.7,
     "imagenet": 11.5},
    {"row": "MLP-Inv", "key": (INV, False, "short"), "cifar10": 58.1, "cifar100": 30.5, "tinyimagenet": 8.9,
     "imagenet": 8.7},
    {"row": "MLP-Inv + DA @1000E", "key": (INV, True, 0), "cifar10": 70.1, "cifar100": 48.3, "tinyimagenet": 27.2,
     "imagenet": 28.7},
    {"row": "MLP-Inv + DA @5000E", "key": (INV, True, 1), "cifar10": 75.4, "cifar100": 50.4, "tinyimagenet": 31.2,
     "imagenet": 31.7},
    {"row": "ResNet18 + DA", "key": None, "cifar10": 93.2, "cifar100": 75.6, "tinyimagenet": 68.9, "imagenet": 69.7},
]

OVERFIT_POINTS = 2.0  # the premise of "DA helps": without DA the models fit their training set this much better
CLAIM_DA = ClaimSpec("da-helps", "data augmentation helps: lower test error with DA than without, for the MLP and for "
                     "MLP-Inv", "trained", "paired t-tests per model, DA < no DA at the table's budget, both must hold "
                     "(``verdicts.all_of``)", effect=47.1 - 49.3, effect_source="Table 1, CIFAR-10 MLP (47.1 → 49.3 %)",
                     needs=(Need("no_da_overfit", ">=", OVERFIT_POINTS, "the premise: without DA the models overfit "
                                 f"(test − training error ≥ {OVERFIT_POINTS:g} points for both), so augmentation has "
                                 "something to fix", kind="premise"),))
CLAIM_INV = ClaimSpec("inv-helps", "the inverted bottleneck helps: MLP-Inv has lower test error than the MLP, with and "
                      "without DA", "trained", "paired t-tests, MLP-Inv < MLP, without and with DA, both must hold "
                      "(``verdicts.all_of``)", effect=47.1 - 58.1,
                      effect_source="Table 1, CIFAR-10 without DA (47.1 → 58.1 %)")
CLAIM_EPOCHS = ClaimSpec("epochs-help", "more epochs help with DA: MLP-Inv + DA trained longer has lower test error "
                         "than trained shorter", "trained", "paired t-tests of each longer budget against the next "
                         "shorter one, all must hold (``verdicts.all_of``)", effect=70.1 - 75.4,
                         effect_source="Table 1, CIFAR-10 MLP-Inv + DA (1000 → 5000 epochs: 70.1 → 75.4 %)")


def _point(r: RunRecord) -> tuple[str, bool, int]:
    return str(r.get("meta.model")), bool(r.get("meta.da")), int(r.get("schedule.epochs"))


def _label(model: str, da: bool, epochs: int) -> str:
    return f"{model}{' + DA' if da else ''} @{epochs}E"


def _analyse_table1(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    runs = [r for r in runs if r.sweep == "table" or r.sweep.startswith("longer")]
    by = {"model": lambda r: r.get("meta.model"), "DA": lambda r: bool(r.get("meta.da")),
          "epochs": lambda r: int(r.get("schedule.epochs"))}
    rows = err_rows(select(runs), None, by, TRAIN_METRICS)
    for r in rows:
        r["test_acc"] = 100.0 - r["test_error"]
    rows.sort(key=lambda r: (r["epochs"], r["model"] != MLP, r["DA"]))
    tab = seed_table(select(runs), _point)
    pts = sorted(tab)
    short = min((p[2] for p in pts), default=0)
    budgets = sorted({p[2] for p in pts if p[0] == INV and p[1]})
    get = lambda m, da, e: tab.get((m, da, e), {})  # noqa: E731
    parts = {
        CLAIM_DA: {f"{m} @{short}E": compare(get(m, True, short), get(m, False, short),
                                           what=f"{m} + DA − {m} test error", unit="points") for m in (MLP, INV)},
        CLAIM_INV: {f"{'with' if da else 'without'} DA": compare(get(INV, da, short), get(MLP, da, short),
                                                               what="MLP-Inv − MLP test error", unit="points")
                    for da in (False, True)},
        CLAIM_EPOCHS: {f"@{hi}E vs @{lo}E": compare(get(INV, True, hi), get(INV, True, lo),
                                                  what="longer − shorter test error", unit="points")
                       for lo, hi in zip(budgets, budgets[1:])},
    }
    gap = [r["test_error"] - r["train_error"] for r in rows if not r["DA"] and r["epochs"] == short]
    measured = {"no_da_overfit": min(gap) if len(gap) == 2 else float("nan")}
    claims = []
    for spec, ps in parts.items():
        mine = [r for r in select(runs) if (spec is not CLAIM_EPOCHS or (bool(r.get("meta.da")) and
                                                                        r.get("meta.model") == INV))]
        claims.append(spec.decide(all_of(ps, unit="points") if ps else None, measured=measured, runs=mine,
                                  detail="" if ps else "needs MLP-Inv + DA at two budgets"))
    ours = {(r["model"], r["DA"], r["epochs"]): r for r in rows}
    longer = budgets[1:]
    ds = manifest.get("scale", {}).get("dataset", "")
    published = []
    for p in TABLE1_PUBLISHED:
        k = p["key"]
        mine = None
        if k is not None:
            e = short if k[2] == "short" else (longer[k[2]] if k[2] < len(longer) else None)
            mine = ours.get((k[0], k[1], e)) if e is not None else None
        published.append({"row": p["row"], **{c: p[c] for c in ("cifar10", "cifar100", "tinyimagenet", "imagenet")},
                          f"ours ({ds}, epochs)": (f"{mine['test_acc']:.2f} ± {mine['test_error_std']:.2f} "
                                                   f"@{mine['epochs']}E (n={mine['n']})") if mine else "–"})
    labels = [_label(r["model"], r["DA"], r["epochs"]) for r in rows]
    panels = [Bars(f"{ds}: test error (mean ± sd over seeds)", "test error (%)", labels,
                   [r["test_error"] for r in rows], [r["test_error_std"] for r in rows],
                   groups=[r["model"] for r in rows])]
    inv_da = [r for r in rows if r["model"] == INV and r["DA"]]
    if len(inv_da) >= 2:
        panels.append(Panel("MLP-Inv + DA: longer training", "epochs", "test error (%)",
                            [Series("MLP-Inv + DA", [r["epochs"] for r in inv_da], [r["test_error"] for r in inv_da],
                                    [r["test_error_std"] for r in inv_da])], xscale="log"))
    notes = [f"published numbers are CIFAR-10 / CIFAR-100 / Tiny ImageNet / ImageNet-1k at 64×64; ours are {ds} "
             f"(see the settings): compare directions, not levels"]
    return Analysis(rows, ["model", "DA", "epochs", "test_acc", *TRAIN_COLUMNS],
                    {"sm-table1": draw(panels, "Scaling MLPs Table 1: MLP vs MLP-Inv, with and without DA")},
                    claims, published, notes=notes)


def _table1_sweeps(sc: Scale, s: SmTable1) -> list[Sweep]:
    base = sc.recipe(epochs=s.epochs, cpu_epochs=s.epochs, **s.recipe)
    if s.train_subset:
        base.update({"data.train_subset": s.train_subset, "data.subset": "random"})
    models = table1_models(s.width, s.depth, s.expansion)
    da = [NO_DA, s.da]  # by meta.da (False, True)
    derived = [derive("lookup", key="meta.model", table=models), derive("lookup", key="meta.da", table=da),
               *trained(sc)]
    names = ["meta.model", "meta.da", "schedule.epochs", "run.seed"]
    seeds = sc.seeds(s.seeds)
    table = Sweep("table", base, [product(("meta.model", [MLP, INV]), ("meta.da", [False, True]))], seeds=seeds,
                  derived=derived, name_keys=names, epochs=s.epochs,
                  description=f"MLP and MLP-Inv (B-{s.depth}/Wi-{s.width}) × DA off/on, {s.epochs} epochs")
    sweeps = [table]
    for e in s.longer:
        sweeps.append(Sweep(f"longer-{e}", {**base, "schedule.epochs": e, "meta.model": INV, "meta.da": True},
                            seeds=seeds, derived=derived, name_keys=names, epochs=e,
                            description=f"MLP-Inv + DA, {e} epochs"))
    return sweeps


@experiment("sm-table1", "Scaling MLPs Table 1: DA, the inverted bottleneck and longer training help MLPs",
            analyse=_analyse_table1, default_dataset="cifar10", claims=(CLAIM_DA, CLAIM_INV, CLAIM_EPOCHS))
def sm_table1(sc: Scale) -> Plan:
    """Scaling MLPs Table 1: from scratch, augmentation and the inverted bottleneck both help MLPs.

    Command: ``mlplab reproduce sm-table1 --scale cpu`` (paper: ``--dataset cifar10|cifar100``).
    Tests: MLP (B-6/Wi-1024, z ↦ W σ(LN z)) and MLP-Inv (z ↦ z + W_c σ(W_e LN z), k = 4), each with
    and without DA (random crop + flip + mixup 0.8), LION lr 5e-5, label smoothing 0.3, 64×64,
    100 epochs; MLP-Inv + DA also at 1000 and 5000 epochs (each budget its own sweep).
    Published: C-10 test acc MLP 47.1, +DA 49.3, MLP-Inv 58.1, MLP-Inv+DA 70.1 (1000E), 75.4 (5000E).
    Verdict: per claim, paired t-tests that must all hold (DA < no DA per model; Inv < MLP with
    and without DA; each longer budget < the shorter); "DA helps" is NOT TESTABLE unless the models
    without DA overfit (its premise). Across claims and ids the summary applies Benjamini–Hochberg.
    Time: paper 12 runs × 100 + 3 × 1000 + 3 × 5000 epochs (``reproduce --list``); cpu 15 runs on
    3 000 Fashion-MNIST images (32 and 128 epochs); smoke seconds.
    """
    s = sc.settings(TABLE1)
    sweeps = _table1_sweeps(sc, s)
    return Plan([sweeps], settings={"models": f"MLP and MLP-Inv, L = {s.depth}, m = {s.width}, k = {s.expansion:g}",
                                    "epochs": s.epochs, "MLP-Inv + DA also at": s.longer,
                                    "training images": s.train_subset or "all", "DA": s.da},
                notes=_notes(sc))


def _notes(sc: Scale) -> list[str]:
    if sc.paper:
        return ["batch 1024: §7 does not state Table 1's batch (the official code's default is 4096); no lr schedule "
                "and no weight decay, as the official code's defaults"]
    return ["proxy: Fashion-MNIST at 28×28×1 (not CIFAR/ImageNet at 64×64×3), m = 128 instead of 1024, 3 000 "
            "training images, 32 and 128 epochs instead of 100/1000/5000; AdamW at each model's lr chosen on a "
            "held-out 10% of the training set (recipes.cpu_lr) instead of LION 5e-5; DA = random crop (padding 1) "
            "+ flip without mixup; label smoothing 0.3 as published"] if not sc.smoke else []
