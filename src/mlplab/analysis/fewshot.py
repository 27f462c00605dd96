"""Linear few-shot evaluation (the MLP-Mixer paper's transfer metric; docs/science.md §7).

Frozen pre-logit features of k examples per class are fitted in closed form by L2-regularised
least squares onto ±1 targets (one column per class: +1 for its class, −1 elsewhere); a test
image gets the class of the largest output. With features centred on the k-shot mean,

    W = (XᵀX + λI)⁻¹ Xᵀ T,   b = mean of T over the shots,   ŷ = argmax_c (x − μ)ᵀ W_c + b_c,

solved in float64. λ is chosen from a grid by accuracy on held-out *training* examples disjoint
from the shots (never on the test set), separately for every draw. Each shot count is repeated
over ``draws`` random draws of the shots; the result is the mean ± sd of test accuracy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

__all__ = ["FewShotResult", "ProbeResult", "DEFAULT_L2_GRID", "ridge_fit", "ridge_predict", "linear_few_shot",
           "linear_probe", "extract_features"]

#: λ candidates: powers of two from 2^-10 to 2^10 (features are not normalised, so the grid is wide).
DEFAULT_L2_GRID: tuple[float, ...] = tuple(2.0 ** e for e in range(-10, 11, 2))


@dataclass(frozen=True)
class FewShotResult:
    """Test accuracy of a k-shot linear classifier over several draws of the shots."""

    shots: int
    mean: float
    sd: float
    accuracies: tuple[float, ...]
    l2: tuple[float, ...]  # the λ chosen in each draw
    holdout: int  # held-out training examples per draw used to choose λ

    def __str__(self) -> str:
        return f"{self.shots}-shot {100 * self.mean:.2f} ± {100 * self.sd:.2f}% ({len(self.accuracies)} draws)"


def ridge_fit(x: np.ndarray, labels: np.ndarray, num_classes: int,
              l2: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(μ, W, b) of the regularised least-squares fit onto ±1 targets (module docstring)."""
    x = np.asarray(x, np.float64)
    mu = x.mean(0)
    xc = x - mu
    t = -np.ones((len(x), num_classes))
    t[np.arange(len(x)), labels] = 1.0
    d = x.shape[1]
    if len(x) < d:  # the dual form: an n×n system instead of d×d (k·K shots ≪ feature width)
        w = xc.T @ np.linalg.solve(xc @ xc.T + l2 * np.eye(len(x)), t - t.mean(0))
    else:
        w = np.linalg.solve(xc.T @ xc + l2 * np.eye(d), xc.T @ (t - t.mean(0)))
    return mu, w, t.mean(0)


def ridge_predict(fit: tuple[np.ndarray, np.ndarray, np.ndarray], x: np.ndarray) -> np.ndarray:
    mu, w, b = fit
    return np.argmax((np.asarray(x, np.float64) - mu) @ w + b, axis=1)


def _draw(labels: np.ndarray, per_class: int, classes: np.ndarray, rng: np.random.Generator,
          exclude: np.ndarray | None = None) -> np.ndarray:
    """Indices of ``per_class`` random examples of every class (fewer where a class has fewer)."""
    pool = np.ones(len(labels), bool)
    if exclude is not None:
        pool[exclude] = False
    out = [rng.permutation(np.flatnonzero(pool & (labels == c)))[:per_class] for c in classes]
    return np.concatenate(out)


