"""Materialise a Mixer as the wide, sparse MLP it is (Proposition 3.2, Hayase & Karakida 2024).

Vectorised column-major (vec(X)[j·S + i] = X[i, j], ``mlplab.layers.vec.vec``), the S-Mixer's
H = φ(φ(W X) V) is the MLP

    vec(H) = φ( J_cᵀ (I_S ⊗ Vᵀ) J_c · φ( (I_C ⊗ W) vec(X) ) )                      (Prop. 3.2)

of width m = S·C, whose weights I_C ⊗ W and J_cᵀ(I_S ⊗ Vᵀ)J_c = Vᵀ ⊗ I_S have densities 1/C and
1/S (docs/science.md §1). Every mixing sublayer of :class:`mlplab.models.mixer.Mixer` is a PK layer
(Def. 5.1) and becomes the sparse matrix J2 (I_{n1} ⊗ W) J1 built from its ``j1()`` /
``j2()`` permutations, so RP blocks are covered by the same code. In an MLP block the two layers
are J_h (I ⊗ W1) J1 and J2 (I ⊗ W2) J_hᵀ: any hidden permutation J_h cancels (the activation is
entry-wise); we pick the one for which the hidden vector is vec of the Mixer's hidden matrix
(J_h = I for token mixing, J_h = J_cᵀ of the S×γC hidden matrix for channel mixing, and I for an
RP layer). The hidden width is then γ·S·C.

The rest of the network is written on the vec as well: the stem X = X0 Eᵀ is the sparse matrix
(E ⊗ I_{S0}) Π acting on the flattened image (Π the patchify permutation), the first-block skip
W̃ X is (I_C ⊗ W̃) vec(X), LayerNorm normalises the entries {j·S + i}_j of each token i, and the
global average pool is (1/S)(I_C ⊗ 1_Sᵀ). Corollary 3.4 (no intermediate activation: the
product of the two mixing matrices is the Monarch matrix J_cᵀ L J_c R, L = I_S ⊗ Vᵀ,
R = I_C ⊗ W) can be read off :meth:`EffectiveMLP.linears`.

Matrices are torch sparse CSR tensors (float64 by default); nothing m×m is ever dense.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from ..layers.common import ACTIVATIONS, DropPath, Mlp
from ..layers.pk import PKMixing
from ..layers.stem import PatchEmbed, patchify
from ..layers.vec import commutation_perm, invert_perm, vec

__all__ = [
    "DEFAULT_MAX_NNZ",
    "sparse_perm_matrix",
    "sparse_kron_identity",
    "pk_matrix",
    "SparseLinear",
    "Activation",
    "TokenLayerNorm",
    "Sublayer",
    "LayerInfo",
    "EffectiveMLP",
    "effective_mlp",
]

DEFAULT_MAX_NNZ = 20_000_000  # ~320 MB of CSR storage in float64 with int64 indices


# ----------------------------------------------------------------------------- sparse helpers


def _csr(crow: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    with warnings.catch_warnings():  # "sparse CSR support is in beta": we only need matmul
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, cols, values, size=shape, check_invariants=False)


def _csr_fixed(cols: torch.Tensor, values: torch.Tensor, n_cols: int) -> torch.Tensor:
    """CSR matrix whose row r holds the entries ``cols[r, :]`` (distinct) with ``values[r, :]``.

    Every structured matrix here (I ⊗ W, W ⊗ I, their row/column permutations, a dense head) has
    the same number of entries per row, so no global sort is needed: only each row's columns."""
    n_rows, k = cols.shape
    cols, order = torch.sort(cols.long(), dim=1)
    values = torch.gather(values, 1, order)
    crow = torch.arange(0, (n_rows + 1) * k, k, dtype=torch.long) if k else torch.zeros(n_rows + 1, dtype=torch.long)
    return _csr(crow, cols.reshape(-1), values.reshape(-1).contiguous(), (n_rows, n_cols))


