"""Building blocks: PK layer, vec convention, stem, MLP, masked/sparse, Monarch, Kronecker."""
from .common import DropPath, Mlp, make_act
from .kronecker import KroneckerLinear
from .masked import MaskedLinear, SparseLinear
from .monarch import MonarchLinear
from .pk import PKLayer, PKMixing, permute_entries
from .stem import PatchEmbed, patchify
from .vec import commutation_matrix, commutation_perm, perm_matrix, unvec, vec

__all__ = [
    "DropPath", "Mlp", "make_act", "PKLayer", "PKMixing", "permute_entries", "PatchEmbed",
    "patchify", "commutation_matrix", "commutation_perm", "perm_matrix", "unvec", "vec",
    "MaskedLinear", "SparseLinear", "MonarchLinear", "KroneckerLinear",
]
