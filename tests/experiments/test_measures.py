"""The numbers analyses compute from finished runs (experiments/measures.py) against numbers
written out here: each statistic against numpy in float64 (degrees of freedom, NaN, even counts,
empty inputs, float32 and integer inputs), and ``first_layer_units`` on runs whose first layer
moved by hand-made unit images with a known half-energy radius r½ (a pixel 0, a 2×2 block √½, two
pixels a distance d apart d/2), the trained layer's r½ by a brute-force loop."""
import math
import statistics
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import mlplab.experiments.tasks as tasks
from mlplab import create_model
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.measures import (
    bin_centres,
    first_layer_units,
    log_grid,
    mean,
    mean_curve,
    mean_departure,
    median,
    nanmean,
    nanmedian,
    run_arrays,
    sd,
    seed_mean,
    seed_sd,
)

NAN = float("nan")


def test_means_spreads_and_medians():
    assert mean([1.0, 2.0, 6.0]) == 3.0 and math.isnan(mean([1.0, NAN]))
    assert sd([1.0, 3.0]) == 1.0 and sd([1.0, 3.0], ddof=1) == pytest.approx(math.sqrt(2))
    assert nanmean([1.0, NAN, 3.0]) == 2.0
    assert nanmedian([5.0, NAN, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5 and math.isnan(median([]))


def test_seed_mean_and_sd_leave_non_finite_seeds_out():
    d = {0: 1.0, 1: 3.0, 2: NAN, 3: float("inf")}
    assert seed_mean(d) == 2.0 and seed_sd(d) == pytest.approx(math.sqrt(2))
    assert math.isnan(seed_mean({0: NAN})) and seed_sd({0: 5.0}) == 0.0


def test_mean_departure_curves_bins_and_grids():
    assert mean_departure([1.0, NAN, 4.0], 2.0) == 1.5
    assert mean_departure([NAN, NAN], 2.0) is None
    assert mean_curve([[1.0, 2.0, 3.0], [3.0, NAN]]) == [2.0, 2.0]  # the steps every curve has
    assert mean_curve([[1.0], []]) == []
    np.testing.assert_array_equal(bin_centres([0.0, 1.0, 3.0]), [0.5, 2.0])
    assert bin_centres([]).size == 0
    np.testing.assert_allclose(log_grid(1.0, 100.0, 3), [1.0, 10.0, 100.0])


def test_run_arrays_reads_weights_npz_and_refuses_a_missing_file(tmp_path):
    np.savez(tmp_path / "weights.npz", a=np.arange(3))
    np.testing.assert_array_equal(run_arrays(tmp_path)["a"], [0, 1, 2])
    with pytest.raises(OSError):
        run_arrays(tmp_path / "nowhere")


XS = [3.5, -1.25, 8.0, 0.5, 2.0, 7.75]


def test_mean_and_sd_are_numpys_in_float64_with_ddof():
    a = np.array(XS)
    assert mean(XS) == pytest.approx(a.sum() / a.size, rel=1e-15) and type(mean(XS)) is float
    for ddof in (0, 1, 2):
        by_hand = math.sqrt(((a - a.sum() / a.size) ** 2).sum() / (a.size - ddof))
        assert sd(XS, ddof) == pytest.approx(by_hand, rel=1e-14) and type(sd(XS, ddof)) is float
    assert sd(XS) == pytest.approx(math.sqrt(((a - a.mean()) ** 2).mean()), rel=1e-14)  # population by default
    assert math.isnan(sd([1.0, NAN]))


def test_nan_statistics_leave_nan_out():
    xs = [NAN, 4.0, 1.0, NAN, 10.0]
    assert nanmean(xs) == 5.0 and type(nanmean(xs)) is float
    assert nanmedian(xs) == 4.0 and nanmedian(xs + [6.0]) == 5.0  # an even count: the middle two's mean
    assert type(nanmedian(xs)) is float


def test_median_of_odd_even_and_no_values():
    assert median([5.0, 1.0, 3.0]) == 3.0
    assert median([8.0, 1.0, 4.0, 2.0]) == 3.0 and median([1, 2]) == 1.5
    assert type(median([1, 3, 2])) is float and median([1, 3, 2]) == statistics.median([1, 3, 2])
    assert math.isnan(median([])) and math.isnan(median(()))


def test_seed_mean_and_sd_over_the_finite_seeds():
    d = {0: 2.0, 3: NAN, 5: 6.0, 7: -math.inf, 9: 7.0}
    vals = np.array([2.0, 6.0, 7.0])
    assert seed_mean(d) == pytest.approx(vals.sum() / 3, rel=1e-15)
    assert seed_sd(d) == pytest.approx(math.sqrt(((vals - vals.mean()) ** 2).sum() / 2), rel=1e-14)  # ddof 1
    assert seed_sd({1: 4.0, 2: NAN}) == 0.0 and seed_sd({}) == 0.0
    assert type(seed_sd(d)) is float and type(seed_mean(d)) is float


def test_no_finite_seed_is_nan_without_numpys_empty_mean_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(seed_mean({0: NAN, 1: math.inf})) and math.isnan(seed_mean({}))


def test_mean_departure_in_float64_over_finite_values():
    v = np.array([1.0, 5.0, 2.5])
    assert mean_departure([1.0, NAN, 5.0, 2.5], 2.0) == pytest.approx(np.abs(v - 2.0).sum() / 3, rel=1e-15)
    assert mean_departure([3, 7], 4) == 2.0  # integers
    # float32 values measured in float64: 1 − 1e-9 rounds to 1 in float32
    assert mean_departure(np.array([1.0], dtype=np.float32), 1e-9) == 1.0 - 1e-9
    assert mean_departure([NAN, math.inf], 0.0) is None and mean_departure([], 1.0) is None


def test_mean_curve_over_common_steps_in_float64():
    assert mean_curve([[1.0, 2.0, 4.0], [3.0, NAN], [5.0, 8.0, 9.0]]) == [3.0, 5.0]
    assert mean_curve([[1.0, None], [3.0, 5.0]]) == [2.0, 5.0]  # a JSON null is a missing value
    # float32 curves averaged in float64: (1 + 2⁻²⁴)/2 is not a float32
    tiny = 2.0 ** -24
    got = mean_curve([np.array([1.0], dtype=np.float32), np.array([tiny], dtype=np.float32)])
    assert got == [(1.0 + tiny) / 2]
    assert mean_curve([[], [1.0]]) == []


def test_bin_centres_and_log_grid():
    edges = [0.0, 1.0, 4.0, 10.0]
    np.testing.assert_array_equal(bin_centres(edges), [0.5, 2.5, 7.0])
    np.testing.assert_array_equal(bin_centres(np.array([0, 3])), [1.5])
    assert bin_centres([]).shape == (0,) and bin_centres([2.0]).shape == (0,)
    assert bin_centres([]).dtype == bin_centres(np.array([], dtype=int)).dtype == np.float64
    g = log_grid(0.01, 100.0)
    assert len(g) == 100  # a fitted curve's x values: 100 by default
    np.testing.assert_allclose(g, 10.0 ** np.linspace(-2.0, 2.0, 100), rtol=1e-13)
    np.testing.assert_allclose(log_grid(2.0, 32.0, 5), [2.0, 4.0, 8.0, 16.0, 32.0], rtol=1e-14)


# ---- first_layer_units ----------------------------------------------------------------------------

SIDE, CH, WIDTH = 4, 3, 6


def _design(k: int) -> tuple[np.ndarray, float]:
    """A unit image (ch, H, W) with a known r½."""
    img = np.zeros((CH, SIDE, SIDE))
    if k == 0:
        img[0, 1, 2] = 2.0  # one pixel: 0
        return img, 0.0
    if k == 1:
        img[1, 0:2, 0:2] = 1.0  # a 2×2 block: every pixel √½ from its centre
        return img, math.sqrt(0.5)
    pairs = {2: ((0, 0), (0, 2)), 3: ((0, 0), (2, 2)), 4: ((0, 0), (0, 3)), 5: ((0, 0), (3, 3))}
    (y0, x0), (y1, x1) = pairs[k]
    img[0, y0, x0], img[2, y1, x1] = 1.0, -1.0  # two pixels of equal energy, in two channels: half their distance
    return img, math.hypot(y1 - y0, x1 - x0) / 2


def _r_half_by_hand(img: np.ndarray) -> float:
    """r½ of one (ch, H, W) image by a loop over the pixels' distances."""
    e = (img ** 2).sum(0)
    tot = e.sum()
    cy = sum(e[y, x] * y for y in range(SIDE) for x in range(SIDE)) / tot
    cx = sum(e[y, x] * x for y in range(SIDE) for x in range(SIDE)) / tot
    dist = {(y, x): math.hypot(y - cy, x - cx) for y in range(SIDE) for x in range(SIDE)}
    for r in sorted(set(dist.values())):
        if sum(e[p] for p, d in dist.items() if d <= r) >= 0.5 * tot * (1 - 1e-12):
            return r
    raise AssertionError("unreachable")


def _run(units: list[int | None], seed: int, scale: float = 1.0):
    """A trained model as its loader returns it: the initial model of ``seed`` (float64) with each
    unit's first-layer row moved by design ``units[u]`` (None: not moved), and the moves."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # the trainer's model: the first draws after seeding
        model = create_model("bottleneck_mlp", image_size=SIDE, in_chans=CH, width=WIDTH, depth=1, num_classes=3)
    model = model.double()
    moves = np.zeros((WIDTH, CH, SIDE, SIDE))
    r = np.full(WIDTH, np.nan)
    for u, k in enumerate(units):
        if k is not None:
            moves[u], r[u] = _design(k)
            moves[u] *= scale * (u + 1)
    with torch.no_grad():
        model.stem.weight.add_(torch.from_numpy(moves.reshape(WIDTH, -1)))  # exact: dyadic moves
    trained = model.stem.weight.detach().numpy().reshape(WIDTH, CH, SIDE, SIDE)
    return model, SimpleNamespace(run=SimpleNamespace(seed=seed)), moves, r, trained


def _record(name, cond, seed=None, **extra):
    over = {"meta.condition": cond, **({} if seed is None else {"run.seed": seed})}
    results = extra.pop("results", None)
    return RunRecord("units", name, Path(f"/runs/{name}"), over, config=extra, results=results)


def test_first_layer_units_measures_each_run_and_pictures_the_lowest_seed(monkeypatch):
    runs = {  # name: (condition, seed, designs per unit, scale)
        "a": ("DA", 2, [5, 0, 3, None, 1, 2], 1.0),
        "b": ("DA", 1, [2, 4, None, None, 0, 5], 2.0),
        "e": ("DA", 3, [0, 1, 2, 3, 4, 5], 0.5),
        "c": ("no DA", None, [4, 1, None, 0, 2, 3], 1.0),
    }
    built = {n: _run(d, seed or 0, s) for n, (_, seed, d, s) in runs.items()}
    bad = {"p": FileNotFoundError("/runs/p has no checkpoint"), "q": ValueError("config.json: bad model")}

    def load(run_dir):
        name = Path(run_dir).name
        if name in bad:
            raise bad[name]
        return built[name][0], built[name][1]

    monkeypatch.setattr(tasks, "load_trained_model", load)
    records = [_record("p", "DA", 5), _record("a", "DA", 2, **{"data.train_subset": 500, "schedule.epochs": 7},
                                              results={"test_acc": 0.75}),
               _record("b", "DA", 1, results={"test_acc": 62.5}), _record("e", "DA", 3),
               _record("c", "no DA"), _record("q", None, None)]
    r_half, pictures, side, rows = first_layer_units(records, 3)

    assert side == SIDE
    assert r_half == {"DA": {2: pytest.approx(float(np.nanmedian(built["a"][3]))),
                             1: pytest.approx(float(np.nanmedian(built["b"][3]))),
                             3: pytest.approx(float(np.nanmedian(built["e"][3])))},
                      "no DA": {0: pytest.approx(float(np.nanmedian(built["c"][3])))}}
    assert r_half["DA"][2] == pytest.approx(1.0)  # the median of 0, √½, 1, √2, 2.12: the NaN left out
    # the lowest seed's units, most localised first: r½ 0 (unit 4), 1 (unit 0), 1.5 (unit 1)
    assert sorted(pictures) == ["DA", "no DA"]
    moves = built["b"][2]
    np.testing.assert_allclose(pictures["DA"], moves[[4, 0, 1]].transpose(0, 2, 3, 1), rtol=0, atol=1e-12)
    moves = built["c"][2]  # r½: 1.5 √½ NaN 0 1 √2
    np.testing.assert_allclose(pictures["no DA"], moves[[3, 1, 4]].transpose(0, 2, 3, 1), rtol=0, atol=1e-12)

    assert [r.get("problem") for r in rows] == ["/runs/p has no checkpoint", None, None, None, None,
                                                "config.json: bad model"]
    assert rows[0] == {"condition": "DA", "seed": 5, "problem": "/runs/p has no checkpoint"}
    assert rows[-1] == {"condition": None, "seed": None, "problem": "config.json: bad model"}
    for row, name in zip(rows[1:5], "abec"):
        cond, seed, _, _ = runs[name]
        r, trained = built[name][3], built[name][4]
        w_r = [_r_half_by_hand(trained[u]) for u in range(WIDTH)]
        assert (row["condition"], row["seed"]) == (cond, seed or 0)
        want = {"r_half_median": np.nanmedian(r),
                "r_half_q10": np.nanpercentile(r, 10), "r_half_q90": np.nanpercentile(r, 90),
                "r_half_W_median": np.median(w_r)}
        assert set(row) == {"condition", "seed", "train_images", "epochs", "r_half_median", "r_half_q10",
                            "r_half_q90", "r_half_W_median", "test_error"}
        for k, v in want.items():
            assert row[k] == pytest.approx(v, rel=1e-12, abs=1e-12), (name, k)
    assert (rows[1]["train_images"], rows[1]["epochs"], rows[1]["test_error"]) == (500, 7, 25.0)
    assert rows[2]["test_error"] == 37.5 and rows[2]["train_images"] is None and rows[2]["epochs"] is None
    assert math.isnan(rows[3]["test_error"])


def test_first_layer_units_without_a_readable_run(monkeypatch):
    def load(run_dir):
        raise OSError(f"{run_dir}: unreadable")

    monkeypatch.setattr(tasks, "load_trained_model", load)
    r_half, pictures, side, rows = first_layer_units([_record("x", "DA", 0)], 4)
    assert (r_half, pictures, side) == ({}, {}, None)
    assert rows == [{"condition": "DA", "seed": 0, "problem": "/runs/x: unreadable"}]
    assert first_layer_units([], 4) == ({}, {}, None, [])


def test_first_layer_units_pictures_the_first_listed_of_equal_seeds(monkeypatch):
    built = {"first": _run([0, 1, 2, 3, 4, 5], 0), "second": _run([5, 4, 3, 2, 1, 0], 0)}
    monkeypatch.setattr(tasks, "load_trained_model", lambda d: built[Path(d).name][:2])
    _, pictures, _, rows = first_layer_units([_record("first", "DA", 0), _record("second", "DA", 0)], 2)
    np.testing.assert_allclose(pictures["DA"], built["first"][2][[0, 1]].transpose(0, 2, 3, 1), rtol=0, atol=1e-12)
    assert len(rows) == 2
