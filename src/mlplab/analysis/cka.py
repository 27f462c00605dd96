"""Linear CKA between representations, full batch and mini-batch (docs/science.md §6).

Centred kernel alignment compares two sets of features X ∈ R^{n×p}, Y ∈ R^{n×q} of the same n
examples through their Gram matrices K = XXᵀ, L = YYᵀ:

    CKA(K, L) = HSIC(K, L) / sqrt(HSIC(K, K) · HSIC(L, L)).

The paper (Hayase & Karakida 2024, Fig. 2) follows Nguyen, Raghu & Kornblith (2021): over
mini-batches k, with the *unbiased* estimator HSIC₁ (Song et al. 2012),

    CKA_minibatch(X, Y) = Σ_k HSIC₁(K_k, L_k) / sqrt(Σ_k HSIC₁(K_k, K_k) · Σ_k HSIC₁(L_k, L_k)).

Because HSIC₁ is unbiased, the sums converge to the population quantity instead of the biased
value that depends on the batch size. Everything is accumulated in float64.

HSIC₁ (Song et al. 2012), with K̃, L̃ the kernels with zeroed diagonals and n ≥ 4:

    HSIC₁(K, L) = [tr(K̃L̃) + 1ᵀK̃1·1ᵀL̃1 / ((n−1)(n−2)) − 2/(n−2)·1ᵀK̃L̃1] / (n(n−3)).

It equals ⟨U(K), U(L)⟩/(n(n−3)) where U is the "U-centring" of Székely & Rizzo (2014):
U(K)_ij = K_ij − r_i/(n−2) − r_j/(n−2) + s/((n−1)(n−2)) off the diagonal (r = row sums of K̃,
s = their total), 0 on it. That inner product form is what makes mini-batch CKA bounded by 1
(Cauchy–Schwarz) and lets :class:`MinibatchCKA` evaluate every layer pair with one matrix product.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import torch
import torch.nn as nn

__all__ = [
    "gram_linear",
    "u_centre",
    "hsic0",
    "hsic1",
    "linear_cka",
    "MinibatchCKA",
    "CKAResult",
    "cka_matrix",
    "default_cka_layers",
]


def _as_f64(x) -> torch.Tensor:
    x = torch.as_tensor(x)
    return x.detach().to(torch.float64)


def _flatten(x) -> torch.Tensor:
    """(N, ...) -> (N, -1) in float64: each example's feature as one vector (docs/science.md §6)."""
    x = _as_f64(x)
    return x.reshape(x.shape[0], -1)


def gram_linear(x) -> torch.Tensor:
    """Linear kernel K = XXᵀ of the flattened features, float64, shape (N, N)."""
    x = _flatten(x)
    return x @ x.T


def u_centre(K) -> torch.Tensor:
    """U-centred kernel (Székely & Rizzo 2014); HSIC₁(K, L) = ⟨U(K), U(L)⟩ / (n(n−3))."""
    K = _as_f64(K).clone()
    n = _kernel_size(K, K)
    if n < 4:
        raise ValueError(f"the unbiased HSIC estimator needs at least 4 examples, got {n}")
    K.fill_diagonal_(0.0)
    r = K.sum(dim=1)
    s = r.sum()
    U = K - r[:, None] / (n - 2) - r[None, :] / (n - 2) + s / ((n - 1) * (n - 2))
    U.fill_diagonal_(0.0)
    return U


def _kernel_size(K: torch.Tensor, L: torch.Tensor) -> int:
    """n of two (n, n) kernels of the same examples, or a ValueError."""
    n = K.shape[0]
    if K.shape != (n, n) or L.shape != (n, n):
        raise ValueError(f"kernels must be square and of equal size, got {tuple(K.shape)} and {tuple(L.shape)}")
    return n


def hsic1(K, L) -> torch.Tensor:
    """Unbiased HSIC estimator of Song et al. (2012), written out term by term.

    ``K``, ``L``: (n, n) kernel matrices of the same n ≥ 4 examples. Returns a float64 scalar.
    """
    K, L = _as_f64(K).clone(), _as_f64(L).clone()
    n = _kernel_size(K, L)
    if n < 4:
        raise ValueError(f"the unbiased HSIC estimator needs at least 4 examples, got {n}")
    K.fill_diagonal_(0.0)
    L.fill_diagonal_(0.0)
    ones = torch.ones(n, dtype=torch.float64, device=K.device)
    trace = (K * L.T).sum()  # tr(K̃L̃)
    middle = K.sum() * L.sum() / ((n - 1) * (n - 2))
    last = 2.0 / (n - 2) * (ones @ K @ L @ ones)
    return (trace + middle - last) / (n * (n - 3))


