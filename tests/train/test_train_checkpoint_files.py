"""Checkpoint files without a training run: what is written, the checkpoint/prev swap, a write
that fails half-way, damaged files, and the strict weight checks (fast: tiny models only)."""
import dataclasses
import json
import os
import re
from pathlib import Path, PurePosixPath

import pytest
import torch
import torch.nn as nn
from safetensors import safe_open
from safetensors.torch import load_file

from mlplab.errors import BadInput
from mlplab.models import create_model
from mlplab.train import checkpoint as ckpt
from mlplab.train.checkpoint import (
    EMA_FILE,
    MODEL_FILE,
    STATE_FILE,
    CheckpointError,
    find_checkpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    save_weights,
)

SMALL = dict(image_size=8, patch_size=4, hidden_dim=8, depth=1, num_classes=3)


def _linear(seed):
    torch.manual_seed(seed)
    return nn.Linear(3, 2)


def _state(epoch):
    return {"epoch": epoch, "step": 10 * epoch, "history": [{"epoch": e} for e in range(1, epoch + 1)],
            "rng": [{"torch": torch.get_rng_state()}], "optimizer": {"state": {}, "param_groups": []}}


def _epoch(folder):
    return torch.load(folder / STATE_FILE, weights_only=True)["epoch"]


def test_a_checkpoint_holds_the_weights_the_ema_and_the_state(tmp_path):
    model, ema = _linear(0), _linear(1)
    state = _state(2)
    out = save_checkpoint(tmp_path, model, state, ema=ema)
    assert out == tmp_path / "checkpoint"
    assert sorted(p.name for p in out.iterdir()) == sorted([MODEL_FILE, EMA_FILE, STATE_FILE])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]  # no prev, no leftovers
    for name, m in ((MODEL_FILE, model), (EMA_FILE, ema)):
        saved = load_file(str(out / name))
        assert saved.keys() == m.state_dict().keys()
        assert all(torch.equal(saved[k], v) for k, v in m.state_dict().items())
        with safe_open(str(out / name), framework="pt") as f:
            assert f.metadata() == {"epoch": "2", "step": "20"}
    back = torch.load(out / STATE_FILE, weights_only=True)
    assert back["epoch"] == 2 and back["step"] == 20 and back["history"] == state["history"]
    assert torch.equal(back["rng"][0]["torch"], state["rng"][0]["torch"])
    fresh, fresh_ema = _linear(5), _linear(6)
    assert load_checkpoint(out, fresh, fresh_ema)["step"] == 20
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh_ema.weight, ema.weight)
    save_checkpoint(tmp_path / "plain", model, _state(1))
    assert not (tmp_path / "plain" / "checkpoint" / EMA_FILE).exists()  # no EMA, no file


