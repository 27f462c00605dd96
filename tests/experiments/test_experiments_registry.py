"""Experiments by id: every docs/science.md §7 id is registered, documented, plannable at every scale, and
every training run it plans is a valid run config (checked against the real ``make_config``)."""
import pytest

from mlplab.experiments import estimate_cost, expand, format_list, get_experiment, list_experiments, plan_experiment
from mlplab.experiments.specs.common import fair_width

SPEC_IDS = ["fig2a-c", "fig2d", "fig4", "fig5", "fig6", "fig7", "figS1", "figS2-S3", "figS4", "figS5",
            "figS6-S8", "figS9", "table1", "tableS3", "implicit-bias", "scaling",
            "figS6-S8", "figS9", "table1", "tableS3", "implicit-bias", "scaling",
            "sm-table1", "sm-batch-size", "sm-transfer", "sm-weights", "sm-inference", "mixer-ablations",
            "mixer-weights", "mixer-cost"]
IMAGENET_IDS = ["fig6-imagenet", "table1-imagenet"]  # smoke and paper scale only
ALL_IDS = ["fig2a-c", "fig2d", "fig4", "fig5", "fig6", "fig6-imagenet", "fig7", "figS1", "figS2-S3", "figS4", "figS5",
           "figS6-S8", "figS9", "table1", "table1-imagenet", "tableS3", "implicit-bias", "scaling",
           "sm-table1", "sm-batch-size", "sm-transfer", "sm-weights", "sm-inference", "mixer-ablations",
           "mixer-weights", "mixer-cost"]


def test_every_spec_id_is_registered():
    assert list_experiments() == ALL_IDS


@pytest.mark.parametrize("alias,id", [("figS2/S3", "figS2-S3"), ("FIGS2-S3", "figS2-S3"), ("fig2", "fig2a-c"),
                                      ("figs6-s8", "figS6-S8"), ("TABLE1", "table1")])
def test_aliases(alias, id):
    assert get_experiment(alias).id == id


def test_unknown_id_lists_valid_ids():
    with pytest.raises(ValueError) as e:
        get_experiment("fig99")
    msg = str(e.value)
    assert "fig99" in msg and all(i in msg for i in SPEC_IDS)


@pytest.mark.parametrize("id", ALL_IDS)
def test_docstring_gives_command_result_and_time(id):
    doc = get_experiment(id).doc
    for word in ("Command:", "Tests:", "Published:", "Time:"):
        assert word in doc, f"{id}: docstring lacks {word!r}"
    assert f"mlplab reproduce {id}" in doc
    time = doc[doc.index("Time:"):].split("\n")
    assert len([line for line in time if line.strip() and not line.strip().endswith('"""')]) <= 3, \
        f"{id}: the Time paragraph is longer than 3 lines"


@pytest.mark.parametrize("scale", ["smoke", "cpu", "paper"])
def test_plans_are_valid_run_configs(scale):
    from mlplab.train import make_config

    for id in SPEC_IDS + (IMAGENET_IDS if scale != "cpu" else []):
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
    assert pairs == [(16, 504), (32, 346), (64, 226), (226, 64), (346, 32), (504, 16)]  # docs/science.md §3, Ω = 2^21
    assert len(specs) == 6 * 3
    _, _, p5 = plan_experiment("fig5", "paper", check_available=False)
    sw_widths = sorted({s.overrides["meta.m"] for s in expand(p5.sweeps[0]) if s.overrides["meta.family"] == "sw_mlp"})
    # docs/science.md §3 widths at Ω = 2^18 (540, 612, 724, 935, 1619), each rounded to a multiple of S0 = 64 so
    # that the SW-MLP gets the Mixer's per-patch stem (issue 8); the density then follows from Ω
    assert sw_widths == [512, 640, 704, 960, 1600]
    assert sw_widths == [fair_width(m, 64) for m in (540, 612, 724, 935, 1619)]


@pytest.fixture
def empty_data_cache(tmp_path, monkeypatch):
    """The dataset cache pointed at an empty folder (CIFAR-10 has no system folder), the
    availability answers forgotten before and after."""
    from mlplab.experiments.recipes import dataset_available

    monkeypatch.setenv("MLPLAB_DATA", str(tmp_path))
    dataset_available.cache_clear()
    yield
    dataset_available.cache_clear()


