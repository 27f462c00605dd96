"""PK layer (Def. 5.1): fast paths equal the generic gather path, permutations persist in the
state dict, bad permutations are refused, and the operator is J2 (I ⊗ f) J1 on vec(X)."""
import io

import pytest
import torch
import torch.nn as nn

import mlplab
from mlplab.layers.common import Mlp
from mlplab.layers.pk import PKLayer, PKMixing, permute_entries, random_perm
from mlplab.layers.vec import commutation_perm, invert_perm, perm_matrix, vec

D = torch.float64


def _copy(mod):
    buf = io.BytesIO()
    torch.save(mod, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def _token(S_in, S, C, inner, force=False):
    return PKMixing(inner, (S_in, C), (S, C), "columns", by_definition=force).double()


def _channel(S, C, inner, force=False):
    return PKMixing(inner, (S, C), (S, C), "rows", commutation_perm(S, C), invert_perm(commutation_perm(S, C)),
                    by_definition=force).double()


@pytest.mark.parametrize("kind, S_in, S, C", [("token", 5, 5, 3), ("token", 6, 4, 3), ("channel", 4, 4, 5)])
@pytest.mark.parametrize("inner_kind", ["linear", "mlp"])
def test_fast_paths_equal_gather_path(kind, S_in, S, C, inner_kind):
    torch.manual_seed(0)
    n2, n2o = (S_in, S) if kind == "token" else (C, C)
    inner = nn.Linear(n2, n2o) if inner_kind == "linear" else Mlp(n2, 7, n2o)
    if kind == "token":
        fast, slow = _token(S_in, S, C, inner), _token(S_in, S, C, _copy(inner), force=True)
        assert fast.arrangement == "columns"
    else:
        fast, slow = _channel(S, C, inner), _channel(S, C, _copy(inner), force=True)
        assert fast.arrangement == "rows"
    assert slow.arrangement == "gather"
    x1 = torch.randn(3, S_in, C, dtype=D, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    y1, y2 = fast(x1), slow(x2)
    assert y1.shape == (3, S, C)
    assert torch.allclose(y1, y2, atol=1e-13, rtol=0)
    g = torch.randn_like(y1)
    (y1 * g).sum().backward()
    (y2 * g).sum().backward()
    assert torch.allclose(x1.grad, x2.grad, atol=1e-13, rtol=0)
    for p1, p2 in zip(fast.parameters(), slow.parameters()):
        assert torch.allclose(p1.grad, p2.grad, atol=1e-13, rtol=0)


def test_gather_path_is_j2_kron_j1_with_mlp_inner():
    """J2 (I ⊗ W2) φ((I ⊗ W1) J1 vec X): the MLP's hidden permutation cancels."""
    torch.manual_seed(1)
    rows, cols, n1, n2, n2o = 4, 3, 6, 2, 5
    g = torch.Generator().manual_seed(2)
    p_in, p_out = random_perm(12, g), random_perm(n1 * n2o, g)
    inner = Mlp(n2, 4, n2o).double()
    layer = PKMixing(inner, (rows, cols), (n2o, n1), n1, p_in, p_out).double()
    assert (layer.n1, layer.n2, layer.n2_out) == (n1, n2, n2o)  # derived from the shapes
    X = torch.randn(2, rows, cols, dtype=D)
    eye = torch.eye(n1, dtype=D)
    h = torch.kron(eye, inner.fc1.weight.detach()) @ perm_matrix(p_in) @ vec(X).T
    h = inner.act(h + inner.fc1.bias.detach().repeat(n1)[:, None])
    out = perm_matrix(p_out) @ (torch.kron(eye, inner.fc2.weight.detach()) @ h
                                + inner.fc2.bias.detach().repeat(n1)[:, None])
    assert torch.allclose(vec(layer(X)), out.T, atol=1e-13, rtol=0)


def test_pk_layer_vec_form_and_effective_weight():
    g = torch.Generator().manual_seed(3)
    layer = PKLayer(3, 4, 2, random_perm(12, g), random_perm(6, g)).double()
    X = torch.randn(5, 4, 3, dtype=D)
    assert torch.allclose(vec(layer(X)), vec(X) @ layer.effective_weight().T + (
        perm_matrix(layer.perm_out) @ layer.inner.bias.detach().repeat(3)), atol=1e-13, rtol=0)
    assert layer.effective_weight().shape == (6, 12)


def test_permutations_survive_state_dict_round_trip():
    g = torch.Generator().manual_seed(4)
    S, C = 4, 3
    a = PKMixing(nn.Linear(C, C), (S, C), (S, C), "rows", random_perm(S * C, g), random_perm(S * C, g)).double()
    b = _channel(S, C, nn.Linear(C, C))  # given permutations that happen to be the rows arrangement
    assert b.arrangement == "rows"
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf)
    assert "perm_in" in sd and "perm_out" in sd
    b.load_state_dict(sd)
    assert torch.equal(b.perm_in, a.perm_in) and torch.equal(b.perm_out, a.perm_out)
    assert b.arrangement == "gather"  # the derived gathers were rebuilt from the loaded permutations
    X = torch.randn(2, S, C, dtype=D)
    assert torch.equal(a(X), b(X))


def test_fixed_arrangements_store_nothing_and_check_their_shapes():
    rows = PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), "rows")
    cols = PKMixing(nn.Linear(4, 4), (4, 3), (4, 3), "columns")
    assert dict(rows.named_buffers()) == {} and dict(cols.named_buffers()) == {}
    assert (rows.n1, rows.n2, cols.n1, cols.n2) == (4, 3, 3, 4)
    assert torch.equal(rows.j1(), commutation_perm(4, 3)) and torch.equal(cols.j1(), torch.arange(12))
    assert rows.gathers is None and rows.arrangement == "rows"
    with pytest.raises(ValueError, match="group map takes 4 -> 4 entries"):
        PKMixing(nn.Linear(4, 4), (4, 3), (4, 3), "rows")
    with pytest.raises(ValueError, match="groups='columns' keeps the columns"):
        PKMixing(nn.Linear(4, 4), (4, 3), (4, 2), "columns")
    with pytest.raises(ValueError, match="groups must be"):
        PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), "diagonal")
    with pytest.raises(ValueError, match="groups must be"):
        PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 4)  # a group count needs free permutations


