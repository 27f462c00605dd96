"""Checkpoints in and out: references made by timm, Flax and Scaling-MLPs' own code
(tests/fixtures/interop/make_fixtures.py, never mlplab) load with logits equal to float32
rounding; mlplab and timm files round-trip exactly; bad inputs are one-sentence errors."""
from pathlib import Path

import numpy as np
import pytest
import torch

import mlplab
from mlplab import cli
from mlplab.interop import detect_format, read_checkpoint, read_tensors, save_pretrained, to_timm
from mlplab.interop.scaling_mlps import image_shape

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "interop"
CASES = {  # weights file -> (format, mlplab model, reference name)
    "timm_mixer.safetensors": ("timm", "mlp_mixer", "timm_mixer"),
    "flax_mixer.npz": ("flax", "mlp_mixer", "flax_mixer"),
    "scaling_bottleneck.pth": ("scaling_mlps", "bottleneck_mlp", "scaling_bottleneck"),
    "scaling_mlp.pth": ("scaling_mlps", "mlp", "scaling_mlp"),
}


def _logit_diff(model, ref: str, **kw) -> float:
    r = np.load(FIX / f"{ref}_ref.npz")
    with torch.no_grad():
        out = model.eval()(torch.from_numpy(r["x"]))
    return (out - torch.from_numpy(r["logits"])).abs().max().item()


@pytest.mark.parametrize("fmt_explicit", [False, True])
@pytest.mark.parametrize("fname", sorted(CASES))
def test_reference_checkpoints_give_the_reference_logits(fname, fmt_explicit):
    fmt, name, ref = CASES[fname]
    tensors, meta = read_tensors(FIX / fname)
    assert detect_format(tensors, meta) == fmt
    model = mlplab.load_pretrained(FIX / fname, format=fmt if fmt_explicit else "auto")
    assert model.model_name == name
    assert _logit_diff(model, ref) <= 1e-5  # float32 rounding (issue: <= 1e-4)


def test_the_original_activation_is_what_makes_flax_logits_agree():
    flax_exact_gelu = mlplab.load_pretrained(FIX / "flax_mixer.npz", act="gelu")
    assert _logit_diff(flax_exact_gelu, "flax_mixer") > 1e-5  # Flax's nn.gelu is the tanh form


def test_inferred_mixer_architecture():
    imp = read_checkpoint(FIX / "flax_mixer.npz")
    assert imp.kwargs == {"image_size": 32, "in_chans": 3, "patch_size": 8, "hidden_dim": 16, "depth": 2,
                          "token_hidden": 8, "channel_hidden": 32, "norm_eps": 1e-6, "act": "gelu_tanh",
                          "num_classes": 5}
    assert read_checkpoint(FIX / "timm_mixer.safetensors").kwargs["act"] == "gelu"
    b = read_checkpoint(FIX / "scaling_bottleneck.pth").kwargs
    assert (b["block"], b["depth"], b["width"], b["expansion"], b["in_chans"], b["image_size"]) == \
        ("bottleneck", 3, 16, 4.0, 3, 8)
    s = read_checkpoint(FIX / "scaling_mlp.pth").kwargs
    assert (s["block"], s["depth"], s["norm_position"]) == ("standard", 2, "pre")


def test_normal_mixer_state_dict_is_timms_and_exports_exactly(tmp_path):
    original, _ = read_tensors(FIX / "timm_mixer.safetensors")
    model = mlplab.load_pretrained(FIX / "timm_mixer.safetensors")
    assert not any("perm" in k for k in model.state_dict())  # fixed J's are not stored
    exported = to_timm(model)
    assert set(exported) == set(original)
    assert all(torch.equal(exported[k], original[k]) for k in original)
    # and through files: timm layout -> mlplab file -> timm layout, bit for bit
    assert cli.main(["convert", str(FIX / "timm_mixer.safetensors"), str(tmp_path / "a.safetensors")]) == 0
    assert cli.main(["convert", str(tmp_path / "a.safetensors"), str(tmp_path / "b.pth"), "--to", "timm"]) == 0
    back, _ = read_tensors(tmp_path / "b.pth")
    assert all(torch.equal(back[k], original[k]) for k in original) and set(back) == set(original)


