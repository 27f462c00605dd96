"""The vec convention of docs/science.md §1 (column-major) and the permutation index convention."""
import pytest
import torch

from mlplab.layers.vec import (
    commutation_matrix,
    commutation_perm,
    invert_perm,
    perm_matrix,
    rowmajor_index_of_vec,
    unvec,
    vec,
    vec_index_of_rowmajor,
)

D = torch.float64


def test_vec_pins_column_major():
    X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=D)  # S = 2 tokens, C = 3 channels
    assert vec(X).tolist() == [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    assert torch.equal(vec(X), X.T.reshape(-1))


@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 3), (2, 3, 1, 4)])
def test_vec_batched_and_unvec_roundtrip(shape):
    X = torch.randn(*shape, dtype=D)
    v = vec(X)
    assert v.shape == shape[:-2] + (shape[-2] * shape[-1],)
    assert torch.equal(v, X.transpose(-1, -2).flatten(-2))
    assert torch.equal(unvec(v, shape[-2], shape[-1]), X)


def test_index_maps():
    S, C = 3, 5
    X = torch.randn(S, C, dtype=D)
    flat, v = X.reshape(-1), vec(X)
    assert torch.equal(flat[rowmajor_index_of_vec(S, C)], v)
    assert torch.equal(v[vec_index_of_rowmajor(S, C)], flat)
    assert torch.equal(rowmajor_index_of_vec(S, C)[vec_index_of_rowmajor(S, C)], torch.arange(S * C))


def test_permutation_convention():
    p = torch.tensor([2, 0, 3, 1])
    v = torch.tensor([10.0, 11.0, 12.0, 13.0], dtype=D)
    J = perm_matrix(p)
    assert torch.equal(J @ v, v[p])  # (J v)[k] = v[p[k]]
    assert torch.equal(J[torch.arange(4), p], torch.ones(4, dtype=D))
    q = invert_perm(p)
    assert torch.equal(perm_matrix(q), J.T)
    assert torch.equal(p[q], torch.arange(4)) and torch.equal(q[p], torch.arange(4))


@pytest.mark.parametrize("S, C", [(2, 3), (4, 4), (1, 6), (5, 1)])
def test_commutation(S, C):
    X = torch.randn(S, C, dtype=D)
    assert torch.equal(vec(X)[commutation_perm(S, C)], vec(X.T))
    Jc = commutation_matrix(S, C)
    assert torch.equal(Jc @ vec(X), vec(X.T))
    # J_c for X and for Xᵀ are inverse to each other
    assert torch.equal(commutation_perm(C, S), invert_perm(commutation_perm(S, C)))


def test_index_maps_written_out_and_built_on_the_given_device():
    S, C = 3, 4
    assert rowmajor_index_of_vec(S, C).tolist() == [i * C + j for j in range(C) for i in range(S)]
    assert vec_index_of_rowmajor(S, C).tolist() == [j * S + i for i in range(S) for j in range(C)]
    for f in (rowmajor_index_of_vec, vec_index_of_rowmajor, commutation_perm):
        assert f(S, C, device="meta").device.type == "meta"  # an accelerator's indices stay there
        assert f(S, C).device.type == "cpu"
    p = torch.tensor([1, 2, 0])
    assert perm_matrix(p.to("meta")).device.type == "meta" and invert_perm(p.to("meta")).device.type == "meta"
    assert perm_matrix(p).dtype == D and perm_matrix(p, torch.float32).dtype == torch.float32
    assert commutation_matrix(2, 3).dtype == D and commutation_matrix(2, 3, torch.float16).dtype == torch.float16
    assert torch.equal(commutation_matrix(2, 3, torch.float32), perm_matrix(commutation_perm(2, 3), torch.float32))
    assert unvec(torch.arange(6.0), 2, 3).tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]


def test_permutations_are_built_beside_their_index_under_another_default_device():
    p = torch.tensor([1, 2, 0])
    want_q, want_J = invert_perm(p), perm_matrix(p)
    with torch.device("meta"):
        q, J = invert_perm(p), perm_matrix(p)
    assert q.device.type == "cpu" and torch.equal(q, want_q) and torch.equal(q, torch.tensor([2, 0, 1]))
    assert J.device.type == "cpu" and torch.equal(J, want_J)
