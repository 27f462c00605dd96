"""The Hugging Face Hub path, offline: a cache the test writes in the Hub's own layout
(``models--ORG--NAME/snapshots/<rev>/``, ``refs/main``) holding timm's reference Mixer
(tests/fixtures/interop, made by timm's code), read with ``HF_HUB_OFFLINE=1``; the Hub layout
written by ``save_pretrained(hub_layout=True)`` reads back; ``push_to_hub`` against a mocked
``HfApi``."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import mlplab
from mlplab import cli
from mlplab.errors import RunFailure

huggingface_hub = pytest.importorskip("huggingface_hub")
hub_constants = pytest.importorskip("huggingface_hub.constants")
errors = pytest.importorskip("huggingface_hub.errors")

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "interop"
REPO = "timm/mixer_b16_224.goog_in21k_ft_in1k"
# timm_mixer.safetensors: image 32, patch 8, C 16, D_S 8, D_C 32, 2 blocks, 5 classes
TINY = dict(image_size=32, patch_size=8, hidden_dim=16, token_hidden=8, channel_hidden=32, depth=2)


def _logits(model):
    r = np.load(FIX / "timm_mixer_ref.npz")
    with torch.no_grad():
        return model.eval()(torch.from_numpy(r["x"])), torch.from_numpy(r["logits"])


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline Hub cache holding REPO with timm's tiny reference Mixer and a timm config.json."""
    cache = tmp_path / "hub"
    rev = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = cache / ("models--" + REPO.replace("/", "--"))
    snap = repo_dir / "snapshots" / rev
    snap.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(rev)
    shutil.copy(FIX / "timm_mixer.safetensors", snap / "model.safetensors")
    (snap / "config.json").write_text(json.dumps({
        "architecture": "mixer_b16_224", "num_classes": 5,
        "pretrained_cfg": {"tag": "goog_in21k_ft_in1k", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
                           "crop_pct": 0.875, "interpolation": "bicubic", "num_classes": 5}}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    # huggingface_hub reads both when it is imported: set what it already read, too
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_load_pretrained_from_the_hub_cache_offline(hub_cache):
    model = mlplab.load_pretrained("hf-hub:" + REPO)
    out, ref = _logits(model)
    assert (out - ref).abs().max().item() <= 1e-5
    assert model.model_name == "mixer_b16_224"  # timm's name from config.json, at the file's sizes
    cfg = model.pretrained_cfg
    assert cfg["source"] == "hf-hub:" + REPO and cfg["mean"] == (0.5, 0.5, 0.5) and cfg["crop_pct"] == 0.875
    assert cfg["input_size"] == (3, 32, 32) and cfg["num_classes"] == 5


def test_create_model_pretrained_true_resolves_the_tag_to_timms_repo(hub_cache):
    model = mlplab.create_model("mixer_b16_224.goog_in21k_ft_in1k", pretrained=True, num_classes=5, **TINY)
    out, ref = _logits(model)
    assert (out - ref).abs().max().item() <= 1e-5
    assert model.pretrained_cfg["source"] == "hf-hub:" + REPO and model.pretrained_cfg["tag"] == "goog_in21k_ft_in1k"
    # the architecture's default tag is the same weights; a new class count gives a new (zero) head
    fresh = mlplab.create_model("mixer_b16_224", pretrained=True, num_classes=3, **TINY)
    assert fresh.head.weight.shape == (3, 16) and not fresh.head.weight.any()
    assert torch.equal(fresh.blocks[1].norm2.weight, model.blocks[1].norm2.weight)
    # pretrained="hf-hub:..." and a local file are the same weights
    a = mlplab.create_model("mixer_b16_224", pretrained="hf-hub:" + REPO, **TINY)
    b = mlplab.create_model("mixer_b16_224", pretrained=FIX / "timm_mixer.safetensors", **TINY)
    assert torch.equal(_logits(a)[0], _logits(b)[0]) and a.config.num_classes == 5


def test_hub_errors_are_one_sentence(hub_cache, capsys):
    with pytest.raises(RunFailure, match="HF_HUB_OFFLINE is set.*hf download timm/mixer_l16_224"):
        mlplab.load_pretrained("hf-hub:timm/mixer_l16_224.goog_in21k")
    with pytest.raises(ValueError, match="hf-hub:ORG/NAME"):
        mlplab.load_pretrained("hf-hub:mixer_b16_224")
    with pytest.raises(ValueError, match="mixer_s32_224 has no published weights"):
        mlplab.create_model("mixer_s32_224", pretrained=True)
    with pytest.raises(ValueError, match="mixer_b16_224 has: mixer_b16_224.goog_in21k_ft_in1k"):
        mlplab.create_model("mixer_b16_224.goog_in1k", pretrained=True)
    with pytest.raises(ValueError, match="tensor 'stem.proj.weight'"):  # B/16 sizes do not fit the tiny file
        mlplab.create_model("mixer_b16_224", pretrained="hf-hub:" + REPO)
    assert cli.main(["convert", "hf-hub:timm/mixer_l16_224.goog_in21k", "x.safetensors"]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_hub_layout_round_trips_and_push_to_hub_uploads_it(tmp_path, monkeypatch):
    model = mlplab.create_model("rp_mlp_mixer", image_size=16, hidden_dim=8, depth=2, num_classes=4, zero_head=False)
    model.pretrained_cfg.update(mean=(0.1, 0.2, 0.3), std=(0.4, 0.5, 0.6))
    folder = mlplab.save_pretrained(model, tmp_path / "repo", hub_layout=True)
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    config = json.loads((folder / "config.json").read_text())
    assert config["architecture"] == "rp_mlp_mixer" and config["num_classes"] == 4
    assert config["pretrained_cfg"]["mean"] == [0.1, 0.2, 0.3]
    back = mlplab.load_pretrained(folder)
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(back(x), model(x)) and back.pretrained_cfg["std"] == (0.4, 0.5, 0.6)

    calls = {}

    class FakeApi:
        def __init__(self, token=None):
            calls["token"] = token

        def create_repo(self, repo_id, private=False, exist_ok=False, repo_type=None):
            calls["create"] = (repo_id, private, exist_ok)

        def upload_folder(self, repo_id, folder_path, commit_message, revision=None, repo_type=None):
            shutil.copytree(folder_path, tmp_path / "uploaded")
            calls["upload"] = (repo_id, commit_message)
            return "https://huggingface.co/me/tiny/commit/abc"

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    url = mlplab.push_to_hub(model, "me/tiny", private=True, token="t0k")
    assert url.endswith("/commit/abc")
    assert calls == {"token": "t0k", "create": ("me/tiny", True, True), "upload": ("me/tiny", "Upload mlplab model")}
    assert torch.equal(mlplab.load_pretrained(tmp_path / "uploaded")(x), model(x))
    with pytest.raises(ValueError, match="hf-hub:ORG/NAME"):
        mlplab.push_to_hub(model, "no-org")


def test_a_run_folder_loads_with_its_datasets_normalisation(tmp_path):
    from mlplab.interop.api import _dataset_inputs
    from mlplab.train import make_config, train

    cfg = make_config("synthetic_tiny", {"run.out_dir": str(tmp_path), "run.name": "r", "run.log": "none",
                                         "schedule.epochs": None, "schedule.steps": 1})
    res = train(cfg)
    model = mlplab.load_pretrained(res["run_dir"])
    assert model.pretrained_cfg["source"] == res["run_dir"]
    assert model.pretrained_cfg["mean"] is None  # synthetic data: no table statistics to claim
    fmnist = _dataset_inputs({"data": {"dataset": "fashion_mnist"}})
    assert fmnist == {"mean": (0.2860,), "std": (0.3530,)}  # the dataset table's, which the loader uses
    (tmp_path / "r" / "config.json").write_text(json.dumps({**json.loads((tmp_path / "r" / "config.json").read_text()),
                                                           "data": {"dataset": "fashion_mnist"}}))
    assert mlplab.load_pretrained(res["run_dir"]).pretrained_cfg["mean"] == (0.2860,)


def test_a_mixer_timm_builds_is_written_in_timms_layout(tmp_path):
    from mlplab.interop import read_tensors

    model = mlplab.create_model("mixer_s32_224", image_size=64, token_hidden=2, channel_hidden=64, num_classes=5,
                                zero_head=False)
    folder = mlplab.save_pretrained(model, tmp_path / "repo", hub_layout=True)
    config = json.loads((folder / "config.json").read_text())
    # timm.create_model("hf-hub:...") builds architecture(**model_args) and loads the file strictly
    assert config["architecture"] == "mixer_s32_224"
    assert config["model_args"] == {"img_size": 64, "in_chans": 3, "mlp_ratio": [2 / 512, 64 / 512], "num_classes": 5}
    tensors, _ = read_tensors(folder / "model.safetensors")
    # the tensors timm's MlpMixer(img_size=64, mlp_ratio=(2/512, 64/512), num_classes=5) holds: timm's own
    # mixer_s32_224 (its names and shapes, written by timm's code) with S = (64/32)² = 4 tokens, D_S = 2, D_C = 64
    timm_s32 = json.loads((FIX / "timm_mixer_names.json").read_text())["architectures"]["mixer_s32_224"]["shapes"]
    expected = dict(timm_s32, **{"head.weight": [5, 512], "head.bias": [5]})
    for i in range(8):
        expected.update({f"blocks.{i}.mlp_tokens.fc1.weight": [2, 4], f"blocks.{i}.mlp_tokens.fc1.bias": [2],
                         f"blocks.{i}.mlp_tokens.fc2.weight": [4, 2], f"blocks.{i}.mlp_tokens.fc2.bias": [4],
                         f"blocks.{i}.mlp_channels.fc1.weight": [64, 512], f"blocks.{i}.mlp_channels.fc1.bias": [64],
                         f"blocks.{i}.mlp_channels.fc2.weight": [512, 64]})
    assert {k: list(v.shape) for k, v in tensors.items()} == expected
    assert torch.equal(tensors["stem.proj.weight"].reshape(512, -1), model.stem.proj.weight)  # (C, ch, P, P)
    back = mlplab.load_pretrained(folder)
    x = torch.randn(2, 3, 64, 64)
    assert back.model_name == "mixer_s32_224" and torch.equal(back(x), model(x))
    # mlplab's own LayerNorm eps (1e-5) is not timm's: that Mixer stays in mlplab's layout
    own = mlplab.create_model("mixer_s32", image_size=64, token_hidden=2, channel_hidden=64)
    config = json.loads((mlplab.save_pretrained(own, tmp_path / "own", hub_layout=True) / "config.json").read_text())
    assert config["architecture"] == "mixer_s32" and "model_args" not in config


def test_a_repository_without_weight_files_is_bad_input(monkeypatch):
    from huggingface_hub import errors

    def no_such_file(repo, name, revision=None, local_files_only=False):
        raise errors.RemoteEntryNotFoundError(f"{name} not in {repo}", response=_Response())

    class _Response:
        status_code, headers, url, request = 404, {}, "https://huggingface.co", None

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_such_file)
    monkeypatch.setattr(mlplab.interop.hub, "hub_reachable", lambda endpoint: True)  # online, in this test
    with pytest.raises(ValueError, match="has neither model.safetensors nor pytorch_model.bin"):
        mlplab.load_pretrained("hf-hub:me/empty")


def test_info_lists_the_published_weights_in_the_hub_cache(hub_cache):
    from mlplab.train.machine import _cached_weights

    assert _cached_weights() == [REPO.partition("/")[2]]


class _Response:  # what huggingface_hub's HTTP errors carry
    status_code, headers, url, request = 404, {}, "https://huggingface.co", None


def _fake_hub(monkeypatch, tmp_path, outcome, reachable=True):
    """``hf_hub_download`` answering ``outcome[name]``: an exception to raise, else the text of the file,
    and a Hub host that accepts connections (``reachable``); returns the calls
    ``(repo, name, revision, local_files_only)``."""
    from mlplab.interop import hub

    calls = []
    monkeypatch.setattr(hub, "hub_reachable", lambda endpoint: reachable)

    def fake_download(repo, name, revision=None, local_files_only=False):
        calls.append((repo, name, revision, local_files_only))
        got = outcome.get(name, errors.LocalEntryNotFoundError(f"{name} not cached"))
        if isinstance(got, Exception):
            raise got
        (tmp_path / name).write_text(got)
        return str(tmp_path / name)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    return calls


def test_hub_download_names_a_missing_repository_or_revision(monkeypatch, tmp_path):
    from mlplab.interop import hub

    _fake_hub(monkeypatch, tmp_path, {"model.safetensors": errors.RepositoryNotFoundError("no", response=_Response())})
    with pytest.raises(ValueError) as e:
        hub.download("hf-hub:me/tiny")
    assert str(e.value) == ("there is no Hub repository 'me/tiny' (or it is private or gated: log in with "
                            "`hf auth login` or set HF_TOKEN)")
    _fake_hub(monkeypatch, tmp_path, {"model.safetensors": errors.RevisionNotFoundError("no", response=_Response())})
    with pytest.raises(ValueError) as e:
        hub.download("hf-hub:me/tiny@v9")
    assert str(e.value) == "the Hub repository 'me/tiny' has no revision 'v9'"
    missing = errors.RemoteEntryNotFoundError("no", response=_Response())
    _fake_hub(monkeypatch, tmp_path, {"model.safetensors": missing, "pytorch_model.bin": missing})
    with pytest.raises(ValueError) as e:
        hub.download("hf-hub:me/tiny")
    assert str(e.value) == ("the Hub repository 'me/tiny' has neither model.safetensors nor pytorch_model.bin; "
                            "it holds no weights mlplab reads")


@pytest.mark.parametrize("offline", [False, True])
def test_hub_download_says_why_the_weights_are_not_there(monkeypatch, tmp_path, offline):
    from mlplab.interop import hub

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", offline)
    _fake_hub(monkeypatch, tmp_path, {"model.safetensors": ConnectionError("unreachable")})
    with pytest.raises(RunFailure) as e:
        hub.download("hf-hub:me/tiny@v1")
    assert str(e.value) == (
        f"cannot get the weights of hf-hub:me/tiny@v1: neither model.safetensors nor pytorch_model.bin is in the cache "
        f"({tmp_path / 'cache'}) and {'HF_HUB_OFFLINE is set' if offline else 'the Hub could not be reached'} "
        "(model.safetensors: ConnectionError; pytorch_model.bin: LocalEntryNotFoundError); download them where there "
        "is internet (`hf download me/tiny`) and copy the cache, or give a local file")


def test_hub_download_takes_the_pickle_and_the_config_of_the_same_revision(monkeypatch, tmp_path):
    from mlplab.interop import hub

    missing = errors.RemoteEntryNotFoundError("no", response=_Response())
    calls = _fake_hub(monkeypatch, tmp_path, {"model.safetensors": missing, "pytorch_model.bin": "w",
                                              "config.json": '{"architecture": "mlp"}'})
    assert hub.download("hf-hub:me/tiny@v1") == (tmp_path / "pytorch_model.bin", {"architecture": "mlp"})
    assert calls == [("me/tiny", "model.safetensors", "v1", False), ("me/tiny", "pytorch_model.bin", "v1", False),
                     ("me/tiny", "config.json", "v1", False)]
    # the Hub unreachable: the cached pickle, and the config from the cache only
    calls = _fake_hub(monkeypatch, tmp_path, {"pytorch_model.bin": "w", "config.json": "[1, 2]"})
    assert hub.download("hf-hub:me/tiny") == (tmp_path / "pytorch_model.bin", {})  # a config that is not a dict
    assert calls == [("me/tiny", "model.safetensors", None, False), ("me/tiny", "pytorch_model.bin", None, True),
                     ("me/tiny", "config.json", None, True)]
    _fake_hub(monkeypatch, tmp_path, {"model.safetensors": "w"})  # no config.json
    assert hub.download("hf-hub:me/tiny") == (tmp_path / "model.safetensors", {})


def test_push_to_hub_creates_and_uploads_a_model_repository(monkeypatch):
    calls = {}

    class CommitInfo:
        commit_url = "https://huggingface.co/me/tiny/commit/abc"

    class FakeApi:
        def __init__(self, **kw):
            calls["api"] = kw

        def create_repo(self, *args, **kw):
            calls["create"] = (args, kw)

        def upload_folder(self, **kw):
            folder = Path(kw["folder_path"])
            calls["upload"] = {**kw, "files": sorted(p.name for p in folder.iterdir())}
            calls["folder"] = folder
            return CommitInfo()

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    model = mlplab.create_model("mlp", image_size=4, width=8, depth=1)
    assert mlplab.push_to_hub(model, "me/tiny", token="t0k", revision="v2") == CommitInfo.commit_url
    folder = calls.pop("folder")
    assert calls == {"api": {"token": "t0k"},
                     "create": (("me/tiny",), {"private": False, "exist_ok": True, "repo_type": "model"}),
                     "upload": {"repo_id": "me/tiny", "folder_path": str(folder),
                                "commit_message": "Upload mlplab model", "revision": "v2", "repo_type": "model",
                                "files": ["README.md", "config.json", "model.safetensors"]}}
    # written under a temporary folder named for mlplab, removed after the upload
    assert folder.name == "repo" and folder.parent.name.startswith("mlplab-hub-") and not folder.parent.exists()


def test_an_unreachable_hub_goes_to_the_cache_at_once(monkeypatch, tmp_path, capsys):
    """Offline without HF_HUB_OFFLINE: no request is made (huggingface_hub would retry five times,
    printing each), the cache is asked, and the error says the Hub did not answer."""
    import socket

    from mlplab.interop import hub

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)

    def refused(address, timeout):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refused)
    reachable = hub.hub_reachable
    assert not reachable("https://huggingface.co")
    calls = _fake_hub(monkeypatch, tmp_path, {}, reachable=False)
    with pytest.raises(RunFailure, match=r"the Hub could not be reached \(https://huggingface\.co did not answer; "
                                         r"model\.safetensors: LocalEntryNotFoundError"):
        hub.download("hf-hub:me/tiny")
    assert calls == [("me/tiny", "model.safetensors", None, True), ("me/tiny", "pytorch_model.bin", None, True)]
    rc = cli.main(["convert", "hf-hub:me/tiny", str(tmp_path / "out.safetensors")])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "Retrying" not in err, err
    assert not (tmp_path / "out.safetensors").exists()
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")  # behind a proxy huggingface_hub asks it itself
    assert reachable("https://huggingface.co")


_PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def test_hub_reachable_asks_the_endpoints_host_and_port_within_the_timeout(monkeypatch):
    """The connection hub_reachable opens, recorded: the endpoint's host, its port (the URL's, else 80
    for http and 443 for https), the timeout (3 s unless given); the socket is closed. Any proxy
    variable, each on its own, answers True without a connection; a refused connection or a URL
    whose port is not a number answers False."""
    import socket

    from mlplab.interop import hub

    for k in _PROXIES:
        monkeypatch.delenv(k, raising=False)
    opened = []

    class Conn:
        def close(self):
            opened[-1]["closed"] = True

    def connect(address, timeout):
        opened.append({"address": address, "timeout": timeout, "closed": False})
        return Conn()

    monkeypatch.setattr(socket, "create_connection", connect)
    assert hub.hub_reachable("https://huggingface.co") is True
    assert hub.hub_reachable("http://mirror.example", timeout=0.5) is True
    assert hub.hub_reachable("https://hub.example:8443/api") is True
    assert hub.hub_reachable("http://hub.example:8080") is True
    assert opened == [{"address": ("huggingface.co", 443), "timeout": 3.0, "closed": True},
                      {"address": ("mirror.example", 80), "timeout": 0.5, "closed": True},
                      {"address": ("hub.example", 8443), "timeout": 3.0, "closed": True},
                      {"address": ("hub.example", 8080), "timeout": 3.0, "closed": True}]
    assert hub.hub_reachable("https://hub.example:port") is False and len(opened) == 4  # urlsplit's ValueError
    for k in _PROXIES:  # each proxy variable alone: huggingface_hub asks the proxy itself
        monkeypatch.setenv(k, "http://proxy:3128")
        n = len(opened)
        assert hub.hub_reachable("https://huggingface.co") is True and len(opened) == n, k
        monkeypatch.setenv(k, "")  # set but empty: no proxy
        assert hub.hub_reachable("https://huggingface.co") is True and len(opened) == n + 1, k
        monkeypatch.delenv(k)

    def refused(address, timeout):
        raise OSError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refused)
    assert hub.hub_reachable("https://huggingface.co") is False


def test_hub_download_asks_whether_the_configured_endpoint_answers(monkeypatch, tmp_path):
    """The host download checks is huggingface_hub's ENDPOINT (a mirror's, when HF_ENDPOINT names one)."""
    from mlplab.interop import hub

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "ENDPOINT", "https://mirror.example")
    _fake_hub(monkeypatch, tmp_path, {"model.safetensors": "w"})
    asked = []
    monkeypatch.setattr(hub, "hub_reachable", lambda endpoint: asked.append(endpoint) or True)
    assert hub.download("hf-hub:me/tiny") == (tmp_path / "model.safetensors", {})
    assert asked == ["https://mirror.example"]
