"""The converters on hand-made tensor dicts: every refusal's sentence, the shared helpers, the
name mapping each way, file containers and their sniffing (no reference models needed)."""
from pathlib import Path

import numpy as np
import pytest
import torch

import mlplab
from mlplab.interop import flax, native, scaling_mlps, timm
from mlplab.interop.common import block_indices, describe_names, perfect_square, take
from mlplab.interop.files import _looks_like_safetensors, read_tensors, resolve_weights_path, write_tensors


def _z(*shape):
    return torch.zeros(*shape)


def test_common_helpers():
    assert block_indices(["blocks.1.a", "blocks.0.b", "blocks.1.c", "head"], r"blocks\.(\d+)\.") == [0, 1]
    assert block_indices(["x"], r"blocks\.(\d+)\.") == []
    with pytest.raises(ValueError) as e:
        block_indices(["blocks.0.a", "blocks.2.a"], r"blocks\.(\d+)\.")
    assert str(e.value) == "block numbers [0, 2] are not 0..1: the checkpoint is incomplete"
    t = {"a": _z(2, 3), "b": _z(2)}
    assert take(t, "a", 2, "timm").shape == (2, 3) and "a" not in t
    with pytest.raises(ValueError) as e:
        take(t, "a", 2, "timm")
    assert str(e.value) == "timm checkpoint lacks tensor 'a'"
    with pytest.raises(ValueError) as e:
        take(t, "b", 2, "Flax")
    assert str(e.value) == "Flax tensor 'b' has shape (2,), expected 2 dimensions"
    assert [perfect_square(n) for n in (0, 1, 15, 16, 17, 196)] == [0, 1, None, 4, None, 14]
    assert describe_names(["d", "a", "c", "b"]) == "4 tensor(s) named like 'a', 'b', 'c', 'd'"
    assert describe_names(["e", "d", "a", "c", "b"]) == "5 tensor(s) named like 'a', 'b', 'c', 'd', ..."
    assert describe_names({"x", "y"}, k=1) == "2 tensor(s) named like 'x', ..."


def _timm_dict(S=4, C=3, ch=2, P=2, d_s=5, d_c=6, depth=2, classes=7):
    t = {"stem.proj.weight": torch.arange(C * ch * P * P, dtype=torch.float32).view(C, ch, P, P),
         "stem.proj.bias": _z(C)}
    for i in range(depth):
        t.update({f"blocks.{i}.norm1.weight": _z(C), f"blocks.{i}.mlp_tokens.fc1.weight": _z(d_s, S),
                  f"blocks.{i}.mlp_tokens.fc2.weight": _z(S, d_s), f"blocks.{i}.mlp_channels.fc1.weight": _z(d_c, C),
                  f"blocks.{i}.mlp_channels.fc2.weight": _z(C, d_c)})
    if classes:
        t["head.weight"] = _z(classes, C)
    return t


def test_timm_names_and_architecture():
    t = _timm_dict()
    assert timm.matches(t)
    imp = timm.to_mlplab(t)
    assert imp.model_name == "mlp_mixer" and imp.source_format == "timm"
    assert imp.kwargs == {"image_size": 4, "in_chans": 2, "patch_size": 2, "hidden_dim": 3, "depth": 2,
                          "token_hidden": 5, "channel_hidden": 6, "norm_eps": 1e-6, "act": "gelu", "num_classes": 7}
    assert torch.equal(imp.state["stem.proj.weight"], torch.arange(24, dtype=torch.float32).view(3, 8))
    assert ("blocks.1.token_mixing.inner.fc2.weight" in imp.state
            and "blocks.0.channel_mixing.inner.fc1.weight" in imp.state)
    assert "blocks.0.norm1.weight" in imp.state and not any("mlp_" in k for k in imp.state)
    assert "num_classes" not in timm.to_mlplab(_timm_dict(classes=0)).kwargs
    assert not timm.matches({"stem.proj.weight": _z(3, 8), "blocks.0.mlp_tokens.fc1.weight": _z(2, 2)})
    assert not timm.matches({"stem.proj.weight": _z(3, 2, 2, 2)})


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.update({"stem.proj.weight": _z(3, 2, 2, 1)}),
     "timm stem kernel is 2x1; mlplab's per-patch stem needs square patches"),
    (lambda t: [t.pop(k) for k in list(t) if k.startswith("blocks.")],
     "timm Mixer checkpoint has no blocks.* tensors"),
    (lambda t: t.pop("blocks.0.mlp_channels.fc1.weight"),
     "timm checkpoint lacks 'blocks.0.mlp_channels.fc1.weight': not an MlpMixer (ResMLP and gMLP use other names)"),
    (lambda t: t.update({"blocks.0.mlp_channels.fc1.weight": _z(6)}),
     "timm checkpoint lacks 'blocks.0.mlp_channels.fc1.weight'"),
    (lambda t: t.update({"blocks.0.mlp_tokens.fc1.weight": _z(5, 5)}),
     "timm Mixer has S=5 tokens, not a square number of patches; mlplab's Mixer needs a square image "
     "(image size = patch·√S)"),
])
def test_timm_refusals(edit, message):
    t = _timm_dict()
    edit(t)
    with pytest.raises(ValueError) as e:
        timm.to_mlplab(t)
    assert str(e.value).startswith(message)


def test_timm_export_refusals_name_every_reason():
    with pytest.raises(ValueError) as e:
        timm.from_mlplab(torch.nn.Linear(2, 2))
    assert str(e.value) == "only MLP-Mixers export to timm, not Linear"
    model = mlplab.create_model("rp_s_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, num_tokens=3,
                                norm=False)
    with pytest.raises(ValueError) as e:
        timm.from_mlplab(model)
    assert str(e.value) == ("this Mixer has no timm counterpart: S-Mixer blocks (block='s'); RP blocks [0]; "
                            "num_tokens=3 != 4 patches (the first-block skip layer); norm=False or skip=False; "
                            "a learned first-block skip layer")
    skipless = mlplab.create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, skip=False)
    with pytest.raises(ValueError, match="^this Mixer has no timm counterpart: norm=False or skip=False$"):
        timm.from_mlplab(skipless)
    assert timm.timm_model_args(skipless) is None


