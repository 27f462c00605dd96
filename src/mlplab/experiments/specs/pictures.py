"""figS9: pictures of the effective weights of an SW-MLP, a Mixer and an RP-Mixer (Fig. S.9)."""
from __future__ import annotations

import math
from typing import Any

from ..aggregate import RunRecord, select
from ..claims import Analysis, ClaimSpec
from ..measures import run_arrays
from ..plan import Plan, experiment
from ..plots import Images, draw
from ..recipes import Scale
from ..sweep import Sweep
from ..verdicts import deterministic

SPARSE_MIXER = ClaimSpec("mixer-density", "the Mixer's effective weight I_C ⊗ W and the RP-Mixer's J1(I_C ⊗ W)J2 have "
                         "density exactly 1/C (the Mixer is a sparse MLP)", "identity",
                         "nonzero fraction of each equals 1/C (true by construction: a Kronecker product with I_C)")
SPARSE_SW = ClaimSpec("sw-density", "the SW-MLP's M ⊙ A has the same density 1/C", "identity",
                      "nonzero fraction within 3 binomial standard deviations of 1/C (the mask is drawn at random, "
                      "once, with a fixed seed)")


def _analyse_figS9(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    rs = select(runs, "pictures")
    panels, claims, rows = [], [], []
    for r in rs:
        res = r.results
        rows.append({k: v for k, v in res.items() if not isinstance(v, (list, dict))})
        try:
            arr = run_arrays(r.run_dir)
            for key, title in (("sw", "SW-MLP M ⊙ A"), ("mixer", "Mixer I_C ⊗ W"), ("rp_mixer", "RP J1(I_C ⊗ W)J2")):
                panels.append(Images(f"{title} (density {res[f'density_{key}']:.3f})", arr[key]))
        except OSError:
            pass
        C, m = res["C"], res["m"]
        d = [res["density_mixer"], res["density_rp_mixer"], res["density_sw"]]
        dens = f"densities {', '.join(f'{x:.4f}' for x in d)} vs 1/C = {1 / C:.4f}"
        far = d[0] if abs(d[0] - 1 / C) >= abs(d[1] - 1 / C) else d[1]  # the one farther from 1/C
        v = deterministic(far, expected=1 / C, tol=1e-12, what="density (the farther of the two from 1/C)",
                          detail=dens)
        claims.append(SPARSE_MIXER.decide(v))
        # the SW-MLP's mask keeps each entry with probability 1/C: its density is 1/C up to sampling,
        # three binomial standard deviations of a fraction over m² entries
        tol = 3.0 * math.sqrt((1 / C) * (1 - 1 / C)) / m
        v = deterministic(d[2], expected=1 / C, tol=tol, what="density(M ⊙ A)", detail=dens)
        claims.append(SPARSE_SW.decide(v, detail=f"tolerance {tol:.2g}"))
    return Analysis(rows, None, {"figS9": draw(panels, "Fig. S.9: effective weights at S = C = 8", ncols=3)}, claims)


@experiment("figS9", "Pictures of effective weights: M⊙A vs I_C⊗W vs J1(I_C⊗W)J2", analyse=_analyse_figS9,
            default_dataset="synthetic", needs_plateau=False, claims=(SPARSE_MIXER, SPARSE_SW))
def figS9(sc: Scale) -> Plan:
    """Fig. S.9: what the Mixer's effective weight looks like next to an SW-MLP's.

    Command: ``mlplab reproduce figS9 --scale paper`` (no training; every scale runs the same).
    Tests: the m×m matrices (m = S·C = 64) of an SW-MLP (density 1/C), the Mixer's I_C ⊗ W and
    the RP-Mixer's J1(I_C ⊗ W)J2, drawn side by side.
    Published: pictures; all three are equally sparse, the Mixer's is block-diagonal and the
    RP-Mixer's looks like a random sparse matrix.
    Time: about a second at every scale.
    """
    sweep = Sweep("pictures", {"S": 8, "C": 8}, seeds=[0], seed_keys=("seed",), task="pictures", epochs=1,
                  description="three effective weights at S = C = 8")
    return Plan([[sweep]], settings={"S": 8, "C": 8})