def test_each_save_keeps_exactly_the_one_before_in_prev(tmp_path):
    model = _linear(0)
    for epoch in (1, 2, 3):
        save_checkpoint(tmp_path, model, _state(epoch))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "checkpoint.prev"]
    assert _epoch(tmp_path / "checkpoint") == 3 and _epoch(tmp_path / "checkpoint.prev") == 2
    (tmp_path / "checkpoint.new").mkdir()
    (tmp_path / "checkpoint.new" / "junk").write_text("left by a killed write")
    save_checkpoint(tmp_path, model, _state(4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "checkpoint.prev"]
    assert _epoch(tmp_path / "checkpoint") == 4 and _epoch(tmp_path / "checkpoint.prev") == 3
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == [MODEL_FILE, STATE_FILE]


@pytest.mark.parametrize("fail_on,error", [(MODEL_FILE, OSError), (EMA_FILE, OSError), (STATE_FILE, OSError),
                                           (STATE_FILE, KeyboardInterrupt)])
def test_a_write_that_fails_half_way_leaves_both_checkpoints_untouched(tmp_path, monkeypatch, fail_on, error):
    model = _linear(0)
    save_checkpoint(tmp_path, model, _state(1), ema=model)
    save_checkpoint(tmp_path, model, _state(2), ema=model)
    before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    real = ckpt.atomic_save

    def failing(path, writer):
        if Path(path).name == fail_on:
            raise error(28, "No space left on device") if error is OSError else error()
        return real(path, writer)

    monkeypatch.setattr(ckpt, "atomic_save", failing)
    with pytest.raises(error):  # a Ctrl-C half-way too
        save_checkpoint(tmp_path, _linear(9), _state(3), ema=_linear(9))
    after = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before and not (tmp_path / "checkpoint.new").exists()


def test_find_checkpoint_takes_the_latest_complete_folder(tmp_path):
    assert find_checkpoint(tmp_path) is None
    assert find_checkpoint(tmp_path / "missing") is None
    save_checkpoint(tmp_path, _linear(0), _state(1))
    save_checkpoint(tmp_path, _linear(0), _state(2))
    assert find_checkpoint(tmp_path) == tmp_path / "checkpoint"
    (tmp_path / "checkpoint" / STATE_FILE).unlink()  # incomplete latest: the one before
    assert find_checkpoint(tmp_path) == tmp_path / "checkpoint.prev"
    (tmp_path / "checkpoint.prev" / MODEL_FILE).unlink()
    assert find_checkpoint(tmp_path) is None
    save_checkpoint(tmp_path / "b", _linear(0), _state(1))
    (tmp_path / "b" / "checkpoint" / MODEL_FILE).unlink()
    assert find_checkpoint(tmp_path / "b") is None


def test_a_damaged_state_file_is_refused_and_points_at_the_intact_prev(tmp_path):
    model = _linear(0)
    save_checkpoint(tmp_path, model, _state(1))
    save_checkpoint(tmp_path, model, _state(2))
    state = tmp_path / "checkpoint" / STATE_FILE
    state.write_bytes(state.read_bytes()[:40])
    target = _linear(7)
    w0 = target.weight.detach().clone()
    msg = (f"checkpoint file {state} is unreadable (it is cut short or not a PyTorch file); it is truncated or "
           f"was not written by mlplab. The previous checkpoint is intact: to continue from it, replace "
           f"{tmp_path / 'checkpoint'} by {tmp_path / 'checkpoint.prev'}")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path / "checkpoint", target)
    assert str(e.value) == msg
    assert torch.equal(target.weight, w0)  # nothing loaded
    assert load_checkpoint(tmp_path / "checkpoint.prev", target)["epoch"] == 1
    # a damaged prev itself: the plain message, no advice to use it
    prev_state = tmp_path / "checkpoint.prev" / STATE_FILE
    prev_state.write_bytes(b"garbage")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path / "checkpoint.prev", target)
    assert "previous checkpoint" not in str(e.value) and str(prev_state) in str(e.value)
    # an incomplete prev (a file missing): the latest's message, without the advice
    for name in (STATE_FILE, MODEL_FILE):
        save_checkpoint(tmp_path / name, model, _state(1))
        save_checkpoint(tmp_path / name, model, _state(2))
        (tmp_path / name / "checkpoint.prev" / name).unlink()
        cut = tmp_path / name / "checkpoint" / STATE_FILE
        cut.write_bytes(b"garbage")
        with pytest.raises(CheckpointError) as e:
            load_checkpoint(tmp_path / name / "checkpoint", target)
        assert str(e.value).endswith("was not written by mlplab"), name


def test_a_damaged_model_file_is_refused_naming_it(tmp_path):
    save_checkpoint(tmp_path, _linear(0), _state(1))
    weights = tmp_path / "checkpoint" / MODEL_FILE
    weights.write_bytes(weights.read_bytes()[:30])
    with pytest.raises(CheckpointError, match=f"^checkpoint file {re.escape(str(weights))} is unreadable .*"
                                              f"truncated or not a safetensors file$"):
        load_checkpoint(tmp_path / "checkpoint", _linear(1))
    os.remove(weights)
    with pytest.raises(FileNotFoundError):
        load_weights(_linear(1), weights)
    (tmp_path / "checkpoint" / STATE_FILE).unlink()
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "checkpoint", _linear(1))