def test_cpu_scale_falls_back_to_fashion_mnist(empty_data_cache):
    from mlplab.experiments.recipes import dataset_available

    assert dataset_available("cifar10") is False and dataset_available("synthetic") is True
    _, sc, plan = plan_experiment("fig7", "cpu", check_available=True)
    assert sc.dataset == "fashion_mnist" and sc.requested_dataset == "cifar10"
    assert sc.notes[0] == "cifar10 is not on this machine: ran on fashion_mnist instead"
    assert (sc.image_size, sc.in_chans) == (28, 1)
    assert expand(plan.sweeps[0])[0].overrides["model.kwargs.patch_size"] == 4  # 28×28: S0 = 49


def test_cpu_scale_keeps_cifar10_where_it_is(monkeypatch):
    from mlplab.experiments import recipes

    monkeypatch.setattr(recipes, "dataset_available", lambda name: name == "cifar10")
    _, sc, plan = plan_experiment("fig7", "cpu", check_available=True)
    assert (sc.dataset, sc.notes, sc.image_size, sc.in_chans) == ("cifar10", [], 32, 3)
    assert expand(plan.sweeps[0])[0].overrides["data.dataset"] == "cifar10"


def test_list_shows_every_id_with_cost():
    text = format_list()
    for id in ALL_IDS:
        assert id in text
    assert "runs" in text and "run-epochs" in text


def test_overrides_reach_every_training_run():
    _, _, plan = plan_experiment("fig4", "smoke", check_available=False, overrides={"schedule.epochs": 2})
    for sw in plan.sweeps:
        for s in expand(sw):
            assert (s.overrides.get("schedule.epochs") == 2) == (sw.task == "train")
    assert estimate_cost(plan, "smoke")["run_epochs"] > 5


def test_epochs_null_switches_the_duration_to_steps():
    """issue 8: the config error recommends ``schedule.epochs=null``; reproduce must accept it."""
    from mlplab.train import make_config

    ov = {"schedule.epochs": None, "schedule.steps": 3}
    _, _, plan = plan_experiment("fig6", "smoke", check_available=False, overrides=ov)
    sw = plan.sweeps[0]
    spec = expand(sw)[0]
    assert spec.overrides["schedule.epochs"] is None and spec.overrides["schedule.steps"] == 3
    cfg = make_config(None, {k: v for k, v in spec.overrides.items() if not k.startswith("meta.")})
    assert cfg.schedule.epochs is None and cfg.schedule.steps == 3
    batch, n = spec.overrides["run.batch_size"], spec.overrides["data.train_subset"]
    assert sw.epochs == pytest.approx(3 * batch / n)  # the cost estimate counts steps as epochs
    _, _, plan = plan_experiment("fig6", "smoke", check_available=False,
                                 overrides={"schedule.epochs": None, "schedule.examples": 128})
    assert plan.sweeps[0].epochs == pytest.approx(128 / n)


def test_fair_width_is_the_nearest_multiple_of_s0():
    assert fair_width(540, 64) == 512 and fair_width(1619, 64) == 1600 and fair_width(10, 49) == 49
    assert fair_width(49 * 7, 49) == 343


@pytest.mark.parametrize("id", ["fig4", "fig5", "figS1"])
@pytest.mark.parametrize("scale", ["smoke", "cpu", "paper"])
def test_sw_mlps_get_the_mixers_per_patch_stem(id, scale):
    """Every SW-MLP width is a multiple of S0, so ``stem='auto'`` picks the per-patch FC, and its
    density spends the same Ω as planned."""

    _, sc, plan = plan_experiment(id, scale, check_available=False)
    s0 = sc.s0(sc.patch_for_tokens(4))
    sws = [s.overrides for sw in plan.sweeps for s in expand(sw) if s.overrides.get("model.name") == "sw_mlp"]
    assert sws
    for o in sws:
        m, p, om = o["model.kwargs.width"], o["model.kwargs.density"], o["meta.omega"]
        assert m % s0 == 0
        gamma = o.get("model.kwargs.expansion", 1.0)
        assert p == 1.0 or p * gamma * m * m == pytest.approx(om)


