"""Prop. 3.2 and the budget Ω against a float64 numpy oracle, for random small Mixers (hypothesis).

The oracle writes vec column-major with numpy's ``order="F"`` and builds every weight of the
effective wide MLP with ``np.kron`` from the Mixer's own weights (docs/science.md §1-2):

    token mixing    vec(W X)  = (I_C ⊗ W) vec(X),      bias b ∈ R^S  -> tile(b, C)
    channel mixing  vec(X Aᵀ) = (A ⊗ I_S) vec(X),      bias c ∈ R^C  -> repeat(c, S)

and counts the nonzeros of the four mixing layers of a block: their mean is the paper's Ω.
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mlplab
from mlplab.theory import budget as B
from mlplab.theory import effective_mlp

PROPS = settings(max_examples=15, deadline=None, derandomize=True, database=None)


def _vec(X):
    return np.asarray(X).flatten(order="F")


def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _w(linear):
    return linear.weight.detach().numpy()


def _b(linear):
    return linear.bias.detach().numpy()


def _token_op(linear, C):
    return np.kron(np.eye(C), _w(linear)), np.tile(_b(linear), C)


def _channel_op(linear, S):
    return np.kron(_w(linear), np.eye(S)), np.repeat(_b(linear), S)


def _model(family, S, C, gamma, depth, seed):
    if family == "mlp_mixer" and min(round(gamma * S), round(gamma * C)) < 1:
        gamma = 1.0  # a hidden width of 0 is refused by the model (tested in tests/models)
    torch.manual_seed(seed)
    kw = dict(image_size=8, patch_size=2, num_tokens=S, hidden_dim=C, depth=depth, zero_head=False)
    if family == "mlp_mixer":
        kw["expansion"] = gamma
    model = mlplab.create_model(family, **kw).double().eval()
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
                mod.bias.normal_(0, 0.5)
    return model


shapes = st.tuples(st.sampled_from(["s_mixer", "mlp_mixer"]), st.integers(1, 6), st.integers(1, 5),
                   st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0]), st.integers(0, 2**16))


@PROPS
@given(shapes)
def test_every_mixing_layer_is_the_numpy_kronecker_matrix(shape):
    family, S, C, gamma, seed = shape
    model = _model(family, S, C, gamma, depth=2, seed=seed)
    eff = effective_mlp(model)
    for b, block in enumerate(model.blocks):
        tok, ch = block.token_mixing.inner, block.channel_mixing.inner
        if family == "s_mixer":
            expected = {"token.fc": _token_op(tok[0], C), "channel.fc": _channel_op(ch[0], S)}
        else:
            expected = {"token.fc1": _token_op(tok.fc1, C), "token.fc2": _token_op(tok.fc2, C),
                        "channel.fc1": _channel_op(ch.fc1, S), "channel.fc2": _channel_op(ch.fc2, S)}
        for name, (A, bias) in expected.items():
            op = eff.layer(f"blocks.{b}.{name}")
            np.testing.assert_array_equal(op.to_dense().numpy(), A)
            np.testing.assert_array_equal(op.bias.numpy(), bias)
            n1 = C if name.startswith("token") else S
            assert op.groups == n1 and op.density == pytest.approx(1 / n1, rel=1e-15)
            assert op.nnz == A.size // n1  # the n1 diagonal blocks, all stored


@PROPS
@given(shapes)
def test_the_block_computes_the_numpy_wide_mlp(shape):
    """Second block (S -> S, no skip layer), no LayerNorm: vec of the Mixer's features equals the
    wide MLP x + φ(...) evaluated in numpy from the Kronecker matrices."""
    family, S, C, gamma, seed = shape
    model = _model(family, S, C, gamma, depth=2, seed=seed)
    block = model.blocks[1]
    block.norm1, block.norm2 = torch.nn.Identity(), torch.nn.Identity()
    X = torch.randn(2, S, C, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    with torch.no_grad():
        Y = block(X).numpy()
    tok, ch = block.token_mixing.inner, block.channel_mixing.inner
    for x, y in zip(X.numpy(), Y):
        v = _vec(x)
        if family == "s_mixer":
            (T, t), (K, k) = _token_op(tok[0], C), _channel_op(ch[0], S)
            u = v + _gelu(T @ v + t)
            out = u + _gelu(K @ u + k)
        else:
            (T1, t1), (T2, t2) = _token_op(tok.fc1, C), _token_op(tok.fc2, C)
            (K1, k1), (K2, k2) = _channel_op(ch.fc1, S), _channel_op(ch.fc2, S)
            u = v + T2 @ _gelu(T1 @ v + t1) + t2
            out = u + K2 @ _gelu(K1 @ u + k1) + k2
        np.testing.assert_allclose(_vec(y), out, rtol=0, atol=1e-12)


@PROPS
@given(st.integers(1, 6), st.integers(1, 5), st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0, 4.0]), st.booleans())
@example(3, 5, 1.5, True)  # γS = 4.5, γC = 7.5: the model builds D_S = 4, D_C = 8 (halves to even)
def test_omega_is_the_mean_nonzeros_of_the_four_mixing_layers(S, C, gamma, mlp):
    """Ω = γ(C·S² + C²·S)/2 counts connections: C·D_S·S twice and S·D_C·C twice, D = round(γ·)."""
    family = "mlp_mixer" if mlp else "s_mixer"
    gamma = gamma if mlp else 1.0
    model = _model(family, S, C, gamma, depth=2, seed=0)
    eff = effective_mlp(model)
    names = ["token.fc1", "token.fc2", "channel.fc1", "channel.fc2"] if mlp else ["token.fc", "channel.fc"]
    mixing = [eff.layer(f"blocks.1.{n}") for n in names]  # block 1: S -> S
    nnz = [op.nnz for op in mixing]
    if mlp and min(round(gamma * S), round(gamma * C)) < 1:
        gamma = 1.0  # as _model does
    D_S, D_C = (round(gamma * S), round(gamma * C)) if mlp else (S, C)  # halves to even, as built
    assert nnz == ([C * D_S * S, C * S * D_S, S * D_C * C, S * C * D_C] if mlp else [C * S * S, S * C * C])
    mean = sum(nnz) / len(nnz)
    if gamma * S == D_S and gamma * C == D_C:  # integer hidden widths: exactly the paper's Ω
        assert mean == B.omega_mixer(S, C, gamma)
    plan = B.plan_budget(B.omega_mixer(S, C, gamma), gamma=gamma, family=family, channels=[C])
    assert plan.pairs() == [(C, S)]
    assert plan.rows[0].connections == mean  # the planner's "connections as built" count these weights
