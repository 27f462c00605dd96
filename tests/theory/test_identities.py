"""The identities of docs/science.md §1 and Corollary 3.4, exactly, in float64 on small random matrices."""
import pytest
import torch

import mlplab
from mlplab.layers.pk import PKLayer
from mlplab.layers.vec import commutation_matrix, commutation_perm, invert_perm, perm_matrix, vec
from mlplab.theory import effective_mlp, pk_matrix, sparse_kron_identity, sparse_perm_matrix

D = torch.float64


def kron(a, b):
    """torch.kron (this torch build refuses non-contiguous inputs such as V.T)."""
    return torch.kron(a.contiguous(), b.contiguous())


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def test_vec_is_column_stacking():
    X = torch.arange(6, dtype=D).view(2, 3)  # S = 2, C = 3
    assert vec(X).tolist() == [0, 3, 1, 4, 2, 5]
    assert torch.equal(vec(X), X.T.reshape(-1))
    S, C = 4, 5
    X = torch.randn(S, C, generator=_g(), dtype=D)
    v = vec(X)
    for i in range(S):
        for j in range(C):
            assert v[j * S + i] == X[i, j]


@pytest.mark.parametrize("S, C, A, B", [(3, 4, 5, 2), (4, 4, 4, 4), (2, 5, 1, 3)])
def test_vec_of_product_is_kronecker(S, C, A, B):
    g = _g(1)
    X = torch.randn(S, C, generator=g, dtype=D)
    W = torch.randn(A, S, generator=g, dtype=D)
    V = torch.randn(C, B, generator=g, dtype=D)
    assert torch.allclose(vec(W @ X @ V), kron(V.T, W) @ vec(X), atol=1e-12, rtol=0)
    assert torch.allclose(vec(X @ V), kron(V.T, torch.eye(S, dtype=D)) @ vec(X), atol=1e-12, rtol=0)
    assert torch.allclose(vec(W @ X), kron(torch.eye(C, dtype=D), W) @ vec(X), atol=1e-12, rtol=0)


@pytest.mark.parametrize("S, C", [(3, 5), (4, 4), (1, 3)])
def test_commutation_matrix(S, C):
    X = torch.randn(S, C, generator=_g(2), dtype=D)
    Jc = commutation_matrix(S, C)
    assert torch.equal(Jc @ vec(X), vec(X.T))
    assert torch.equal(Jc.T @ Jc, torch.eye(S * C, dtype=D))  # a permutation matrix
    assert torch.equal(Jc.sum(0), torch.ones(S * C, dtype=D)) and torch.equal(Jc.sum(1), torch.ones(S * C, dtype=D))
    V = torch.randn(C, C, generator=_g(3), dtype=D)
    lhs = Jc.T @ kron(torch.eye(S, dtype=D), V.T) @ Jc
    assert torch.allclose(lhs, kron(V.T, torch.eye(S, dtype=D)), atol=0, rtol=0)


def test_permutations_commute_with_activation():
    p = torch.randperm(30, generator=_g(4))
    J = perm_matrix(p)
    v = torch.randn(30, generator=_g(5), dtype=D)
    for phi in (torch.nn.functional.gelu, torch.relu, torch.tanh):
        assert torch.equal(phi(J @ v), J @ phi(v))
        assert torch.equal(phi(v[p]), phi(v)[p])


def test_densities_one_over_c_and_one_over_s():
    S, C = 6, 4
    W = torch.randn(S, S, generator=_g(6), dtype=D)
    V = torch.randn(C, C, generator=_g(7), dtype=D)
    tok = kron(torch.eye(C, dtype=D), W)
    ch = kron(V.T, torch.eye(S, dtype=D))
    m = S * C
    assert (tok != 0).sum().item() / m**2 == pytest.approx(1 / C)
    assert (ch != 0).sum().item() / m**2 == pytest.approx(1 / S)
    assert pk_matrix(W, C).values().numel() / m**2 == pytest.approx(1 / C)


def test_sparse_helpers_equal_dense_constructions():
    g = _g(8)
    W = torch.randn(3, 5, generator=g, dtype=D)
    n1 = 4
    p_in, p_out = torch.randperm(n1 * 5, generator=g), torch.randperm(n1 * 3, generator=g)
    dense = perm_matrix(p_out) @ kron(torch.eye(n1, dtype=D), W) @ perm_matrix(p_in)
    assert torch.equal(pk_matrix(W, n1, p_in, p_out).to_dense(), dense)
    assert torch.equal(pk_matrix(W, n1).to_dense(), kron(torch.eye(n1, dtype=D), W))
    assert torch.equal(sparse_kron_identity(W, n1, "left").to_dense(), kron(torch.eye(n1, dtype=D), W))
    assert torch.equal(sparse_kron_identity(W, n1, "right").to_dense(), kron(W, torch.eye(n1, dtype=D)))
    assert torch.equal(sparse_perm_matrix(p_in).to_dense(), perm_matrix(p_in))
    with pytest.raises(ValueError, match="perm_in has"):
        pk_matrix(W, n1, p_out, None)


