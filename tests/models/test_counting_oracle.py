"""The one counter (counting.py) against closed forms written here, on tiny models: parameters
(effective and trainable), stored bytes, analytic matmul FLOPs per layer kind and the activation
elements of a forward, with the input-shape check and the model's mode left as it was."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from mlplab import create_model
from mlplab.layers.kronecker import KroneckerLinear
from mlplab.layers.masked import MaskedLinear, SparseLinear
from mlplab.layers.monarch import MonarchLinear
from mlplab.models.counting import (
    count_activations,
    count_flops,
    count_params,
    measured_flops,
    model_input_shape,
    state_bytes,
)
from mlplab.models.mixer_variants import GroupLinear


def test_params_effective_and_trainable():
    m = create_model("sw_mlp", width=16, density=0.5, image_size=8, patch_size=4, depth=2, num_classes=3)
    dense = sum(p.numel() for p in m.parameters())
    nnz = sum(int(blk.fc1.mask.sum()) for blk in m.blocks)
    assert count_params(m) == dense
    assert count_params(m, effective=True) == dense - 2 * 16 * 16 + nnz
    m.head.weight.requires_grad_(False)
    assert count_params(m, trainable_only=True) == dense - 3 * 16
    assert count_params(m, effective=True, trainable_only=True) == dense - 2 * 16 * 16 + nnz - 3 * 16


def test_state_bytes_count_parameters_and_buffers_once_each():
    lin = nn.Linear(4, 3).double()
    assert state_bytes(lin) == (12 + 3) * 8
    seq = nn.Sequential(lin, nn.BatchNorm1d(3))  # weight, bias 3 + 3 float32; mean, var float32; count int64
    assert state_bytes(seq) == (12 + 3) * 8 + 4 * 3 * 4 + 8
    tied = nn.Sequential(lin, lin)
    assert state_bytes(tied) == state_bytes(lin)
    masked = MaskedLinear(4, 3, torch.ones(3, 4, dtype=torch.bool), bias=False)
    assert state_bytes(masked) == 12 * 4 + 12 * 1 + masked.scale.numel() * masked.scale.element_size()


def test_flops_of_each_layer_kind():
    """2·in·out per row for a Linear and a MaskedLinear (what runs), 2·nnz for a SparseLinear,
    a structured layer's own statement, 2·G·in·out per row for a GroupLinear."""
    assert count_flops(nn.Linear(5, 7)) == 70
    assert count_flops(nn.Sequential(nn.Linear(5, 7), nn.LayerNorm(7), nn.GELU(), nn.Linear(7, 2))) == 70 + 28
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[0, 1] = mask[2, 3] = True
    assert count_flops(MaskedLinear(4, 3, mask)) == 24
    sparse = SparseLinear(4, 3, torch.tensor([[0, 2, 2], [1, 0, 3]]))
    assert count_flops(sparse) == 6
    mon = MonarchLinear(12, 6, nblocks=3, mid_block=2)
    assert count_flops(mon) == mon.flops_per_example() > 0
    kron = KroneckerLinear(12, 6)
    assert count_flops(nn.Sequential(kron, nn.ReLU())) == kron.flops_per_example() > 0
    assert count_flops(GroupLinear(3, 4, 5)) == 2 * 3 * 4 * 5

    class Stated(nn.Module):
        def flops_per_example(self):
            return 17

    assert count_flops(nn.Sequential(Stated(), Stated())) == 34

    class Unknown(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(2, 2))

    with pytest.raises(NotImplementedError, match="^count_flops does not know how to count Unknown; add a rule"):
        count_flops(nn.Sequential(nn.Linear(2, 2), Unknown()))