def test_timm_export_layout_and_model_args():
    model = mlplab.create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, in_chans=2,
                                token_hidden=8, channel_hidden=12)
    out = timm.from_mlplab(model)
    assert out["stem.proj.weight"].shape == (4, 2, 4, 4)
    assert torch.equal(out["stem.proj.weight"].reshape(4, 32), model.stem.proj.weight)
    assert "blocks.0.mlp_tokens.fc1.weight" in out and "blocks.0.mlp_channels.fc2.bias" in out
    assert not any("mixing" in k for k in out)
    assert timm.timm_model_args(model) is None  # no timm Mixer has patch 4, width 4, depth 1
    s32 = mlplab.create_model("mixer_s32_224", num_classes=3)
    assert timm.timm_model_args(s32) == ("mixer_s32_224", {"num_classes": 3})
    small = mlplab.create_model("mixer_s32_224", image_size=32, in_chans=1, num_classes=3)
    assert timm.timm_model_args(small) == ("mixer_s32_224", {"img_size": 32, "in_chans": 1,
                                                             "mlp_ratio": [0.5, 4.0], "num_classes": 3})
    small.cfg.norm_eps = 1e-5  # options timm's MlpMixer fixes otherwise
    assert timm.timm_model_args(small) is None
    small.cfg.norm_eps, small.cfg.act = 1e-6, "gelu_tanh"
    assert timm.timm_model_args(small) is None


def _flax_dict(S=4, C=3, ch=2, P=2, d_s=5, d_c=6, depth=1, root="", head=True):
    t = {"stem/kernel": torch.arange(P * P * ch * C, dtype=torch.float32).view(P, P, ch, C), "stem/bias": _z(C),
         "pre_head_layer_norm/scale": _z(C), "pre_head_layer_norm/bias": _z(C)}
    for i in range(depth):
        b = f"MixerBlock_{i}"
        for n in ("LayerNorm_0", "LayerNorm_1"):
            t.update({f"{b}/{n}/scale": _z(C), f"{b}/{n}/bias": _z(C)})
        for mix, n, d in (("token_mixing", S, d_s), ("channel_mixing", C, d_c)):
            t.update({f"{b}/{mix}/Dense_0/kernel": torch.ones(n, d), f"{b}/{mix}/Dense_0/bias": _z(d),
                      f"{b}/{mix}/Dense_1/kernel": _z(d, n), f"{b}/{mix}/Dense_1/bias": _z(n)})
    if head:
        t.update({"head/kernel": _z(C, 10), "head/bias": _z(10)})
    return {root + k: v for k, v in t.items()}


@pytest.mark.parametrize("root", ["", "params/", "opt/target/", "target/"])
def test_flax_names_roots_and_layout(root):
    t = _flax_dict(root=root)
    assert flax.matches(t)
    imp = flax.to_mlplab(t)
    assert imp.kwargs == {"image_size": 4, "in_chans": 2, "patch_size": 2, "hidden_dim": 3, "depth": 1,
                          "token_hidden": 5, "channel_hidden": 6, "norm_eps": 1e-6, "act": "gelu_tanh",
                          "num_classes": 10}
    k = torch.arange(24, dtype=torch.float32).view(2, 2, 2, 3)  # (P, P, ch, C) HWIO
    assert torch.equal(imp.state["stem.proj.weight"], k.permute(3, 2, 0, 1).reshape(3, 8))
    assert imp.state["blocks.0.token_mixing.inner.fc1.weight"].shape == (5, 4)  # (in, out) transposed
    assert imp.state["blocks.0.channel_mixing.inner.fc2.weight"].shape == (3, 6)
    assert imp.state["blocks.0.norm2.weight"].shape == (3,) and "norm.bias" in imp.state
    assert imp.state["head.weight"].shape == (10, 3)
    assert "num_classes" not in flax.to_mlplab(_flax_dict(root=root, head=False)).kwargs


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.update({"stem/kernel": _z(2, 1, 2, 3)}),
     "Flax stem kernel is 2x1; mlplab's per-patch stem needs square patches"),
    (lambda t: [t.pop(k) for k in list(t) if "channel_mixing" in k],
     "Flax checkpoint lacks 'MixerBlock_0/channel_mixing/Dense_0/kernel': not a Mixer"),
    (lambda t: t.update({"MixerBlock_0/token_mixing/Dense_0/kernel": _z(5, 5)}),
     "Flax Mixer has S=5 tokens, not a square number of patches"),
    (lambda t: t.update({"extra/kernel": _z(1)}), "Flax checkpoint has tensors a Mixer does not use: ['extra/kernel']"),
    (lambda t: t.pop("MixerBlock_0/LayerNorm_1/scale"),
     "Flax checkpoint lacks tensor 'MixerBlock_0/LayerNorm_1/scale'"),
    (lambda t: t.update({"MixerBlock_0/token_mixing/Dense_1/bias": _z(1, 4)}),
     "Flax tensor 'MixerBlock_0/token_mixing/Dense_1/bias' has shape (1, 4), expected 1 dimensions"),
])
def test_flax_refusals(edit, message):
    t = _flax_dict()
    edit(t)
    with pytest.raises(ValueError) as e:
        flax.to_mlplab(t)
    assert str(e.value).startswith(message)


def _scaling_dict(bottleneck=True, d_in=48, m=8, depth=2, k=4):
    t = {"linear_in.weight": _z(m, d_in), "linear_in.bias": _z(m), "linear_out.weight": _z(10, m),
         "linear_out.bias": _z(10)}
    for i in range(depth):
        t.update({f"layernorms.{i}.weight": _z(m), f"layernorms.{i}.bias": _z(m)})
        if bottleneck:
            t.update({f"blocks.{i}.block.0.weight": _z(k * m, m), f"blocks.{i}.block.0.bias": _z(k * m),
                      f"blocks.{i}.block.2.weight": _z(m, k * m), f"blocks.{i}.block.2.bias": _z(m)})
        else:
            t.update({f"layers.{i}.weight": _z(m, m), f"layers.{i}.bias": _z(m)})
    return t


