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

__all__ = ["PKMixing", "PKLayer", "ARRANGEMENTS", "has_hooks", "permute_entries", "random_perm"]


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


def has_hooks(module: nn.Module) -> bool:
    """Whether a forward hook or pre-hook is registered on ``module``, inside it, or for every
    module (``nn.modules.module.register_module_forward_hook``): fast paths then call those
    modules as modules, so the hooks fire."""
    glob = nn.modules.module
    if glob._global_forward_hooks or glob._global_forward_pre_hooks:
        return True
    stack = [module]  # the tree walked directly: ``modules()`` costs ~4 µs per module, this ~0.2
    while stack:
        m = stack.pop()
        if m._forward_hooks or m._forward_pre_hooks:
            return True
        stack.extend(c for c in m._modules.values() if c is not None)
    return False


def _group_map_widths(inner: nn.Module) -> tuple[int, int] | None:
    """(n2, n2') of a group map whose widths are known (Linear, Mlp, LinearAct), else None."""
    if isinstance(inner, nn.Linear):
        return inner.in_features, inner.out_features
    if isinstance(inner, Mlp):
        return inner.fc1.in_features, inner.fc2.out_features
    if isinstance(inner, LinearAct):
        return inner[0].in_features, inner[0].out_features
    return None


class PKMixing(nn.Module):
    """Mat[J2 (I_{n1} ⊗ f) J1 vec(X)] for an arbitrary group map f: R^{n2} -> R^{n2'} (Def. 5.1).

    Args:
        inner: the group map f, acting on the last dimension (n2 -> n2'), e.g. ``nn.Linear`` (a
            PK layer) or a two-layer MLP (a PK MLP block; its hidden permutation cancels).
        in_shape, out_shape: (rows, cols) of the input matrix X and of the output; m = rows·cols.
        groups: n1, the number of groups: "rows" (n1 = rows, n2 = cols: channel mixing, J1 = J_c,
            J2 = J_cᵀ), "columns" (n1 = cols, n2 = rows: token mixing, J1 = J2 = I), or an int
            (with free permutations). n2 = m / n1 and n2' = m' / n1 follow from the shapes.
        perm_in, perm_out: *free* permutations J1, J2 (vec-order index arrays), e.g. an RP
            layer's, stored in the state dict. Without them the J's are the ones ``groups`` names
            and nothing is stored (as in timm).
        by_definition: compute by the two gathers of Def. 5.1 whatever the J's (a Mixer sets it
            on every layer for ``model.impl = "definition"``); else the cheapest arrangement.

    Public view: :attr:`arrangement` (how the row-major storage is mapped: "rows", "columns" or
    "gather"), :attr:`gathers` (the row-major gathers of J1, J2 and their inverses, for
    "gather"; derived once from the J's, again only when loaded permutations replace them),
    :attr:`group_map` (f), :meth:`j1` / :meth:`j2`.

    - ``rows``: f acts on the last dimension as stored: ``inner(x)``, no data moved.
    - ``columns``: f acts on every column; ``inner.forward_columns(x)`` (W X from the left) when
      the group map has one, left GEMMs pay (:func:`~mlplab.layers.common.left_gemm_pays`) and
      no forward hook watches f (a left GEMM uses its weights without calling it); else ``inner``
      on the transposed input.
    - ``gather``: J1 as one gather, f on the (B, n1, n2) groups, J2 as one gather.

    Tests pin every arrangement to the gather path in float64, forward and gradients.
    """

    def __init__(
        self,
        inner: nn.Module,
        in_shape: tuple[int, int],
        out_shape: tuple[int, int],
        groups: str | int = "columns",
        perm_in: torch.Tensor | None = None,
        perm_out: torch.Tensor | None = None,
        by_definition: bool = False,
    ):
        super().__init__()
        rows, cols = in_shape
        rows_o, cols_o = out_shape
        m, m_out = rows * cols, rows_o * cols_o
        free = perm_in is not None or perm_out is not None
        if groups == "rows" and rows_o != rows or groups == "columns" and cols_o != cols:
            raise ValueError(f"groups={groups!r} keeps the {groups} of X: output {out_shape} does not fit "
                             f"input {in_shape}")
        if groups not in ("rows", "columns") and not (free and isinstance(groups, int)):
            raise ValueError(f"groups must be 'rows', 'columns' or, with free permutations, a group count; "
                             f"got {groups!r}")
        n1 = {"rows": rows, "columns": cols}.get(groups, groups)
        if n1 < 1 or m % n1 or m_out % n1:
            raise ValueError(f"{n1} groups do not fit input {in_shape} (m={m}) and output {out_shape} (m'={m_out})")
        widths = _group_map_widths(inner)
        if widths is not None and widths != (m // n1, m_out // n1):
            raise ValueError(f"the group map takes {widths[0]} -> {widths[1]} entries but {n1} groups of input "
                             f"{in_shape} and output {out_shape} have {m // n1} -> {m_out // n1}")
        self.inner = inner
        self.in_shape, self.out_shape, self.groups = (rows, cols), (rows_o, cols_o), groups
        self._linear_first = isinstance(inner, (nn.Linear, Mlp, LinearAct))
        if free:
            p_in = torch.arange(m) if perm_in is None else perm_in.long().clone()
            p_out = torch.arange(m_out) if perm_out is None else perm_out.long().clone()
            for name, p, size in (("perm_in", p_in, m), ("perm_out", p_out, m_out)):
                # a meta tensor has no values to check (a parameter count, train.runplan): only its shape
                if p.shape != (size,) or not p.is_meta and not torch.equal(torch.sort(p).values, torch.arange(size)):
                    raise ValueError(f"{name} must be a permutation of range({size})")
            # J1, J2 in vec order: free parameters of the model, saved in the state dict.
            self.register_buffer("perm_in", p_in)
            self.register_buffer("perm_out", p_out)
        self._by_definition = bool(by_definition)
        self._derive()
        if free:  # loaded permutations replace the drawn ones: derive the gathers from them
            self.register_load_state_dict_post_hook(lambda module, keys: module._derive())

    # ------------------------------------------------------------------ the public view
    @property
    def n1(self) -> int:
        rows, cols = self.in_shape
        return {"rows": rows, "columns": cols}.get(self.groups, self.groups)

    @property
    def n2(self) -> int:
        return self.in_shape[0] * self.in_shape[1] // self.n1

    @property
    def n2_out(self) -> int:
        return self.out_shape[0] * self.out_shape[1] // self.n1

    @property
    def free_perms(self) -> bool:
        """Whether J1, J2 are stored (an RP layer) rather than fixed by ``groups``."""
        return hasattr(self, "perm_in")

    @property
    def group_map(self) -> nn.Module:
        return self.inner

    @property
    def by_definition(self) -> bool:
        """Whether the layer computes by Def. 5.1's gathers whatever its J's."""
        return self._by_definition

    @by_definition.setter
    def by_definition(self, on: bool) -> None:
        if bool(on) != self._by_definition:
            self._by_definition = bool(on)
            self._derive()

    @property
    def arrangement(self) -> str:
        """How the layer maps row-major storage: "gather" by definition, else the cheapest
        arrangement its J's allow."""
        return "gather" if self._by_definition else self._natural

    @property
    def gathers(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """(J1 gather, its inverse, J2 gather, its inverse) on row-major storage, or None unless
        the arrangement is "gather": grouped input r = x[J1 gather], output x' = u[J2 gather]."""
        return self._gathers

    def j1(self) -> torch.Tensor:
        """J1 as a vec-order index array ((J1 v)[k] = v[p[k]])."""
        if self.free_perms:
            return self.perm_in
        rows, cols = self.in_shape
        return commutation_perm(rows, cols) if self.groups == "rows" else torch.arange(rows * cols)

    def j2(self) -> torch.Tensor:
        """J2 as a vec-order index array."""
        if self.free_perms:
            return self.perm_out
        rows_o, cols_o = self.out_shape
        return invert_perm(commutation_perm(rows_o, cols_o)) if self.groups == "rows" else torch.arange(rows_o * cols_o)

    def _derive(self) -> None:
        """The natural arrangement of J1, J2, and the row-major gathers where "gather" computes:
        once when the layer is made, again when ``by_definition`` changes or permutations load."""
        rows, cols = self.in_shape
        rows_o, cols_o = self.out_shape
        j1, j2 = self.j1(), self.j2()
        dev = j1.device
        # the row-major gathers: what free J's are compared by, and what "gather" computes with
        gathers = self._row_major_gathers(j1, j2) if self.free_perms or self._by_definition else None
        if not self.free_perms:  # the J's that ``groups`` names: its arrangement moves no data
            self._natural = self.groups
        elif j1.is_meta:  # drawn on the meta device: no values to compare (a parameter count)
            self._natural = "gather"
        else:  # free J's, unless they happen to be the rows' or the columns' own
            n = (self.n1, self.n2, self.n2_out)
            is_rows = n == (rows, cols, cols_o) and \
                torch.equal(gathers[0], torch.arange(rows * cols, device=dev)) and \
                torch.equal(gathers[1], torch.arange(rows_o * cols_o, device=dev))
            # groups are the columns of X: the grouped order is vec order on both sides
            is_columns = n == (cols, rows, rows_o) and cols == cols_o and \
                torch.equal(j1, torch.arange(rows * cols, device=dev)) and \
                torch.equal(j2, torch.arange(rows_o * cols_o, device=dev))
            self._natural = "rows" if is_rows else "columns" if is_columns else "gather"
        self._gathers = None
        if self.arrangement == "gather":
            gather_in, gather_out = gathers
            self._gathers = (gather_in, invert_perm(gather_in), gather_out, invert_perm(gather_out))

    def _row_major_gathers(self, j1: torch.Tensor, j2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """J1 and J2 as gathers on row-major storage: x_grouped = r[gather_in], r_out = u[gather_out]."""
        dev = j1.device
        return (rowmajor_index_of_vec(*self.in_shape, dev)[j1], j2[vec_index_of_rowmajor(*self.out_shape, dev)])

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        if self._gathers is not None:  # keep derived gathers on the device of the buffers
            dev = next(iter(self.inner.parameters()), torch.empty(0)).device
            self._gathers = tuple(g.to(dev) for g in self._gathers)
        return out

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """A normal layer stores no permutations: a checkpoint that holds some for it is an RP
        layer's, or one written by an older mlplab that also stored the J's its groups imply."""
        if not self.free_perms:
            for key in (prefix + "perm_in", prefix + "perm_out"):
                if state_dict.pop(key, None) is not None:
                    error_msgs.append(f"{key}: the checkpoint holds permutations for a layer whose J's its "
                                      f"{self.groups!r} groups fix: an RP layer's, or an older mlplab's that "
                                      f"stored them, which this version does not read")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    # ------------------------------------------------------------------ forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, rows, cols)
        arrangement = self.arrangement
        if arrangement == "rows":
            return self.inner(x)  # groups are rows: f acts on channels directly
        if arrangement == "columns":
            if hasattr(self.inner, "forward_columns") and left_gemm_pays(x) and not has_hooks(self.inner):
                return self.inner.forward_columns(x)  # (B, rows, cols) -> (B, rows', cols)
            return self.inner(x.transpose(-1, -2)).transpose(-1, -2)  # (B, cols, rows') -> (B, rows', cols)
        g_in, g_in_inv, g_out, g_out_inv = self._gathers
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
            + (", by definition" if self._by_definition else "")
        )


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
        free = perm_in is not None or perm_out is not None
        in_shape = in_shape or (n2, n1)
        if not free and in_shape[1] != n1:
            raise ValueError(f"without permutations a PK layer's {n1} groups are the columns of X; got X of {in_shape}")
        super().__init__(nn.Linear(n2, n2_out, bias=bias), in_shape, out_shape or (n2_out, n1),
                         n1 if free else "columns", perm_in, perm_out)

    @property
    def weight(self) -> torch.Tensor:
        return self.inner.weight

    def effective_weight(self, dtype=torch.float64) -> torch.Tensor:
        """The dense m'×m matrix J2 (I_{n1} ⊗ W) J1 in vec order (small sizes only)."""
        from .vec import perm_matrix

        W = self.inner.weight.detach().to(dtype)
        eye = torch.eye(self.n1, dtype=dtype, device=W.device)
        return (perm_matrix(self.j2().to(W.device), dtype) @ torch.kron(eye, W)
                @ perm_matrix(self.j1().to(W.device), dtype))