def test_mixer_flops_are_the_closed_form():
    """2·[S0·(ch·P²)·C (stem) + C·S·S0 (W̃ on each channel) + per block C·(S_in·D_S + D_S·S)
    (the token MLP on each channel) + S·(C·D_C + D_C·C) (the channel MLP on each token) + C·K]."""
    ch, P, S0, S, C, D_S, D_C, K = 2, 2, 16, 6, 3, 7, 5, 4
    m = create_model("mlp_mixer", image_size=8, patch_size=P, in_chans=ch, hidden_dim=C, num_tokens=S, depth=2,
                     token_hidden=D_S, channel_hidden=D_C, num_classes=K)
    blocks = sum(C * (s_in * D_S + D_S * S) + S * (C * D_C + D_C * C) for s_in in (S0, S))
    assert count_flops(m) == 2 * (S0 * ch * P * P * C + C * S * S0 + blocks + C * K)
    assert count_flops(m, (ch, 8, 8)) == count_flops(m, (9, ch, 8, 8)) == count_flops(m)
    s = create_model("s_mixer", image_size=8, patch_size=P, in_chans=ch, hidden_dim=C, depth=1, num_classes=K)
    assert count_flops(s) == 2 * (S0 * ch * P * P * C + C * S0 * S0 + S0 * C * C + C * K)


@pytest.mark.parametrize("variant, G", [("untied", 1), ("views", 3), ("grouped", 3)])
def test_token_mixing_variant_flops(variant, G):
    """Each of the M token MLPs n_in -> D -> n_out acts on V = S·C/(M·n_out) vectors."""
    S, C, D = 16, 6, 5
    m = create_model(f"mlp_mixer_{variant}", image_size=8, patch_size=2, in_chans=1, hidden_dim=C, depth=1,
                     token_groups=G, token_hidden=D, channel_hidden=4, num_classes=2)
    n_in = n_out = S * (G if variant == "grouped" else 1)
    token = 2 * S * C // n_out * (n_in * D + D * n_out)  # M·V = S·C / n_out vectors, whatever M is
    assert count_flops(m) == 2 * S * 4 * C + token + 2 * S * (C * 4 + 4 * C) + 2 * C * 2


def test_input_shapes_are_checked_against_the_config():
    m = create_model("mlp", image_size=4, in_chans=2, width=3, depth=1)
    assert model_input_shape(m) == (2, 4, 4)
    assert model_input_shape(m, (2, 4, 4)) == model_input_shape(m, (7, 2, 4, 4)) == (2, 4, 4)
    with pytest.raises(ValueError, match=r"^model expects inputs of shape \(2, 4, 4\) .* got \(3, 4, 4\)$"):
        count_flops(m, (3, 4, 4))
    with pytest.raises(ValueError, match=r"^input_shape must be \(ch, H, W\) or \(N, ch, H, W\), got \(4, 4\)$"):
        model_input_shape(m, (4, 4))
    with pytest.raises(ValueError, match="input_shape must be"):
        model_input_shape(m, (1, 1, 2, 4, 4))
    bare = nn.Linear(3, 2)
    assert model_input_shape(bare) is None and model_input_shape(bare, (1, 5, 5)) == (1, 5, 5)
    with pytest.raises(ValueError, match="^input_shape is needed for a model without image_size"):
        measured_flops(bare)
    with pytest.raises(ValueError, match="^input_shape is needed for a model without image_size"):
        count_activations(bare)


def test_measured_flops_per_example_and_the_mode_restored():
    m = create_model("mlp", image_size=4, in_chans=2, width=3, depth=2, num_classes=5).double().train()
    want = 2 * (32 * 3 + 2 * 3 * 3 + 3 * 5)
    assert measured_flops(m) == measured_flops(m, batch=5) == count_flops(m) == want
    assert m.training and m.stem.weight.grad is None
    assert measured_flops(m.eval(), (2, 4, 4)) == want and not m.training