def test_flax_converts_to_timm_layout(tmp_path):
    out = mlplab.interop.convert(FIX / "flax_mixer.npz", tmp_path / "t.safetensors", "flax", to="timm")
    again = mlplab.load_pretrained(out, act="gelu_tanh")  # timm's layout does not record the activation
    assert _logit_diff(again, "flax_mixer") <= 1e-5


@pytest.mark.parametrize("name,kw", [("rp_mlp_mixer", dict(depth=2, hidden_dim=8, image_size=16)),
                                     ("s_mixer", dict(depth=2, hidden_dim=8, image_size=16, num_tokens=9)),
                                     ("bottleneck_mlp", dict(width=8, depth=2, image_size=8))])
def test_save_pretrained_round_trips_exactly(tmp_path, name, kw):
    model = mlplab.create_model(name, **kw, **({} if name == "bottleneck_mlp" else {"seed": 3}))
    path = save_pretrained(model, tmp_path / "m.safetensors")
    again = mlplab.load_pretrained(path)
    assert again.model_name == name and again.config == model.config
    sd, sd2 = model.state_dict(), again.state_dict()
    assert set(sd) == set(sd2) and all(torch.equal(sd[k], sd2[k]) for k in sd)
    if name == "rp_mlp_mixer":
        assert any("perm" in k for k in sd)  # RP permutations are free parameters, so they are stored


def test_new_head_when_the_class_count_changes(tmp_path):
    sd, _ = read_tensors(FIX / "timm_mixer.safetensors")
    torch.save({k: v for k, v in sd.items() if not k.startswith("head.")}, tmp_path / "headless.pth")
    headless = mlplab.load_pretrained(tmp_path / "headless.pth", num_classes=7)  # timm num_classes=0: no head
    assert headless.head.weight.shape == (7, 16) and torch.count_nonzero(headless.head.weight) == 0
    old = mlplab.load_pretrained(FIX / "timm_mixer.safetensors")
    new = mlplab.load_pretrained(FIX / "timm_mixer.safetensors", num_classes=10)
    assert new.head.weight.shape == (10, 16) and torch.count_nonzero(new.head.weight) == 0  # Mixer: zero head
    assert torch.equal(new.blocks[1].channel_mixing.inner.fc2.weight, old.blocks[1].channel_mixing.inner.fc2.weight)


def test_run_checkpoints_are_self_describing(tmp_path):
    from mlplab.train.checkpoint import save_checkpoint

    model = mlplab.create_model("mlp_mixer", depth=1, hidden_dim=8, image_size=16, num_classes=3)
    save_checkpoint(tmp_path / "run", model, {"epoch": 1, "step": 1})
    again = mlplab.load_pretrained(tmp_path / "run")  # the run folder is enough
    assert again.config == model.config


def test_rp_and_s_mixers_do_not_export_to_timm():
    with pytest.raises(ValueError, match="RP blocks"):
        to_timm(mlplab.create_model("rp_mlp_mixer", depth=1, hidden_dim=8, image_size=16))
    with pytest.raises(ValueError, match="S-Mixer"):
        to_timm(mlplab.create_model("s_mixer", depth=1, hidden_dim=8, image_size=16))
    with pytest.raises(ValueError, match="only MLP-Mixers"):
        to_timm(mlplab.create_model("bottleneck_mlp", depth=1, width=8, image_size=8))


def test_scaling_mlps_input_shape_inference():
    assert image_shape(28 * 28) == (1, 28) and image_shape(3 * 64 * 64) == (3, 64)
    assert image_shape(3 * 64 * 64, in_chans=3) == (3, 64)
    with pytest.raises(ValueError, match="neither H² nor 3·H²"):
        image_shape(1000)
    with pytest.raises(ValueError, match="do not match"):
        image_shape(784, in_chans=3)


