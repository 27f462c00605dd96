"""The Hugging Face Hub: ``hf-hub:ORG/NAME`` sources, the Hub's folder layout, and uploads.

Downloads go through ``huggingface_hub.hf_hub_download``, so its cache (``$HF_HUB_CACHE``,
default ``~/.cache/huggingface/hub``), its offline mode (``HF_HUB_OFFLINE=1``) and its token
(``HF_TOKEN``) apply. A repository holds ``model.safetensors`` (else ``pytorch_model.bin``) and
usually a ``config.json``; timm's carry timm's ``MlpMixer`` state dict, mlplab's the
self-describing file of :func:`~mlplab.interop.save_pretrained`. Either loads through the one
weight loader, :func:`~mlplab.interop.read_checkpoint`.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

from ..errors import RunFailure

__all__ = ["HUB_PREFIX", "is_hub_source", "hub_repo", "download", "hub_cache_dir", "hub_reachable"]

HUB_PREFIX = "hf-hub:"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def is_hub_source(source: Any) -> bool:
    return isinstance(source, str) and source.startswith(HUB_PREFIX)


def hub_repo(source: str) -> tuple[str, str | None]:
    """``"hf-hub:ORG/NAME[@REVISION]"`` -> ``("ORG/NAME", REVISION or None)``."""
    repo, _, revision = source[len(HUB_PREFIX):].partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise ValueError(f"{source!r} is not a Hub repository; write hf-hub:ORG/NAME, e.g. "
                         "hf-hub:timm/mixer_b16_224.goog_in21k_ft_in1k")
    return repo, revision or None


def hub_cache_dir() -> str:
    """Where ``huggingface_hub`` keeps downloads (for messages and ``mlplab info``)."""
    env = os.environ
    return env.get("HF_HUB_CACHE") or str(Path(env.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub")


def hub_reachable(endpoint: str, timeout: float = 3.0) -> bool:
    """Whether the Hub's host accepts a connection within ``timeout`` seconds (True behind a
    proxy, which ``huggingface_hub`` asks itself). Offline, ``huggingface_hub`` would retry five
    times over ~25 s, printing each retry; asked first, mlplab goes to the cache at once."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urllib.parse.urlsplit(endpoint)
    try:
        socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)), timeout).close()
        return True
    except (OSError, ValueError):
        return False


def download(source: str) -> tuple[Path, dict[str, Any]]:
    """The weights file of ``hf-hub:ORG/NAME`` in the local cache (downloading it unless offline)
    and the repository's ``config.json`` ({} when it has none)."""
    try:
        import huggingface_hub as hub
        from huggingface_hub import constants, errors
    except ImportError as e:
        raise RunFailure("loading from the Hugging Face Hub needs huggingface_hub: pip install huggingface_hub") from e
    repo, revision = hub_repo(source)
    weights, why = None, []
    if not constants.HF_HUB_OFFLINE and not hub_reachable(constants.ENDPOINT):
        why.append(f"{constants.ENDPOINT} did not answer")
    for name in WEIGHT_FILES:
        try:  # once the Hub proved unreachable, only the cache is asked (no second round of retries)
            weights = Path(hub.hf_hub_download(repo, name, revision=revision, local_files_only=bool(why)))
            break
        except errors.RepositoryNotFoundError:
            raise ValueError(f"there is no Hub repository {repo!r} (or it is private or gated: log in with "
                             "`hf auth login` or set HF_TOKEN)") from None
        except errors.RevisionNotFoundError:
            raise ValueError(f"the Hub repository {repo!r} has no revision {revision!r}") from None
        except (errors.LocalEntryNotFoundError, OSError) as e:  # not cached, and offline or not reachable ...
            if isinstance(e, errors.EntryNotFoundError) and not isinstance(e, errors.LocalEntryNotFoundError):
                continue  # ... or the Hub says the repository has no such file: try the other
            why.append(f"{name}: {type(e).__name__}")
    if weights is None and not why:
        raise ValueError(f"the Hub repository {repo!r} has neither {' nor '.join(WEIGHT_FILES)}; it holds no "
                         "weights mlplab reads")
    if weights is None:
        offline = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the Hub could not be reached"
        raise RunFailure(f"cannot get the weights of {source}: neither {' nor '.join(WEIGHT_FILES)} is in the cache "
                         f"({hub_cache_dir()}) and {offline} ({'; '.join(why)}); download them where there is "
                         f"internet (`hf download {repo}`) and copy the cache, or give a local file")
    try:
        config = json.loads(Path(hub.hf_hub_download(repo, "config.json", revision=revision,
                                                     local_files_only=bool(why))).read_text())
    except (errors.EntryNotFoundError, errors.LocalEntryNotFoundError, OSError, ValueError):
        config = {}
    return weights, config if isinstance(config, dict) else {}


def write_hub_folder(folder: str | os.PathLike, tensors_writer, config: dict[str, Any], readme: str) -> Path:
    """The Hub layout: ``model.safetensors`` (written by ``tensors_writer(path)``), ``config.json``
    and a model card ``README.md``, each written atomically into ``folder``."""
    from ..utils.io import atomic_write_text

    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file; hub_layout=True writes a folder "
                         "(model.safetensors, config.json, README.md)")
    out.mkdir(parents=True, exist_ok=True)
    tensors_writer(out / "model.safetensors")
    atomic_write_text(out / "config.json", json.dumps(config, indent=2) + "\n")
    atomic_write_text(out / "README.md", readme)
    return out


def upload_folder(folder: Path, repo_id: str, *, private: bool, token: str | None, commit_message: str,
                  revision: str | None) -> str:
    """Create ``repo_id`` if needed and upload ``folder`` (``huggingface_hub.HfApi``); the commit's URL."""
    try:
        import huggingface_hub as hub
    except ImportError as e:
        raise RunFailure("pushing to the Hugging Face Hub needs huggingface_hub: pip install huggingface_hub") from e
    api = hub.HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message=commit_message,
                             revision=revision, repo_type="model")
    return str(getattr(info, "commit_url", info))


def temporary_folder():
    return tempfile.TemporaryDirectory(prefix="mlplab-hub-")
