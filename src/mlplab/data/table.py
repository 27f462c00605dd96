"""The one dataset table: one frozen record per dataset.

Every fact about a dataset (classes, sizes, files, where they come from, their checksums, the
normalisation statistics) lives in its ``DatasetInfo`` record, never in parallel dicts.

Checksums are the ones published by the dataset authors (or, where the authors publish none,
the md5s that torchvision has verified against the authors' archives for years):

* MNIST / Fashion-MNIST: md5 of each ``.gz`` file, plus the md5 of its *decompressed* content.
  The content checksum is what makes a re-packed copy acceptable: Debian's
  ``dataset-fashion-mnist`` re-gzips the files without the file name in the gzip header, so the
  ``.gz`` bytes differ while the IDX bytes inside are identical to the authors' release.
* CIFAR-10/100, STL-10, Tiny ImageNet: md5 of the archive, and (CIFAR, STL-10) of each member
  that the loader reads, so an already extracted folder can be verified too.

Mean/std are per-channel statistics of the training split in [0, 1] units
(``x_norm = (x / 255 - mean) / std``).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace

from ..errors import BadInput

__all__ = ["DataFile", "DatasetInfo", "DATASETS", "get_info", "restrict_classes", "FASHION_MNIST_DEBIAN_DIR"]

#: Where Debian's ``dataset-fashion-mnist`` package installs its IDX files (``dpkg -L``).
FASHION_MNIST_DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset.

    ``name`` is relative to the dataset's folder (``cifar-10-batches-py/data_batch_1``).
    ``urls`` is empty for files that come out of an archive (``archive`` names it).
    ``checksum`` is ``"md5:<hex>"`` or ``"sha256:<hex>"``; ``content_checksum`` (gz files only)
    is the checksum of the decompressed bytes.
    """

    name: str
    checksum: str = ""
    urls: tuple[str, ...] = ()
    content_checksum: str = ""
    archive: str = ""
    splits: tuple[str, ...] = ()