def hsic0(K, L) -> torch.Tensor:
    """Biased HSIC estimator tr(KHLH)/(n−1)² (Gretton et al. 2005), H = I − 11ᵀ/n."""
    K, L = _as_f64(K), _as_f64(L)
    n = _kernel_size(K, L)
    H = torch.eye(n, dtype=torch.float64, device=K.device) - 1.0 / n
    return torch.trace(K @ H @ L @ H) / (n - 1) ** 2


def linear_cka(X, Y, unbiased: bool = False) -> float:
    """Full-batch linear CKA of features X (n, ...) and Y (n, ...), flattened per example.

    ``unbiased=False``: the original CKA (Kornblith et al. 2019) with the biased HSIC₀, equal to
    ‖YcᵀXc‖_F² / (‖XcᵀXc‖_F ‖YcᵀYc‖_F) for column-centred features; in [0, 1].
    ``unbiased=True``: HSIC₁ in place of HSIC₀ (a one-batch mini-batch CKA, docs/science.md §6).
    """
    X, Y = _flatten(X), _flatten(Y)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must hold the same examples, got {X.shape[0]} and {Y.shape[0]} rows")
    K, L = X @ X.T, Y @ Y.T
    if unbiased:
        UK, UL = u_centre(K), u_centre(L)
        xy, xx, yy = (UK * UL).sum(), (UK * UK).sum(), (UL * UL).sum()
    else:
        Xc, Yc = X - X.mean(0), Y - Y.mean(0)
        Kc, Lc = Xc @ Xc.T, Yc @ Yc.T
        xy, xx, yy = (Kc * Lc).sum(), (Kc * Kc).sum(), (Lc * Lc).sum()
    return float(xy / torch.sqrt(xx * yy))


class MinibatchCKA:
    """Accumulates Σ_k HSIC₁ over mini-batches for every (layer of A, layer of B) pair (docs/science.md §6).

    >>> acc = MinibatchCKA(num_a=3, num_b=2)
    >>> acc.update([xa0, xa1, xa2], [yb0, yb1])   # one mini-batch, features of each layer
    >>> acc.compute()                              # (3, 2) numpy array of CKA values

    ``update(feats_a, feats_b=None)``: each feature is (n, ...) for the same n ≥ 4 examples;
    ``feats_b=None`` compares A with itself (the B side then mirrors A).
    """

    def __init__(self, num_a: int, num_b: int | None = None, device: str | torch.device | None = None):
        self.num_a = num_a
        self.self_similarity = num_b is None
        self.num_b = num_a if num_b is None else num_b
        self.device = device
        self.reset()

    def reset(self) -> None:
        self.xy = torch.zeros(self.num_a, self.num_b, dtype=torch.float64)
        self.xx = torch.zeros(self.num_a, dtype=torch.float64)
        self.yy = torch.zeros(self.num_b, dtype=torch.float64)
        self.num_batches = 0
        self.num_examples = 0

    def _centred_stack(self, feats: Sequence, expected: int, side: str) -> torch.Tensor:
        if len(feats) != expected:
            raise ValueError(f"expected {expected} feature tensors for side {side}, got {len(feats)}")
        rows = []
        for f in feats:
            f = torch.as_tensor(f).detach()
            if self.device is not None:
                f = f.to(self.device)
            rows.append(u_centre(gram_linear(f)).reshape(-1))  # (n²,)
        return torch.stack(rows)  # (layers, n²)

    def update(self, feats_a: Sequence, feats_b: Sequence | None = None) -> None:
        n = int(torch.as_tensor(feats_a[0]).shape[0])
        for f in list(feats_a) + list(feats_b or []):
            if int(torch.as_tensor(f).shape[0]) != n:
                raise ValueError("all features of one update must hold the same examples")
        Ua = self._centred_stack(feats_a, self.num_a, "A")
        if feats_b is None:
            if not self.self_similarity and self.num_a != self.num_b:
                raise ValueError("feats_b is required when the two sides have different layers")
            Ub = Ua
        else:
            Ub = self._centred_stack(feats_b, self.num_b, "B")
        scale = 1.0 / (n * (n - 3))
        self.xy += (Ua @ Ub.T).cpu() * scale  # HSIC₁ for all pairs at once
        self.xx += (Ua * Ua).sum(1).cpu() * scale
        self.yy += (Ub * Ub).sum(1).cpu() * scale
        self.num_batches += 1
        self.num_examples += n

    def compute(self) -> np.ndarray:
        """The (num_a, num_b) CKA matrix Σ HSIC₁(K,L) / sqrt(Σ HSIC₁(K,K) Σ HSIC₁(L,L))."""
        if self.num_batches == 0:
            raise RuntimeError("MinibatchCKA.compute() called before any update()")
        denom = torch.sqrt(torch.clamp(torch.outer(self.xx, self.yy), min=0.0))
        return (self.xy / denom).numpy()


