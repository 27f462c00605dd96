"""The speed paths of PKMixing / MixerBlock compute exactly the generic path's function.

Float64, every registered Mixer variant that has a fast path, forward, intermediates and
parameter gradients; a fast path must also leave ``mode`` and the buffers untouched.
"""
import copy

import pytest
import torch
import torch.nn as nn

from mlplab import create_model
from mlplab.layers.common import Mlp
from mlplab.layers.pk import PKMixing, _left_matmul_layers, permute_entries
from mlplab.layers.vec import invert_perm

TOL = 1e-12


def _set_fast(model: nn.Module, fast: bool) -> nn.Module:
    for mod in model.modules():
        if isinstance(mod, PKMixing):
            mod.fast = fast
    return model


def _pair(name: str, **kw):
    torch.manual_seed(0)
    fast = create_model(name, **kw).double()
    for p in fast.parameters():  # a non-zero head so that every gradient is informative
        p.data.normal_(0, 0.3)
    slow = _set_fast(copy.deepcopy(fast), False)
    return fast, slow


CASES = [
    ("mlp_mixer", dict(hidden_dim=6, num_tokens=16, expansion=2.0, depth=2, image_size=16)),
    ("mlp_mixer", dict(hidden_dim=5, num_tokens=12, token_hidden=7, channel_hidden=9, depth=2, image_size=16)),
    ("s_mixer", dict(hidden_dim=6, num_tokens=16, depth=2, image_size=16)),
    ("s_mixer", dict(hidden_dim=6, num_tokens=9, depth=2, image_size=16, act="relu")),  # skip layer
    ("rp_mlp_mixer", dict(hidden_dim=6, num_tokens=16, expansion=2.0, depth=2, image_size=16, rp_blocks=(1,))),
    ("rp_s_mixer", dict(hidden_dim=4, num_tokens=16, depth=2, image_size=16)),
]


@pytest.mark.parametrize("name,kw", CASES)
def test_fast_path_matches_generic(name, kw):
    fast, slow = _pair(name, **kw)
    x = torch.randn(3, 3, kw["image_size"], kw["image_size"], dtype=torch.float64)
    lf, ff = fast.forward_intermediates(x)
    ls, fs = slow.forward_intermediates(x)
    assert list(ff) == list(fs)
    torch.testing.assert_close(lf, ls, rtol=0, atol=TOL)
    for k in ff:
        assert ff[k].shape == fs[k].shape, k
        torch.testing.assert_close(ff[k], fs[k], rtol=0, atol=TOL)
    lf.square().sum().backward()
    ls.square().sum().backward()
    for (n, pf), (_, ps) in zip(fast.named_parameters(), slow.named_parameters()):
        assert pf.grad is not None, n
        torch.testing.assert_close(pf.grad, ps.grad, rtol=0, atol=TOL, msg=n)


def test_fast_path_is_used_and_structure_kept():
    m = create_model("mlp_mixer", hidden_dim=6, num_tokens=16, depth=1, image_size=16)
    tok = m.blocks[0].token_mixing
    assert tok.mode == "columns" and tok.fast
    assert _left_matmul_layers(tok.inner) == [tok.inner.fc1, tok.inner.act, tok.inner.fc2]
    assert isinstance(tok.inner, Mlp)
    assert m.blocks[0].channel_mixing.mode == "rows"
    sd = m.state_dict()
    assert "blocks.0.token_mixing.perm_in" in sd and "blocks.0.token_mixing.inner.fc1.weight" in sd


def test_fast_path_declines_dropout_in_training_and_hooks():
    mlp = Mlp(4, 8, 4, drop=0.1)
    assert _left_matmul_layers(mlp.train()) is None
    assert _left_matmul_layers(mlp.eval()) is not None
    lin = nn.Linear(4, 4)
    lin.register_forward_hook(lambda *a: None)
    assert _left_matmul_layers(nn.Sequential(lin, nn.GELU())) is None
    hooked = Mlp(4, 8, 4)
    hooked.register_forward_hook(lambda *a: None)
    assert _left_matmul_layers(hooked) is None


def test_columns_mode_with_bias_free_linear_matches():
    torch.manual_seed(1)
    inner = nn.Linear(5, 7, bias=False).double()
    pk = PKMixing(inner, (5, 3), (7, 3), 3, 5, 7)
    assert pk.mode == "columns"
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    y = pk(x)
    pk.fast = False
    torch.testing.assert_close(y, pk(x), rtol=0, atol=TOL)


def test_permute_entries_gather_backward_is_exact():
    torch.manual_seed(2)
    idx = torch.randperm(12)
    x = torch.randn(3, 12, dtype=torch.float64, requires_grad=True)
    y = permute_entries(x, idx, invert_perm(idx))
    assert torch.equal(y, x[:, idx])
    g = torch.randn(3, 12, dtype=torch.float64)
    (gx,) = torch.autograd.grad(y, x, g)
    ref = torch.zeros_like(x).index_add_(1, idx, g)
    assert torch.equal(gx, ref)