def test_rp_mixer_permutations_saved_with_the_model():
    kw = dict(image_size=8, patch_size=4, hidden_dim=3, num_tokens=4, depth=2)
    a = mlplab.create_model("rp_s_mixer", seed=1, zero_head=False, **kw).double().eval()
    b = mlplab.create_model("rp_s_mixer", seed=2, **kw).double().eval()
    assert not torch.equal(a.blocks[0].token_mixing.perm_in, b.blocks[0].token_mixing.perm_in)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 3, 8, 8, dtype=D)
    assert torch.equal(a(x), b(x))
    # same seed -> same permutations; RP choice of one block does not change another's
    c = mlplab.create_model("rp_s_mixer", seed=1, rp_blocks=(1,), **kw)
    assert torch.equal(c.blocks[1].channel_mixing.perm_in, a.blocks[1].channel_mixing.perm_in)


@pytest.mark.parametrize(
    "perm_in, perm_out, match",
    [
        (torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10]), None, "perm_in must be a permutation"),
        (torch.arange(11), None, "perm_in must be a permutation"),
        (torch.arange(1, 13), None, "perm_in must be a permutation"),
        (None, torch.arange(13), "perm_out must be a permutation"),
        (None, -torch.arange(12), "perm_out must be a permutation"),
    ],
)
def test_bad_permutations_refused(perm_in, perm_out, match):
    with pytest.raises(ValueError, match=match):
        PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), "rows", perm_in, perm_out)


def test_bad_grouping_refused():
    with pytest.raises(ValueError, match="5 groups do not fit"):
        PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 5, torch.arange(12))


def test_permute_entries_gradient():
    p = torch.randperm(7, generator=torch.Generator().manual_seed(5))
    x = torch.randn(3, 7, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: permute_entries(t, p), (x,))
    assert torch.equal(permute_entries(x, p), x[:, p])


def test_dtype_move_keeps_paths():
    layer = PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), "rows", torch.arange(12), by_definition=True)
    layer = layer.double()
    assert layer.arrangement == "gather" and layer.gathers[0].dtype == torch.long
    x = torch.randn(2, 4, 3, dtype=D)
    assert layer(x).dtype == D