def test_activations_are_the_leaf_outputs_of_one_forward():
    """Plain MLP: stem m; per block the Linear, the ReLU and the LN m each; head K (an Identity
    final norm and an eval-mode dropout write nothing)."""
    m = create_model("mlp", image_size=4, in_chans=2, width=3, depth=2, num_classes=5, drop_rate=0.5).train()
    hooks_before = [len(mod._forward_hooks) for mod in m.modules()]
    assert count_activations(m) == 3 + 2 * 3 * 3 + 5
    assert m.training and [len(mod._forward_hooks) for mod in m.modules()] == hooks_before
    b = create_model("bottleneck_mlp", image_size=4, in_chans=2, width=3, depth=1, num_classes=5, expansion=2.0,
                     final_norm=True).eval()
    assert count_activations(b, (1, 2, 4, 4)) == 3 + (3 + 6 + 6 + 3) + 3 + 5 and not b.training


def test_rows_multiply_every_rule_and_counts_stay_integers():
    from types import SimpleNamespace

    from mlplab.models import counting
    from mlplab.models.mixer import MixerConfig, build_mixer

    sparse = SparseLinear(4, 3, torch.tensor([[0, 2, 2], [1, 0, 3]]))
    mon = MonarchLinear(12, 6, nblocks=3, mid_block=2)
    assert counting._walk(sparse, 3) == 18 and counting._walk(mon, 3) == 3 * mon.flops_per_example()
    views = create_model("mlp_mixer_views", image_size=8, patch_size=2, in_chans=1, hidden_dim=6, depth=1,
                         token_groups=3, token_hidden=5, channel_hidden=4, num_classes=2)
    assert type(counting._walk(views, 1)) is int
    raw = build_mixer(MixerConfig(image_size=8, patch_size=2, in_chans=1, hidden_dim=3, depth=1))  # .cfg only
    assert not hasattr(raw, "config") and model_input_shape(raw) == (1, 8, 8)
    for cfg in (SimpleNamespace(in_chans=3), SimpleNamespace(image_size=8), SimpleNamespace()):
        m = nn.Linear(2, 2)
        m.config = cfg
        assert model_input_shape(m) is None
    m = create_model("mlp", image_size=4, in_chans=2, width=3, depth=1, num_classes=5)
    m.head.weight.requires_grad_(False)
    assert count_params(m) == sum(p.numel() for p in m.parameters())  # trainable or not, by default
    assert type(measured_flops(m)) is int
    for fn in (count_activations, measured_flops):
        with pytest.raises(ValueError, match="model expects inputs of shape"):
            fn(m, (3, 4, 4))


def test_state_bytes_count_a_tensor_held_twice_once():
    a, b = nn.Linear(4, 3), nn.Module()
    b.register_buffer("w", a.weight)  # the same tensor as a parameter of one and a buffer of the other
    assert state_bytes(nn.Sequential(a, b)) == (12 + 3) * 4


def test_counts_run_in_the_models_dtype_and_on_its_device():
    m = create_model("mlp", image_size=4, in_chans=2, width=3, depth=2, num_classes=5).double()
    assert count_activations(m) == 3 + 2 * 3 * 3 + 5
    meta = create_model("mlp", image_size=4, in_chans=2, width=3, depth=2, num_classes=5).to("meta")
    assert count_activations(meta) == 3 + 2 * 3 * 3 + 5
    assert measured_flops(meta) == 2 * (32 * 3 + 2 * 3 * 3 + 3 * 5)


def test_a_leaf_that_returns_several_tensors_counts_each():
    from types import SimpleNamespace

    class Pair(nn.Module):
        def forward(self, x):
            return x * 2, x[:, :1] * 3

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = SimpleNamespace(in_chans=1, image_size=2)
            self.pair, self.lin = Pair(), nn.Linear(4, 2)

        def forward(self, x):
            a, b = self.pair(x)
            return self.lin(a.flatten(1)) + b.flatten(1).sum()

    assert count_activations(Net()) == 4 + 4 + 2  # both outputs of the pair (1·1·2·2 each), the Linear 2
