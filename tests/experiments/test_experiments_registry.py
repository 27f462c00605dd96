"""Experiments by id: every SPEC §7 id is registered, documented, plannable at every scale, and
every training run it plans is a valid run config (checked against the real ``make_config``)."""
import pytest

from mlplab.experiments import estimate_cost, expand, format_list, get_experiment, list_experiments, plan_experiment

SPEC_IDS = ["fig2a-c", "fig2d", "fig4", "fig5", "fig6", "fig7", "figS1", "figS2-S3", "figS4", "figS5",
            "figS6-S8", "figS9", "table1", "tableS3", "implicit-bias"]


def test_every_spec_id_is_registered():
    assert list_experiments() == SPEC_IDS


@pytest.mark.parametrize("alias,id", [("figS2/S3", "figS2-S3"), ("FIGS2-S3", "figS2-S3"), ("fig2", "fig2a-c"),
                                      ("figs6-s8", "figS6-S8"), ("TABLE1", "table1")])
def test_aliases(alias, id):
    assert get_experiment(alias).id == id


def test_unknown_id_lists_valid_ids():
    with pytest.raises(ValueError) as e:
        get_experiment("fig99")
    msg = str(e.value)
    assert "fig99" in msg and all(i in msg for i in SPEC_IDS)


@pytest.mark.parametrize("id", SPEC_IDS)
def test_docstring_gives_command_result_and_time(id):
    doc = get_experiment(id).doc
    for word in ("Command:", "Tests:", "Published:", "Time:"):
        assert word in doc, f"{id}: docstring lacks {word!r}"
    assert f"mlplab reproduce {id}" in doc


@pytest.mark.parametrize("scale", ["smoke", "cpu", "paper"])
def test_plans_are_valid_run_configs(scale):
    from mlplab.train import make_config

    for id in SPEC_IDS:
        _, sc, plan = plan_experiment(id, scale, check_available=False)
        assert plan.stages and all(plan.stages)
        c = estimate_cost(plan)
        assert c["runs"] > 0 and c["est_s"] > 0
        for sw in plan.sweeps:
            specs = expand(sw)
            assert specs, f"{id}/{sw.name} is empty"
            assert len({s.name for s in specs}) == len(specs)
            if sw.task != "train":
                continue
            for s in specs:
                o = {k: v for k, v in s.overrides.items() if not k.startswith("meta.")}
                make_config(None, o)  # unknown key / wrong type / unknown model -> error


def test_paper_scale_keeps_the_published_settings():
    _, _, plan = plan_experiment("fig6", "paper", "cifar10", check_available=False)
    (sw,) = plan.sweeps
    specs = expand(sw)
    o = specs[0].overrides
    assert (o["optim.name"], o["optim.lr"], o["run.batch_size"], o["schedule.epochs"]) == ("adamw", 0.02, 1024, 2000)
    assert o["model.kwargs.depth"] == 12
    pairs = sorted({(s.overrides["meta.C"], s.overrides["meta.S"]) for s in specs})
    assert pairs == [(16, 504), (32, 346), (64, 226), (226, 64), (346, 32), (504, 16)]  # SPEC §3, Ω = 2^21
    assert len(specs) == 6 * 3
    _, _, p5 = plan_experiment("fig5", "paper", check_available=False)
    sw_widths = sorted({s.overrides["meta.m"] for s in expand(p5.sweeps[0]) if s.overrides["meta.family"] == "sw_mlp"})
    assert sw_widths == [540, 612, 724, 935, 1619]  # SPEC §3, Ω = 2^18


def test_cpu_scale_falls_back_to_fashion_mnist():
    _, sc, plan = plan_experiment("fig7", "cpu", check_available=True)
    from mlplab.experiments.recipes import dataset_available

    if not dataset_available("cifar10"):
        assert sc.dataset == "fashion_mnist" and sc.notes
        assert expand(plan.sweeps[0])[0].overrides["model.kwargs.patch_size"] == 4  # 28×28: S0 = 49


def test_list_shows_every_id_with_cost():
    text = format_list()
    for id in SPEC_IDS:
        assert id in text
    assert "runs" in text and "run-epochs" in text


def test_overrides_reach_every_training_run():
    _, _, plan = plan_experiment("fig4", "smoke", check_available=False, overrides={"schedule.epochs": 2})
    for sw in plan.sweeps:
        for s in expand(sw):
            assert (s.overrides.get("schedule.epochs") == 2) == (sw.task == "train")
    assert estimate_cost(plan, "smoke")["run_epochs"] > 5
