"""PK layer (Def. 5.1) against a float64 numpy oracle for random small shapes (hypothesis).

Oracle: vec column-major (numpy ``order="F"``), permutation matrices built from index arrays as
P[k, p[k]] = 1, and Y = Mat[J2 (I_{n1} ⊗ W) J1 vec(X) + 1_{n1} ⊗ b] with ``np.kron``. Normal
Mixers are PK layers (docs/science.md §2): token mixing (groups = columns) is W X + b, channel
mixing (groups = rows, J1 = J_c, J2 = J_cᵀ) is X Wᵀ + b.
"""
import numpy as np
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from mlplab.layers.common import LinearAct, Mlp
from mlplab.layers.pk import PKLayer, PKMixing, permute_entries
from mlplab.models.impl import compute_by_definition

PROPS = settings(max_examples=25, deadline=None, derandomize=True, database=None)
D = torch.float64


def _perm_matrix(p):
    P = np.zeros((len(p), len(p)))
    P[np.arange(len(p)), np.asarray(p)] = 1.0
    return P


def _vec(X):
    return np.asarray(X).flatten(order="F")


def _mat(v, rows, cols):
    return np.asarray(v).reshape(cols, rows).T  # inverse of the column-major vec


def _oracle(X, W, b, n1, p_in, p_out, out_shape):
    """Mat[J2 ((I ⊗ W) J1 vec(X) + 1 ⊗ b)] for one X."""
    u = np.kron(np.eye(n1), W) @ (_perm_matrix(p_in) @ _vec(X)) + np.tile(b, n1)
    return _mat(_perm_matrix(p_out) @ u, *out_shape)