def test_scaling_mlps_names_and_architecture():
    imp = scaling_mlps.to_mlplab(_scaling_dict())
    assert imp.model_name == "bottleneck_mlp"
    assert imp.kwargs == {"image_size": 4, "in_chans": 3, "width": 8, "act": "gelu", "norm_eps": 1e-5,
                          "num_classes": 10, "block": "bottleneck", "depth": 2, "expansion": 4.0}
    assert {"blocks.1.fc1.weight", "blocks.1.fc2.bias", "blocks.1.norm.weight", "stem.bias",
            "head.weight"} <= set(imp.state)
    imp = scaling_mlps.to_mlplab(_scaling_dict(bottleneck=False, d_in=64), {"in_chans": 4})
    assert imp.model_name == "mlp" and (imp.kwargs["in_chans"], imp.kwargs["image_size"]) == (4, 4)
    assert (imp.kwargs["block"], imp.kwargs["depth"], imp.kwargs["norm_position"]) == ("standard", 2, "pre")
    assert {"blocks.1.fc.weight", "blocks.1.fc.bias", "blocks.0.norm.bias"} <= set(imp.state)
    assert scaling_mlps.matches(_scaling_dict()) and not scaling_mlps.matches({"linear_in.weight": _z(1)})
    assert scaling_mlps.image_shape(48, image_size=4) == (3, 4) and scaling_mlps.image_shape(16) == (1, 4)
    assert scaling_mlps.image_shape(12, in_chans=3, image_size=2) == (3, 2)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.update({"bn.running_mean": _z(8)}),
     "this Scaling-MLPs checkpoint uses BatchNorm (normalization='batch'); mlplab's MLPs use LayerNorm only"),
    (lambda t: [t.pop(k) for k in list(t) if k.startswith("blocks.")],
     "Scaling-MLPs checkpoint has neither blocks.* (BottleneckMLP) nor layers.* (MLP) tensors; a model without "
     "blocks has no mlplab counterpart"),
    (lambda t: t.update({"layernorms.2.weight": _z(8)}),
     "Scaling-MLPs checkpoint has tensors this model does not use: ['layernorms.2.weight']"),
    (lambda t: t.pop("linear_out.bias"), "Scaling-MLPs checkpoint lacks tensor 'linear_out.bias'"),
])
def test_scaling_mlps_refusals(edit, message):
    t = _scaling_dict()
    edit(t)
    with pytest.raises(ValueError) as e:
        scaling_mlps.to_mlplab(t)
    assert str(e.value).startswith(message)


def test_image_shape_refusals():
    with pytest.raises(ValueError) as e:
        scaling_mlps.image_shape(48, image_size=3)
    assert str(e.value) == ("in_chans=None, image_size=3 do not match the checkpoint's input width 48 "
                            "(in_chans·image_size² must equal it)")
    with pytest.raises(ValueError) as e:
        scaling_mlps.image_shape(50)
    assert str(e.value) == ("the input width 50 is neither H² nor 3·H²; pass in_chans= and image_size= with "
                            "in_chans·image_size² = 50")
    with pytest.raises(ValueError, match="neither H² nor 3·H²"):
        scaling_mlps.image_shape(3 * 8)  # divisible by 3, but 8 is not a square


def test_native_metadata_and_refusals():
    model = mlplab.create_model("mlp", image_size=4, width=8, depth=1)
    meta = native.model_metadata(model)
    assert meta["mlplab_model"] == "mlp" and '"width": 8' in meta["mlplab_config"]
    assert native.model_metadata(torch.nn.Linear(2, 2)) == {}
    assert native.matches({}, meta) and not native.matches({}, {"mlplab_model": "mlp"})
    with pytest.raises(ValueError) as e:
        native.to_mlplab({}, {"mlplab_model": "mlp"})
    assert str(e.value).startswith("this safetensors file has no 'mlplab_model'/'mlplab_config' metadata")
    with pytest.raises(ValueError, match=r"^the file's 'mlplab_config' metadata is not JSON \("):
        native.to_mlplab({}, {"mlplab_model": "mlp", "mlplab_config": "{"})
    imp = native.to_mlplab({"w": _z(1)}, {"mlplab_model": "mlp", "mlplab_config": '{"width": 8}',
                                          "mlplab_pretrained_cfg": "not json"})
    assert (imp.model_name, imp.kwargs, imp.pretrained_cfg, imp.source_format) == ("mlp", {"width": 8}, {}, "mlplab")
    imp = native.to_mlplab({}, {"mlplab_model": "mlp", "mlplab_config": "{}", "mlplab_pretrained_cfg": "[1]"})
    assert imp.pretrained_cfg == {}
    imp = native.to_mlplab({}, {"mlplab_model": "mlp", "mlplab_config": "{}",
                                "mlplab_pretrained_cfg": '{"mean": [0.5]}'})
    assert imp.pretrained_cfg == {"mean": [0.5]}


def test_files_containers_and_sniffing(tmp_path):
    t = {"a": torch.arange(3.0), "b": torch.ones(2, 2)}
    for name in ("w.safetensors", "w.pth", "w.pt", "w.bin"):
        p = write_tensors(tmp_path / name, t, metadata={"k": "v"} if name.endswith("safetensors") else None)
        back, meta = read_tensors(p)
        assert set(back) == {"a", "b"} and torch.equal(back["a"], t["a"])
        assert meta == ({"k": "v"} if name.endswith("safetensors") else {})
    with pytest.raises(ValueError) as e:
        write_tensors(tmp_path / "w.txt", t)
    assert str(e.value) == f"cannot write {tmp_path / 'w.txt'}: give a .safetensors, .pth, .pt or .bin file name"
    (tmp_path / "renamed.weights").write_bytes((tmp_path / "w.safetensors").read_bytes())
    assert _looks_like_safetensors(tmp_path / "renamed.weights")
    assert read_tensors(tmp_path / "renamed.weights")[1] == {"k": "v"}  # sniffed, not by suffix
    assert not _looks_like_safetensors(tmp_path / "w.pth")
    (tmp_path / "short").write_bytes(b"1234567")
    assert not _looks_like_safetensors(tmp_path / "short")
    (tmp_path / "big").write_bytes((10**9).to_bytes(8, "little") + b"{")
    assert not _looks_like_safetensors(tmp_path / "big")
    (tmp_path / "one").write_bytes((1).to_bytes(8, "little") + b"{")
    assert not _looks_like_safetensors(tmp_path / "one")  # a header holds at least "{}"
    (tmp_path / "two").write_bytes((2).to_bytes(8, "little") + b"{}")
    assert _looks_like_safetensors(tmp_path / "two")
    (tmp_path / "nobrace").write_bytes((2).to_bytes(8, "little") + b"[]")
    assert not _looks_like_safetensors(tmp_path / "nobrace")
    np.savez(tmp_path / "w.npz", **{"module.x": np.ones(2, dtype=np.float32)})
    assert list(read_tensors(tmp_path / "w.npz")[0]) == ["x"]  # prefixes dropped
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"bad.npz is not a readable .npz archive \("):
        read_tensors(tmp_path / "bad.npz")
    (tmp_path / "bad.safetensors").write_bytes(b"garbage!")
    with pytest.raises(ValueError, match=r"bad.safetensors is not a readable safetensors file \("):
        read_tensors(tmp_path / "bad.safetensors")
    torch.save({"_orig_mod.module._orig_mod.w": torch.ones(1)}, tmp_path / "nested.pth")
    assert list(read_tensors(tmp_path / "nested.pth")[0]) == ["w"]
    torch.save({"model": {"state_dict": {"w": torch.ones(1)}}, "epoch": 1}, tmp_path / "deep.pth")
    assert list(read_tensors(tmp_path / "deep.pth")[0]) == ["w"]
    for wrapper in ("model_state_dict", "params", "state_dict_ema"):
        torch.save({wrapper: {"w": torch.ones(1)}, "step": 2}, tmp_path / "wrapped.pth")
        assert list(read_tensors(tmp_path / "wrapped.pth")[0]) == ["w"]
    torch.save({}, tmp_path / "empty.pth")
    with pytest.raises(ValueError, match=r"empty.pth holds a dict, not a dict of tensors"):
        read_tensors(tmp_path / "empty.pth")