def test_spec_modules_never_import_the_registry_or_the_report():
    """Structure (issue 8): plan, claims and verdicts are leaves; specs → plan/claims/verdicts;
    registry → specs and report; report → claims/plan. No lazy import of the registry anywhere."""
    import ast
    import pathlib

    import mlplab.experiments as pkg

    root = pathlib.Path(pkg.__file__).parent
    banned = {"plan.py": {"registry", "report", "specs", "executors"}, "claims.py": {"registry", "report", "specs"},
              "verdicts.py": {"registry", "report", "specs", "claims", "plan"}, "report.py": {"registry", "specs"}}
    for f in [*root.glob("specs/*.py"), *(root / n for n in banned)]:
        bad = banned.get(f.name, {"registry", "report"})
        pkg_parts = ["mlplab", "experiments"] + (["specs"] if f.parent.name == "specs" else [])
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                mod = (".".join(pkg_parts[:len(pkg_parts) - node.level + 1] + [node.module]) if node.level
                       else node.module)
                if mod.startswith("mlplab.experiments."):
                    assert mod.split(".")[2] not in bad, f"{f.name} imports {mod}"


def test_cpu_scale_trains_on_the_full_set_with_the_fast_engine_and_family_lr():
    from mlplab.experiments.recipes import CPU_BATCH, CPU_SEEDS, cpu_lr

    CPU_LR = cpu_lr()
    _, _, plan = plan_experiment("fig5", "cpu", check_available=False)
    specs = expand(plan.sweeps[0])
    assert {s.overrides["run.seed"] for s in specs} == set(range(CPU_SEEDS))
    for s in specs:
        o = s.overrides
        assert "data.train_subset" not in o and "data.test_subset" not in o
        assert (o["run.batch_size"], o["run.eval_every"], o["run.checkpoint_every"]) == (CPU_BATCH, 0, 0)
        assert o["optim.name"] == "adamw" and o["optim.lr"] == CPU_LR[o["model.name"]]
    # smoke keeps its tiny recipe; paper its published lr
    _, _, p = plan_experiment("fig6", "smoke", check_available=False)
    assert expand(p.sweeps[0])[0].overrides["data.train_subset"] == 64
    _, _, p = plan_experiment("fig6", "paper", check_available=False)
    assert expand(p.sweeps[0])[0].overrides["optim.lr"] == 0.02


def test_table1_runs_each_model_at_its_own_searched_lr_and_the_search_knows_them():
    from mlplab.experiments.lr_search import lr_search
    from mlplab.experiments.recipes import cpu_lr, lr_search_table

    CPU_LR, LR_SEARCH = cpu_lr(), lr_search_table()
    _, _, plan = plan_experiment("table1", "cpu", dataset="fashion_mnist", check_available=False)
    specs = expand(plan.sweeps[0])
    assert len(specs) == 6
    for s in specs:
        o = s.overrides
        key = o["meta.lr_key"]
        assert key in LR_SEARCH["models"] and o["optim.lr"] == CPU_LR[key]
        searched = LR_SEARCH["models"][key]  # the searched model is the one table1 trains
        assert all(o[k] == v for k, v in searched.items()), key
    assert {s.overrides["meta.lr_key"] for s in specs} == {"table1 narrow", "table1 wide"}
    # the paper plan keeps the published per-model lr grid
    _, _, paper = plan_experiment("table1", "paper", dataset="cifar10", check_available=False)
    assert sorted({s.overrides["optim.lr"] for s in expand(paper.sweeps[0])}) == [0.04, 0.05, 0.06]
    with pytest.raises(ValueError, match="no lr-search model"):
        lr_search(["table2 narrow"])


