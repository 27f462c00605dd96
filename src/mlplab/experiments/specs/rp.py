"""Random-permuted Mixers: fig7 (depth), figS4 (which block carries locality), figS6-S8
(RP prevents overfitting)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..aggregate import RunRecord, mean_std, select
from ..claims import Analysis, decided
from ..plan import Plan, experiment
from ..plots import Bars, Panel, Series, draw
from ..recipes import Scale
from ..sweep import Sweep, product
from ..verdicts import compare, trend, worst_of
from .common import FAMILY_LABEL, TRAIN_COLUMNS, TRAIN_METRICS, err_rows, mixer, model_seed, seed_table


# ------------------------------------------------------------------------------------------ fig7


def _analyse_fig7(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    runs = select(runs, "depth")
    by = {"family": lambda r: r.get("model.name"), "depth": lambda r: r.get("model.kwargs.depth")}
    rows = sorted(err_rows(runs, None, by, TRAIN_METRICS), key=lambda r: (r["family"], r["depth"]))
    series = []
    for f in ("s_mixer", "rp_s_mixer"):
        rs = [r for r in rows if r["family"] == f]
        series.append(Series(FAMILY_LABEL[f], [r["depth"] for r in rs], [r["test_error"] for r in rs],
                             [r["test_error_std"] for r in rs]))
    depths = sorted({r["depth"] for r in rows})
    tab = seed_table(runs, lambda r: (r.get("model.name"), r.get("model.kwargs.depth")))
    seeds = sorted({s for v in tab.values() for s in v})
    nan = float("nan")
    gap = {s: [tab.get(("rp_s_mixer", L), {}).get(s, nan) - tab.get(("s_mixer", L), {}).get(s, nan) for L in depths]
           for s in seeds}  # per seed: RP − normal test error at each depth
    v = trend(depths, gap, sign=-1, what="Δ gap", unit="points")
    mean_gap = [float(np.nanmean([gap[s][i] for s in seeds])) if seeds else nan for i in range(len(depths))]
    claim = decided("the RP S-Mixer catches up with the normal S-Mixer as depth grows",
                    "per seed, the gap (RP − normal test error) against log2(depth): least-squares slope; "
                    "one-sample t-test of the per-seed slopes < 0", v,
                    "mean gaps " + "; ".join(f"L={L}: {g:+.2f}" for L, g in zip(depths, mean_gap)))
    rows_out = rows + [{"family": "gap RP − normal", "depth": L, "test_error": g} for L, g in zip(depths, mean_gap)]
    return Analysis(rows_out, ["family", "depth", *TRAIN_COLUMNS],
                    {"fig7": draw([Panel(f"{manifest['scale']['dataset']}: S-Mixer vs RP S-Mixer", "depth L",
                                         "test error (%)", series, xticks=depths)], "Fig. 7: RP vs normal over depth")},
                    [claim])


@experiment("fig7", "RP vs normal S-Mixer over depth", analyse=_analyse_fig7, default_dataset="cifar10")
def fig7(sc: Scale) -> Plan:
    """Fig. 7: random permutations cost accuracy in shallow Mixers, less so in deep ones.

    Command: ``mlplab reproduce fig7 --scale cpu``.
    Tests: S-Mixer and RP S-Mixer with S = C = 128 at depths L ∈ {4, 8, 12, 16, 20}.
    Published: the RP S-Mixer is worse at small depth and approaches the S-Mixer as L grows.
    Verdict: per seed, the slope of the gap (RP − normal test error) against log2(L), one-sample
    t-test < 0 (``verdicts.trend``).
    Time: paper 10 runs × 3 seeds × 200 epochs; cpu (see ``reproduce --list``): S = C = 32,
    L ∈ {2, 4, 8}, 3 seeds, 10 epochs on all 60k Fashion-MNIST images. Dropped: depths 12-20
    (three depths a factor 2 apart are enough for a slope; L = 16 would double the cost).
    """
    depths = sc.pick([1, 2], [2, 4, 8], [4, 8, 12, 16, 20])
    S = sc.pick(8, 32, 128)
    base = sc.recipe(epochs=200, cpu_epochs=10)
    patch = sc.patch_for_tokens(4)
    sweep = Sweep("depth", base, [product(("meta.rp", [False, True]), ("model.kwargs.depth", depths))],
                  seeds=sc.seed_list(3), derived=[lambda o: {k: v for k, v in mixer(S, S, o["model.kwargs.depth"], patch,
                                                                                     rp=o["meta.rp"]).items()}, model_seed, sc.family_lr],
                  name_keys=["model.name", "model.kwargs.depth", "run.seed"], est_epoch_s=sc.pick(1, 36, 30),
                  epochs=base["schedule.epochs"], description=f"S-Mixer vs RP S-Mixer, S=C={S}, L ∈ {depths}")
    return Plan([[sweep]], settings={"S = C": S, "depths": depths, "patch": patch})


# ------------------------------------------------------------------------------------------ figS4


def _rp_label(v: Any) -> str:
    if v in (None, "none"):
        return "none (S-Mixer)"
    if v == "all":
        return "all (RP S-Mixer)"
    return "block " + ",".join(str(x) for x in v)


def _analyse_figS4(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    runs = select(runs, "blocks")
    label = lambda r: _rp_label(r.get("model.kwargs.rp_blocks", "none"))  # noqa: E731
    rows = err_rows(runs, None, {"rp_blocks": label}, TRAIN_METRICS)
    tab = seed_table(runs, label)
    singles = [r["rp_blocks"] for r in rows if r["rp_blocks"].startswith("block ")]
    claims = []
    if "block 0" in singles and len(singles) >= 2:
        v = worst_of(tab["block 0"], {k: tab[k] for k in singles if k != "block 0"}, name="block 0", unit="points")
        claims.append(decided("the first block carries locality: making block 0 random-permuted hurts most",
                              "among single-block replacements, block 0's test error against each other's: paired "
                              "one-sided t-tests (block 0 higher), Holm-corrected, all must hold", v,
                              ", ".join(f"{r['rp_blocks']}: {r['test_error']:.2f}%" for r in rows)))
    fig = draw([Bars(f"{manifest['scale']['dataset']}: 4-block S-Mixer, one block RP", "test error (%)",
                     [r["rp_blocks"] for r in rows], [r["test_error"] for r in rows], [r["test_error_std"] for r in rows])],
               "Fig. S.4: replacing one block with an RP block")
    return Analysis(rows, ["rp_blocks", *TRAIN_COLUMNS], {"figS4": fig}, claims)


@experiment("figS4", "Replace one block of a 4-block S-Mixer with an RP block", analyse=_analyse_figS4,
            default_dataset="cifar10")
def figS4(sc: Scale) -> Plan:
    """Fig. S.4: which block needs the Mixer's structured (local) permutations.

    Command: ``mlplab reproduce figS4 --scale cpu`` (paper: CIFAR-10, CIFAR-100, STL-10 via ``--dataset``).
    Tests: a 4-block S-Mixer (S = C = 64) with rp_blocks ∈ {none, (0,), (1,), (2,), (3,), all}.
    Published: replacing the first block costs the most accuracy; later blocks matter little.
    Verdict: block 0's error against each other single-block replacement, paired one-sided
    t-tests, Holm (``verdicts.worst_of``).
    Time: paper 6 runs × 3 seeds × 200 epochs; cpu (see ``reproduce --list``): S = C = 32, all six
    variants, 3 seeds, 10 epochs on all 60k Fashion-MNIST images.
    """
    S = sc.pick(8, 32, 64)
    depth = 4
    choices = sc.pick(["none", [0], [1]], ["none", [0], [1], [2], [3], "all"], ["none", [0], [1], [2], [3], "all"])
    base = sc.recipe(epochs=200, cpu_epochs=10)
    patch = sc.patch_for_tokens(4)
    sweep = Sweep("blocks", {**base, **mixer(S, S, depth, patch)}, [("model.kwargs.rp_blocks", choices)],
                  seeds=sc.seed_list(3), derived=[model_seed, sc.family_lr], est_epoch_s=sc.pick(1, 36, 25),
                  epochs=base["schedule.epochs"], description=f"S-Mixer S=C={S}, L=4, one block RP at a time")
    return Plan([[sweep]], settings={"S = C": S, "depth": depth})


# ------------------------------------------------------------------------------------------ figS6-S8

_S678 = {"S6": "S-Mixer L=8, SGD lr 0.1, 600 epochs", "S7": "MLP-Mixer γ=4 + AutoAugment",
         "S8": "S-Mixer, AdamW lr 0.01, batch 256"}


def _curve(r: RunRecord, key: str) -> list[float]:
    return [h.get(key, float("nan")) for h in (r.results or {}).get("history", [])]


def _gap(r: RunRecord) -> float:
    """Final generalisation gap of a run: test loss − training loss (the last epoch's)."""
    res = r.results or {}
    return float(res.get("test_loss", float("nan"))) - float(res.get("train_loss", float("nan")))


def _analyse_figS6(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    rows, panels, claims = [], [], []
    for part in ("S6", "S7", "S8"):
        rs = [r for r in select(runs, part) if r.results is not None]
        if not rs:
            continue
        series = []
        for rp in (False, True):
            sub = [r for r in rs if bool(r.get("meta.rp")) == rp]
            if not sub:
                continue
            lab = "RP" if rp else "normal"
            for key, style in (("test_loss", "-"), ("train_loss", "--")):
                curves = [_curve(r, key) for r in sub]
                n = min(len(c) for c in curves)
                if n:
                    mean = np.nanmean(np.array([c[:n] for c in curves], dtype=float), axis=0)
                    series.append(Series(f"{lab}: {key.replace('_', ' ')}", list(range(1, n + 1)), mean.tolist(),
                                         style=style))
            gm, gs, k = mean_std([_gap(r) for r in sub])
            em, es, _ = mean_std([100 * (1 - r.results["test_acc"]) for r in sub])
            rows.append({"part": part, "setting": _S678[part], "model": lab, "test_error": em, "test_error_std": es,
                         "gap": gm, "gap_std": gs, "n": k})
        panels.append(Panel(f"Fig. {part[0]}.{part[1:]}: {_S678[part]}", "epoch", "loss", series))
        tab = seed_table(rs, lambda r: bool(r.get("meta.rp")), _gap)
        v = compare(tab.get(True, {}), tab.get(False, {}), what="RP − normal generalisation gap", unit="nats")
        claims.append(decided(f"{part} ({_S678[part]}): RP reduces overfitting",
                              "final generalisation gap (test loss − training loss), per seed: paired one-sided "
                              "t-test, RP < normal", v))
    return Analysis(rows, ["part", "setting", "model", "test_error", "test_error_std", "gap", "gap_std", "n"],
                    {"figS6-S8": draw(panels, "Figs. S.6–S.8: RP Mixers overfit less")}, claims)


@experiment("figS6-S8", "RP prevents overfitting (three training settings)", analyse=_analyse_figS6,
            default_dataset="cifar10", aliases=("figS6", "figS7", "figS8", "figS6S8"))
def figS6_S8(sc: Scale) -> Plan:
    """Figs. S.6–S.8: random permutations act as a regulariser.

    Command: ``mlplab reproduce figS6-S8 --scale cpu``.
    Tests: normal vs RP, loss curves (train and test every epoch): S.6 S-Mixer L = 8, SGD lr 0.1,
    600 epochs; S.7 MLP-Mixer γ = 4 + AutoAugment; S.8 AdamW lr 0.01, batch 256. S = C is not
    given in SPEC; we use S = C = 64 at paper scale.
    Published: the normal Mixer's test loss rises late in training (overfitting) while the RP
    Mixer's does not: the RP generalisation gap is smaller.
    Verdict: per part, the per-seed gap (test − training loss at the end), paired one-sided
    t-test RP < normal (``verdicts.compare``).
    Time: paper 6 runs × 600 epochs; cpu (see ``reproduce --list``): S = C = 32, L = 4, 50 epochs,
    batch 256, each part with its published optimiser and lr (S.6, S.7: SGD 0.1, momentum 0.9;
    S.8: AdamW 0.01), on a fixed random 2 000 training images (to provoke overfitting), test loss every epoch on
    2 000 test images, 5 seeds (a paired gap difference is small); quick: the same runs with
    3 seeds (a subset of the cpu runs that the paired test can still decide).
    """
    S = sc.pick(8, 32, 64)
    depth = sc.pick(2, 4, 8)
    patch = sc.patch_for_tokens(4)
    ep = sc.pick(1, 50, 600)
    sweeps = []
    parts = (("S6", "s", dict(optim="sgd", lr=0.1, augment="crop_flip")),
             ("S7", "mlp", dict(optim="sgd", lr=0.1, augment="autoaugment")),
             ("S8", "s", dict(optim="adamw", lr=0.01, batch_size=256, augment="crop_flip")))
    for part, block, kw in parts[:1] if sc.smoke else parts:  # smoke: S.6 only
        # each part keeps its published optimiser and lr at every scale: the three settings differ
        # by them (with the cpu recipe's AdamW at the S-Mixer's lr, S.6 and S.8 were the same runs)
        base = sc.recipe(epochs=600, cpu_epochs=ep, eval_every=1, cpu_optim=None, **kw)
        if sc.name in ("cpu", "quick"):  # the same subsets at both scales: quick runs are cpu runs
            base.update({"data.train_subset": 2000, "data.test_subset": 2000, "data.subset": "random"})
        sweeps.append(Sweep(part, base, [("meta.rp", [False, True])], seeds=sc.seed_list(1, cpu=3 if sc.quick else 5),
                            derived=[lambda o, block=block: mixer(S, S, depth, patch, block=block,
                                                                  gamma=4.0 if block == "mlp" else None, rp=o["meta.rp"]),
                                     model_seed, sc.family_lr],
                            name_keys=["model.name", "run.seed"], est_epoch_s=sc.pick(1, 12 if block == "s" else 36, 30),
                            epochs=base["schedule.epochs"], description=_S678[part]))
    return Plan([sweeps], settings={"S = C": S, "depth": depth, "epochs": ep})
