"""``specs/runtime.py`` (tableS3) field by field: the four models of each setting against Table S.3's
grid written out here (CIFAR: S = 64, C = 48, L = 3, γ = 2, P = 4 on 32×32, the SW-MLP of width
m = S·C = 3072 and density p = Ω/(γm²) with Ω = γ(C·S² + C²·S)/2; ImageNet: S = 256, C = 588,
L = 8, γ = 4, P = 14 on 224×224), the table's rows, each claim on its own pair of models with
its median per-round ratio from numpy, the published rows and the panels (the drawing replaced by
a recorder). test_experiments_analyses.py drives the report."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.plots import Bars
from mlplab.experiments.specs import runtime as rt


@pytest.mark.parametrize("st, S, C, L, gamma, P, side, classes", [
    (rt.CIFAR, 64, 48, 3, 2.0, 4, 32, 10), (rt.IMAGENET, 256, 588, 8, 4.0, 14, 224, 1000)])
def test_models_of_a_setting_against_table_s3(st, S, C, L, gamma, P, side, classes):
    omega = gamma * (C * S * S + C * C * S) / 2
    m = S * C
    p = omega / (gamma * m * m)
    common = {"image_size": side, "patch_size": P, "num_classes": classes}
    mixer = {**common, "num_tokens": S, "hidden_dim": C, "depth": L, "expansion": gamma}
    sw = {**common, "width": m, "density": p, "depth": 2 * L, "block": "mlp", "expansion": gamma}
    models = rt._models(st)
    assert models == [{"label": "MLP-Mixer", "model": "mlp_mixer", "kwargs": mixer},
                      {"label": "RP-Mixer", "model": "rp_mlp_mixer", "kwargs": mixer},
                      {"label": "SW-MLP", "model": "sw_mlp", "kwargs": sw},
                      {"label": "SW-MLP (sparse)", "model": "sw_mlp", "kwargs": {**sw, "storage": "sparse"}}]
    assert models[0]["kwargs"] is not models[1]["kwargs"]  # the RP-Mixer's own copy
    assert models[2]["kwargs"]["density"] == pytest.approx(344064 / (2 * 3072 ** 2) if S == 64 else p, rel=1e-12)


def test_a_dense_budget_caps_the_density_at_one():
    st = rt.Setting("tiny", S=2, C=2, L=1, gamma=1.0, P=4, side=8)  # Ω = 8, m = 4: p = min(1, 8/16)
    assert rt._models(st)[2]["kwargs"]["density"] == 0.5
    st = rt.Setting("tiny", S=1, C=1, L=1, gamma=1.0, P=4, side=8)  # Ω = 1, m = 1: p = 1, not more
    sw = rt._models(st)[2]["kwargs"]
    assert sw["density"] == 1.0 and "block" not in sw and "expansion" not in sw  # γ = 1: single-layer blocks


def times(base: float, ratio: float, n: int, seed: int) -> list[float]:
    g = np.random.default_rng(seed)
    return list(base * ratio * (1 + 0.2 * g.random(n)))


def result(ratios: dict[str, float], n: int = 40, device: str = "cpu", extra=()) -> dict:
    """One setting's cost run: each model's step times, ratio × the Mixer's per round (a shared load)."""
    load = 1 + 0.3 * np.random.default_rng(7).random(n)
    rows = []
    for i, (label, r) in enumerate(ratios.items()):
        t = list(0.01 * r * load * (1 + 0.002 * np.random.default_rng(i).standard_normal(n)))
        rows.append({"label": label, "params": 1000 * (i + 1), "params_nonzero": 500 * (i + 1) if i else None,
                     "flops_per_example": 1e6 * (i + 1) if i != 1 else None, "weight_MB": 1.5 * (i + 1),
                     "peak_MB": None, "step_s": float(np.median(t)), "epoch_s": 100 * float(np.median(t)) + i,
                     "step_times": t})
    return {"rows": rows, "machine": {"loadavg": [1.25, 1.0, 1.0]}, "load_after": [2.5, 1.0, 1.0], "device": device}