def test_pk_layer_effective_weight_equals_forward():
    g = _g(9)
    n1, n2, n2o = 3, 4, 5
    layer = PKLayer(n1, n2, n2o, torch.randperm(n1 * n2, generator=g), torch.randperm(n1 * n2o, generator=g),
                    bias=False).double()
    torch.nn.init.normal_(layer.inner.weight)
    X = torch.randn(7, n2, n1, dtype=D, generator=g)  # the (n2 × n1) matrix whose vec is the input
    out = layer(X)
    Weff = layer.effective_weight()
    assert torch.allclose(vec(out), vec(X) @ Weff.T, atol=1e-12, rtol=0)
    assert torch.equal(Weff, pk_matrix(layer.weight.detach(), n1, layer.perm_in, layer.perm_out).to_dense())


def test_rp_effective_weight_keeps_singular_values():
    g = _g(10)
    n1, n2, n2o = 4, 6, 3
    W = torch.randn(n2o, n2, generator=g, dtype=D)
    plain = kron(torch.eye(n1, dtype=D), W)
    rp = pk_matrix(W, n1, torch.randperm(n1 * n2, generator=g), torch.randperm(n1 * n2o, generator=g)).to_dense()
    s_plain = torch.linalg.svdvals(plain)
    s_rp = torch.linalg.svdvals(rp)
    assert torch.allclose(s_rp, s_plain, atol=1e-12, rtol=0)
    # and they are those of W, each repeated n1 times
    s_w = torch.linalg.svdvals(W).repeat_interleave(n1)
    assert torch.allclose(s_plain, s_w, atol=1e-12, rtol=0)


@pytest.mark.parametrize("S, C", [(5, 3), (4, 4)])
def test_corollary_3_4_smixer_without_activation_is_monarch(S, C):
    """Cor. 3.4: with φ = id, no LN, no skips and no biases, the two mixing layers multiply to the
    Monarch matrix J_cᵀ L J_c R with L = I_S ⊗ Vᵀ and R = I_C ⊗ W (weight-shared blocks)."""
    torch.manual_seed(0)
    model = mlplab.create_model("s_mixer", image_size=8, patch_size=4, num_tokens=S, hidden_dim=C, depth=1,
                                act="identity", norm=False, skip=False, zero_head=False).double().eval()
    blk = model.blocks[0]
    for mix in (blk.token_mixing, blk.channel_mixing):
        torch.nn.init.zeros_(mix.inner[0].bias)
    W = blk.token_mixing.inner[0].weight.detach()  # (S, S0): X ↦ W X
    Vt = blk.channel_mixing.inner[0].weight.detach()  # Vᵀ: X ↦ X V with V = weightᵀ
    eff = effective_mlp(model)
    A_tok = eff.layer("blocks.0.token.fc").to_dense()
    A_ch = eff.layer("blocks.0.channel.fc").to_dense()
    M = A_ch @ A_tok
    Jc = commutation_matrix(S, C)
    L = kron(torch.eye(S, dtype=D), Vt)
    R = kron(torch.eye(C, dtype=D), W)
    monarch = Jc.T @ L @ Jc @ R
    assert torch.allclose(M, monarch, atol=1e-13, rtol=0)
    assert torch.allclose(M, kron(Vt, W), atol=1e-13, rtol=0)  # = (Vᵀ ⊗ I_S)(I_C ⊗ W)
    # L and R are block-diagonal with one shared block
    for Mat, n, blkw in ((L, S, Vt), (R, C, W)):
        a, b = blkw.shape
        for k in range(n):
            assert torch.equal(Mat[k * a:(k + 1) * a, k * b:(k + 1) * b], blkw)
    # and the whole model is that one linear map between stem and pooling
    x = torch.randn(3, 3, 8, 8, dtype=D)
    assert (model(x) - eff(x)).abs().max().item() <= 1e-12
    assert torch.equal(blk.channel_mixing.j1(), commutation_perm(S, C))
    assert torch.equal(blk.channel_mixing.j2(), invert_perm(commutation_perm(S, C)))