@st.composite
def free_layers(draw):
    n1 = draw(st.integers(1, 4))
    n2 = draw(st.integers(1, 4))
    n2o = draw(st.integers(1, 4))
    m, mo = n1 * n2, n1 * n2o
    # any factorisation of m and m' as the stored (rows, cols)
    rows = draw(st.sampled_from([d for d in range(1, m + 1) if m % d == 0]))
    rows_o = draw(st.sampled_from([d for d in range(1, mo + 1) if mo % d == 0]))
    p_in = draw(st.permutations(range(m)))
    p_out = draw(st.permutations(range(mo)))
    seed = draw(st.integers(0, 2**16))
    return n1, n2, n2o, (rows, m // rows), (rows_o, mo // rows_o), p_in, p_out, seed


@PROPS
@given(free_layers(), st.sampled_from(["auto", "definition"]))
def test_free_pk_layer_is_the_kronecker_operator(layer, impl):
    n1, n2, n2o, in_shape, out_shape, p_in, p_out, seed = layer
    torch.manual_seed(seed)
    pk = PKLayer(n1, n2, n2o, perm_in=torch.tensor(p_in), perm_out=torch.tensor(p_out),
                 in_shape=in_shape, out_shape=out_shape).double()
    pk.by_definition = impl == "definition"
    X = torch.randn(3, *in_shape, dtype=D, generator=torch.Generator().manual_seed(seed))
    Y = pk(X).detach().numpy()
    W, b = pk.weight.detach().numpy(), pk.inner.bias.detach().numpy()
    assert Y.shape == (3, *out_shape)
    for x, y in zip(X.numpy(), Y):
        np.testing.assert_allclose(y, _oracle(x, W, b, n1, p_in, p_out, out_shape), rtol=0, atol=1e-12)
    # the dense effective weight is the numpy operator J2 (I ⊗ W) J1
    A = _perm_matrix(p_out) @ np.kron(np.eye(n1), W) @ _perm_matrix(p_in)
    np.testing.assert_array_equal(pk.effective_weight().numpy(), A)
    assert (pk.n1, pk.n2, pk.n2_out, pk.free_perms) == (n1, n2, n2o, True)
    assert pk.j1().tolist() == list(p_in) and pk.j2().tolist() == list(p_out)


@PROPS
@given(free_layers())
def test_free_pk_layer_gradients_are_the_transposed_operator(layer):
    n1, n2, n2o, in_shape, out_shape, p_in, p_out, seed = layer
    torch.manual_seed(seed)
    pk = PKLayer(n1, n2, n2o, perm_in=torch.tensor(p_in), perm_out=torch.tensor(p_out),
                 in_shape=in_shape, out_shape=out_shape, bias=False).double()
    X = torch.randn(2, *in_shape, dtype=D, requires_grad=True)
    G = torch.randn(2, *out_shape, dtype=D)
    (pk(X) * G).sum().backward()
    A = _perm_matrix(p_out) @ np.kron(np.eye(n1), pk.weight.detach().numpy()) @ _perm_matrix(p_in)
    for gx, g in zip(X.grad.numpy(), G.numpy()):  # dL/dvec(X) = Aᵀ vec(G)
        np.testing.assert_allclose(_vec(gx), A.T @ _vec(g), rtol=0, atol=1e-12)
    # dL/dW = Σ over the n1 groups of g_group ⊗ x_group
    gW = np.zeros((n2o, n2))
    for x, g in zip(X.detach().numpy(), G.numpy()):
        r = (_perm_matrix(p_in) @ _vec(x)).reshape(n1, n2)
        u = (_perm_matrix(p_out).T @ _vec(g)).reshape(n1, n2o)
        gW += u.T @ r
    np.testing.assert_allclose(pk.weight.grad.numpy(), gW, rtol=0, atol=1e-12)


# C up to 40: from 32 columns a token-mixing group map runs as a left GEMM (forward_columns)
mixer_shapes = st.tuples(st.integers(1, 5), st.integers(1, 5), st.sampled_from([1, 2, 3, 5, 32, 40]),
                         st.integers(0, 2**16), st.sampled_from(["linear", "linear_act", "mlp"]))


def _inner(kind, n_in, n_out):
    if kind == "linear":
        return nn.Linear(n_in, n_out)
    if kind == "linear_act":
        return LinearAct(n_in, n_out)
    return Mlp(n_in, 3, n_out)


def _apply_inner_numpy(inner, Z):
    """The group map applied to the rows of Z, in numpy float64."""
    def lin(l, z):
        return z @ l.weight.detach().numpy().T + l.bias.detach().numpy()

    def gelu(z):
        return torch.nn.functional.gelu(torch.from_numpy(z)).numpy()

    if isinstance(inner, nn.Linear):
        return lin(inner, Z)
    if isinstance(inner, LinearAct):
        return gelu(lin(inner[0], Z))
    return lin(inner.fc2, gelu(lin(inner.fc1, Z)))


@PROPS
@given(mixer_shapes, st.sampled_from(["auto", "definition"]))
def test_token_mixing_is_w_x_on_every_column(shape, impl):
    """groups = columns: Y = f(X columns), i.e. W X + b for a Linear (J1 = J2 = I)."""
    S_in, S, C, seed, kind = shape
    torch.manual_seed(seed)
    pk = PKMixing(_inner(kind, S_in, S), (S_in, C), (S, C), "columns", by_definition=impl == "definition").double()
    X = torch.randn(2, S_in, C, dtype=D, generator=torch.Generator().manual_seed(seed))
    Y = pk(X).detach().numpy()
    # with S_in = S = C the columns are also rows of a square X: either fixed arrangement is right
    assert pk.arrangement in (("gather",) if impl == "definition" else ("columns", "rows"))
    for x, y in zip(X.numpy(), Y):
        np.testing.assert_allclose(y, _apply_inner_numpy(pk.inner, x.T).T, rtol=0, atol=1e-12)
    if kind == "linear":
        W, b = pk.inner.weight.detach().numpy(), pk.inner.bias.detach().numpy()
        for x, y in zip(X.numpy(), Y):
            np.testing.assert_allclose(_vec(y), np.kron(np.eye(C), W) @ _vec(x) + np.tile(b, C), rtol=0, atol=1e-12)
    assert pk.j1().tolist() == list(range(S_in * C)) and pk.j2().tolist() == list(range(S * C))


@PROPS
@given(mixer_shapes, st.sampled_from(["auto", "definition"]))
def test_channel_mixing_is_x_wt_on_every_row(shape, impl):
    """groups = rows: Y = f(X rows), i.e. X Wᵀ + b, which on the vec is J_cᵀ (I_S ⊗ W) J_c = W ⊗ I_S."""
    _, S, C, seed, kind = shape
    C_out = C  # channel mixing keeps C
    torch.manual_seed(seed)
    pk = PKMixing(_inner(kind, C, C_out), (S, C), (S, C_out), "rows", by_definition=impl == "definition").double()
    X = torch.randn(2, S, C, dtype=D, generator=torch.Generator().manual_seed(seed))
    Y = pk(X).detach().numpy()
    assert pk.arrangement in (("gather",) if impl == "definition" else ("rows", "columns"))
    for x, y in zip(X.numpy(), Y):
        np.testing.assert_allclose(y, _apply_inner_numpy(pk.inner, x), rtol=0, atol=1e-12)
    # J1 = J_c maps vec(X) to vec(Xᵀ), J2 = J_cᵀ: vec(X)[j·S + i] = X[i, j]
    Jc = [0] * (S * C)  # (J_c v)[k] = v[Jc[k]]: vec(Xᵀ)[i·C + j] = X[i, j] = vec(X)[j·S + i]
    for i in range(S):
        for j in range(C):
            Jc[i * C + j] = j * S + i
    assert pk.j1().tolist() == Jc
    assert pk.j2().tolist() == np.argsort(Jc).tolist()
    if kind == "linear":
        W, b = pk.inner.weight.detach().numpy(), pk.inner.bias.detach().numpy()
        A = _perm_matrix(np.argsort(Jc)) @ np.kron(np.eye(S), W) @ _perm_matrix(Jc)
        np.testing.assert_array_equal(A, np.kron(W, np.eye(S)))
        for x, y in zip(X.numpy(), Y):
            np.testing.assert_allclose(_vec(y), A @ _vec(x) + np.repeat(b, S), rtol=0, atol=1e-12)


@PROPS
@given(st.integers(1, 40), st.integers(1, 4), st.integers(0, 2**16))
def test_permute_entries_is_a_gather(m, batch, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.randperm(m, generator=g)
    for dtype in (torch.float64, torch.bfloat16):
        x = torch.randn(batch, m, generator=g).to(dtype)
        y = permute_entries(x, p)
        assert y.dtype == dtype
        assert y.tolist() == [[row[k] for k in p.tolist()] for row in x.tolist()]


def test_compute_by_definition_routes_every_layer_through_the_gathers():
    pk = PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), "rows")
    assert pk.arrangement == "rows" and pk.gathers is None
    compute_by_definition(pk)
    assert pk.by_definition and pk.arrangement == "gather" and len(pk.gathers) == 4
    pk.by_definition = False
    assert pk.arrangement == "rows" and pk.gathers is None
