"""The supplement's token-mixing variants (mixer_variants): shapes, gradients, closed-form
parameter counts, equality with the shared Mixer in float64, a 2-step ``mlplab train`` run each."""
import json

import pytest
import torch

import mlplab
from mlplab import cli
from mlplab.analysis.cost import mixer_counts
from mlplab.models.counting import count_activations, count_flops, count_params, measured_flops

VARIANTS = ("untied", "grouped", "views")
S, C, L, GAMMA = 16, 8, 2, 2.0  # 16x16 images, patch 4 -> S = 16 tokens


def build(token_mixing="shared", token_groups=1, **extra):
    return mlplab.create_model("mlp_mixer", image_size=16, patch_size=4, hidden_dim=C, depth=L, expansion=GAMMA,
                               num_classes=5, zero_head=False, token_mixing=token_mixing,
                               token_groups=token_groups, **extra)


def images(n=3, dtype=torch.float32):
    return torch.randn(n, 3, 16, 16, generator=torch.Generator().manual_seed(0), dtype=dtype)


@pytest.mark.parametrize("variant, G", [("untied", 1), ("grouped", 2), ("grouped", 4), ("views", 2), ("views", 8)])
def test_shapes_and_every_parameter_gets_a_gradient(variant, G):
    model = build(variant, G)
    y = model(images())
    assert y.shape == (3, 5) and torch.isfinite(y).all()
    (y ** 2).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def _token_params(variant, G):
    """Closed form: one token MLP n_in -> D -> n_out has n_in·D + D + D·n_out + n_out parameters."""
    d = int(GAMMA * S)
    if variant == "shared":
        return S * d + d + d * S + S
    if variant == "untied":
        return C * (S * d + d + d * S + S)
    if variant == "views":
        return G * (S * d + d + d * S + S)
    dg = int(GAMMA * S * G)  # grouped: S·G tokens, hidden γ·S·G
    return S * G * dg + dg + dg * S * G + S * G


@pytest.mark.parametrize("variant, G", [("untied", 1), ("grouped", 2), ("grouped", 4), ("views", 2), ("views", 8)])
def test_parameter_counts_match_the_closed_forms(variant, G):
    model, shared = build(variant, G), build()
    expected = count_params(shared) + L * (_token_params(variant, G) - _token_params("shared", 1))
    assert count_params(model) == expected
    counts = mixer_counts(model.config)  # the config-only counts used by `mlplab models` and plans
    assert counts["params"] == expected
    assert counts["flops"] == count_flops(model) == measured_flops(model)
    assert counts["activations"] == count_activations(model)


def _shared_token_mlp(shared, i):
    return shared.blocks[i].token_mixing.inner


def _copy_common(dst, src):
    """Everything but the token mixing: stem, norms, channel MLPs, head."""
    own = dst.state_dict()
    own.update({k: v for k, v in src.state_dict().items() if ".token_mixing." not in k})
    dst.load_state_dict(own)


@pytest.mark.parametrize("variant", VARIANTS)
def test_g1_and_equal_mlps_compute_the_shared_mixer(variant):
    torch.manual_seed(1)
    shared = build().double().eval()
    for p in shared.parameters():  # no zero biases: a mis-wired bias would otherwise pass
        torch.nn.init.normal_(p, std=0.3)
    model = build(variant, 1).double().eval()
    _copy_common(model, shared)
    with torch.no_grad():
        for i, blk in enumerate(model.blocks):
            mlp = _shared_token_mlp(shared, i)
            tm = blk.token_mixing
            if variant == "grouped":  # G = 1: the folded MLP is the shared one
                tm.fn.load_state_dict(mlp.state_dict())
            else:  # every one of the M MLPs (C for untied, G = 1 view) set to the shared MLP
                for mine, theirs in ((tm.fc1, mlp.fc1), (tm.fc2, mlp.fc2)):
                    mine.weight.copy_(theirs.weight.expand_as(mine.weight))
                    mine.bias.copy_(theirs.bias.expand_as(mine.bias))
    x = images(dtype=torch.float64)
    torch.testing.assert_close(model(x), shared(x), rtol=0, atol=1e-12)