def test_weights_path_of_folders(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint.prev").mkdir(parents=True)
    write_tensors(run / "checkpoint.prev" / "model.safetensors", {"w": torch.ones(1)})
    assert resolve_weights_path(run) == run / "checkpoint.prev" / "model.safetensors"
    (run / "checkpoint").mkdir()
    write_tensors(run / "checkpoint" / "model.safetensors", {"w": torch.ones(1)})
    assert resolve_weights_path(run) == run / "checkpoint" / "model.safetensors"  # the latest first
    write_tensors(run / "model.safetensors", {"w": torch.ones(1)})
    assert resolve_weights_path(run) == run / "model.safetensors"
    one = tmp_path / "one"
    one.mkdir()
    (one / "notes.txt").write_text("x")
    write_tensors(one / "w.pth", {"w": torch.ones(1)})
    assert resolve_weights_path(one) == one / "w.pth"
    write_tensors(one / "v.pt", {"w": torch.ones(1)})
    with pytest.raises(FileNotFoundError) as e:
        resolve_weights_path(one)
    assert str(e.value) == (f"{one} is a folder without model.safetensors or checkpoint/model.safetensors and "
                            "with 2 weight files; give the file itself")
    with pytest.raises(FileNotFoundError) as e:
        resolve_weights_path(tmp_path / "none")
    assert str(e.value) == (f"{tmp_path / 'none'} does not exist; give the path of a checkpoint file or an mlplab "
                            "run folder")


@pytest.mark.parametrize("bottleneck, key", [
    (True, k) for k in ("linear_in.weight", "linear_in.bias", "linear_out.weight", "linear_out.bias",
                        "blocks.1.block.0.weight", "blocks.1.block.0.bias", "blocks.1.block.2.weight",
                        "layernorms.1.weight", "layernorms.1.bias")] + [
    (False, k) for k in ("layers.1.weight", "layers.1.bias", "layernorms.1.weight", "layernorms.1.bias")])
def test_scaling_mlps_names_the_missing_or_misshapen_tensor(bottleneck, key):
    t = _scaling_dict(bottleneck=bottleneck)
    t.pop(key)
    with pytest.raises(ValueError) as e:
        scaling_mlps.to_mlplab(t)
    assert str(e.value) == f"Scaling-MLPs checkpoint lacks tensor {key!r}"
    t = _scaling_dict(bottleneck=bottleneck)
    t[key] = t[key][None]
    with pytest.raises(ValueError) as e:
        scaling_mlps.to_mlplab(t)
    assert str(e.value).startswith(f"Scaling-MLPs tensor {key!r} has shape (1, ")


def test_scaling_mlps_overrides_and_leftovers():
    imp = scaling_mlps.to_mlplab(_scaling_dict(d_in=48), {"image_size": 4})
    assert (imp.kwargs["in_chans"], imp.kwargs["image_size"], imp.source_format) == (3, 4, "scaling_mlps")
    with pytest.raises(ValueError, match="in_chans=None, image_size=3 do not match"):
        scaling_mlps.to_mlplab(_scaling_dict(d_in=48), {"image_size": 3})
    t = _scaling_dict()
    t.update({f"extra.{i}": _z(1) for i in range(6)})
    with pytest.raises(ValueError) as e:
        scaling_mlps.to_mlplab(t)
    assert str(e.value) == ("Scaling-MLPs checkpoint has tensors this model does not use: "
                            "['extra.0', 'extra.1', 'extra.2', 'extra.3', 'extra.4']")


@pytest.mark.parametrize("key", ["stem/kernel", "stem/bias", "MixerBlock_0/LayerNorm_0/bias",
                                 "MixerBlock_0/channel_mixing/Dense_1/kernel", "MixerBlock_0/token_mixing/Dense_0/bias",
                                 "pre_head_layer_norm/scale", "head/bias"])
def test_flax_names_the_missing_tensor(key):
    t = _flax_dict()
    t.pop(key)
    with pytest.raises(ValueError) as e:
        flax.to_mlplab(t)
    assert str(e.value) == f"Flax checkpoint lacks tensor {key!r}"


def test_push_to_hub_passes_every_option_to_the_upload(monkeypatch):
    from mlplab.interop import hub

    calls = {}

    def fake_upload(folder, repo_id, **kw):
        calls.update(repo_id=repo_id, files=sorted(p.name for p in Path(folder).iterdir()), **kw)
        return "url"

    monkeypatch.setattr(hub, "upload_folder", fake_upload)
    model = mlplab.create_model("mlp", image_size=4, width=8, depth=1)
    assert mlplab.push_to_hub(model, "me/tiny", revision="v2", commit_message="msg") == "url"
    assert calls == {"repo_id": "me/tiny", "files": ["README.md", "config.json", "model.safetensors"],
                     "private": False, "token": None, "commit_message": "msg", "revision": "v2"}


def test_push_without_huggingface_hub_is_a_runtime_failure(monkeypatch, tmp_path):
    import sys

    from mlplab.errors import RunFailure
    from mlplab.interop import hub

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    with pytest.raises(RunFailure) as e:
        hub.upload_folder(tmp_path, "me/tiny", private=False, token=None, commit_message="m", revision=None)
    assert str(e.value) == "pushing to the Hugging Face Hub needs huggingface_hub: pip install huggingface_hub"


def test_image_shape_checks_given_values_and_finds_three_channels():
    assert scaling_mlps.image_shape(27) == (3, 3) and scaling_mlps.image_shape(16, in_chans=1) == (1, 4)
    with pytest.raises(ValueError, match="in_chans=3, image_size=5 do not match the checkpoint's input width 48"):
        scaling_mlps.image_shape(48, in_chans=3, image_size=5)


def test_hub_folder_config_and_timm_layout(tmp_path):
    import json

    from mlplab.interop.api import _dataset_inputs
    from mlplab.version import __version__

    model = mlplab.create_model("mixer_s32_224", image_size=32, in_chans=1, num_classes=3)
    folder = mlplab.save_pretrained(model, tmp_path / "repo", hub_layout=True)
    config = json.loads((folder / "config.json").read_text())
    assert {k: v for k, v in config.items() if k not in ("model_config", "pretrained_cfg")} == {
        "architecture": "mixer_s32_224", "num_classes": 3, "num_features": 512, "global_pool": "avg",
        "library_name": "mlplab", "mlplab_version": __version__,
        "model_args": {"img_size": 32, "in_chans": 1, "mlp_ratio": [0.5, 4.0], "num_classes": 3}}
    assert config["model_config"]["hidden_dim"] == 512
    tensors, meta = read_tensors(folder / "model.safetensors")
    assert meta["format"] == "pt" and meta["mlplab_layout"] == "timm" and meta["mlplab_model"] == "mixer_s32_224"
    assert "blocks.0.mlp_tokens.fc1.weight" in tensors  # timm's names, so timm loads it
    with pytest.raises(ValueError) as e:
        mlplab.save_pretrained(torch.nn.Linear(2, 2), tmp_path / "x.safetensors")
    assert str(e.value) == ("save_pretrained needs a model built by mlplab.create_model (it records the model's name "
                            "and config); for other modules save model.state_dict()")
    assert _dataset_inputs({"data": "cifar10"}) == {} and _dataset_inputs({}) == {}


def test_flax_matching_needs_both_names_and_lists_five_leftovers():
    assert not flax.matches({"stem/kernel": _z(1)})
    assert not flax.matches({"MixerBlock_0/token_mixing/Dense_0/kernel": _z(1)})
    assert flax.to_mlplab(_flax_dict()).source_format == "flax"
    t = _flax_dict()
    t.update({f"extra/{i}": _z(1) for i in range(6)})
    with pytest.raises(ValueError) as e:
        flax.to_mlplab(t)
    assert str(e.value) == ("Flax checkpoint has tensors a Mixer does not use: "
                            "['extra/0', 'extra/1', 'extra/2', 'extra/3', 'extra/4']")


def test_pickles_unwrap_two_levels_and_name_what_they_hold(tmp_path):
    torch.save({"model": {"state_dict": {"model": {"w": torch.ones(1)}}}}, tmp_path / "three.pth")
    with pytest.raises(ValueError, match="not a dict of tensors"):
        read_tensors(tmp_path / "three.pth")  # two wrappers at most
    torch.save({f"k{i}": i for i in range(6)}, tmp_path / "six.pth")
    with pytest.raises(ValueError) as e:
        read_tensors(tmp_path / "six.pth")
    assert str(e.value) == (
        f"{tmp_path / 'six.pth'} holds a dict with keys ['k0', 'k1', 'k2', 'k3', 'k4'] and no state dict under "
        "'state_dict', 'model', 'model_state_dict', 'params', 'state_dict_ema', not a dict of tensors (a state dict); "
        "save model.state_dict() rather than the model object")


def test_safetensors_sniffing_bounds(tmp_path):
    exact = tmp_path / "exact"
    exact.write_bytes((9).to_bytes(8, "little") + b"{")  # the header length equals the file size
    assert _looks_like_safetensors(exact)
    for n, expected in ((100_000_000, True), (100_000_001, False)):
        p = tmp_path / f"big{n}"
        with open(p, "wb") as f:
            f.write(n.to_bytes(8, "little") + b"{")
            f.truncate(n + 8)  # sparse: no disk used
        assert _looks_like_safetensors(p) is expected


def test_a_pickled_module_names_the_class(tmp_path):
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pth")
    with pytest.raises(ValueError) as e:
        read_tensors(tmp_path / "module.pth")
    assert str(e.value).startswith(f"{tmp_path / 'module.pth'} is neither safetensors, .npz nor a PyTorch file "
                                   "loadable with weights_only=True (it holds objects other than tensors")
    assert "torch.nn.modules.linear.Linear" in str(e.value)


def test_hub_cache_dir_follows_the_huggingface_variables(monkeypatch, tmp_path):
    from mlplab.interop import hub

    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub.hub_cache_dir() == str(tmp_path / ".cache" / "huggingface" / "hub")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub.hub_cache_dir() == str(tmp_path / "hf" / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert hub.hub_cache_dir() == str(tmp_path / "c")


def test_write_hub_folder_layout_and_refusal(tmp_path):
    from mlplab.interop import hub

    out = tmp_path / "a" / "b"  # parents are made
    written = hub.write_hub_folder(out, lambda p: write_tensors(p, {"w": torch.ones(1)}), {"k": [1]}, "# card\n")
    assert written == out and (out / "config.json").read_text() == '{\n  "k": [\n    1\n  ]\n}\n'
    assert (out / "README.md").read_text() == "# card\n" and read_tensors(out / "model.safetensors")[0]["w"] == 1
    hub.write_hub_folder(out, lambda p: write_tensors(p, {"w": torch.ones(1)}), {}, "")  # into an existing folder
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError) as e:
        hub.write_hub_folder(tmp_path / "file", lambda p: None, {}, "")
    assert str(e.value) == (f"{tmp_path / 'file'} is a file; hub_layout=True writes a folder (model.safetensors, "
                            "config.json, README.md)")


def test_native_metadata_carries_the_input_settings_but_not_the_source():
    import json

    model = mlplab.create_model("mlp", image_size=4, width=8, depth=1)
    model.pretrained_cfg.clear()
    assert set(native.model_metadata(model)) == {"mlplab_model", "mlplab_config"}
    model.pretrained_cfg.update(mean=[0.5], source="/somewhere")
    meta = native.model_metadata(model)
    assert json.loads(meta["mlplab_pretrained_cfg"]) == {"mean": [0.5]}
    model.model_name = None
    assert native.model_metadata(model) == {}
    model.model_name, model.config = "mlp", {"not": "a dataclass"}
    assert native.model_metadata(model) == {}
    imp = native.to_mlplab({"w": _z(1)}, {"mlplab_model": "mlp", "mlplab_config": "{}"})
    assert imp.pretrained_cfg == {} and list(imp.state) == ["w"]


def test_json_or_empty_and_written_tensors_are_cpu_copies(tmp_path):
    from mlplab.interop.api import _json_or_empty

    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "ok.json").write_text('{"a": 1}')
    assert _json_or_empty(tmp_path / "list.json") == {} and _json_or_empty(tmp_path / "bad.json") == {}
    assert _json_or_empty(tmp_path / "ok.json") == {"a": 1} and _json_or_empty(tmp_path / "none.json") == {}
    t = torch.arange(6.0).view(2, 3).t()  # not contiguous
    back, _ = read_tensors(write_tensors(tmp_path / "t.safetensors", {"t": t}))
    assert torch.equal(back["t"], t)


