"""sm-weights: Scaling MLPs (Bachmann et al. 2023) Figs. 10–11 — the first layer's units become more
localised with augmentation and with more data. MLP-Inv as in sm-table1 (``specs/sm_table1.py``);
the localisation measure r½ is :func:`mlplab.analysis.units.half_energy_radius`, measured per run
by :func:`mlplab.experiments.measures.first_layer_units`."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...analysis.units import uniform_half_energy_radius, unit_picture
from ..aggregate import RunRecord, select
from ..claims import Analysis, ClaimSpec, Need
from ..derived import derive
from ..measures import first_layer_units, mean, sd
from ..plan import Plan, experiment
from ..plots import Bars, Images, draw
from ..recipes import Scale
from ..sweep import Sweep
from ..verdicts import compare
from .common import trained
from .sm_table1 import CPU_DA, CPU_RECIPE, INV, NO_DA, PAPER_DA, PAPER_RECIPE, table1_models

__all__ = ["WEIGHTS", "CONDITIONS", "LOCALISED_BELOW", "CLAIM_W_DA", "CLAIM_W_DATA"]


@dataclass(frozen=True)
class SmWeights:
    width: int  # m of MLP-Inv
    depth: int
    subsets: tuple[int | None, int]  # pre-training set sizes (more, fewer); None: the whole training set
    more_size: int  # training-set size behind None (for the equal-steps epochs)
    epochs: int  # on the larger set; the smaller set trains for as many steps (epochs × more/fewer)
    seeds: int
    da: dict[str, Any]
    recipe: dict[str, Any]  # Scale.recipe keywords besides the epochs
    units: int  # units drawn per condition in the figure


WEIGHTS = {
    "smoke": SmWeights(width=16, depth=1, subsets=(64, 32), more_size=64, epochs=1, seeds=1, da=CPU_DA,
                       recipe=CPU_RECIPE, units=8),
    # 12 000 images for 8 epochs with and without DA, and 3 000 images for 32 epochs (as many steps; the
    # config of sm-table1's cpu MLP-Inv + DA runs): the pictures and r½ compare equal training lengths
    "cpu": SmWeights(width=128, depth=6, subsets=(12000, 3000), more_size=12000, epochs=8, seeds=3, da=CPU_DA,
                     recipe=CPU_RECIPE, units=16),
    "paper": SmWeights(width=1024, depth=6, subsets=(None, 12500), more_size=50000, epochs=100, seeds=3,
                       da=PAPER_DA, recipe=PAPER_RECIPE, units=16),
}

CONDITIONS = ("no DA", "DA", "DA, fewer images")  # (meta.condition)
# "More localised" is a claim about units that are localised: when every condition's seed-mean
# median r½ is at least this fraction of an even spread's, no condition has localised units (a unit
# confined to a disc of a quarter of the image has about 0.5) and the claims are not testable
LOCALISED_BELOW = 0.9
LOCALISED = Need("min_relative_r_half", "<", LOCALISED_BELOW, "the premise: some condition has localised units (its "
                 f"median r½ below {LOCALISED_BELOW:g} of an even spread's) — 'more localised' is about units that are",
                 kind="premise")
CLAIM_W_DA = ClaimSpec("localised-da", "first-layer units are more localised with DA: smaller r½ of ΔW^(1) with DA "
                       "than without", "trained",
                       "per seed the median over units of r½ (pixels), paired t-test DA < no DA "
                       "(same data, same steps)",
                       needs=(LOCALISED,))
CLAIM_W_DATA = ClaimSpec("localised-data", "first-layer units are more localised with more data: smaller r½ on the "
                         "larger pre-training set", "trained", "per seed the median over units of r½, paired t-test "
                         "larger set < smaller set (both with DA, as many steps)", needs=(LOCALISED,))


def _analyse_weights(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    units = int(manifest.get("settings", {}).get("units drawn", 16))
    r_half, pictures, side, rows = first_layer_units(select(runs, "units"), units)
    ref = uniform_half_energy_radius(side) if side else float("nan")
    rel = {c: mean(list(v.values())) / ref for c, v in r_half.items() if v}
    measured = {"min_relative_r_half": min(rel.values()) if rel else float("nan")}
    units_runs = select(runs, "units")
    claims = [CLAIM_W_DA.decide(compare(r_half.get("DA", {}), r_half.get("no DA", {}), what="r½ with DA − without",
                                        unit="px"), measured=measured,
                                runs=[r for r in units_runs if r.get("meta.condition") in ("DA", "no DA")]),
              CLAIM_W_DATA.decide(compare(r_half.get("DA", {}), r_half.get("DA, fewer images", {}),
                                          what="r½ more images − fewer", unit="px"), measured=measured,
                                  runs=[r for r in units_runs
                                        if r.get("meta.condition") in ("DA", "DA, fewer images")])]
    panels: list[Any] = []
    for cond in CONDITIONS:
        if cond in pictures:
            image, symmetric = unit_picture(pictures[cond])
            panels.append(Images(f"{cond}: ΔW^(1) units (lowest seed, most localised first)", image,
                                 symmetric=symmetric))
    means = [mean(list(r_half[c].values())) if r_half.get(c) else float("nan") for c in CONDITIONS]
    sds = [sd(list(r_half[c].values()), ddof=1) if len(r_half.get(c, {})) > 1 else float("nan")
           for c in CONDITIONS]
    panels.append(Bars(f"r½ (median over units; uniform = {ref:.2f} px)", "r½ (pixels)", list(CONDITIONS), means, sds))
    table = sorted(rows, key=lambda r: (str(r.get("condition")), r.get("seed") or 0))
    published = [{"figure": "Figs. 10–11", "published": "pictures: with DA and with more pre-training data the first "
                  "layer's units look more localised (no number)",
                  "ours": "; ".join(f"{c}: r½ {m:.2f} px" for c, m in zip(CONDITIONS, means) if math.isfinite(m))}]
    notes = [f"r½: radius (pixels) of the smallest disc about a unit's energy centre of mass holding half of Σ w²; "
             f"energy spread evenly over the {side}×{side} image gives {ref:.2f} px (no localisation)",
             "W^(1) is the embedding of the flattened image (ch·H·W → m); r½ and the pictures are of ΔW^(1) = "
             "W^(1) − its initial value (rebuilt from run.seed, initial_model): what training added, without the "
             "random initial weights, which a short training leaves a large part of (r_half_W_median: r½ of "
             "W^(1) itself); units drawn as H×W images, each on its own symmetric colour scale"]
    if side:
        notes.append("median r½ relative to the even spread: " + ", ".join(
            f"{c} {m / ref:.3f}" for c, m in zip(CONDITIONS, means) if math.isfinite(m))
            + " (1 = no localisation; a unit confined to a disc of a quarter of the image's area is about 0.5)")
    return Analysis(table, ["condition", "seed", "train_images", "epochs", "r_half_median", "r_half_q10",
                            "r_half_q90", "r_half_W_median", "test_error"],
                    {"sm-weights": draw(panels, "Scaling MLPs Figs. 10–11: first-layer units", ncols=2)}, claims,
                    published, notes=notes)


@experiment("sm-weights", "Scaling MLPs Figs. 10–11: first-layer units are more localised with DA and more data",
            analyse=_analyse_weights, default_dataset="cifar100", claims=(CLAIM_W_DA, CLAIM_W_DATA))
def sm_weights(sc: Scale) -> Plan:
    """Scaling MLPs Figs. 10–11: the first layer's units with and without DA, and over data sizes.

    Command: ``mlplab reproduce sm-weights --scale cpu``.
    Tests: MLP-Inv B-6/Wi-1024 pre-trained with and without DA on the whole training set, and with
    DA on a quarter of it for as many steps; W^(1) ∈ R^{3wh×m} reshaped to w×h×3 per unit; per unit
    r½, the radius of the smallest disc about its energy centre holding half of Σ w².
    Published: pictures: the units become more localised with DA and with more data.
    Verdict: per seed the median r½ over units; paired t-tests DA < no DA and more data < less
    data; NOT TESTABLE when no condition has localised units (the premise).
    Time: paper 9 runs (3 × 100 epochs of CIFAR-100 at 64×64 per seed); cpu 9 runs on Fashion-MNIST
    (12 000 images × 8 epochs, 3 000 × 32); smoke seconds.
    """
    s = sc.settings(WEIGHTS)
    base = sc.recipe(epochs=s.epochs, cpu_epochs=s.epochs, **s.recipe)
    model = table1_models(s.width, s.depth)[INV]
    more, fewer = s.subsets
    steps_factor = s.more_size / fewer
    conds = {"no DA": {**NO_DA, "meta.da": False, "data.train_subset": more, "schedule.epochs": s.epochs},
             "DA": {**s.da, "meta.da": True, "data.train_subset": more, "schedule.epochs": s.epochs},
             "DA, fewer images": {**s.da, "meta.da": True, "data.train_subset": fewer,
                                  "schedule.epochs": int(round(s.epochs * steps_factor))}}
    base.update({**model, "meta.model": INV, "data.subset": "random"})
    sweep = Sweep("units", base, [("meta.condition", list(CONDITIONS))], seeds=sc.seeds(s.seeds),
                  derived=[derive("lookup", key="meta.condition", table=conds), *trained(sc)],
                  name_keys=["meta.condition", "run.seed"], epochs=s.epochs,
                  description=f"MLP-Inv B-{s.depth}/Wi-{s.width}: {', '.join(CONDITIONS)}")
    return Plan([[sweep]], settings={"model": f"MLP-Inv, L = {s.depth}, m = {s.width}, k = 4",
                                     "training images (more, fewer)": [more or "all", fewer],
                                     "epochs (more, fewer)": [s.epochs, conds["DA, fewer images"]["schedule.epochs"]],
                                     "units drawn": s.units, "DA": s.da},
                notes=_weights_notes(sc))


def _weights_notes(sc: Scale) -> list[str]:
    if sc.smoke:
        return []
    notes = ["the smaller set trains for as many steps as the larger one (epochs × size ratio)"]
    if not sc.paper:
        notes.append("proxy: Fashion-MNIST 28×28×1 (units are 28×28 grey images, not 64×64×3), m = 128, 12 000 vs "
                     "3 000 images, AdamW at the held-out lr instead of LION 5e-5; DA = random crop (padding 1) + "
                     "flip without mixup; the smaller set's runs have the config of sm-table1's cpu MLP-Inv + DA runs")
    return notes