@dataclass(frozen=True)
class DatasetInfo:
    """Everything the toolkit knows about one dataset (see module docstring)."""

    name: str
    num_classes: int
    image_size: tuple[int, int]  # (H, W) as stored; (0, 0) = variable (image folders)
    in_chans: int
    splits: tuple[str, ...]
    files: tuple[DataFile, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    description: str
    format: str  # "idx" | "cifar10" | "cifar100" | "stl10" | "tiny_imagenet" | "imagefolder" | "packed" | "synthetic"
    folder: str = ""  # name of the dataset's folder under a data root / the cache
    homepage: str = ""
    classes: tuple[str, ...] = ()
    extra_dirs: tuple[str, ...] = field(default=())  # searched after root and cache

    def archives(self) -> tuple[DataFile, ...]:
        """The files that are downloaded (have URLs)."""
        return tuple(f for f in self.files if f.urls)

    def file(self, name: str) -> DataFile:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no file {name!r}; files: {[f.name for f in self.files]}")


def _idx_files(base_urls: tuple[str, ...], md5s: dict[str, tuple[str, str]]) -> tuple[DataFile, ...]:
    out = []
    for stem, (gz_md5, raw_md5) in md5s.items():
        split = "train" if stem.startswith("train") else "test"
        out.append(DataFile(name=f"{stem}.gz", checksum=f"md5:{gz_md5}",
                            urls=tuple(u + f"{stem}.gz" for u in base_urls),
                            content_checksum=f"md5:{raw_md5}", splits=(split,)))
    return tuple(out)


_MNIST = DatasetInfo(
    name="mnist", num_classes=10, image_size=(28, 28), in_chans=1, splits=("train", "test"),
    files=_idx_files(
        # yann.lecun.com serves plain http only (and often refuses); torchvision's https mirror
        # holds byte-identical files (same md5s).
        ("https://ossci-datasets.s3.amazonaws.com/mnist/",
         "https://storage.googleapis.com/cvdf-datasets/mnist/"),
        {
            "train-images-idx3-ubyte": ("f68b3c2dcbeaaa9fbdd348bbdeb94873", "6bbc9ace898e44ae57da46a324031adb"),
            "train-labels-idx1-ubyte": ("d53e105ee54ea40749a09fcbcd1e9432", "a25bea736e30d166cdddb491f175f624"),
            "t10k-images-idx3-ubyte": ("9fb629c4189551a2d022fa330f9573f3", "2646ac647ad5339dbf082846283269ea"),
            "t10k-labels-idx1-ubyte": ("ec29112dd5afa0611ce80d1b7f02629c", "27ae3e4e09519cfbb04c329615203637"),
        }),
    mean=(0.1307,), std=(0.3081,),
    description="MNIST handwritten digits, 60k train / 10k test, 28x28 grey (LeCun et al. 1998).",
    format="idx", folder="mnist", homepage="http://yann.lecun.com/exdb/mnist/",
    classes=tuple(str(i) for i in range(10)),
)

_FASHION = DatasetInfo(
    name="fashion_mnist", num_classes=10, image_size=(28, 28), in_chans=1, splits=("train", "test"),
    files=_idx_files(
        # The authors' repository serves the release files over https; their S3 website
        # endpoint (fashion-mnist.s3-website.eu-central-1.amazonaws.com) is http only.
        ("https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion/",
         "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"),
        {
            "train-images-idx3-ubyte": ("8d4fb7e6c68d591d4c3dfef9ec88bf0d", "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
            "train-labels-idx1-ubyte": ("25c81989df183df01b3e8a0aad5dffbe", "9018921c3c673c538a1fc5bad174d6f9"),
            "t10k-images-idx3-ubyte": ("bef4ecab320f06d8554ea6380940ec79", "8181f5470baa50b63fa0f6fddb340f0a"),
            "t10k-labels-idx1-ubyte": ("bb300cfdad3c16e7a12a480ee83cd310", "15d484375f8d13e6eb1aabb0c3f46965"),
        }),
    mean=(0.2860,), std=(0.3530,),
    description="Fashion-MNIST (Xiao et al. 2017), 60k/10k 28x28 grey, 10 clothing classes. "
                "On project machines it comes from Debian's dataset-fashion-mnist package.",
    format="idx", folder="fashion_mnist", homepage="https://github.com/zalandoresearch/fashion-mnist",
    classes=("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
             "Bag", "Ankle boot"),
    extra_dirs=(FASHION_MNIST_DEBIAN_DIR,),
)

_C10 = "cifar-10-python.tar.gz"
_CIFAR10 = DatasetInfo(
    name="cifar10", num_classes=10, image_size=(32, 32), in_chans=3, splits=("train", "test"),
    files=(
        DataFile(_C10, "md5:c58f30108f718f92721af3b95e74349a",
                 urls=("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",)),
        DataFile("cifar-10-batches-py/data_batch_1", "md5:c99cafc152244af753f735de768cd75f", archive=_C10,
                 splits=("train",)),
        DataFile("cifar-10-batches-py/data_batch_2", "md5:d4bba439e000b95fd0a9bffe97cbabec", archive=_C10,
                 splits=("train",)),
        DataFile("cifar-10-batches-py/data_batch_3", "md5:54ebc095f3ab1f0389bbae665268c751", archive=_C10,
                 splits=("train",)),
        DataFile("cifar-10-batches-py/data_batch_4", "md5:634d18415352ddfa80567beed471001a", archive=_C10,
                 splits=("train",)),
        DataFile("cifar-10-batches-py/data_batch_5", "md5:482c414d41f54cd18b22e5b47cb7c3cb", archive=_C10,
                 splits=("train",)),
        DataFile("cifar-10-batches-py/test_batch", "md5:40351d587109b95175f43aff81a1287e", archive=_C10,
                 splits=("test",)),
    ),
    mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616),
    description="CIFAR-10 (Krizhevsky 2009), 50k/10k 32x32 RGB, 10 classes; python pickle release.",
    format="cifar10", folder="cifar10", homepage="https://www.cs.toronto.edu/~kriz/cifar.html",
    classes=("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
)

_C100 = "cifar-100-python.tar.gz"
_CIFAR100 = DatasetInfo(
    name="cifar100", num_classes=100, image_size=(32, 32), in_chans=3, splits=("train", "test"),
    files=(
        DataFile(_C100, "md5:eb9058c3a382ffc7106e4002c42a8d85",
                 urls=("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",)),
        DataFile("cifar-100-python/train", "md5:16019d7e3df5f24257cddd939b257f8d", archive=_C100, splits=("train",)),
        DataFile("cifar-100-python/test", "md5:f0ef6b0ae62326f3e7ffdfab6717acfc", archive=_C100, splits=("test",)),
        DataFile("cifar-100-python/meta", "md5:7973b15100ade9c7d40fb424638fde48", archive=_C100),
    ),
    mean=(0.5071, 0.4865, 0.4409), std=(0.2673, 0.2564, 0.2762),
    description="CIFAR-100 (Krizhevsky 2009), 50k/10k 32x32 RGB, 100 fine classes (fine_labels).",
    format="cifar100", folder="cifar100", homepage="https://www.cs.toronto.edu/~kriz/cifar.html",
)

_STL = "stl10_binary.tar.gz"
_STL10 = DatasetInfo(
    name="stl10", num_classes=10, image_size=(96, 96), in_chans=3, splits=("train", "test"),
    files=(
        DataFile(_STL, "md5:91f7769df0f17e558f3565bffb0c7dfb",
                 urls=("https://ai.stanford.edu/~acoates/stl10/stl10_binary.tar.gz",)),
        DataFile("stl10_binary/train_X.bin", "md5:918c2871b30a85fa023e0c44e0bee87f", archive=_STL, splits=("train",)),
        DataFile("stl10_binary/train_y.bin", "md5:5a34089d4802c674881badbb80307741", archive=_STL, splits=("train",)),
        DataFile("stl10_binary/test_X.bin", "md5:7f263ba9f9e0b06b93213547f721ac82", archive=_STL, splits=("test",)),
        DataFile("stl10_binary/test_y.bin", "md5:36f9794fa4beb8a2c72628de14fa638e", archive=_STL, splits=("test",)),
    ),
    mean=(0.4467, 0.4398, 0.4066), std=(0.2603, 0.2566, 0.2713),
    description="STL-10 (Coates et al. 2011), labelled 5k/8k 96x96 RGB, 10 classes; binary release "
                "(column-major images, 1-based labels). Resize with image_size=32 for the paper's runs.",
    format="stl10", folder="stl10", homepage="https://cs.stanford.edu/~acoates/stl10/",
    classes=("airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck"),
)

_TINY = DatasetInfo(
    name="tiny_imagenet", num_classes=200, image_size=(64, 64), in_chans=3, splits=("train", "val"),
    files=(
        DataFile("tiny-imagenet-200.zip", "md5:90528d7ca1a48142e341f4ef8d21d0de",
                 urls=("https://cs231n.stanford.edu/tiny-imagenet-200.zip",)),
    ),
    mean=(0.4802, 0.4481, 0.3975), std=(0.2770, 0.2691, 0.2821),
    description="Tiny ImageNet-200 (CS231n), 100k train / 10k val 64x64 JPEG, 200 WordNet classes.",
    format="tiny_imagenet", folder="tiny_imagenet", homepage="https://cs231n.stanford.edu/",
)

_FOLDER = DatasetInfo(
    name="imagefolder", num_classes=0, image_size=(0, 0), in_chans=3, splits=("train", "val"),
    files=(),
    mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
    description="ImageNet-style folders root/{train,val}/<class>/<image> (ImageNet-1k, ImageNet-21k, "
                "any custom set); classes are the sorted folder names of the train split. Decoded "
                "with Pillow; held in memory when small, streamed from disk by worker processes "
                "(StreamingLoader) when large. No download.",
    format="imagefolder", folder="imagefolder", homepage="https://www.image-net.org/",
)

_PACKED = DatasetInfo(
    name="packed", num_classes=0, image_size=(0, 0), in_chans=3, splits=("train", "val", "test"),
    files=(),
    mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25),
    description="A pack written by `mlplab pack` (uint8 .npy shards + index.json, mlplab.data.packed): "
                "data.root names its folder; classes, size and mean/std come from its index. Streamed "
                "from memory-mapped shards.",
    format="packed", folder="",
)

_SYNTH = DatasetInfo(
    name="synthetic", num_classes=10, image_size=(32, 32), in_chans=3, splits=("train", "val", "test"),
    files=(),
    mean=(0.5, 0.5, 0.5), std=(0.2, 0.2, 0.2),  # make_synthetic states its generator's own per seed
    description="Deterministic random images with learnable class structure (a smooth prototype "
                "per class plus noise); sizes configurable; for tests and smoke runs.",
    format="synthetic", folder="",
)

DATASETS: dict[str, DatasetInfo] = {d.name: d for d in
                                    (_MNIST, _FASHION, _CIFAR10, _CIFAR100, _STL10, _TINY, _FOLDER, _PACKED, _SYNTH)}


def get_info(name: str) -> DatasetInfo:
    """The table's record for ``name``; an unknown name lists the known ones."""
    if name not in DATASETS:
        close = difflib.get_close_matches(str(name), DATASETS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise BadInput(f"unknown dataset {name!r}; {hint}known datasets: {', '.join(sorted(DATASETS))}")
    return DATASETS[name]


def restrict_classes(info: DatasetInfo, classes) -> DatasetInfo:
    """``info`` for the data restricted to ``classes`` (``data.classes``), relabelled 0..k-1 in
    the order given: k classes, named as the dataset names them. ``classes=None`` -> ``info``.
    A class the dataset does not have is an error (checked where the class count is known: image
    folders and packs know theirs once opened)."""
    if classes is None:
        return info
    classes = [int(c) for c in classes]
    if info.num_classes and max(classes) >= info.num_classes:
        raise BadInput(f"data.classes={classes} names class {max(classes)} but {info.name} has classes "
                       f"0..{info.num_classes - 1}; give indices below {info.num_classes}")
    names = tuple(info.classes[c] for c in classes) if 0 < info.num_classes == len(info.classes) else ()
    return replace(info, num_classes=len(classes), classes=names)