FIX = Path(__file__).resolve().parents[1] / "fixtures" / "interop"


def test_convert_writes_each_layout(tmp_path):
    from mlplab.interop import convert

    out = convert(FIX / "timm_mixer.safetensors", tmp_path / "m.safetensors", from_format="timm")
    assert read_tensors(out)[1]["mlplab_model"] == "mlp_mixer"  # mlplab's format by default
    out = convert(FIX / "timm_mixer.safetensors", tmp_path / "t.safetensors", to="timm")
    tensors, meta = read_tensors(out)
    assert meta == {"format": "pt"} and "blocks.0.mlp_tokens.fc1.weight" in tensors
    out = convert(FIX / "timm_mixer.safetensors", tmp_path / "t.pth", to="timm")
    assert read_tensors(out)[1] == {} and "stem.proj.weight" in read_tensors(out)[0]
    with pytest.raises(ValueError) as e:
        convert(FIX / "timm_mixer.safetensors", tmp_path / "x", to="onnx")
    assert str(e.value) == "cannot convert to 'onnx'; choose mlplab or timm"
    with pytest.raises(ValueError, match="is not a flax checkpoint"):
        convert(FIX / "timm_mixer.safetensors", tmp_path / "y.safetensors", from_format="flax")


def test_timm_export_names_the_token_mixing_variant():
    model = mlplab.create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, token_mixing="untied")
    with pytest.raises(ValueError) as e:
        timm.from_mlplab(model)
    assert str(e.value) == "this Mixer has no timm counterpart: token_mixing='untied'"