def run(setting: str, res: dict, sweep: str = "cost") -> RunRecord:
    return RunRecord(sweep, f"setting={setting}", Path("."), {"setting": setting}, results=res)


@pytest.fixture
def drawn(monkeypatch):
    out = []
    monkeypatch.setattr(rt, "draw", lambda panels, title: out.append((panels, title)) or "figure")
    return out


RATIOS = {"MLP-Mixer": 1.0, "RP-Mixer": 1.04, "SW-MLP": 4.6, "SW-MLP (sparse)": 9.0}


def test_rows_of_each_setting(drawn):
    res = {"cifar": result(RATIOS), "imagenet": result(RATIOS, n=3, device="cuda")}
    an = rt._analyse_tableS3([run("cifar", res["cifar"]), run("imagenet", res["imagenet"]),
                              run("other", result(RATIOS), sweep="train")], {})
    want = []
    for setting in ("cifar", "imagenet"):
        for x in res[setting]["rows"]:
            fl = x["flops_per_example"]
            want.append({"setting": setting, "model": x["label"], "params": x["params"],
                         "params_nonzero": x["params_nonzero"], "MFLOPs/example": fl / 1e6 if fl else float("nan"),
                         "weight_MB": x["weight_MB"], "peak_MB": None, "step_s": x["step_s"], "epoch_s": x["epoch_s"],
                         "rounds": len(x["step_times"]), "device": res[setting]["device"]})
    assert len(an.table) == 8
    for got, w in zip(an.table, want):
        assert got.keys() == w.keys()
        for k in w:
            if k == "MFLOPs/example" and w[k] != w[k]:
                assert got[k] != got[k]
            else:
                assert got[k] == w[k], k
    assert an.columns is None and an.figures == {"tableS3": "figure"}


def _median_ratio(res, a):
    t = {x["label"]: x["step_times"] for x in res["rows"]}
    return float(np.median(np.divide(t[a], t["MLP-Mixer"])))


@pytest.mark.parametrize("rp, sw, words", [(1.04, 4.6, ("HELD", "HELD")), (1.3, 1.5, ("DID NOT HOLD", "DID NOT HOLD")),
                                           (1.3, 4.6, ("HELD", "DID NOT HOLD")), (1.04, 1.5, ("DID NOT HOLD", "HELD"))])
def test_each_claim_on_its_own_pair(drawn, rp, sw, words):
    res = result({**RATIOS, "RP-Mixer": rp, "SW-MLP": sw})
    an = rt._analyse_tableS3([run("cifar", res)], {})
    slower, cheap = an.claims
    assert (slower.key, cheap.key) == ("sw-slower", "rp-as-cheap") and (slower.verdict, cheap.verdict) == words
    assert slower.stats.effect == pytest.approx(_median_ratio(res, "SW-MLP"), rel=1e-12)
    assert (slower.stats.extra["bound"], slower.stats.extra["side"]) == (2.0, "above")
    assert slower.stats.effect_name == "median SW-MLP / MLP-Mixer step time (claim > 2)"
    assert cheap.stats.effect == pytest.approx(_median_ratio(res, "RP-Mixer"), rel=1e-12)
    assert (cheap.stats.extra["bound"], cheap.stats.extra["side"]) == (1.1, "below")
    assert cheap.stats.effect_name == "median RP-Mixer / MLP-Mixer step time (claim < 1.1)"
    assert slower.claim.startswith("cifar: ") and cheap.claim.startswith("cifar: ")
    epochs = ", ".join(f"{x['label']} {x['epoch_s']:.2f} s/epoch" for x in res["rows"])
    assert slower.detail == f"{epochs}; load average 1.25 before, 2.50 after"
    assert cheap.detail == "load average 1.25 before, 2.50 after"


