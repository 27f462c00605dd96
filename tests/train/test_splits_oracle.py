"""The splits a result rests on are disjoint for every seed, not only for seed 0.

Train / validation / test of a run (``train.data.load_run_data``: in memory and streamed, with
random subsets), and the examples that choose the ridge regulariser of the few-shot evaluation
and the linear probe against the examples they are fitted on. Examples are identified by their
bytes (in memory) or their row of the shared images (streamed); the few-shot examples by a
feature column that holds each example's index.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

import mlplab.analysis.fewshot as fewshot
from mlplab.data import load_dataset
from mlplab.data.formats import png_bytes
from mlplab.train import make_config
from mlplab.train.data import load_run_data

SEEDS = range(6)


def _keys(images: torch.Tensor) -> list[bytes]:
    return [bytes(row) for row in images.reshape(len(images), -1).numpy()]


def _cfg(seed: int, **extra):
    return make_config(None, {"data.dataset": "synthetic", "data.image_size": 8, "data.val_fraction": 0.25,
                              "run.seed": seed, "run.name": "split", **extra})


@pytest.mark.parametrize("subsets", [{}, {"data.subset": "random", "data.train_subset": 300,
                                          "data.test_subset": 100}])
def test_train_val_and_test_are_disjoint_for_every_seed(subsets):
    full = _keys(load_dataset("synthetic", "train", image_size=8).images)
    assert len(set(full)) == len(full) == 1024  # every example is its own key
    vals = []
    for seed in SEEDS:
        data = load_run_data(_cfg(seed, **subsets), torch.device("cpu"))
        train, val, test = (_keys(s.images) for s in (data.train, data.val, data.test))
        assert set(train) <= set(full) and set(val) <= set(full)  # both drawn from the official train split
        assert not set(train) & set(val) and not set(test) & (set(train) | set(val))
        assert len(val) == 256 and len(train) == subsets.get("data.train_subset", 768)
        if not subsets:
            assert Counter(train) + Counter(val) == Counter(full)  # a partition of the train split
        vals.append(val)
    assert all(v == vals[0] for v in vals)  # every seed of a sweep is selected on the same val set


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An image folder of 20 distinct random 8x8 training images in 3 classes (and 2 val images each)."""
    root, rng = tmp_path_factory.mktemp("split") / "folder", np.random.default_rng(0)
    for split, counts in (("train", (7, 6, 7)), ("val", (2, 2, 2))):
        for c, n in enumerate(counts):
            (root / split / f"class{c}").mkdir(parents=True)
            for i in range(n):
                image = rng.integers(0, 256, (3, 8, 8), dtype=np.uint8)
                (root / split / f"class{c}" / f"{i}.png").write_bytes(png_bytes(image))
    return root


@pytest.mark.parametrize("stream", [False, True])
def test_an_image_folders_holdout_is_disjoint_from_training_for_every_seed(folder, stream):
    seen_val = []
    for seed in SEEDS:
        cfg = _cfg(seed, **{"data.dataset": "imagefolder", "data.root": str(folder), "data.stream": stream,
                            "data.val_fraction": 0.3})
        data = load_run_data(cfg, torch.device("cpu"))
        if stream:  # the splits are rows of the one training split
            train, val = data.train.rows.tolist(), data.val.rows.tolist()
            assert data.train.images is data.val.images and sorted(train + val) == list(range(20))
        else:
            train, val = _keys(data.train.images), _keys(data.val.images)
            assert Counter(train) + Counter(val) == Counter(_keys(load_dataset("imagefolder", "train",
                                                                               root=folder).images))
        assert not set(train) & set(val) and len(val) == 6
        seen_val.append(val)
    assert all(v == seen_val[0] for v in seen_val)


class _Recorder:
    """Wraps ridge_fit / ridge_predict: which training rows each draw fitted on and predicted."""

    def __init__(self, monkeypatch):
        self.draws: list[dict] = []
        fit, predict = fewshot.ridge_fit, fewshot.ridge_predict

        def rec_fit(x, labels, k, l2):
            rows = tuple(np.asarray(x)[:, 0].astype(int))
            if not self.draws or self.draws[-1]["fit"] != rows:
                self.draws.append({"fit": rows, "held": set(), "tested": False})
            return fit(x, labels, k, l2)

        def rec_predict(f, x):
            rows = np.asarray(x)[:, 0].astype(int)
            if (rows < 0).all():
                self.draws[-1]["tested"] = True
            else:
                assert (rows >= 0).all(), "a prediction mixes training and test examples"
                self.draws[-1]["held"] |= set(rows.tolist())
            return predict(f, x)

        monkeypatch.setattr(fewshot, "ridge_fit", rec_fit)
        monkeypatch.setattr(fewshot, "ridge_predict", rec_predict)