def test_hub_download_asks_for_the_revision_and_only_the_cache_after_a_failure(monkeypatch, tmp_path):
    import sys

    import huggingface_hub
    from huggingface_hub import errors

    from mlplab.errors import RunFailure
    from mlplab.interop import hub

    calls = []

    def fake_download(repo, name, revision=None, local_files_only=False):
        calls.append((repo, name, revision, local_files_only))
        raise errors.LocalEntryNotFoundError("offline")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(hub, "hub_reachable", lambda endpoint: True)  # the host answers; the file is not there
    with pytest.raises(RunFailure, match="^cannot get the weights of hf-hub:me/tiny@v1"):
        hub.download("hf-hub:me/tiny@v1")
    assert [c[2:] for c in calls] == [("v1", False)] + [("v1", True)] * (len(calls) - 1) and len(calls) >= 2
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(RunFailure) as e:
        hub.download("hf-hub:me/tiny")
    assert str(e.value) == "loading from the Hugging Face Hub needs huggingface_hub: pip install huggingface_hub"


def test_hub_ids_pretrained_arguments_and_overrides(tmp_path):
    from mlplab.interop import hub

    assert (hub.hub_repo("hf-hub:me/tiny@v1") == ("me/tiny", "v1")
            and hub.hub_repo("hf-hub:me/tiny") == ("me/tiny", None))
    for bad in ("hf-hub:me/", "hf-hub:/tiny", "hf-hub:a/b/c"):
        with pytest.raises(ValueError) as e:
            hub.hub_repo(bad)
        assert str(e.value) == (f"{bad!r} is not a Hub repository; write hf-hub:ORG/NAME, e.g. "
                                "hf-hub:timm/mixer_b16_224.goog_in21k_ft_in1k")
    with pytest.raises(TypeError) as e:
        mlplab.create_model("mlp", pretrained=3)
    assert str(e.value) == "pretrained is True, a path or 'hf-hub:ORG/NAME', not 3"
    # the model takes the checkpoint's eps, φ, classes
    model = mlplab.create_model("mlp_mixer", pretrained=FIX / "flax_mixer.npz", image_size=32, patch_size=8,
                                hidden_dim=16, depth=2, token_hidden=8, channel_hidden=32)
    assert (model.config.act, model.config.norm_eps, model.config.num_classes) == ("gelu_tanh", 1e-6, 5)
    with pytest.raises(ValueError, match="^in_chans=None, image_size=5 do not match the checkpoint's input width"):
        mlplab.load_pretrained(FIX / "scaling_mlp.pth", image_size=5)  # overrides reach the converter


def _tiny_mixer(**kw):
    return mlplab.create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, **kw)


