"""Model options that imported checkpoints need: the tanh GELU and the pre-norm standard block."""
import pytest
import torch
import torch.nn.functional as F

import mlplab
from mlplab.layers.common import make_act


def test_gelu_tanh_is_the_tanh_approximation():
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    assert torch.equal(make_act("gelu_tanh")(x), F.gelu(x, approximate="tanh"))
    assert not torch.equal(make_act("gelu_tanh")(x), F.gelu(x))


@pytest.mark.parametrize("name,kw", [("mlp_mixer", dict(hidden_dim=8, depth=1, image_size=16)),
                                     ("s_mixer", dict(hidden_dim=8, depth=1, image_size=16)),
                                     ("mlp", dict(width=8, depth=1, image_size=8)),
                                     ("sw_mlp", dict(width=64, depth=1, image_size=16, density=0.5))])
def test_every_family_accepts_gelu_tanh(name, kw):
    m = mlplab.create_model(name, act="gelu_tanh", **kw)
    assert any(isinstance(mod, torch.nn.GELU) and mod.approximate == "tanh" for mod in m.modules())


def test_pre_norm_standard_block_is_w_phi_ln():
    m = mlplab.create_model("mlp", width=6, depth=1, image_size=4, in_chans=1, norm_position="pre").double()
    blk = m.blocks[0]
    z = torch.randn(3, 6, dtype=torch.float64)
    expect = blk.fc(F.relu(F.layer_norm(z, (6,), blk.norm.weight, blk.norm.bias, 1e-5)))
    assert torch.allclose(blk(z)[1], expect, rtol=0, atol=1e-15)
    post = mlplab.create_model("mlp", width=6, depth=1, image_size=4, in_chans=1).double().blocks[0]
    post.load_state_dict(blk.state_dict())
    assert torch.allclose(post(z)[1], post.norm(F.relu(post.fc(z))), rtol=0, atol=1e-15)


def test_bottleneck_blocks_are_pre_norm_only():
    with pytest.raises(ValueError, match="norm_position='post' exists for standard blocks only"):
        mlplab.create_model("bottleneck_mlp", width=8, depth=1, norm_position="post")