def linear_few_shot(train_features: np.ndarray, train_labels: np.ndarray, test_features: np.ndarray,
                    test_labels: np.ndarray, shots: Sequence[int] = (1, 5, 10, 25), *, draws: int = 5,
                    l2_grid: Iterable[float] = DEFAULT_L2_GRID, holdout_per_class: int = 10,
                    seed: int = 0) -> dict[int, FewShotResult]:
    """k-shot linear accuracy for every k in ``shots`` (module docstring). Features are (N, d)
    arrays (``extract_features``); labels are integers 0..K-1."""
    train_labels, test_labels = np.asarray(train_labels), np.asarray(test_labels)
    classes = np.unique(train_labels)
    k_classes = int(max(train_labels.max(), test_labels.max())) + 1
    grid = tuple(float(v) for v in l2_grid)
    if not grid or min(grid) <= 0:
        raise ValueError(f"l2_grid must hold positive values, got {grid}")
    if draws < 1 or any(int(k) < 1 for k in shots):
        raise ValueError(f"draws and every shot count must be >= 1, got draws={draws}, shots={list(shots)}")
    counts = np.bincount(train_labels, minlength=k_classes)[classes]
    need = max(int(k) for k in shots) + holdout_per_class
    if counts.min() < need:
        raise ValueError(f"{max(shots)} shots plus {holdout_per_class} held-out examples need {need} training "
                         f"examples of every class; the smallest class has {counts.min()}")
    out: dict[int, FewShotResult] = {}
    for k in shots:
        accs, chosen, held = [], [], 0
        for d in range(draws):
            rng = np.random.default_rng([seed, int(k), d])
            idx = _draw(train_labels, int(k), classes, rng)
            hold = _draw(train_labels, holdout_per_class, classes, rng, exclude=idx)
            held = len(hold)
            fits = {lam: ridge_fit(train_features[idx], train_labels[idx], k_classes, lam) for lam in grid}
            hold_acc = {lam: float(np.mean(ridge_predict(f, train_features[hold]) == train_labels[hold]))
                        for lam, f in fits.items()}
            lam = max(grid, key=lambda v: (hold_acc[v], v))  # ties: the stronger regulariser
            accs.append(float(np.mean(ridge_predict(fits[lam], test_features) == test_labels)))
            chosen.append(lam)
        a = np.asarray(accs)
        out[int(k)] = FewShotResult(int(k), float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0,
                                    tuple(accs), tuple(chosen), held)
    return out


@dataclass(frozen=True)
class ProbeResult:
    """Test accuracy of the ridge classifier fitted on every training example."""

    acc: float
    l2: float  # the λ chosen on the held-out part of the training examples
    holdout: int  # training examples held out to choose λ
    train: int  # training examples of the final fit (all of them)


def linear_probe(train_features: np.ndarray, train_labels: np.ndarray, test_features: np.ndarray,
                 test_labels: np.ndarray, *, l2_grid: Iterable[float] = DEFAULT_L2_GRID,
                 holdout_fraction: float = 0.1, seed: int = 0) -> ProbeResult:
    """The linear probe of frozen features in closed form: the ±1 ridge fit of the module
    docstring on all training examples, λ chosen by accuracy on a random ``holdout_fraction`` of
    them (fitted on the rest), then refitted on all of them with that λ."""
    train_labels, test_labels = np.asarray(train_labels), np.asarray(test_labels)
    grid = tuple(float(v) for v in l2_grid)
    if not grid or min(grid) <= 0:
        raise ValueError(f"l2_grid must hold positive values, got {grid}")
    if not 0.0 < holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must be in (0, 1), got {holdout_fraction}")
    k_classes = int(max(train_labels.max(), test_labels.max())) + 1
    order = np.random.default_rng([seed, 1]).permutation(len(train_labels))
    n_hold = max(1, int(round(holdout_fraction * len(order))))
    hold, fit_idx = order[:n_hold], order[n_hold:]
    hold_acc = {lam: float(np.mean(ridge_predict(ridge_fit(train_features[fit_idx], train_labels[fit_idx], k_classes,
                                                           lam), train_features[hold]) == train_labels[hold]))
                for lam in grid}
    lam = max(grid, key=lambda v: (hold_acc[v], v))  # ties: the stronger regulariser
    fit = ridge_fit(train_features, train_labels, k_classes, lam)
    acc = float(np.mean(ridge_predict(fit, test_features) == test_labels))
    return ProbeResult(acc, lam, n_hold, len(train_labels))


@torch.no_grad()
def extract_features(model: torch.nn.Module, loader, *, autocast=None) -> tuple[np.ndarray, np.ndarray]:
    """Pre-logit features (``forward_head(forward_features(x), pre_logits=True)``) and labels of
    every batch of ``loader`` (``(x, y)`` pairs), as float64 / int64 numpy arrays."""
    was = model.training
    model.eval()
    feats, labels = [], []
    try:
        for x, y in loader:
            ctx = autocast() if autocast is not None else torch.autocast(x.device.type, enabled=False)
            with ctx:
                f = model.forward_head(model.forward_features(x), pre_logits=True)
            feats.append(f.float().cpu().numpy().astype(np.float64))
            labels.append((y.argmax(1) if y.ndim == 2 else y).cpu().numpy())
    finally:
        model.train(was)
    return np.concatenate(feats), np.concatenate(labels)