@dataclass
class CKAResult:
    """A CKA matrix with its row (model A) and column (model B) layer names."""

    matrix: np.ndarray
    layers_a: list[str]
    layers_b: list[str]
    num_examples: int = 0
    num_batches: int = 0
    meta: dict = field(default_factory=dict)

    def diagonal_mean(self) -> float:
        """Average CKA of matching layers (paper Fig. 2b: "average diagonal CKA")."""
        k = min(self.matrix.shape)
        return float(np.mean(np.diag(self.matrix[:k, :k])))

    def get(self, layer_a: str, layer_b: str) -> float:
        return float(self.matrix[self.layers_a.index(layer_a), self.layers_b.index(layer_b)])

    def to_dict(self) -> dict:
        return {
            "matrix": self.matrix.tolist(),
            "layers_a": list(self.layers_a),
            "layers_b": list(self.layers_b),
            "num_examples": self.num_examples,
            "num_batches": self.num_batches,
            "diagonal_mean": self.diagonal_mean(),
            **({"meta": self.meta} if self.meta else {}),
        }


def default_cka_layers(names: Iterable[str]) -> list[str]:
    """The residual-branch outputs (``blocks.*``, features just before each skip, DESIGN.md);
    all names when a model has none."""
    names = list(names)
    blocks = [n for n in names if n.startswith("blocks.")]
    return blocks or names


def _batches(loader_or_batches, max_batches: int | None):
    for k, batch in enumerate(loader_or_batches):
        if max_batches is not None and k >= max_batches:
            return
        yield batch[0] if isinstance(batch, (tuple, list)) else batch


def _select(feats: "OrderedDict[str, torch.Tensor]", layers: list[str], which: str) -> list[torch.Tensor]:
    missing = [n for n in layers if n not in feats]
    if missing:
        raise KeyError(f"model {which} has no intermediate feature(s) {missing}; it has {list(feats)}")
    return [feats[n] for n in layers]


@torch.no_grad()
def cka_matrix(
    model_a: nn.Module,
    model_b: nn.Module | None,
    loader_or_batches,
    layers_a: Sequence[str] | None = None,
    layers_b: Sequence[str] | None = None,
    max_batches: int | None = None,
    device: str | torch.device = "cpu",
) -> CKAResult:
    """Mini-batch linear CKA between every layer of ``model_a`` and every layer of ``model_b``.

    Features come from each model's ``forward_intermediates(x)`` (DESIGN.md: residual-branch
    outputs just before the skip connection), flattened to (N, -1). ``loader_or_batches`` yields
    ``x`` or ``(x, y, ...)``; both models see the same batches, in eval mode, and must already
    live on ``device`` (batches are moved there). Batches need ≥ 4 examples (HSIC₁). ``model_b=None``
    (or the same object) gives the self-similarity matrix.
    Default layers: :func:`default_cka_layers`. Returns a :class:`CKAResult` (rows A, columns B).
    """
    same = model_b is None or model_b is model_a
    models = [model_a] if same else [model_a, model_b]
    was_training = [m.training for m in models]
    for m in models:
        m.eval()
    acc: MinibatchCKA | None = None
    names_a = list(layers_a) if layers_a is not None else None
    names_b = list(layers_b) if layers_b is not None else None
    try:
        for x in _batches(loader_or_batches, max_batches):
            x = x.to(device)
            _, fa = model_a.forward_intermediates(x)
            fb = fa if same else model_b.forward_intermediates(x)[1]
            if acc is None:
                names_a = names_a or default_cka_layers(fa)
                names_b = names_b or default_cka_layers(fb)
                acc = MinibatchCKA(len(names_a), len(names_b), device=device)
            acc.update(_select(fa, names_a, "A"), _select(fb, names_b, "B"))
    finally:
        for m, t in zip(models, was_training):
            m.train(t)
    if acc is None:
        raise ValueError("cka_matrix got no batches")
    return CKAResult(
        acc.compute(), names_a, names_b, acc.num_examples, acc.num_batches,
        {"model_a": getattr(model_a, "model_name", type(model_a).__name__),
         "model_b": getattr(model_b if not same else model_a, "model_name", type(model_a).__name__)},
    )