def test_a_shape_mismatch_names_the_overrides_that_change_the_architecture():
    tiny = FIX / "timm_mixer.safetensors"  # image 32, patch 8, C 16, D_S 8, D_C 32, 2 blocks, 5 classes
    with pytest.raises(ValueError) as e:
        mlplab.load_pretrained(tiny, hidden_dim=32, depth=2)  # depth=2 is the checkpoint's own: not named
    assert str(e.value) == ("tensor 'stem.proj.weight' is (16, 192) in the checkpoint but (32, 192) in the model: "
                            "the overrides {'hidden_dim': 32} change the architecture")
    with pytest.raises(ValueError) as e:
        mlplab.load_pretrained(tiny, image_size=64)
    assert str(e.value) == ("tensor 'blocks.0.token_mixing.inner.fc1.weight' is (8, 16) in the checkpoint but (8, 64) "
                            "in the model: the overrides {'image_size': 64} change the architecture; to fine-tune at "
                            "a higher resolution use mlplab.expand_resolution(model, K)")
    with pytest.raises(ValueError) as e:
        mlplab.create_model("mlp_mixer", pretrained=tiny)  # the registered default sizes, no override
    assert str(e.value) == ("tensor 'stem.proj.weight' is (16, 192) in the checkpoint but (64, 48) in the model: "
                            "the inferred architecture does not fit")


def test_loading_names_the_missing_and_unexpected_tensors():
    from mlplab.interop import build_pretrained
    from mlplab.interop.common import Imported

    model = _tiny_mixer(num_classes=3)
    names = list(model.state_dict())
    gone = [k for k in names if k.startswith("blocks.0.")]  # 12 tensors, in the model's order
    extra = [f"extra.{i}" for i in range(7)]
    state = {**{k: v for k, v in model.state_dict().items() if k not in gone}, **{k: torch.zeros(1) for k in extra}}
    kw = dict(image_size=8, patch_size=4, hidden_dim=4, depth=1, num_classes=3)
    with pytest.raises(ValueError) as e:
        build_pretrained(Imported("mlp_mixer", kw, state, "timm"))
    assert str(e.value) == (f"the timm checkpoint does not fit model 'mlp_mixer': missing {gone[:5]}, "
                            f"unexpected {extra[:5]}")
    only_missing = {k: v for k, v in state.items() if k not in extra}
    with pytest.raises(ValueError, match=r"^the timm checkpoint does not fit model 'mlp_mixer': missing \['blocks"):
        build_pretrained(Imported("mlp_mixer", kw, only_missing, "timm"))
    with pytest.raises(ValueError, match=r"missing \['blocks.0.norm1.weight'"):  # a new head excuses the head only
        build_pretrained(Imported("mlp_mixer", kw, only_missing, "timm"), num_classes=4)
    head_bias = {k: v for k, v in model.state_dict().items() if k != "head.bias"}
    with pytest.raises(ValueError, match=r"missing \['head.bias'\], unexpected \[\]$"):
        build_pretrained(Imported("mlp_mixer", kw, head_bias, "timm"))


def test_loading_keeps_the_recorded_input_settings_only():
    from mlplab.interop import build_pretrained
    from mlplab.interop.common import Imported

    model = _tiny_mixer(num_classes=3)
    settings = {"mean": [0.1, 0.2, 0.3], "std": (0.4, 0.5, 0.6), "interpolation": "bilinear", "crop_pct": 0.9,
                "tag": "t1", "hf_hub_id": "me/tiny", "license": "mit"}
    imp = Imported("mlp_mixer", dict(image_size=8, patch_size=4, hidden_dim=4, depth=1, num_classes=3),
                   model.state_dict(), "timm", pretrained_cfg={**settings, "architecture": "other", "extra": 1})
    cfg = build_pretrained(imp, source="here").pretrained_cfg
    assert {k: cfg[k] for k in settings} == {**settings, "mean": (0.1, 0.2, 0.3)}
    assert cfg["architecture"] == "mlp_mixer" and "extra" not in cfg and cfg["source"] == "here"
    imp.pretrained_cfg = {"crop_pct": None}  # an unknown setting keeps the model's own
    assert build_pretrained(imp).pretrained_cfg["crop_pct"] == 1.0


def test_format_errors_list_every_format():
    from mlplab.interop import detect_format, read_checkpoint

    with pytest.raises(ValueError) as e:
        detect_format({"a": _z(1)})
    assert str(e.value) == (
        "cannot tell the checkpoint's format: it holds 1 tensor(s) named like 'a'. Expected one of "
        f"mlplab: {native.EXPECTED}; timm: {timm.EXPECTED}; flax: {flax.EXPECTED}; "
        f"scaling_mlps: {scaling_mlps.EXPECTED}")
    with pytest.raises(ValueError) as e:
        read_checkpoint(FIX / "timm_mixer.safetensors", format="onnx")
    assert str(e.value) == "unknown checkpoint format 'onnx'; choose auto, mlplab, timm, flax, scaling_mlps"


def test_a_hub_source_takes_the_published_tags_architecture_and_settings(monkeypatch):
    from mlplab.interop import hub, read_checkpoint

    asked = []

    def fake_download(source, config=None):
        asked.append(source)
        return FIX / "timm_mixer.safetensors", dict(config or {})

    monkeypatch.setattr(hub, "download", fake_download)
    imp = read_checkpoint("hf-hub:timm/mixer_b16_224.miil_in21k@v2")  # no config.json: the registered tag's
    assert asked == ["hf-hub:timm/mixer_b16_224.miil_in21k@v2"] and imp.model_name == "mixer_b16_224"
    assert {k: imp.pretrained_cfg[k] for k in ("tag", "hf_hub_id", "mean", "interpolation", "license")} == {
        "tag": "miil_in21k", "hf_hub_id": "timm/mixer_b16_224.miil_in21k", "mean": (0.0, 0.0, 0.0),
        "interpolation": "bilinear", "license": "apache-2.0"}
    assert read_checkpoint("hf-hub:me/tiny").model_name == "mlp_mixer"  # not a registered repository
    monkeypatch.setattr(hub, "download", lambda s: fake_download(s, {
        "architecture": "mixer_l16_224", "pretrained_cfg": {"mean": [0.25] * 3, "crop_pct": None}}))
    imp = read_checkpoint("hf-hub:timm/mixer_b16_224.goog_in21k")
    assert imp.model_name == "mixer_l16_224"  # the repository's config.json names the architecture
    assert imp.pretrained_cfg["mean"] == [0.25] * 3 and imp.pretrained_cfg["crop_pct"] == 0.875
    from mlplab.models import registry

    monkeypatch.setattr(registry, "_PRETRAINED", dict(registry._PRETRAINED))
    registry.register_pretrained("mixer_b16_224.in1k.v2", hf_hub_id="me/v2", num_classes=5, mean=(0.5,), std=(0.5,))
    monkeypatch.setattr(hub, "download", fake_download)
    assert read_checkpoint("hf-hub:me/v2").model_name == "mixer_b16_224"  # ARCH is what precedes the first dot