def _indexed_features(n_per_class, classes=4, d=6, sign=1, seed=0):
    """Features whose column 0 is the example's index (test examples: −1 − index)."""
    labels = np.repeat(np.arange(classes), n_per_class)
    x = np.random.default_rng(seed).normal(size=(len(labels), d))
    x[:, 0] = np.arange(len(labels)) if sign > 0 else -1 - np.arange(len(labels))
    return x, labels


def _per_seed(monkeypatch, n_per_class, evaluate):
    """For every seed: what ``evaluate(train features, labels, test features, labels, seed)``
    returns, the draws it recorded, and the training labels."""
    (xtr, ytr), (xte, yte) = _indexed_features(n_per_class), _indexed_features(5, sign=-1, seed=1)
    rec = _Recorder(monkeypatch)
    for seed in SEEDS:
        rec.draws.clear()
        yield evaluate(xtr, ytr, xte, yte, seed), list(rec.draws), ytr


def test_few_shot_shots_and_the_lambda_holdout_are_disjoint_for_every_seed(monkeypatch):
    def few_shot(xtr, ytr, xte, yte, seed):
        return fewshot.linear_few_shot(xtr, ytr, xte, yte, shots=(1, 3), draws=3, l2_grid=(0.1, 10.0),
                                       holdout_per_class=4, seed=seed)

    for res, draws, ytr in _per_seed(monkeypatch, 15, few_shot):
        assert len(draws) == 6 and res[3].holdout == 16
        for draw, k in zip(draws, (1, 1, 1, 3, 3, 3)):
            shots, held = set(draw["fit"]), draw["held"]
            assert not shots & held and draw["tested"]
            assert Counter(ytr[list(shots)].tolist()) == {c: k for c in range(4)}
            assert Counter(ytr[list(held)].tolist()) == {c: 4 for c in range(4)}


def test_the_probes_lambda_holdout_is_disjoint_from_its_fit_for_every_seed(monkeypatch):
    def probe(xtr, ytr, xte, yte, seed):
        return fewshot.linear_probe(xtr, ytr, xte, yte, l2_grid=(0.1, 10.0), holdout_fraction=0.25, seed=seed)

    for res, (choose, final), _ in _per_seed(monkeypatch, 10, probe):
        assert not set(choose["fit"]) & choose["held"] and len(choose["held"]) == res.holdout == 10
        assert set(choose["fit"]) | choose["held"] == set(range(40)) and not choose["tested"]
        assert sorted(final["fit"]) == list(range(40)) and final["tested"]  # refitted on every example


@pytest.mark.parametrize("stream", [False, True])
def test_the_holdout_is_drawn_with_the_split_seed_not_the_runs(folder, monkeypatch, stream):
    """The validation examples are the first round(N·f) of the split seed's permutation of the
    training split (written out here), whatever ``run.seed`` is: with the split seed moved to 4,
    the holdout moves with it."""
    import mlplab.train.data as D

    monkeypatch.setattr(D, "SPLIT_SEED", 4)
    want = np.sort(torch.randperm(20, generator=torch.Generator().manual_seed(4)).numpy()[:6])
    images = load_dataset("imagefolder", "train", root=folder).images
    for seed in (0, 3):
        cfg = _cfg(seed, **{"data.dataset": "imagefolder", "data.root": str(folder), "data.stream": stream,
                            "data.val_fraction": 0.3})
        data = load_run_data(cfg, torch.device("cpu"))
        if stream:
            assert data.val.rows.tolist() == want.tolist()
            assert data.train.rows.tolist() == sorted(set(range(20)) - set(want.tolist()))
        else:
            assert _keys(data.val.images) == _keys(images[want])
            assert _keys(data.train.images) == _keys(images[sorted(set(range(20)) - set(want.tolist()))])
    synthetic = load_run_data(_cfg(3), torch.device("cpu"))
    full = load_dataset("synthetic", "train", image_size=8, seed=4)  # (the synthetic set's own seed is the split's)
    pick = np.sort(torch.randperm(1024, generator=torch.Generator().manual_seed(4)).numpy()[:256])
    assert torch.equal(synthetic.val.images, full.images[pick]) and torch.equal(synthetic.val.labels, full.labels[pick])