def sparse_perm_matrix(p: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Sparse J with (J v)[k] = v[p[k]], i.e. J[k, p[k]] = 1 (``layers.vec.perm_matrix``, sparse)."""
    p = p.long().cpu()
    m = p.numel()
    return _csr_fixed(p.view(m, 1), torch.ones(m, 1, dtype=dtype), m)


def sparse_kron_identity(W: torch.Tensor, n: int, side: str = "left") -> torch.Tensor:
    """I_n ⊗ W (``side="left"``, block-diagonal, density 1/n) or W ⊗ I_n (``side="right"``)."""
    W = W.detach().cpu()
    a, b = W.shape
    if side == "left":
        return pk_matrix(W, n)
    if side != "right":
        raise ValueError(f"side must be 'left' (I ⊗ W) or 'right' (W ⊗ I), got {side!r}")
    # row r·n + g holds W[r, c] at column c·n + g
    R = torch.arange(a * n)
    r, g = R // n, R % n
    cols = torch.arange(b).view(1, b) * n + g.view(-1, 1)
    return _csr_fixed(cols, W[r], b * n)


def pk_matrix(
    W: torch.Tensor,
    n1: int,
    perm_in: torch.Tensor | None = None,
    perm_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """J2 (I_{n1} ⊗ W) J1 of Definition 5.1 as a sparse (n1·n2' × n1·n2) matrix.

    Multiplying by permutation matrices only moves entries: with (J v)[k] = v[p[k]], row k of
    J2 A is row p2[k] of A, and A J1 sends column c of A to column p1[c]. Row g·n2' + r of
    I ⊗ W holds W[r, :] at columns g·n2 + (0..n2−1). So the matrix is written down directly
    (equal to ``perm_matrix(p2) @ kron(I, W) @ perm_matrix(p1)``, which the tests check).
    """
    W = W.detach().cpu()
    a, b = W.shape
    m_out, m_in = n1 * a, n1 * b
    src = torch.arange(m_out)
    if perm_out is not None:
        if perm_out.numel() != m_out:
            raise ValueError(f"perm_out has {perm_out.numel()} entries, expected n1·n2' = {m_out}")
        src = perm_out.long().cpu()  # row k of J2 A is row p2[k] of A
    g, r = src // a, src % a
    cols = (g * b).view(-1, 1) + torch.arange(b).view(1, b)  # (m_out, n2)
    if perm_in is not None:
        if perm_in.numel() != m_in:
            raise ValueError(f"perm_in has {perm_in.numel()} entries, expected n1·n2 = {m_in}")
        cols = perm_in.long().cpu()[cols]
    return _csr_fixed(cols, W[r], m_in)


def _full_sparse(W: torch.Tensor) -> torch.Tensor:
    """A dense matrix stored as CSR with every entry (head: density 1 even when zero-initialised)."""
    a, b = W.shape
    cols = torch.arange(b).view(1, b).expand(a, b)
    return _csr_fixed(cols, W.detach().cpu().clone(), b)


# ----------------------------------------------------------------------------- ops on (B, m)


@dataclass(eq=False)
class SparseLinear:
    """v ↦ A v + b on a (B, in) batch of vec-form vectors; A sparse CSR (out × in).

    kind: stem | token | channel | skip | pool | head. ``groups`` is n1, the number of diagonal
    blocks of I_{n1} ⊗ W (so the density is 1/n1); ``density_label`` names it (1/C, 1/S, ...).
    """

    name: str
    kind: str
    weight: torch.Tensor
    bias: torch.Tensor | None
    groups: int = 1
    density_label: str = "1"
    rp: bool = False

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weight.shape)

    @property
    def nnz(self) -> int:
        return int(self.weight.values().numel())

    @property
    def density(self) -> float:
        rows, cols = self.shape
        return self.nnz / (rows * cols)

    def __call__(self, v: torch.Tensor) -> torch.Tensor:  # (B, in) -> (B, out)
        y = (self.weight @ v.t().contiguous()).t()
        return y if self.bias is None else y + self.bias

    def to_dense(self) -> torch.Tensor:
        return self.weight.to_dense()


@dataclass(eq=False)
class Activation:
    """Entry-wise φ; it commutes with every permutation (docs/science.md §1), so it needs no re-ordering."""

    name: str
    fn: nn.Module

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        return self.fn(v)


@dataclass(eq=False)
class TokenLayerNorm:
    """LayerNorm of each token over its channels, on vec(X): token i owns entries {j·S + i}_j."""

    name: str
    tokens: int
    channels: int
    weight: torch.Tensor | None
    bias: torch.Tensor | None
    eps: float

    def __call__(self, v: torch.Tensor) -> torch.Tensor:  # (B, C·S)
        x = v.reshape(v.shape[0], self.channels, self.tokens)  # x[:, j, i] = X[i, j]
        mu = x.mean(dim=1, keepdim=True)
        var = (x - mu).pow(2).mean(dim=1, keepdim=True)
        y = (x - mu) / torch.sqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight.view(1, -1, 1)
        if self.bias is not None:
            y = y + self.bias.view(1, -1, 1)
        return y.reshape(v.shape[0], -1)


@dataclass(eq=False)
class Sublayer:
    """A residual branch: out = skip(v) + branch(v) (skip = identity, or (I_C ⊗ W̃) for the
    first-block skip layer), or out = branch(v) when the Mixer has no skips. ``name`` matches
    ``Mixer.forward_intermediates`` (the branch output, just before the skip connection)."""

    name: str
    branch: list
    residual: bool
    skip: SparseLinear | None = None

    def run(self, v: torch.Tensor, trace: dict | None = None) -> torch.Tensor:
        u = v
        for op in self.branch:
            u = op(u)
            if trace is not None:
                trace[op.name] = u
        if trace is not None:
            trace[self.name] = u
        if not self.residual:
            return u
        return (v if self.skip is None else self.skip(v)) + u

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        return self.run(v)


@dataclass
class LayerInfo:
    """One linear layer of the effective MLP. ``width`` is its output width (m = S·C for a mixing
    layer, γ·S·C for the hidden layer of an MLP block); ``density`` = nnz/(out·in) and
    ``expected_density`` = 1/n1 for a PK layer (1/C token mixing, 1/S channel mixing)."""

    name: str
    kind: str
    shape: tuple[int, int]
    width: int
    nnz: int
    density: float
    expected_density: float
    density_label: str
    rp: bool


@dataclass(eq=False)
class EffectiveMLP:
    """The Mixer as an MLP on the flattened image: a list of ops acting on (B, m) tensors.

    ``self(images)`` gives the same logits as the Mixer (Prop. 3.2); ``intermediates(images)``
    the vec form of every op's output (names of the branch outputs match
    ``Mixer.forward_intermediates``); ``layers()`` / ``summary()`` describe the linear layers.
    """

    ops: list
    image_shape: tuple[int, int, int]
    tokens: int
    channels: int
    patches: int
    dtype: torch.dtype = torch.float64
    model_name: str = ""
    rp_blocks: tuple[int, ...] = field(default_factory=tuple)

    def _flatten(self, images: torch.Tensor) -> torch.Tensor:
        if images.ndim != 4 or tuple(images.shape[1:]) != self.image_shape:
            raise ValueError(f"expected images of shape (N, {', '.join(map(str, self.image_shape))}), "
                             f"got {tuple(images.shape)}")
        return images.detach().to(device="cpu", dtype=self.dtype).reshape(images.shape[0], -1)

    @torch.no_grad()
    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        v = self._flatten(images)
        for op in self.ops:
            v = op(v)
        return v

    @torch.no_grad()
    def intermediates(self, images: torch.Tensor) -> "OrderedDict[str, torch.Tensor]":
        """Every op's output in vec form (``stem`` is vec(X), ``blocks.{i}.token`` the branch
        output, ...), ending with ``logits``."""
        trace: OrderedDict[str, torch.Tensor] = OrderedDict()
        v = self._flatten(images)
        for op in self.ops:
            v = op.run(v, trace) if isinstance(op, Sublayer) else op(v)
            if not isinstance(op, Sublayer):
                trace[op.name] = v
        trace["logits"] = v
        return trace

    def linears(self) -> list[SparseLinear]:
        """Every linear layer in order (skip matrices right after their branch)."""
        out = []
        for op in self.ops:
            if isinstance(op, SparseLinear):
                out.append(op)
            elif isinstance(op, Sublayer):
                out += [o for o in op.branch if isinstance(o, SparseLinear)]
                if op.skip is not None:
                    out.append(op.skip)
        return out

    def layer(self, name: str) -> SparseLinear:
        for lin in self.linears():
            if lin.name == name:
                return lin
        raise KeyError(f"no linear layer {name!r}; layers are: {', '.join(l.name for l in self.linears())}")

    def layers(self) -> list[LayerInfo]:
        return [
            LayerInfo(
                name=l.name, kind=l.kind, shape=l.shape, width=l.shape[0], nnz=l.nnz, density=l.density,
                expected_density=1.0 / l.groups, density_label=l.density_label, rp=l.rp,
            )
            for l in self.linears()
        ]

    @property
    def nnz(self) -> int:
        return sum(l.nnz for l in self.linears())

    @property
    def width(self) -> int:
        """The effective width m = S·C."""
        return self.tokens * self.channels

    def summary(self) -> str:
        head = ["layer", "kind", "shape (out x in)", "width", "nnz", "density", "expected"]
        rows = []
        for info in self.layers():
            rows.append([
                info.name, info.kind + (" (RP)" if info.rp else ""), f"{info.shape[0]} x {info.shape[1]}",
                str(info.width), f"{info.nnz:,}", f"{info.density:.4g}",
                f"{info.density_label} = {info.expected_density:.4g}",
            ])
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
        fmt = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w)  # noqa: E731
                                      for i, (c, w) in enumerate(zip(cells, widths)))
        title = (f"effective wide MLP of {self.model_name or 'Mixer'}: S = {self.tokens}, C = {self.channels}, "
                 f"m = S·C = {self.width}, S0 = {self.patches}, {self.nnz:,} nonzeros (Prop. 3.2)")
        return "\n".join([title, fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


# ----------------------------------------------------------------------------- building


def _act_types() -> tuple[type, ...]:
    return tuple(cls for cls in ACTIVATIONS.values() if cls is not nn.Identity)


def _inner_chain(inner: nn.Module, where: str) -> list[tuple[str, nn.Module]]:
    """The group map f of a PK layer as a chain of ("linear", Linear) / ("act", φ) steps."""
    if isinstance(inner, nn.Linear):
        return [("linear", inner)]
    if isinstance(inner, Mlp):
        mods = [inner.fc1, inner.act, inner.drop1, inner.fc2, inner.drop2]
    elif isinstance(inner, nn.Sequential):
        mods = list(inner)
    else:
        raise TypeError(f"{where}: cannot express {type(inner).__name__} as sparse linear layers")
    chain: list[tuple[str, nn.Module]] = []
    for mod in mods:
        if isinstance(mod, (nn.Linear, Mlp, nn.Sequential)):
            chain += _inner_chain(mod, where)
        elif isinstance(mod, nn.Identity):
            continue
        elif isinstance(mod, nn.Dropout):
            if mod.training and mod.p > 0:
                raise ValueError(f"{where}: dropout is active; call model.eval() first")
        elif isinstance(mod, _act_types()):
            chain.append(("act", mod))
        else:
            raise TypeError(f"{where}: {type(mod).__name__} is not an entry-wise activation mlplab knows")
    return chain


def _is_identity(p: torch.Tensor) -> bool:
    return torch.equal(p.cpu(), torch.arange(p.numel()))


def _hidden_perm(mix: PKMixing, hidden: int) -> torch.Tensor:
    """J_h for an MLP block's hidden layer (it cancels; chosen so the hidden vector is a vec):
    J_cᵀ of the (n1 × hidden) matrix when the layer ends with J2 = J_cᵀ (channel mixing),
    identity otherwise (token mixing, RP)."""
    n1 = mix.n1
    p_out = mix.j2().cpu()
    if not _is_identity(p_out) and torch.equal(p_out, invert_perm(commutation_perm(n1, mix.n2_out))):
        return invert_perm(commutation_perm(n1, hidden))
    return torch.arange(n1 * hidden)


def _pk_ops(mix: PKMixing, prefix: str, kind: str, label: str, rp: bool, dtype: torch.dtype) -> list:
    chain = _inner_chain(mix.inner, prefix)
    linears = [m for t, m in chain if t == "linear"]
    if not linears:
        raise TypeError(f"{prefix}: the mixing layer has no linear map")
    if linears[0].in_features != mix.n2 or linears[-1].out_features != mix.n2_out:
        raise ValueError(f"{prefix}: inner map {linears[0].in_features}->{linears[-1].out_features} "
                         f"does not match the PK grouping n2={mix.n2}, n2'={mix.n2_out}")
    n1 = mix.n1
    ops: list = []
    p_in = mix.j1().cpu()
    n_acts = sum(t == "act" for t, _ in chain)
    k = a = 0
    for t, mod in chain:
        if t == "act":
            a += 1
            ops.append(Activation(f"{prefix}.act" if n_acts == 1 else f"{prefix}.act{a}", mod))
            continue
        last = k == len(linears) - 1
        p_out = mix.j2().cpu() if last else _hidden_perm(mix, mod.out_features)
        A = pk_matrix(mod.weight.detach().to(dtype), n1, p_in, p_out)
        bias = None
        if mod.bias is not None:
            # bias of every group: 1_{n1} ⊗ b, then the output permutation
            bias = mod.bias.detach().to(dtype).cpu().repeat(n1)[p_out]
        name = f"{prefix}.fc" if len(linears) == 1 else f"{prefix}.fc{k + 1}"
        ops.append(SparseLinear(name, kind, A, bias, groups=n1, density_label=label, rp=rp))
        p_in = invert_perm(p_out)  # the next layer starts with J_hᵀ
        k += 1
    return ops


def _stem_op(stem: PatchEmbed, dtype: torch.dtype) -> SparseLinear:
    """vec(X0 Eᵀ) + b ⊗ 1_{S0} = (E ⊗ I_{S0}) Π x + b ⊗ 1_{S0}, x the flattened image and
    Π the patchify permutation (vec(X0) = Π x)."""
    ch, H = stem.in_chans, stem.image_size
    S0 = stem.num_patches
    idx = torch.arange(ch * H * H).view(1, ch, H, H)
    q = vec(patchify(idx, stem.patch_size))[0]  # vec(X0)[t] = x[q[t]]
    E = stem.proj.weight.detach().to(dtype).cpu()  # (C, C0)
    C, C0 = E.shape
    # E ⊗ I_{S0}: row j·S0 + s holds E[j, c0] at column c0·S0 + s; then Π moves column t to q[t]
    R = torch.arange(C * S0)
    j, s = R // S0, R % S0
    cols = q[torch.arange(C0).view(1, C0) * S0 + s.view(-1, 1)]
    A = _csr_fixed(cols, E[j], ch * H * H)
    bias = None
    if stem.proj.bias is not None:
        bias = stem.proj.bias.detach().to(dtype).cpu().repeat_interleave(S0)
    return SparseLinear("stem", "stem", A, bias, groups=S0, density_label="1/S0")


def _ln_op(norm: nn.Module, name: str, tokens: int, channels: int, dtype: torch.dtype) -> TokenLayerNorm | None:
    if isinstance(norm, nn.Identity):
        return None
    if not isinstance(norm, nn.LayerNorm):
        raise TypeError(f"{name}: {type(norm).__name__} is not a LayerNorm")
    w = None if norm.weight is None else norm.weight.detach().to(dtype).cpu()
    b = None if norm.bias is None else norm.bias.detach().to(dtype).cpu()
    return TokenLayerNorm(name, tokens, channels, w, b, norm.eps)


def _estimate_nnz(model: nn.Module) -> int:
    stem = model.stem
    total = stem.proj.weight.numel() * stem.num_patches
    for blk in model.blocks:
        for mix in (blk.token_mixing, blk.channel_mixing):
            total += sum(m.weight.numel() * mix.n1 for m in mix.modules() if isinstance(m, nn.Linear))
        if blk.skip_proj is not None and blk.use_skip:
            total += blk.skip_proj.weight.numel() * blk.dim
    total += model.num_tokens * model.hidden_dim + model.head.weight.numel()
    return total


def effective_mlp(model: nn.Module, dtype: torch.dtype = torch.float64, max_nnz: int = DEFAULT_MAX_NNZ) -> EffectiveMLP:
    """Materialise ``model`` (a :class:`mlplab.models.mixer.Mixer`: S-Mixer or MLP-Mixer, normal or
    RP, with or without LN and skips, any S vs S0) as its effective wide MLP (Prop. 3.2).

    The result computes ``model(images)`` (in eval mode) with explicit sparse matrices in
    ``dtype``. Refused when the matrices would hold more than ``max_nnz`` nonzeros: storage grows
    with nnz (≈ 16 bytes each), not with m², but a model can still be too large for that.
    """
    from ..models.mixer import Mixer  # theory depends only on layers/models

    if not isinstance(model, Mixer):
        raise TypeError(f"effective_mlp expects a mlplab Mixer (S-Mixer / MLP-Mixer / RP), got {type(model).__name__}")
    if model.cfg.token_mixing != "shared":
        raise ValueError(f"effective_mlp builds the PK token mixing of the shared Mixer, "
                         f"not token_mixing={model.cfg.token_mixing!r}")
    if model.training:
        for mod in model.modules():
            if (isinstance(mod, nn.Dropout) and mod.p > 0) or (isinstance(mod, DropPath) and mod.p > 0):
                raise ValueError("the model has active dropout / stochastic depth; call model.eval() first")
    nnz = _estimate_nnz(model)
    if nnz > max_nnz:
        m = model.num_tokens * model.hidden_dim
        raise ValueError(
            f"the effective MLP would hold {nnz:,} nonzeros (> max_nnz = {max_nnz:,}, about "
            f"{16 * nnz / 2**30:.1f} GiB sparse; dense, each m×m layer would be {m:,}² = {m * m:,} entries). "
            f"Use a smaller S, C or depth, or raise max_nnz"
        )
    S, C, S0 = model.num_tokens, model.hidden_dim, model.num_patches
    ops: list = [_stem_op(model.stem, dtype)]
    for blk in model.blocks:
        i = blk.index
        tag = f"blocks.{i}"
        s_in = blk.tokens_in
        branch = [op for op in [_ln_op(blk.norm1, f"{tag}.norm1", s_in, C, dtype)] if op is not None]
        branch += _pk_ops(blk.token_mixing, f"{tag}.token", "token", "1/C", blk.rp, dtype)
        skip = None
        if blk.use_skip and blk.skip_proj is not None:
            # vec(W̃ X) = (I_C ⊗ W̃) vec(X)
            skip = SparseLinear(f"{tag}.skip", "skip", pk_matrix(blk.skip_proj.weight.detach().to(dtype), C),
                                None, groups=C, density_label="1/C")
        ops.append(Sublayer(f"{tag}.token", branch, blk.use_skip, skip))
        branch = [op for op in [_ln_op(blk.norm2, f"{tag}.norm2", S, C, dtype)] if op is not None]
        branch += _pk_ops(blk.channel_mixing, f"{tag}.channel", "channel", "1/S", blk.rp, dtype)
        ops.append(Sublayer(f"{tag}.channel", branch, blk.use_skip, None))
    final = _ln_op(model.norm, "norm", S, C, dtype)
    if final is not None:
        ops.append(final)
    # global average pool over tokens: (1/S)(I_C ⊗ 1_Sᵀ)
    pool = pk_matrix(torch.full((1, S), 1.0 / S, dtype=dtype), C)
    ops.append(SparseLinear("pool", "pool", pool, None, groups=C, density_label="1/C"))
    head = model.head
    ops.append(SparseLinear("head", "head", _full_sparse(head.weight.detach().to(dtype)),
                            None if head.bias is None else head.bias.detach().to(dtype).cpu()))
    stem = model.stem
    return EffectiveMLP(
        ops=ops, image_shape=(stem.in_chans, stem.image_size, stem.image_size), tokens=S, channels=C,
        patches=S0, dtype=dtype, model_name=getattr(model, "model_name", type(model).__name__),
        rp_blocks=tuple(sorted(model.rp_blocks)),
    )