def test_a_run_with_an_ema_needs_the_ema_file(tmp_path):
    save_checkpoint(tmp_path, _linear(0), _state(1))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path / "checkpoint", _linear(1), ema=_linear(2))
    assert str(e.value) == (f"checkpoint {tmp_path / 'checkpoint'} has no ema.safetensors although the run keeps an "
                            "EMA of its weights (run.ema_decay); it was not written by this run's config")


def test_a_state_file_holding_code_is_refused(tmp_path):
    """state.pt is read weights-only: plain types and tensors, never objects whose loading runs code."""
    save_checkpoint(tmp_path, _linear(0), _state(1))
    torch.save({**_state(1), "path": PurePosixPath("x")}, tmp_path / "checkpoint" / STATE_FILE)
    with pytest.raises(CheckpointError, match=r"unreadable \(it holds objects other than tensors and plain types"):
        load_checkpoint(tmp_path / "checkpoint", _linear(1))


def test_the_state_file_is_read_weights_only_where_torch_defaults_to_unsafe_loading(tmp_path, monkeypatch):
    """torch 2.1–2.5 (the project allows torch >= 2.1) load everything unless told weights_only=True
    (None means False there): with that default, a state file holding code is still refused."""
    real_load = torch.load

    def torch_before_2_6_load(*args, weights_only=None, **kwargs):
        return real_load(*args, weights_only=bool(weights_only), **kwargs)

    save_checkpoint(tmp_path, _linear(0), _state(1))
    torch.save({**_state(1), "path": PurePosixPath("x")}, tmp_path / "checkpoint" / STATE_FILE)
    monkeypatch.setattr(torch, "load", torch_before_2_6_load)
    with pytest.raises(CheckpointError, match=r"unreadable \(it holds objects other than tensors and plain types"):
        load_checkpoint(tmp_path / "checkpoint", _linear(1))


def test_a_state_file_written_on_a_gpu_resumes_on_a_machine_without_one(tmp_path, monkeypatch):
    """A GPU run's optimiser state is saved as CUDA tensors; state.pt is mapped to the CPU on
    load, so the run resumes on a CPU-only machine (and the trainer moves the state where it runs)."""
    import torch.serialization

    state = {**_state(1), "optimizer": {"state": {0: {"momentum_buffer": torch.arange(6.0).view(2, 3)}},
                                        "param_groups": [{"lr": 0.1, "params": [0]}]}}
    with monkeypatch.context() as m:  # torch.save tags each storage with its device: "cuda:0" here
        m.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        save_checkpoint(tmp_path, _linear(0), state)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    back = load_checkpoint(tmp_path / "checkpoint", _linear(1))
    buf = back["optimizer"]["state"][0]["momentum_buffer"]
    assert buf.device == torch.device("cpu") and torch.equal(buf, torch.arange(6.0).view(2, 3))


def test_saved_weights_are_copied_to_the_cpu_first(tmp_path, monkeypatch):
    """On a GPU the snapshot written to model.safetensors must not take a second copy of the weights
    in GPU memory: every tensor is moved to the CPU before it is cloned and written."""
    moved, real_to = [], torch.Tensor.to

    def recording_to(self, *args, **kwargs):
        moved.append(args[0] if args else kwargs.get("device"))
        return real_to(self, *args, **kwargs)

    model = _linear(0)
    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    save_weights(model, tmp_path / MODEL_FILE)
    monkeypatch.undo()
    assert len(moved) == len(model.state_dict()) and all(d is not None and torch.device(d).type == "cpu" for d in moved)
    assert all(torch.equal(load_file(str(tmp_path / MODEL_FILE))[k], v) for k, v in model.state_dict().items())