def test_a_hub_layout_folder_reads_its_config(tmp_path):
    import json
    import shutil

    from mlplab.interop import read_checkpoint

    folder = tmp_path / "timm_repo"  # a timm repository copied from the Hub
    folder.mkdir()
    shutil.copy(FIX / "timm_mixer.safetensors", folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"architecture": "mixer_b16_224",
                                                    "pretrained_cfg": {"mean": [0.3, 0.3, 0.3]}}))
    imp = read_checkpoint(folder)
    assert imp.model_name == "mixer_b16_224" and imp.pretrained_cfg["mean"] == [0.3, 0.3, 0.3]
    flax_folder = tmp_path / "flax_repo"  # the architecture renames timm's files only
    flax_folder.mkdir()
    shutil.copy(FIX / "flax_mixer.npz", flax_folder / "weights.npz")
    (flax_folder / "config.json").write_text(json.dumps({"architecture": "mixer_b16_224"}))
    assert read_checkpoint(flax_folder).model_name == "mlp_mixer"


def test_save_pretrained_names_timms_architecture_and_the_suffix_it_needs(tmp_path):
    import json

    # an mlp_mixer of S/32's patch, width and depth is timm's mixer_s32_224
    model = mlplab.create_model("mlp_mixer", image_size=64, patch_size=32, hidden_dim=512, depth=8, token_hidden=2,
                                channel_hidden=64, norm_eps=1e-6, act="gelu", num_classes=5)
    config = json.loads((mlplab.save_pretrained(model, tmp_path / "repo", hub_layout=True) / "config.json").read_text())
    assert config["architecture"] == "mixer_s32_224" and config["model_args"]["img_size"] == 64
    with pytest.raises(ValueError) as e:
        mlplab.save_pretrained(model, tmp_path / "m.pth")
    assert str(e.value) == ("save_pretrained writes safetensors; name the file *.safetensors, not 'm.pth' "
                            "(or pass hub_layout=True to write a Hub folder)")


def test_the_hub_config_leaves_out_the_local_source_and_a_missing_head(tmp_path):
    import json

    model = mlplab.load_pretrained(FIX / "timm_mixer.safetensors")
    assert model.pretrained_cfg["source"] == str(FIX / "timm_mixer.safetensors")
    config = json.loads((mlplab.save_pretrained(model, tmp_path / "a", hub_layout=True) / "config.json").read_text())
    assert "source" not in config["pretrained_cfg"] and config["num_features"] == 16
    model.reset_classifier(0)  # no head: pooled features out
    config = json.loads((mlplab.save_pretrained(model, tmp_path / "b", hub_layout=True) / "config.json").read_text())
    assert config["num_features"] is None and config["num_classes"] == 0
    del model.pretrained_cfg  # a model without input settings saves too
    config = json.loads((mlplab.save_pretrained(model, tmp_path / "c", hub_layout=True) / "config.json").read_text())
    assert config["pretrained_cfg"] == {} and "mlplab_pretrained_cfg" not in native.model_metadata(model)


@pytest.mark.parametrize("name", ["w.safetensors", "w.npz", "w.pth", "w.pt", "w.bin"])
def test_a_folder_with_one_weights_file_resolves_to_it(tmp_path, name):
    (tmp_path / name).write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    assert resolve_weights_path(tmp_path) == tmp_path / name


def test_native_refuses_a_file_without_its_metadata():
    with pytest.raises(ValueError) as e:
        native.to_mlplab({"w": _z(1)}, {"mlplab_model": "mlp"})
    assert str(e.value) == ("this safetensors file has no 'mlplab_model'/'mlplab_config' metadata; it was not written "
                            "by mlplab.save_pretrained (or a run checkpoint); pass its format explicitly")


def test_timm_names_the_missing_or_misshapen_stem():
    t = _timm_dict()
    t["stem.proj.weight"] = _z(3, 8)
    with pytest.raises(ValueError) as e:
        timm.to_mlplab(t)
    assert str(e.value) == "timm tensor 'stem.proj.weight' has shape (3, 8), expected 4 dimensions"
    del t["stem.proj.weight"]
    with pytest.raises(ValueError) as e:
        timm.to_mlplab(t)
    assert str(e.value) == "timm checkpoint lacks tensor 'stem.proj.weight'"


def test_pytorch_files_load_on_the_cpu_with_weights_only(tmp_path, monkeypatch):
    # torch < 2.6 (allowed) defaults to weights_only=False, and a file saved on a GPU loads there without map_location
    seen = []
    real_load = torch.load

    def recording_load(*args, **kwargs):
        seen.append(kwargs)
        return real_load(*args, **kwargs)

    torch.save({"w": torch.ones(2)}, tmp_path / "w.pth")
    monkeypatch.setattr(torch, "load", recording_load)
    assert torch.equal(read_tensors(tmp_path / "w.pth")[0]["w"], torch.ones(2))
    assert seen == [{"map_location": "cpu", "weights_only": True}]


def test_written_tensors_are_moved_to_the_cpu(tmp_path):
    moved = []

    class Recording(torch.Tensor):  # what a CUDA tensor would be asked: where to go
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.Tensor.to:
                moved.append(args[1:])
            return super().__torch_function__(func, types, args, kwargs or {})

    out = write_tensors(tmp_path / "t.safetensors", {"t": torch.ones(2).as_subclass(Recording)})
    assert moved == [("cpu",)] and torch.equal(read_tensors(out)[0]["t"], torch.ones(2))


def test_native_files_of_mlplab_0_1_drop_the_mixers_impl(tmp_path):
    """mlplab 0.1.0 wrote a Mixer's "impl" (how it computes) into mlplab_config; it is no model field
    now, so reading such a file drops it and the model builds from the rest."""
    import json

    model = mlplab.create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, num_classes=3)
    meta = native.model_metadata(model)
    old = json.loads(meta["mlplab_config"])
    assert "impl" not in old
    meta["mlplab_config"] = json.dumps({**old, "impl": "fused"})
    imp = native.to_mlplab(model.state_dict(), meta)
    assert imp.kwargs == old
    write_tensors(tmp_path / "old.safetensors", model.state_dict(), metadata=meta)
    again = mlplab.load_pretrained(tmp_path / "old.safetensors")
    assert again.config == model.config