def test_every_cpu_lr_was_searched_and_fig2d_trains_each_shallow_family_at_its_own():
    from mlplab.experiments.recipes import cpu_lr, lr_search_table

    CPU_LR, LR_SEARCH = cpu_lr(), lr_search_table()
    # RP variants share their normal family's lr; everything else in the table has a search entry
    unsearched = {k for k in CPU_LR if k not in LR_SEARCH["models"]}
    assert unsearched == {"default"} | {k for k in CPU_LR if k.startswith("rp_")}
    assert all(CPU_LR[k] == CPU_LR[k[3:]] for k in CPU_LR if k.startswith("rp_"))
    _, _, plan = plan_experiment("fig2d", "cpu", dataset="fashion_mnist", check_available=False)
    specs = expand(plan.sweeps[0])
    assert {s.overrides["model.name"] for s in specs} == {"monarch_mlp", "kronecker_mlp"}
    for s in specs:
        o = s.overrides
        assert o["optim.lr"] == CPU_LR[o["model.name"]] != CPU_LR["default"]
        # searched as fig2d trains them: without augmentation
        assert o.get("augment.crop_padding", 0) == LR_SEARCH["models"][o["model.name"]]["augment.crop_padding"]


def test_quick_fig6_is_the_centre_and_both_ends_with_three_seeds():
    _, sc, plan = plan_experiment("fig6", "quick", check_available=False)
    specs = expand(plan.sweeps[0])
    pairs = sorted({(s.overrides["meta.S"], s.overrides["meta.C"]) for s in specs})
    assert pairs == [(8, 124), (40, 41), (41, 40), (124, 8)]
    assert len(specs) == 12
    # the same runs as the cpu plan's (same epochs, lr, seeds): quick only drops the inner pairs
    cpu = {s.name: s.overrides for s in expand(plan_experiment("fig6", "cpu", check_available=False)[2].sweeps[0])}
    assert all(cpu[s.name] == s.overrides for s in specs)
    # ids that say nothing about quick run their cpu plan
    q = [s.overrides for s in expand(plan_experiment("fig7", "quick", check_available=False)[2].sweeps[0])]
    c = [s.overrides for s in expand(plan_experiment("fig7", "cpu", check_available=False)[2].sweeps[0])]
    assert q == c


def test_trained_ids_run_three_seeds_or_more_at_cpu_scale():
    from mlplab.experiments.claims import LONGER_SUFFIX
    from mlplab.experiments.recipes import CPU_SEEDS

    five = {"fig2d", "figS5", "figS6-S8"}  # small effects: five seeds
    for id in SPEC_IDS:
        _, _, plan = plan_experiment(id, "cpu", dataset="fashion_mnist", check_available=False)
        for sw in plan.sweeps:
            if sw.task != "train" or id == "scaling" or sw.name.endswith(LONGER_SUFFIX):
                continue  # scaling: one run per (size, N, T), bootstrap over runs; a longer run: one seed
            seeds = {s.overrides["run.seed"] for s in expand(sw)}
            assert len(seeds) >= (5 if id in five else CPU_SEEDS), f"{id}/{sw.name}: seeds {sorted(seeds)}"
        _, _, plan = plan_experiment(id, "cpu", dataset="fashion_mnist", check_available=False, role="confirmatory")
        for sw in plan.sweeps:  # a confirmatory run: at least 5 fresh seeds, never an exploratory one
            if sw.task == "train" and id != "scaling" and not sw.name.endswith(LONGER_SUFFIX):
                seeds = {s.overrides["run.seed"] for s in expand(sw)}
                assert len(seeds) >= 5 and not seeds & {0, 1, 2}, f"{id}/{sw.name}: seeds {sorted(seeds)}"


def test_figS6_S8_parts_are_three_different_training_settings_at_cpu_scale():
    _, _, plan = plan_experiment("figS6-S8", "cpu", dataset="fashion_mnist", check_available=False)
    keys = ("model.name", "optim.name", "optim.lr")
    settings = {sw.name: {tuple(s.overrides[k] for k in keys) for s in expand(sw)} for sw in plan.sweeps
                if not sw.name.endswith("-longer")}
    assert settings == {"S6": {("s_mixer", "sgd", 0.1), ("rp_s_mixer", "sgd", 0.1)},
                        "S7": {("mlp_mixer", "sgd", 0.1), ("rp_mlp_mixer", "sgd", 0.1)},
                        "S8": {("s_mixer", "adamw", 0.01), ("rp_s_mixer", "adamw", 0.01)}}