def test_weights_carry_the_model_metadata_and_load_strictly(tmp_path):
    model = create_model("s_mixer", **SMALL)
    path = save_weights(model, tmp_path / "w.safetensors", metadata={"note": "x"})
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    assert meta["mlplab_model"] == "s_mixer" and meta["note"] == "x"
    assert json.loads(meta["mlplab_config"])["hidden_dim"] == 8
    other_seed = create_model("s_mixer", **SMALL, seed=3, drop_path_rate=0.1, drop_rate=0.2)  # loads across these
    load_weights(other_seed, path)
    assert all(torch.equal(a, b) for a, b in zip(other_seed.state_dict().values(), model.state_dict().values()))
    wider = create_model("s_mixer", **{**SMALL, "hidden_dim": 12})
    before = {k: v.clone() for k, v in wider.state_dict().items()}
    with pytest.raises(BadInput, match=r"holds a 's_mixer' \(.*\) model, not this 's_mixer' .*hidden_dim: "
                                       r"checkpoint 8, model 12; build the model the checkpoint was saved from$"):
        load_weights(wider, path)
    assert all(torch.equal(before[k], v) for k, v in wider.state_dict().items())  # refused: untouched


def test_plain_modules_are_checked_by_names_and_shapes(tmp_path):
    path = save_weights(nn.Linear(3, 2), tmp_path / "w.safetensors")
    with safe_open(str(path), framework="pt") as f:
        assert "mlplab_model" not in (f.metadata() or {})
    with pytest.raises(BadInput, match=r"shapes differ \(checkpoint vs model\): bias \(2,\) vs \(4,\), "
                                       r"weight \(2, 3\) vs \(4, 3\); build the model"):
        load_weights(nn.Linear(3, 4), path)
    with pytest.raises(BadInput, match=r"does not match the model: missing \['0\.bias', '0\.weight'\]; "
                                       r"unexpected \['bias', 'weight'\]; build"):
        load_weights(nn.Sequential(nn.Linear(3, 2)), path)
    no_bias = nn.Linear(3, 2, bias=False)
    with pytest.raises(BadInput, match=r"does not match the model: unexpected \['bias'\]; build"):
        load_weights(no_bias, path)
    shared = nn.Linear(2, 2)
    tied = nn.Sequential(shared, shared)  # shared storage is saved as separate tensors
    load_weights(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), save_weights(tied, tmp_path / "t.safetensors"))


def test_refusals_name_the_first_few_differences_only(tmp_path):
    path = save_weights(create_model("s_mixer", **SMALL), tmp_path / "w.safetensors")
    other = create_model("s_mixer", image_size=16, patch_size=8, hidden_dim=16, depth=2, num_classes=5)
    with pytest.raises(BadInput) as e:
        load_weights(other, path)
    detail = str(e.value).split("(mlp_mixer): ", 1)[1].split("; build", 1)[0]
    assert detail == ("depth: checkpoint 1, model 2, hidden_dim: checkpoint 8, model 16, image_size: checkpoint 8, "
                      "model 16, num_classes: checkpoint 3, model 5")  # 4 of the 5 differences, sorted
    with pytest.raises(BadInput, match=r"holds a 's_mixer' \(mlp_mixer\) model, not this 'mlp' \(mlp\)"):
        load_weights(create_model("mlp", image_size=8, num_classes=3), path)
    with pytest.raises(BadInput, match="does not match the model: missing"):  # plain weights, registry model
        load_weights(create_model("s_mixer", **SMALL), save_weights(nn.Linear(3, 2), tmp_path / "plain.safetensors"))
    many = nn.Sequential(*[nn.Linear(2, 2) for _ in range(3)])
    wide = nn.Sequential(*[nn.Linear(3, 3) for _ in range(3)])
    with pytest.raises(BadInput) as e:
        load_weights(wide, save_weights(many, tmp_path / "many.safetensors"))
    assert str(e.value).count(" vs (") == 5  # 6 tensors differ: 5 are named
    with pytest.raises(BadInput) as e:
        load_weights(nn.Linear(2, 2), save_weights(many, tmp_path / "many.safetensors"))
    assert str(e.value).split("missing ")[1].startswith("['bias', 'weight']; unexpected ['0.bias', '0.weight', "
                                                        "'1.bias', '1.weight', '2.bias']; build")