def test_views_group_g_uses_mlp_g_on_its_contiguous_channels():
    """Views with G groups equals G shared Mixers' token mixing, each on its C/G channel slice."""
    torch.manual_seed(2)
    G = 2
    tm = build("views", G).double().blocks[1].token_mixing
    with torch.no_grad():
        for p in tm.parameters():
            torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(3, S, C, dtype=torch.float64)
    k = C // G
    for g in range(G):
        h = tm.act(torch.einsum("bsc,ds->bcd", x[:, :, g * k:(g + 1) * k], tm.fc1.weight[g]) + tm.fc1.bias[g])
        ref = torch.einsum("bcd,td->btc", h, tm.fc2.weight[g]) + tm.fc2.bias[g][None, :, None]
        torch.testing.assert_close(tm(x)[:, :, g * k:(g + 1) * k], ref, rtol=0, atol=1e-12)


def test_grouped_folds_g_neighbouring_channels_into_the_tokens():
    torch.manual_seed(3)
    G = 2
    tm = build("grouped", G).double().blocks[1].token_mixing
    x = torch.randn(3, S, C, dtype=torch.float64)
    y = tm(x)
    for g in range(C // G):  # channel group g: channels g·G .. g·G+G-1, token index s·G + j
        folded = x[:, :, g * G:(g + 1) * G].reshape(3, S * G)
        torch.testing.assert_close(y[:, :, g * G:(g + 1) * G].reshape(3, S * G), tm.fn(folded), rtol=0, atol=1e-12)


def test_the_shared_default_still_takes_the_fused_path():
    assert build().config.token_mixing == "shared"
    for variant in VARIANTS:
        assert "token_mixing" in build(variant, 2).fusable().reason


@pytest.mark.parametrize("variant", VARIANTS)
def test_two_step_train_run(tmp_path, variant):
    ov = {
        "model.name": f"mlp_mixer_{variant}", "model.kwargs.patch_size": 4, "model.kwargs.hidden_dim": 8,
        "model.kwargs.depth": 2, "model.kwargs.token_groups": 2,
        "data.dataset": "synthetic", "data.image_size": 8, "data.train_subset": 64, "data.test_subset": 32,
        "optim.name": "adamw", "optim.lr": 3e-3, "schedule.epochs": 1, "schedule.warmup_steps": 1,
        "run.batch_size": 32, "run.threads": 1, "run.log": "none", "run.precision": "fp32",
        "run.tensorboard": False, "run.out_dir": str(tmp_path), "run.name": variant, "run.device": "cpu",
    }
    assert cli.main(["train", "cifar10_s_mixer", *[f"{k}={json.dumps(v)}" for k, v in ov.items()]]) == 0
    res = json.loads((tmp_path / variant / "results.json").read_text())
    assert res["epochs"] == 1 and res["steps"] == 2


@pytest.mark.parametrize("overrides, phrase", [
    (dict(token_mixing="views", token_groups=3), "token_groups=3 must divide hidden_dim"),
    (dict(token_mixing="grouped", token_groups=0), "token_groups=0 must divide hidden_dim"),
    (dict(token_mixing="views", token_groups=2, block="s"), "variant of the MLP-Mixer block"),
])
def test_bad_groups_are_one_sentence(overrides, phrase):
    with pytest.raises(ValueError, match=phrase) as err:
        build(**overrides)
    assert "\n" not in str(err.value)


def test_bad_groups_on_the_command_line_exit_2(tmp_path, capsys):
    args = ["train", "cifar10_s_mixer", 'model.name="mlp_mixer_views"', "model.kwargs.token_groups=3",
            f'run.out_dir="{tmp_path}"', "--print-config"]
    code = cli.main(args)
    err = capsys.readouterr().err
    assert code == 2 and "must divide hidden_dim" in err and "Traceback" not in err


def test_tools_for_the_shared_token_mlp_refuse_the_variants():
    from mlplab.interop.timm import from_mlplab
    from mlplab.models.expand import expand_resolution
    from mlplab.theory.effective import effective_mlp

    model = build("views", 2).eval()
    for fn in (from_mlplab, lambda m: expand_resolution(m, 2), effective_mlp):
        with pytest.raises(ValueError, match="token_mixing='views'"):
            fn(model)