def test_bad_inputs_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        mlplab.load_pretrained(tmp_path / "nope.pth")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="neither safetensors, .npz nor a PyTorch file"):
        mlplab.load_pretrained(tmp_path / "notes.txt")
    torch.save({"conv.weight": torch.zeros(2, 2)}, tmp_path / "other.pth")
    with pytest.raises(ValueError,
                       match=r"cannot tell the checkpoint's format: it holds 1 tensor\(s\) named like 'conv.weight'"):
        mlplab.load_pretrained(tmp_path / "other.pth")
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pth")
    with pytest.raises(ValueError, match="weights_only=True"):
        mlplab.load_pretrained(tmp_path / "module.pth")
    torch.save([torch.zeros(1)], tmp_path / "list.pth")
    with pytest.raises(ValueError, match="not a dict of tensors"):
        mlplab.load_pretrained(tmp_path / "list.pth")
    torch.save({"epoch": 3, "weights": {"w": torch.zeros(1)}}, tmp_path / "odd.pth")
    with pytest.raises(ValueError, match=r"keys \['epoch', 'weights'\] and no state dict under 'state_dict'"):
        mlplab.load_pretrained(tmp_path / "odd.pth")
    with pytest.raises(ValueError, match="is not a flax checkpoint"):
        mlplab.load_pretrained(FIX / "timm_mixer.safetensors", format="flax")
    with pytest.raises(ValueError, match="unknown checkpoint format 'keras'"):
        mlplab.load_pretrained(FIX / "timm_mixer.safetensors", format="keras")
    with pytest.raises(ValueError, match="expand_resolution"):
        mlplab.load_pretrained(FIX / "timm_mixer.safetensors", image_size=64)
    with pytest.raises(ValueError, match="mlplab_model"):
        mlplab.load_pretrained(FIX / "timm_mixer.safetensors", format="mlplab")
    with pytest.raises(ValueError, match=r"\*.safetensors"):
        save_pretrained(mlplab.create_model("bottleneck_mlp", width=8, depth=1), tmp_path / "m.pth")
    with pytest.raises(ValueError, match="create_model"):
        save_pretrained(torch.nn.Linear(2, 2), tmp_path / "m.safetensors")


def test_convert_cli_errors_are_one_line(tmp_path, capsys):
    assert cli.main(["convert", str(tmp_path / "missing.npz"), str(tmp_path / "o.safetensors")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mlplab convert: error:") and "does not exist" in err and "\n" not in err
    assert cli.main(["convert", str(FIX / "flax_mixer.npz"), str(tmp_path / "o.safetensors"), "num_classes=3"]) == 0
    assert "flax" in capsys.readouterr().out
    assert mlplab.load_pretrained(tmp_path / "o.safetensors").config.num_classes == 3


@pytest.mark.parametrize("suffix", [".pth", ".bin"])
@pytest.mark.parametrize("wrap", ["plain", "model", "state_dict", "module.", "_orig_mod.module."])
def test_timm_pickles_wrapped_or_prefixed_load_the_same(tmp_path, suffix, wrap):
    """timm state dicts as PyTorch pickles (read with weights_only=True), also inside a training
    checkpoint ({"model": sd}, {"state_dict": sd}) or with DDP / torch.compile prefixes."""
    sd, _ = read_tensors(FIX / "timm_mixer.safetensors")
    obj = {"plain": sd, "model": {"model": sd, "epoch": torch.tensor(3)}, "state_dict": {"state_dict": sd}}.get(
        wrap, {wrap + k: v for k, v in sd.items()})
    torch.save(obj, tmp_path / f"ckpt{suffix}")
    model = mlplab.load_pretrained(tmp_path / f"ckpt{suffix}")
    assert _logit_diff(model, "timm_mixer") <= 1e-5


@pytest.mark.parametrize("name", ["mlp_mixer", "rp_s_mixer", "bottleneck_mlp", "mlp", "sw_mlp"])
def test_norm_eps_reaches_every_layernorm(name):
    kw = dict(image_size=8, norm_eps=1e-6)
    kw.update(dict(patch_size=2, hidden_dim=4, depth=2) if "mixer" in name else
              dict(width=8, depth=2, final_norm=True) if "mlp" in name and name != "sw_mlp" else {})
    norms = [m for m in mlplab.create_model(name, **kw).modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and {m.eps for m in norms} == {1e-6}