def test_no_claim_without_the_three_models_and_published_rows_of_cifar_only(drawn):
    three = {k: v for k, v in RATIOS.items() if k != "RP-Mixer"}
    an = rt._analyse_tableS3([run("cifar", result(three))], {})
    assert an.claims == []
    assert [(p["model"], p["ours s/epoch"], p["our ratio"]) for p in an.published] == [
        ("SW-MLP", an.table[1]["epoch_s"], an.table[1]["epoch_s"] / an.table[0]["epoch_s"]),
        ("RP-Mixer", None, None), ("MLP-Mixer", an.table[0]["epoch_s"], 1.0)]
    an = rt._analyse_tableS3([run("imagenet", result(RATIOS))], {})
    assert [c.claim.split(":")[0] for c in an.claims] == ["imagenet", "imagenet"] and an.published == []
    no_mixer = {k: v for k, v in RATIOS.items() if k != "MLP-Mixer"}
    an = rt._analyse_tableS3([run("cifar", result(no_mixer))], {})
    assert [p["our ratio"] for p in an.published] == [None, None, None]


def test_published_rows(drawn):
    res = result(RATIOS)
    an = rt._analyse_tableS3([run("cifar", res)], {})
    ep = {x["label"]: x["epoch_s"] for x in res["rows"]}
    pub = {"SW-MLP": 28.2, "RP-Mixer": 6.41, "MLP-Mixer": 6.08}  # Table S.3, V100, s/epoch
    assert an.published == [{"model": k, "published s/epoch (V100)": v, "ours s/epoch": ep[k],
                             "published ratio to MLP-Mixer": round(v / 6.08, 2), "our ratio": ep[k] / ep["MLP-Mixer"]}
                            for k, v in pub.items()]
    assert [p["published ratio to MLP-Mixer"] for p in an.published] == [4.64, 1.05, 1.0]


def test_panels_by_setting(drawn):
    res = {"imagenet": result(RATIOS), "cifar": result({"MLP-Mixer": 1.0, "SW-MLP": 3.0})}
    an = rt._analyse_tableS3([run("imagenet", res["imagenet"]), run("cifar", res["cifar"])], {})
    ((panels, title),) = drawn
    assert title == "Table S.3: memory, FLOPs and runtime"
    labels = {s: [x["label"] for x in res[s]["rows"]] for s in res}
    epoch = {s: [x["epoch_s"] for x in res[s]["rows"]] for s in res}
    params = {s: [x["params"] for x in res[s]["rows"]] for s in res}
    assert panels == [Bars("cifar: time per epoch", "s / epoch", labels["cifar"], epoch["cifar"]),
                      Bars("imagenet: time per epoch", "s / epoch", labels["imagenet"], epoch["imagenet"]),
                      Bars("cifar: parameters", "parameters", labels["cifar"], params["cifar"], yscale="log"),
                      Bars("imagenet: parameters", "parameters", labels["imagenet"], params["imagenet"], yscale="log")]
    assert len(an.table) == 6


def test_paper_plan_times_both_settings():
    from mlplab.experiments import expand, plan_experiment

    _, _, plan = plan_experiment("tableS3", "paper", check_available=False)
    (sweep,) = plan.sweeps
    runs = {s.overrides["setting"]: s.overrides for s in expand(sweep)}
    assert set(runs) == {"cifar", "imagenet"}
    for name, o in runs.items():
        assert (o["steps"], o["batch"], o["epoch_examples"]) == (40, 128, 50000)
        S, C, L, gamma = (64, 48, 3, 2.0) if name == "cifar" else (256, 588, 8, 4.0)
        assert [(m["label"], m["kwargs"].get("num_tokens"), m["kwargs"].get("hidden_dim"), m["kwargs"]["depth"])
                for m in o["models"]] == [("MLP-Mixer", S, C, L), ("RP-Mixer", S, C, L), ("SW-MLP", None, None, 2 * L),
                                          ("SW-MLP (sparse)", None, None, 2 * L)]
        assert o["models"][2]["kwargs"]["width"] == S * C
        assert o["models"][2]["kwargs"]["density"] == pytest.approx(gamma * (C * S * S + C * C * S) / 2
                                                                    / (gamma * (S * C) ** 2), rel=1e-12)