def test_quick_figS6_S8_is_a_subset_of_cpu_that_can_be_decided():
    def runs(scale):
        _, _, plan = plan_experiment("figS6-S8", scale, dataset="fashion_mnist", check_available=False)
        return {(sw.name, s.name): s.overrides for sw in plan.sweeps for s in expand(sw)}

    quick, cpu = runs("quick"), runs("cpu")
    assert set(quick) < set(cpu)
    assert all(quick[k] == cpu[k] for k in quick)  # the same runs, not a different recipe
    for part in ("S6", "S7", "S8"):
        for rp in (False, True):
            seeds = {o["run.seed"] for (p, _), o in quick.items() if p == part and o["meta.rp"] == rp}
            assert len(seeds) >= 3
    assert {o["data.train_subset"] for o in cpu.values()} == {2000}


def _measured_experiments() -> dict[str, tuple[float, float, int | None]]:
    from mlplab.experiments.cost import calibration

    (row,) = [r for r in calibration()["rows"] if "s_per_example" not in r]
    return {k: v for k, v in row.items() if k not in ("what", "source")}


def test_cost_constants_reproduce_the_calibration_rows():
    """t(F, A) at the module's constants meets every timed row of ``cost.calibration()`` within 31 %
    (the S = 124, C = 8 S-Mixer is 30 % low, the rest within 22 %); table1's two models, timed
    only together, within 5 % on their mean."""
    from mlplab.experiments.cost import calibration, example_s

    rows = [r for r in calibration()["rows"] if "s_per_example" in r]
    for r in rows:
        if not r.get("pair_mean"):
            assert abs(example_s(r["flops"], r["activations"]) / r["s_per_example"] - 1) <= 0.31, r["what"]
    pair = [r for r in rows if r.get("pair_mean")]
    mean = sum(example_s(r["flops"], r["activations"]) for r in pair) / len(pair)
    assert len(pair) == 2 and abs(mean / pair[0]["s_per_example"] - 1) <= 0.05


@pytest.mark.parametrize("key", sorted(_measured_experiments()))
def test_estimate_is_at_least_the_measured_experiment(key, monkeypatch):
    """Every experiment timed on the 2-core machine took no longer than its estimate (the plan as
    it was timed: today's plan, or at the epochs the calibration names, on Fashion-MNIST, its runs
    started in the sweep's order), and the calibration states that estimate."""
    from mlplab.experiments import cost

    monkeypatch.setattr(cost, "longest_first", lambda secs: list(range(len(secs))))  # as timed
    id, scale = key.split()
    measured, stated, epochs = _measured_experiments()[key]
    overrides = {"schedule.epochs": epochs} if epochs is not None else None
    _, _, plan = plan_experiment(id, scale, dataset="fashion_mnist", check_available=False, overrides=overrides)
    plan.stages = [[sw for sw in stage if not sw.name.endswith("-longer")] for stage in plan.stages]  # as timed
    minutes = estimate_cost(plan, scale, lockstep="off")["est_s"] / 60  # they were timed one run at a time
    assert measured <= minutes
    assert minutes == pytest.approx(stated, abs=0.05)


def test_scale_settings_picks_the_named_entry_and_quick_falls_back_to_cpu():
    from mlplab.experiments.recipes import Scale

    table = {"smoke": 1, "cpu": 2, "paper": 3}
    assert [Scale(n, "fashion_mnist").settings(table) for n in ("smoke", "quick", "cpu", "paper")] == [1, 2, 2, 3]
    assert Scale("quick", "fashion_mnist").settings({**table, "quick": 9}) == 9
    with pytest.raises(KeyError, match="no settings for scale 'paper'"):
        Scale("paper", "fashion_mnist").settings({"smoke": 1, "cpu": 2})


def test_a_cpu_kind_with_fitted_constants_uses_them_and_others_the_module_constants(monkeypatch):
    from mlplab.experiments import cost

    fitted = {"rate": 2e11, "kappa": 1e-9, "tau": 3e-6, "rp_slowdown": 1.5, "runs": 40, "overhead_s": 3.5}
    monkeypatch.setattr(cost, "calibration", lambda: {"machines": {"kind-a": fitted}})
    a, other = cost.cpu_machine("kind-a"), cost.cpu_machine("kind-b")
    assert (a.rate, a.kappa, a.tau, a.rp_slowdown, a.startup_s) == (2e11, 1e-9, 3e-6, 1.5, 3.5) and "40 runs" in a.name
    assert (other.rate, other.kappa, other.tau, other.rp_slowdown, other.startup_s) == (
        cost.RATE, cost.KAPPA_S, cost.TAU_S, cost.RP_SLOWDOWN, cost.RUN_OVERHEAD_S["cpu"])
    assert cost.cpu_machine().rate == cost.RATE  # tests run as a host without a fit (tests/conftest.py)


