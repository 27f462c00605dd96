"""figS1: SW-MLPs at a fixed budget Ω get harder to train as they get sparser (and wider), and the
normalised spectrum of a sparse random weight (Fig. S.1)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..aggregate import RunRecord, select
from ..claims import Analysis, ClaimSpec
from ..measures import bin_centres
from ..plan import Plan, experiment
from ..plots import Panel, Series, draw
from ..recipes import Scale
from ..sweep import Sweep, product
from ..verdicts import compare, trend
from .budget import BY, NAME_KEYS, budget, dataset_title, point, row_point
from .common import TRAIN_COLUMNS, TRAIN_METRICS, err_rows, log2, seed_table, trained


@dataclass(frozen=True)
class FigS1:
    omega: float  # budget Ω of the trained SW-MLPs
    densities: list[float]  # p (width m = sqrt(Ω/p), rounded to a multiple of S0)
    depth: int  # "Mixer blocks": the SW-MLPs get 2 × depth blocks
    seeds: int
    epochs: int
    spectrum_omega: float  # Ω of the normalised spectrum (m = Ω^((1+a)/2), p = Ω^-a)
    trials: int  # random matrices per a


SETTINGS = {
    "smoke": FigS1(omega=2**8, densities=[0.5, 0.1], depth=1, seeds=1, epochs=1, spectrum_omega=100.0, trials=3),
    # Ω = 4·49²: p ∈ {1, 1/4, 1/16, 1/64} give widths 98–784, multiples of the S0 = 49 patches, so
    # every point has the Mixer's per-patch stem and exactly Ω connections; the sparse end 1 − p = 0.984
    "cpu": FigS1(omega=4 * 49**2, densities=[1.0, 1 / 4, 1 / 16, 1 / 64], depth=2, seeds=3, epochs=10,
                 spectrum_omega=1000.0, trials=20),
    "paper": FigS1(omega=2**16, densities=[0.9, 0.7, 0.5, 0.3, 0.1, 0.03], depth=4, seeds=3, epochs=200,
                   spectrum_omega=1000.0, trials=50),
}


SPECTRUM = ClaimSpec("spectrum", "the largest normalised singular value of M ⊙ W grows with a (sparser and wider at "
                     "fixed Ω)", "identity", "per random trial (independent matrices at each a), the least-squares "
                     "slope of σ_max against a; a t-test of the slopes > 0 (trials stand in for seeds)")
SPARSE = ClaimSpec("sparse-worse", "very sparse (and so very wide) SW-MLPs train worse at fixed Ω: the sparsest has a "
                   "higher test error than the next denser", "trained",
                   "paired t-test over seeds, next denser < sparsest (two fixed points: nothing chosen from the data)")


def _analyse_figS1(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    train_runs = select(runs, "train")
    rows = err_rows(train_runs, None, BY, TRAIN_METRICS)
    rows = sorted(rows, key=lambda r: -r["p"])
    claims = []
    panels = [Panel(f"{dataset_title(manifest)}: SW-MLP at Ω = {log2(rows[0]['omega']) if rows else '?'}",
                    "sparsity 1 − p", "test error (%)",
                    [Series("SW-MLP", [1 - r["p"] for r in rows], [r["test_error"] for r in rows],
                            [r["test_error_std"] for r in rows])])]
    spec = sorted([r.results for r in select(runs, "spectrum")], key=lambda d: d["a"])
    if spec:
        panels.append(Panel("normalised spectrum: largest singular value", "a (m = Ω^((1+a)/2), p = Ω^-a)",
                            "σ_max (normalised)", [Series("mean over trials", [d["a"] for d in spec],
                                                          [d["largest_mean"] for d in spec],
                                                          [d["largest_std"] for d in spec])]))
        for d in spec:
            centres = bin_centres(d["edges"])
            if centres.size:
                panels.append(Panel(f"spectrum, a = {d['a']:g}, Ω = {d['omega']:g}", "singular value", "count",
                                    [Series(f"{d['trials']} trials", centres, d["hist"], style="-")]))
        trials = {t: [float(d["largest"][t]) if t < len(d.get("largest", [])) else float("nan") for d in spec]
                  for t in range(max(len(d.get("largest", [])) for d in spec))}
        v = trend([d["a"] for d in spec], trials, sign=+1, log_x=False, what="Δ σ_max per unit of a")
        v = replace(v, n_of="trial")
        claims.append(SPECTRUM.decide(v, detail=", ".join(f"a={d['a']:g}: {d['largest_mean']:.2f}" for d in spec)))
    if len(rows) >= 2:
        tab = seed_table(train_runs, point)
        sparsest, denser = rows[-1], rows[-2]  # rows run from the densest to the sparsest
        v = compare(tab.get(row_point(denser), {}), tab.get(row_point(sparsest), {}),
                    what="next denser − sparsest SW-MLP test error", unit="points")
        claims.append(SPARSE.decide(v, runs=select(train_runs, None, meta__p=sparsest["p"])
                                    + select(train_runs, None, meta__p=denser["p"]),
                                    detail=f"sparsest 1−p={1 - sparsest['p']:.3g}: {sparsest['test_error']:.2f}%; next "
                                           f"denser 1−p={1 - denser['p']:.3g}: {denser['test_error']:.2f}%"))
    return Analysis(rows, ["omega", "m", "p", *TRAIN_COLUMNS],
                    {"figS1": draw(panels, "Fig. S.1: SW-MLP trainability and spectra vs sparsity")}, claims,
                    tables={"spectrum": [{k: v for k, v in d.items() if k not in ("hist", "edges")} for d in spec]})


@experiment("figS1", "SW-MLP trainability and normalised spectra vs sparsity", analyse=_analyse_figS1,
            default_dataset="cifar10", claims=(SPECTRUM, SPARSE))
def figS1(sc: Scale) -> Plan:
    """Fig. S.1: SW-MLPs at fixed Ω get harder to train as they get sparser (and wider).

    Command: ``mlplab reproduce figS1 --scale cpu``.
    Tests: SW-MLPs at Ω = 2^16 over sparsities 1 − p (width m = sqrt(Ω/p)); and the normalised
    spectrum of Z = M ⊙ W (m = Ω^((1+a)/2), p = Ω^-a, Ω = 10³, 50 trials) for a ∈ {0.5, 1, 1.5}.
    Published: error rises at high sparsity; the spectrum's largest value grows with a (a = 1.5
    shown in the paper).
    Verdicts: the sparsest SW-MLP against the next denser one (``compare``); σ_max against a over
    the random trials (``trend``; a random-matrix identity, not a trained model).
    Time: paper 18 runs × 200 epochs + spectra (≈ 1 min); cpu 12 runs at Ω = 4·49² on
    Fashion-MNIST + 3 spectra of 20 trials (``reproduce --list``); smoke seconds.
    """
    s = sc.settings(SETTINGS)
    patch = sc.patch_for_tokens(4)
    base = sc.recipe(epochs=s.epochs, cpu_epochs=s.epochs)
    models = budget(depth=s.depth, patch=patch, densities={s.omega: s.densities}, s0=sc.s0(patch))
    train = Sweep("train", base, [product(("meta.omega", [s.omega]), ("meta.family", ["sw_mlp"]))],
                  seeds=sc.seeds(s.seeds), derived=[models, *trained(sc)], name_keys=NAME_KEYS,
                  epochs=base["schedule.epochs"],
                  description=f"SW-MLP, Ω={log2(s.omega)}, {2 * s.depth} blocks, p ∈ {s.densities}")
    spectrum = Sweep("spectrum", {"omega": s.spectrum_omega, "trials": s.trials}, [("a", [0.5, 1.0, 1.5])],
                     seeds=sc.one_seed(), seed_keys=("seed",), task="normalised_spectrum", epochs=1,
                     description="normalised spectrum of M ⊙ W (Ω = 10³; smoke: 10²)")
    return Plan([[train, spectrum]], settings={"Ω": log2(s.omega), "SW-MLP blocks": 2 * s.depth,
                                               "densities": s.densities})
