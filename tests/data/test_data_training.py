"""`mlplab train` on your own data: an image folder at any resolution (in memory and streamed), a
pack (streamed, resized, held out), each DDP rank reading its own share, and the bad inputs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_data_packed import write_folder

from mlplab import cli
from mlplab.data import pack
from mlplab.data.packed import PackedImages
from mlplab.train import make_config
from mlplab.train.data import load_run_data, train_loader
from mlplab.train.distributed import DistInfo


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("own") / "folder", per_class=(6, 6, 6), val=2, size=(20, 14))


def tiny(out: Path, name: str, **extra) -> list[str]:
    ov = {"model.name": "s_mixer", "model.kwargs.patch_size": 4, "model.kwargs.hidden_dim": 8,
          "model.kwargs.depth": 1,
          "optim.name": "adamw", "optim.lr": 3e-3, "schedule.epochs": 1, "run.batch_size": 4, "run.threads": 1,
          "run.log": "none", "run.precision": "fp32", "run.tensorboard": False, "run.out_dir": str(out),
          "run.name": name, "run.device": "cpu", **extra}
    return ["train", "synthetic_tiny", *(f"{k}={json.dumps(v)}" for k, v in ov.items())]


def head_rows(run: Path) -> int:
    w = load_file(run / "checkpoint" / "model.safetensors")
    return next(v.shape[0] for k, v in w.items() if k.startswith("head") and k.endswith("weight"))


@pytest.mark.parametrize("stream", [False, True])
def test_train_on_an_image_folder_at_a_chosen_size(folder, tmp_path, stream):
    args = tiny(tmp_path, "f", **{"data.dataset": "imagefolder", "data.root": str(folder), "data.image_size": 8,
                                  "data.stream": stream, "augment.random_resized_crop": True})
    assert cli.main(args) == 0
    res = json.loads((tmp_path / "f" / "results.json").read_text())
    assert res["train_examples"] == 18 and 0 <= res["test_acc"] <= 1
    assert head_rows(tmp_path / "f") == 3  # the preset's 10-class head became the folder's 3 classes


@pytest.mark.parametrize("stream", [True, "auto"])  # auto: a small pack is held in memory
def test_train_on_a_pack_resized_with_a_holdout(folder, tmp_path, stream):
    pack(folder, tmp_path / "pk", 16, workers=1, shard_size=5, progress="none")
    args = tiny(tmp_path / "runs", "p", **{"data.dataset": "packed", "data.root": str(tmp_path / "pk"),
                                          "data.image_size": 8, "data.stream": stream, "data.val_fraction": 0.25,
                                          "augment.hflip": True})
    assert cli.main(args) == 0
    res = json.loads((tmp_path / "runs" / "p" / "results.json").read_text())
    assert res["train_examples"] == 18 - round(18 * 0.25) and "val_acc" in res["history"][-1]
    assert head_rows(tmp_path / "runs" / "p") == 3


def test_each_rank_reads_its_own_share_of_a_pack(folder, tmp_path):
    pack(folder, tmp_path / "p", 8, workers=1, shard_size=5, progress="none")
    cfg = make_config(None, {"data.dataset": "packed", "data.root": str(tmp_path / "p"), "data.stream": True})
    data = load_run_data(cfg, torch.device("cpu"))
    assert isinstance(data.train.images, PackedImages) and data.info.num_classes == 3

    read = {0: [], 1: []}
    real = PackedImages.take_ascending
    rank = 0

    def spy(self, rows, out):
        read[rank].extend(int(r) for r in rows)
        return real(self, rows, out)

    PackedImages.take_ascending = spy
    try:
        for rank in (0, 1):
            for _ in train_loader(data, 0, 3, seed=0, dist=DistInfo(rank=rank, world_size=2)):
                pass
    finally:
        PackedImages.take_ascending = real
    assert len(read[0]) == len(read[1]) == 9 and not set(read[0]) & set(read[1])
    assert set(read[0]) | set(read[1]) == set(range(18))


def test_bad_image_folders_are_one_message_and_no_run_folder(folder, tmp_path, capsys):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    (bad / "train" / "class1" / "README.txt").write_text("not an image")  # skipped, with a note
    (bad / "train" / "empty").mkdir()
    base = {"data.dataset": "imagefolder", "data.root": str(bad), "data.image_size": 8}
    assert cli.main(tiny(tmp_path / "runs", "a", **base)) == 2
    err = capsys.readouterr().err
    assert "train/empty: class folder holds no images" in err and "Traceback" not in err
    (bad / "train" / "empty").rmdir()
    (bad / "train" / "class2" / "x.png").write_bytes(b"broken")
    assert cli.main(tiny(tmp_path / "runs", "a", **base)) == 2
    err = capsys.readouterr().err
    assert "x.png: cannot decode image" in err and "skipped 1 non-image file" in err
    assert cli.main(tiny(tmp_path / "runs", "a", **{**base, "data.root": str(tmp_path / "nowhere")})) == 2
    assert "data.root=" in capsys.readouterr().err
    assert cli.main(tiny(tmp_path / "runs", "a", **{"data.dataset": "packed"})) == 2
    assert "needs data.root" in capsys.readouterr().err
    assert cli.main(tiny(tmp_path / "runs", "a", **{"data.dataset": "packed", "data.root": str(folder)})) == 2
    assert "not a packed dataset" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "a").exists()


@pytest.mark.parametrize("stream", [False, True])
def test_data_classes_keeps_those_classes_relabelled_in_the_order_given(folder, tmp_path, stream):
    """``data.classes=[2,0]``: only classes 2 and 0, as labels 0 and 1, in every split, in memory
    and streamed from a pack; the model's head has 2 outputs."""
    pack(folder, tmp_path / "pk", 8, workers=1, shard_size=5, progress="none")
    base = {"data.dataset": "packed", "data.root": str(tmp_path / "pk"), "data.stream": stream}
    full = load_run_data(make_config(None, base), torch.device("cpu"))
    got = load_run_data(make_config(None, {**base, "data.classes": [2, 0]}), torch.device("cpu"))
    assert got.info.num_classes == 2 and got.info.classes == (full.info.classes[2], full.info.classes[0])

    def examples(split):  # (label, image bytes) of every example the split uses, via the loader's path
        rows = (split.rows if split.rows is not None else torch.arange(len(split.labels))) if split.streamed else None
        imgs = split.images.take(rows) if split.streamed else split.images
        labels = split.labels[rows] if split.streamed else split.labels
        return sorted((int(y), bytes(x.numpy().tobytes())) for x, y in zip(torch.as_tensor(imgs), labels))

    for name in ("train", "test"):
        want = [(0 if y == 2 else 1, x) for y, x in examples(getattr(full, name)) if y in (2, 0)]
        assert examples(getattr(got, name)) == sorted(want) and len(want) > 0
    assert cli.main(tiny(tmp_path / "runs", "c", **{**base, "data.classes": [2, 0]})) == 0
    assert head_rows(tmp_path / "runs" / "c") == 2
    assert json.loads((tmp_path / "runs" / "c" / "results.json").read_text())["train_examples"] == 12


@pytest.mark.parametrize("bad,says", [([], "non-empty list"), ([1, 1], "distinct"), ([-1], ">= 0"),
                                      ([0, 12], "names class 12 but synthetic has classes 0..9")])
def test_bad_data_classes_is_one_sentence(tmp_path, capsys, bad, says):
    assert cli.main(tiny(tmp_path, "b", **{"data.classes": bad, "data.dataset": "synthetic",
                                           "data.image_size": 8})) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and err.count("\n") == 0 and "Traceback" not in err, err
