"""The permuted-Kronecker (PK) layer, Definition 5.1 of Hayase & Karakida (2024).

For X ∈ R^{n1×n2} (m = n1·n2), W ∈ R^{n2'×n2} and permutations J1 (m×m), J2 (m'×m'):

    PK-Layer_W(X; J1, J2) = Mat[ J2 (I_{n1} ⊗ W) J1 vec(X) ]                        (Def. 5.1)

Nothing m×m is ever built: permute the m entries (J1), view them as n1 groups of n2, apply W
to every group, permute the m' outputs (J2). The MLP-Mixer's mixing layers are PK layers with
J ∈ {I, J_c, J_cᵀ}; the RP-Mixer draws J1, J2 uniformly at random. In an MLP block
W2 φ(W1 ·) the hidden permutation cancels (J and Jᵀ), so a whole MLP may act on each group:
:class:`PKMixing` takes any module that maps the last dimension n2 -> n2'.

Storage: models keep the matrix X row-major as (B, rows, cols). Permutations are stored as
index arrays in the paper's **vec (column-major) order** (``(J v)[k] = v[p[k]]``); the gathers
that act directly on row-major storage are derived from them (one gather in, one out).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .common import LinearAct, Mlp, left_gemm_pays
from .vec import commutation_perm, invert_perm, rowmajor_index_of_vec, vec_index_of_rowmajor

__all__ = ["PKMixing", "PKLayer", "ARRANGEMENTS", "compute_by_definition", "permute_entries", "random_perm"]


@torch.library.custom_op("mlplab::permute_entries", mutates_args=())
def _permute_entries(x: torch.Tensor, idx: torch.Tensor, inv_idx: torch.Tensor) -> torch.Tensor:
    """y[:, k] = x[:, idx[k]] for a (B, m) tensor (idx, inv_idx: (1, m) int64).

    ``torch.gather`` with the index broadcast over the batch (stride 0) moves data at the speed
    of a transpose copy; ``index_select`` along dim 1 was 7× slower on this project's CPUs. It is
    a custom op so that ``torch.compile`` calls this kernel instead of generating an indirect-load
    loop (measured 1.5-2× slower than this gather on CPU); the ops around it still fuse.
    """
    if x.element_size() == 2:  # bf16/fp16: gather the bits as int16 (1.7x faster on CPU, same values)
        return torch.gather(x.view(torch.int16), 1, idx.expand(x.shape[0], -1)).view(x.dtype)
    return torch.gather(x, 1, idx.expand(x.shape[0], -1))


@_permute_entries.register_fake
def _(x, idx, inv_idx):
    return x.new_empty((x.shape[0], idx.shape[1]))


def _permute_entries_backward(ctx, grad):
    # the transpose of a permutation is the inverse gather: same values as a scatter, no atomics
    idx, inv_idx = ctx.saved_tensors
    return _permute_entries(grad.contiguous(), inv_idx, idx), None, None


def _permute_entries_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[1], inputs[2])


_permute_entries.register_autograd(_permute_entries_backward, setup_context=_permute_entries_setup)


def permute_entries(x: torch.Tensor, idx: torch.Tensor, inv_idx: torch.Tensor | None = None) -> torch.Tensor:
    """Apply the permutation ``idx`` to dim 1 of a (B, m) tensor: y[:, k] = x[:, idx[k]]."""
    if inv_idx is None:
        inv_idx = invert_perm(idx)
    return _permute_entries(x.contiguous(), idx.view(1, -1), inv_idx.view(1, -1))


def random_perm(m: int, generator: torch.Generator) -> torch.Tensor:
    """A uniformly random permutation of ``range(m)`` drawn from ``generator`` (CPU)."""
    return torch.randperm(m, generator=generator)


#: How a PK layer is computed on row-major (B, rows, cols) storage. The first two are the
#: normal Mixer's arrangements and move no data; "gather" is Definition 5.1 read literally.
ARRANGEMENTS = ("rows", "columns", "gather")


class PKMixing(nn.Module):
    """Mat[J2 (I_{n1} ⊗ f) J1 vec(X)] for an arbitrary group map f: R^{n2} -> R^{n2'} (Def. 5.1).

    Args:
        inner: module acting on the last dimension (n2 -> n2_out), e.g. ``nn.Linear`` (a PK
            layer) or a two-layer MLP (a PK MLP block; its hidden permutation cancels).
        in_shape: (rows, cols) of the input matrix X, m = rows·cols = n1·n2.
        out_shape: (rows', cols') of the output matrix, m' = n1·n2_out.
        n1, n2, n2_out: the grouping of Definition 5.1.
        perm_in, perm_out: *free* permutations J1, J2 (vec-order index arrays), e.g. an RP
            layer's. They are buffers in the state dict. Leave them out for a normal Mixer's
            layer: its J's are fixed by ``arrangement`` and nothing is stored (as in timm).
        arrangement: "rows" (groups are the rows of X: J1 = J_c, J2 = J_cᵀ, channel mixing),
            "columns" (groups are the columns: J1 = J2 = I, token mixing) or "gather" (compute
            with two gathers, the definition read literally). Default: "columns" without
            permutations; with permutations, whichever arrangement they are, else "gather".

    **The one fast-path mechanism** is the arrangement, fixed at construction (``self.arrangement``):

    - ``rows``: f acts on the last dimension as stored: ``inner(x)``, no data moved.
    - ``columns``: f acts on every column; ``inner.forward_columns(x)`` (W X from the left) when
      the group map has one (:class:`~mlplab.layers.common.Mlp`,
      :class:`~mlplab.layers.common.LinearAct`) and left GEMMs pay (fp32, see
      :func:`~mlplab.layers.common.left_gemm_pays`), else ``inner`` on the transposed input.
    - ``gather``: J1 as one gather, f on the (B, n1, n2) groups, J2 as one gather.

    Tests pin every arrangement to the gather path in float64, forward and gradients.
    """

    def __init__(
        self,
        inner: nn.Module,
        in_shape: tuple[int, int],
        out_shape: tuple[int, int],
        n1: int,
        n2: int,
        n2_out: int,
        perm_in: torch.Tensor | None = None,
        perm_out: torch.Tensor | None = None,
        arrangement: str | None = None,
    ):
        super().__init__()
        rows, cols = in_shape
        rows_o, cols_o = out_shape
        m, m_out = rows * cols, rows_o * cols_o
        if n1 * n2 != m or n1 * n2_out != m_out:
            raise ValueError(
                f"PK grouping n1={n1}, n2={n2}, n2'={n2_out} does not fit input {in_shape} "
                f"(m={m}) and output {out_shape} (m'={m_out})"
            )
        if arrangement not in (None,) + ARRANGEMENTS:
            raise ValueError(f"arrangement must be one of {ARRANGEMENTS}, got {arrangement!r}")
        self.inner = inner
        self._linear_first = isinstance(inner, (nn.Linear, Mlp, LinearAct))
        self.in_shape = (rows, cols)
        self.out_shape = (rows_o, cols_o)
        self.n1, self.n2, self.n2_out = n1, n2, n2_out
        self.free_perms = perm_in is not None or perm_out is not None
        if self.free_perms:
            if arrangement in ("rows", "columns"):
                raise ValueError(f"arrangement={arrangement!r} fixes J1 and J2; pass no permutations with it")
            p_in = torch.arange(m) if perm_in is None else perm_in.long().clone()
            p_out = torch.arange(m_out) if perm_out is None else perm_out.long().clone()
            for name, p, size in (("perm_in", p_in, m), ("perm_out", p_out, m_out)):
                if p.shape != (size,) or not torch.equal(torch.sort(p).values, torch.arange(size)):
                    raise ValueError(f"{name} must be a permutation of range({size})")
            # J1, J2 in vec order: free parameters of the model, saved in the state dict.
            self.register_buffer("perm_in", p_in)
            self.register_buffer("perm_out", p_out)
            self._forced_gather = arrangement == "gather"
        else:
            implied = arrangement or "columns"
            if implied == "rows" and (n1, n2, n2_out) != (rows, cols, cols_o):
                raise ValueError(f"arrangement='rows' needs n1=rows, n2=cols, n2'=cols' (got {n1}, {n2}, {n2_out} "
                                 f"for {in_shape} -> {out_shape})")
            if implied == "columns" and (n1, n2, n2_out) != (cols, rows, rows_o):
                raise ValueError(f"arrangement='columns' needs n1=cols, n2=rows, n2'=rows' (got {n1}, {n2}, "
                                 f"{n2_out} for {in_shape} -> {out_shape})")
            self._implied = "columns" if implied == "gather" else implied  # gather: J1 = J2 = I, computed literally
            self._forced_gather = implied == "gather"
        self._derive()
        self.register_load_state_dict_post_hook(lambda module, keys: module._derive())

    # ------------------------------------------------------------------ the permutations
    def j1(self) -> torch.Tensor:
        """J1 as a vec-order index array ((J1 v)[k] = v[p[k]])."""
        if self.free_perms:
            return self.perm_in
        rows, cols = self.in_shape
        if self._implied == "rows":
            return commutation_perm(rows, cols)
        return torch.arange(rows * cols)

    def j2(self) -> torch.Tensor:
        """J2 as a vec-order index array."""
        if self.free_perms:
            return self.perm_out
        rows_o, cols_o = self.out_shape
        if self._implied == "rows":
            return invert_perm(commutation_perm(rows_o, cols_o))
        return torch.arange(rows_o * cols_o)

    def _derive(self) -> None:
        """The arrangement that computes J1, J2, and the row-major gathers when it is 'gather'."""
        rows, cols = self.in_shape
        rows_o, cols_o = self.out_shape
        j1, j2 = self.j1(), self.j2()
        dev = j1.device
        gather_in = rowmajor_index_of_vec(rows, cols, dev)[j1]  # x_grouped = r[gather_in]
        gather_out = j2[vec_index_of_rowmajor(rows_o, cols_o, dev)]  # r_out = u[gather_out]
        is_rows = (self.n1, self.n2, self.n2_out) == (rows, cols, cols_o) and \
            torch.equal(gather_in, torch.arange(rows * cols, device=dev)) and \
            torch.equal(gather_out, torch.arange(rows_o * cols_o, device=dev))
        # groups are the columns of X: the grouped order is vec order on both sides
        is_columns = (self.n1, self.n2, self.n2_out) == (cols, rows, rows_o) and cols == cols_o and \
            torch.equal(j1, torch.arange(rows * cols, device=dev)) and \
            torch.equal(j2, torch.arange(rows_o * cols_o, device=dev))
        if self._forced_gather or not (is_rows or is_columns):
            self.arrangement = "gather"
        else:
            self.arrangement = "rows" if is_rows else "columns"
        self._gather = None
        if self.arrangement == "gather":
            self._gather = (gather_in, invert_perm(gather_in), gather_out, invert_perm(gather_out))

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        if self._gather is not None:  # keep derived gathers on the device of the buffers
            dev = next(iter(self.inner.parameters()), torch.empty(0)).device
            self._gather = tuple(g.to(dev) for g in self._gather)
        return out

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """A normal layer stores no permutations. Checkpoints written before that (which saved the
        implied J's) still load; a checkpoint with *other* permutations (an RP layer) is refused."""
        if not self.free_perms:
            for name, implied in (("perm_in", self.j1), ("perm_out", self.j2)):
                key = prefix + name
                if key in state_dict:
                    if torch.equal(state_dict[key].cpu().long(), implied().cpu()):
                        state_dict.pop(key)
                    else:
                        error_msgs.append(f"{key}: the checkpoint holds free permutations (an RP layer) but "
                                          f"this layer has the fixed {self.arrangement!r} arrangement")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    # ------------------------------------------------------------------ forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, rows, cols)
        if self.arrangement == "rows":
            return self.inner(x)  # groups are rows: f acts on channels directly
        if self.arrangement == "columns":
            if hasattr(self.inner, "forward_columns") and left_gemm_pays(x):
                return self.inner.forward_columns(x)  # (B, rows, cols) -> (B, rows', cols)
            return self.inner(x.transpose(-1, -2)).transpose(-1, -2)  # (B, cols, rows') -> (B, rows', cols)
        g_in, g_in_inv, g_out, g_out_inv = self._gather
        B = x.shape[0]
        x = self._autocast_input(x)
        r = permute_entries(x.reshape(B, -1), g_in, g_in_inv)  # (B, m) = J1 vec(X), grouped
        u = self.inner(r.view(B, self.n1, self.n2)).reshape(B, -1)  # (B, n1·n2')
        r_out = permute_entries(u, g_out, g_out_inv)  # row-major storage of Mat[J2 u]
        return r_out.view(B, *self.out_shape)

    def _autocast_input(self, x: torch.Tensor) -> torch.Tensor:
        """Under autocast, cast a float32 input to the autocast dtype *before* the J1 gather when
        the group map starts with a Linear (which would cast it anyway): a permutation commutes
        with the cast, so the result is identical and the gather moves half the bytes."""
        dev = x.device.type
        if x.dtype == torch.float32 and self._linear_first and torch.is_autocast_enabled(dev):
            return x.to(torch.get_autocast_dtype(dev))
        return x

    def extra_repr(self) -> str:
        return (
            f"in={self.in_shape}, out={self.out_shape}, n1={self.n1}, n2={self.n2}, "
            f"n2'={self.n2_out}, arrangement={self.arrangement}" + (", free permutations" if self.free_perms else "")
        )


def compute_by_definition(model: nn.Module) -> nn.Module:
    """Switch every PK layer of ``model`` to the "gather" arrangement (in place): the same
    function computed literally as Def. 5.1 (two gathers around the group map), and turn off
    paths that bypass the PK layers (a Mixer's ``fuse_seams``). Tests and benchmarks compare the
    fast arrangements against it."""
    for mod in model.modules():
        if hasattr(mod, "fuse_seams"):
            mod.fuse_seams = False
        if isinstance(mod, PKMixing):
            mod._forced_gather = True
            mod._derive()
    return model


class PKLayer(PKMixing):
    """The PK layer of Definition 5.1 with a single weight W ∈ R^{n2'×n2} (plus optional bias).

    Works on the vec form directly when ``in_shape``/``out_shape`` are omitted: the input is then
    treated as the (n2 × n1) matrix whose vec is the input vector, and so is the output.
    """

    def __init__(
        self,
        n1: int,
        n2: int,
        n2_out: int,
        perm_in: torch.Tensor | None = None,
        perm_out: torch.Tensor | None = None,
        bias: bool = True,
        in_shape: tuple[int, int] | None = None,
        out_shape: tuple[int, int] | None = None,
    ):
        super().__init__(
            nn.Linear(n2, n2_out, bias=bias),
            in_shape or (n2, n1),
            out_shape or (n2_out, n1),
            n1,
            n2,
            n2_out,
            perm_in,
            perm_out,
        )

    @property
    def weight(self) -> torch.Tensor:
        return self.inner.weight

    def effective_weight(self, dtype=torch.float64) -> torch.Tensor:
        """The dense m'×m matrix J2 (I_{n1} ⊗ W) J1 in vec order (small sizes only)."""
        from .vec import perm_matrix

        W = self.inner.weight.detach().to(dtype)
        eye = torch.eye(self.n1, dtype=dtype, device=W.device)
        return perm_matrix(self.j2().to(W.device), dtype) @ torch.kron(eye, W) @ perm_matrix(self.j1().to(W.device), dtype)
