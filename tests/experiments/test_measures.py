"""The numbers analyses compute from finished runs (experiments/measures.py) on values with known
answers: NaN and empty inputs each have a defined result."""
import math

import numpy as np
import pytest

from mlplab.experiments.measures import (
    bin_centres,
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