def test_the_run_folder_is_synced_after_the_swap(tmp_path, monkeypatch):
    synced, real = [], os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    save_checkpoint(tmp_path, _linear(0), _state(1))
    assert synced[-1] == str(tmp_path)  # the renames are durable once save_checkpoint returns
    assert sum(p.startswith(str(tmp_path / "checkpoint.new")) for p in synced) == 2  # model, state

    def failing(fd):
        raise OSError(22, "fsync not supported")

    open_fds = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "fsync", failing)
    ckpt._fsync_dir(tmp_path)  # a file system without directory fsync: ignored, the descriptor closed
    ckpt._fsync_dir(tmp_path / "missing")
    assert len(os.listdir("/proc/self/fd")) == open_fds


def test_the_write_error_is_the_one_reported_even_if_the_cleanup_fails(tmp_path, monkeypatch):
    def failing_save(path, writer):
        raise OSError(28, "No space left on device")

    def rmtree(path, ignore_errors=False):
        if not ignore_errors:
            raise PermissionError(13, "cannot delete", str(path))

    monkeypatch.setattr(ckpt, "atomic_save", failing_save)
    monkeypatch.setattr(ckpt.shutil, "rmtree", rmtree)
    with pytest.raises(OSError, match="No space left on device"):
        save_checkpoint(tmp_path, _linear(0), _state(1))


def _with_metadata(path, **changes):
    """The weights file at ``path`` rewritten with its metadata changed."""
    from safetensors.torch import save_file

    with safe_open(str(path), framework="pt") as f:
        meta = {**f.metadata(), **changes}
    save_file(load_file(str(path)), str(path), metadata=meta)
    return path


def test_config_fields_on_one_side_only_differ_and_another_family_is_named_alone(tmp_path):
    model = create_model("s_mixer", **SMALL)
    config = json.dumps({**dataclasses.asdict(model.config), "extra": 1})  # a field this model does not have
    path = _with_metadata(save_weights(model, tmp_path / "w.safetensors"), mlplab_config=config)
    with pytest.raises(BadInput, match=r": extra: checkpoint 1, model None; build the model"):
        load_weights(create_model("s_mixer", **SMALL), path)
    path = _with_metadata(save_weights(model, tmp_path / "m.safetensors"), mlplab_model="mlp")
    with pytest.raises(BadInput) as e:  # the same config under another family: nothing else to list
        load_weights(create_model("s_mixer", **SMALL), path)
    assert str(e.value) == (f"checkpoint {path} holds a 'mlp' (mlp) model, not this 's_mixer' (mlp_mixer); "
                            "build the model the checkpoint was saved from")


def test_missing_names_alone_and_at_most_five(tmp_path):
    path = save_weights(nn.Linear(3, 2, bias=False), tmp_path / "w.safetensors")
    with pytest.raises(BadInput) as e:
        load_weights(nn.Linear(3, 2), path)
    assert str(e.value) == (f"checkpoint {path} does not match the model: missing ['bias']; build the model with the "
                            "config the checkpoint was saved from")
    with pytest.raises(BadInput, match=r"missing \['0\.bias', '0\.weight', '1\.bias', '1\.weight', '2\.bias'\]; "
                                       r"unexpected \['weight'\]; build"):
        load_weights(nn.Sequential(*[nn.Linear(3, 2) for _ in range(3)]), path)
