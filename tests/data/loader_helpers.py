"""A tiny dataset and a pack written by hand from the format's description, shared by the loader
and packed-reader tests (a module with a unique name, so importing it cannot pick up another
folder's module)."""
from __future__ import annotations

import json

import numpy as np
import torch

from mlplab.data import AugmentConfig, build_augment, staging

N, B, K = 11, 3, 3
MEAN, STD = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
IMAGES = torch.randint(0, 256, (N, 3, 4, 4), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
LABELS = torch.arange(N) % K
AUG = build_augment(AugmentConfig(crop_padding=1, hflip=True, mixup=0.5), num_classes=K, mean=MEAN, std=STD)


class InMemory(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return IMAGES[i], int(LABELS[i])


def write_pack(root, images=IMAGES, labels=LABELS, shard=4, extra=None):
    """A pack written by hand from the format's description (not by ``mlplab.data.packing``)."""
    root.mkdir(parents=True, exist_ok=True)
    shards = []
    for k, lo in enumerate(range(0, len(images), shard)):
        names = {"images": f"train-{k:05d}.images.npy", "labels": f"train-{k:05d}.labels.npy"}
        np.save(root / names["images"], images[lo:lo + shard].numpy())
        np.save(root / names["labels"], labels[lo:lo + shard].numpy().astype(np.int64))
        shards.append({**names, "count": len(images[lo:lo + shard])})
    index = {"format": "mlplab.packed", "version": 1, "image_size": list(images.shape[-2:]),
             "in_chans": images.shape[1], "classes": [f"c{i}" for i in range(K)], "mean": list(MEAN),
             "std": list(STD), "splits": {"train": {"count": len(images), "shards": shards}}, **(extra or {})}
    (root / "index.json").write_text(json.dumps(index))
    return root


def record_pools(monkeypatch) -> list[int]:
    """The worker count of each reader thread pool ``mlplab.data.staging`` starts from now on."""
    pools = []

    class Pool(staging.ThreadPoolExecutor):
        def __init__(self, workers):
            pools.append(workers)
            super().__init__(workers)

    monkeypatch.setattr(staging, "ThreadPoolExecutor", Pool)
    return pools