def test_split_examples_takes_the_subset_else_the_share_of_the_classes():
    from mlplab.experiments.cost import split_examples

    o = {"data.dataset": "fashion_mnist", "data.classes": [5, 6, 7, 8, 9]}
    assert (split_examples(o, "train"), split_examples(o, "test")) == (30000, 5000)
    assert split_examples({**o, "data.train_subset": 3000}, "train") == 3000
    assert split_examples({**o, "data.test_subset": 700}, "test") == 700
    assert split_examples({"data.dataset": "cifar10"}, "test") == 10000
    assert split_examples({"data.classes": [0, 1]}, "train", "fashion_mnist") == 12000  # an analysis task's data


def test_linear_eval_is_estimated_from_its_examples_and_few_shot_fits(monkeypatch):
    from mlplab.experiments import cost

    units = {"linear_eval": {"s": 1e-4}, "linear_eval_fit": {"s": 2e-3}}
    monkeypatch.setattr(cost, "calibration", lambda: {"task_units": units})
    m = cost.cpu_machine("kind-a")
    probe = {"probe": True, "data.train_subset": 5000, "data.classes": [5, 6, 7, 8, 9]}
    assert cost.linear_eval_task_s(probe, m) == pytest.approx(1e-4 * (5000 + 5000))
    few = {"shots": [1, 5, 10, 25], "draws": 20, "data.classes": [5, 6, 7, 8, 9]}
    assert cost.linear_eval_task_s(few, m) == pytest.approx(1e-4 * (30000 + 5000) + 2e-3 * 80)
    default_draws = {"shots": [1], "data.classes": [5, 6, 7, 8, 9]}  # the task draws 5 unless told
    assert cost.linear_eval_task_s(default_draws, m) == pytest.approx(1e-4 * 35000 + 2e-3 * 5)


def test_a_fitted_cpu_kind_starts_its_runs_in_its_fitted_start_up(monkeypatch):
    """A CPU kind with fitted constants estimates every run's start-up at its fitted intercept (the
    smoke scale, in-process, keeps its own; an analysis task takes the same) and every optimiser
    step at its fitted τs."""
    from mlplab.experiments import cost
    from mlplab.experiments.sweep import RunSpec

    fitted = {"rate": 2e11, "kappa": 1e-9, "tau": 3e-6, "rp_slowdown": 1.0, "runs": 40, "overhead_s": 3.5,
              "step_s": 2e-3}
    monkeypatch.setattr(cost, "host_tag", lambda: "kind-a")
    monkeypatch.setattr(cost, "calibration", lambda: {"machines": {"kind-a": fitted},
                                                      "task_units": {"pictures": {"s": 0.01}}})
    o = {"model.name": "mlp", "model.kwargs.width": 8, "model.kwargs.depth": 1, "data.dataset": "fashion_mnist",
         "data.train_subset": 100, "data.test_subset": 10, "schedule.epochs": 1}
    train = RunSpec("r", o, task="train")
    f, a, _ = cost.run_counts(o)
    work = cost.run_s(f, a, 100, 1, 10, overhead=0.0, machine=cost.cpu_machine(), steps=1)  # 100 examples, batch 128
    assert work == pytest.approx(100 * cost.cpu_machine().example_s(f, a) + 2e-3 + 10 * cost.example_s(f, a) / 3)
    assert cost.spec_s(train, "cpu") == pytest.approx(3.5 + work)
    small = RunSpec("r", {**o, "run.batch_size": 16}, task="train")  # 7 steps: 6 of 16, one of 4
    assert cost.spec_s(small, "cpu") - cost.spec_s(train, "cpu") == pytest.approx(6 * 2e-3)
    assert cost.spec_s(train, "smoke") == pytest.approx(cost.RUN_OVERHEAD_S["smoke"] + work)
    assert cost.spec_s(RunSpec("p", {}, task="pictures"), "cpu") == pytest.approx(3.5 + 0.01)
