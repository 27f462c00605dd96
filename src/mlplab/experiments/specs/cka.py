"""fig2a-c: the representations of a trained MLP-Mixer resemble those of an SW-MLP of matching
sparsity, by mini-batch linear CKA (Fig. 2a-c)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..aggregate import RunRecord, group_runs, select
from ..claims import Analysis, ClaimSpec
from ..derived import derive
from ..plan import Plan, experiment
from ..plots import Heatmap, Panel, Series, draw
from ..recipes import Scale
from ..sweep import Sweep, expand
from ..verdicts import compare, optimum_within
from .common import TRAIN_METRICS, err_rows, mixer, sw_mlp, trained

DEPTH, GAMMA = 3, 2.0  # MLP-Mixer blocks L and expansion γ (SW-MLPs: 2L blocks, the same γ)


@dataclass(frozen=True)
class Fig2abc:
    sizes: list[int]  # S = C of the Mixers (SW-MLP width m = S·C)
    ns: list[int]  # SW-MLP densities p = 2^-n
    seeds: int
    epochs: int
    cka_batches: int  # CKA on cka_batches × cka_batch_size test images
    cka_batch_size: int


SETTINGS = {
    "smoke": Fig2abc(sizes=[4], ns=[0, 2], seeds=1, epochs=1, cka_batches=2, cka_batch_size=32),
    # S = C = 16 (m = 256; m = 64 says little about sparsity), n ∈ {0, 2, 4, 8}: p = 1/C = 2^-4
    # inside, the dense and a very sparse end; 15 epochs: the loss falls ~4 % per epoch at the end
    "cpu": Fig2abc(sizes=[16], ns=[0, 2, 4, 8], seeds=3, epochs=15, cka_batches=10, cka_batch_size=256),
    "paper": Fig2abc(sizes=[64, 32], ns=list(range(11)), seeds=1, epochs=600, cka_batches=40, cka_batch_size=250),
}


PEAK = ClaimSpec("peak", "the average diagonal CKA between the Mixer and SW-MLPs peaks at an intermediate sparsity",
                 "trained", "per training seed, a parabola of the mean diagonal CKA in log2(1/p) and its slopes at the "
                 "densest and the sparsest p: a maximum inside when the first is > 0 and the last < 0, both by t-tests "
                 "over seeds (``verdicts.optimum_within``)")
MATCH = ClaimSpec("match", "the Mixer is more similar to the SW-MLP with p = 1/C than to the dense MLP", "trained",
                  "paired t-test over training seeds: mean diagonal CKA at p = 1/C > at p = 1")


def _analyse_fig2(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    cka = select(runs, "cka")
    err = err_rows(runs, "train", {"family": lambda r: r.get("meta.family"), "S": lambda r: r.get("meta.S"),
                                   "p": lambda r: r.get("meta.p")}, TRAIN_METRICS)
    by = {"S=C": lambda r: r.get("meta.S"), "p": lambda r: r.get("meta.p"), "log2(1/p)": lambda r: r.get("meta.n")}
    rows = group_runs(cka, by, {"cka_diag": lambda r: r.results["diagonal_mean"]})
    panels, claims = [], []
    sizes = sorted({r["S=C"] for r in rows})
    series = []
    # per seed of the trained pair: the mean diagonal CKA at each (S, n)
    cka_tab: dict[tuple, dict[int, float]] = {}
    for r in cka:
        if r.results is not None:
            cka_tab.setdefault((r.get("meta.S"), r.get("meta.n")), {})[int(r.get("seed", 0))] = \
                float(r.results["diagonal_mean"])
    for S in sizes:
        rs = sorted([r for r in rows if r["S=C"] == S], key=lambda r: -r["p"])
        series.append(Series(f"Mixer S = C = {S}", [r["p"] for r in rs], [r["cka_diag"] for r in rs],
                             [r["cka_diag_std"] for r in rs]))
        ns = [r["log2(1/p)"] for r in rs]  # densest to sparsest
        mine = select(runs, "train", meta__S=S)
        if len(rs) >= 3:
            seeds = sorted({sd for n in ns for sd in cka_tab.get((S, n), {})})
            y = {sd: [cka_tab.get((S, n), {}).get(sd, float("nan")) for n in ns] for sd in seeds}
            v = optimum_within(ns, y, min(ns), max(ns), maximum=True, what="mean diagonal CKA", unit="CKA",
                               x_name="log2(1/p)")
            claims.append(PEAK.decide(v, label=f"S = C = {S}", runs=mine,
                                      detail=", ".join(f"p={r['p']:.3g}: {r['cka_diag']:.3f}" for r in rs)))
        n_match = int(round(math.log2(S)))  # p = 1/C = 2^-log2(S) at S = C
        dense, match = cka_tab.get((S, 0)), cka_tab.get((S, n_match))
        if dense and match:
            v = compare(dense, match, what="CKA(p = 1) − CKA(p = 1/C)", unit="CKA")
            claims.append(MATCH.decide(v, label=f"S = C = {S}", runs=mine))
    panels.append(Panel("average diagonal CKA (Fig. 2b)", "SW-MLP density p", "mean diagonal CKA", series,
                        xscale="log"))
    for S in sizes:  # CKA matrices with the matching sparse MLP and with the dense one (Fig. 2a, c)
        for p_lab, pval in (("p = 1/C", 1.0 / S), ("p = 1 (dense)", 1.0)):
            rr = [r for r in cka if r.get("meta.S") == S and abs(r.get("meta.p") - pval) < 1e-12]
            if rr:
                res = rr[0].results
                panels.append(Heatmap(f"S=C={S}: Mixer vs SW-MLP {p_lab}", res["matrix"],
                                      xlabels=res["layers_b"], ylabels=res["layers_a"], xlabel="SW-MLP layer",
                                      ylabel="Mixer layer"))
    table = sorted(rows, key=lambda r: (r["S=C"], -r["p"]))
    return Analysis(table, ["S=C", "log2(1/p)", "p", "cka_diag", "cka_diag_std", "n"],
                    {"fig2a-c": draw(panels, "Fig. 2a-c: CKA between a Mixer and SW-MLPs over sparsity")}, claims,
                    tables={"test_error": err})


def _cka_pairs(train: Sweep, sizes: list[int], ns: list[int], seeds: list[int]) -> list[dict[str, Any]]:
    """One CKA run per (S, n, training seed): the Mixer's and the SW-MLP's run folders."""
    specs = expand(train)

    def find(**kw) -> str:
        for s in specs:
            if all(s.overrides.get(k) == v for k, v in kw.items()):
                return f"{s.sweep}/{s.name}"
        raise KeyError(kw)

    pts = []
    for S in sizes:
        for n in ns:
            for seed in seeds:
                pts.append({"meta.S": S, "meta.n": n, "meta.p": 2.0 ** -n, "seed": seed,
                            "a": find(**{"meta.family": "mlp_mixer", "meta.S": S, "run.seed": seed}),
                            "b": find(**{"meta.family": "sw_mlp", "meta.S": S, "meta.n": n, "run.seed": seed})})
    return pts


@experiment("fig2a-c", "CKA between a trained MLP-Mixer and SW-MLPs over sparsity", analyse=_analyse_fig2,
            default_dataset="cifar10", aliases=("fig2", "fig2a", "fig2abc"), claims=(PEAK, MATCH))
def fig2abc(sc: Scale) -> Plan:
    """Fig. 2a-c: a Mixer's representations resemble those of an SW-MLP of matching sparsity.

    Command: ``mlplab reproduce fig2a-c --scale cpu``.
    Tests: train MLP-Mixers (L = 3, γ = 2, S = C ∈ {64, 32}) and SW-MLPs of the same effective
    width m = S·C and expansion, with 2L = 6 blocks (one per Mixer mixing layer) and density
    p = 2^-n, n = 0..10 (CIFAR-10, AdamW lr 0.01, batch 128, 600 epochs, AutoAugment, cosine);
    then mini-batch linear CKA (docs/science.md §6) between each Mixer layer (token and channel branches)
    and each SW-MLP block, on test images, from the runs' saved weights.
    Published: the average diagonal CKA peaks at an intermediate sparsity, and the CKA matrix with
    the matching sparse MLP (p = 1/C = 1/64) is higher than with the dense MLP.
    Verdicts: per training seed, the mean diagonal CKA at each p; a maximum strictly inside the
    sparsity sweep (``verdicts.optimum_within``) and p = 1/C against p = 1 (``verdicts.compare``).
    Time: paper 24 runs × 600 epochs (GPU days) + 22 CKA runs; cpu 15 runs at S = C = 16 on
    Fashion-MNIST + 12 CKA runs (``reproduce --list``); smoke seconds.
    """
    s = sc.settings(SETTINGS)
    seeds = sc.seeds(s.seeds)
    patch = sc.patch_for_tokens(4)
    base = sc.recipe(epochs=s.epochs, cpu_epochs=s.epochs, optim="adamw", lr=0.01, augment="autoaugment")
    models = []
    for S in s.sizes:
        models.append({**mixer(S, S, DEPTH, patch, block="mlp", gamma=GAMMA), "meta.family": "mlp_mixer",
                       "meta.S": S})
        for n in s.ns:
            models.append({**sw_mlp(S * S, 2.0 ** -n, 2 * DEPTH, patch, GAMMA), "meta.family": "sw_mlp",
                           "meta.S": S, "meta.n": n, "meta.p": 2.0 ** -n})
    train = Sweep("train", base, [("meta.i", list(range(len(models))))], seeds=seeds,
                  derived=[derive("lookup", key="meta.i", table=models), *trained(sc)],
                  name_keys=["meta.family", "meta.S", "meta.n", "run.seed"], epochs=base["schedule.epochs"],
                  description="Mixers and SW-MLPs of matching width")
    pts = _cka_pairs(train, s.sizes, s.ns, seeds)
    cka = Sweep("cka", {"batches": s.cka_batches, "batch_size": s.cka_batch_size}, [("meta.i", list(range(len(pts))))],
                seeds=[0], seed_keys=("cka_seed",), derived=[derive("lookup", key="meta.i", table=pts)],
                name_keys=["meta.S", "meta.n", "seed"], task="cka", epochs=1,
                description="mini-batch CKA, Mixer vs each SW-MLP")
    return Plan([[train], [cka]], settings={"S = C": s.sizes, "n (p = 2^-n)": s.ns, "depth": DEPTH, "γ": GAMMA})
