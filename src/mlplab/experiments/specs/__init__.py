"""The published experiments (SPEC §7), one registered function each. Importing this package
registers them all in :data:`mlplab.experiments.registry.EXPERIMENTS`, in SPEC order, followed
by ``implicit-bias`` (SPEC §5, not a figure of §7)."""
from . import misc as _misc  # noqa: F401  fig2a-c, fig2d (and figS5, figS9, tableS3)
from . import budget as _budget  # noqa: F401  fig4, fig5, fig6, figS1, figS2-S3, table1
from . import rp as _rp  # noqa: F401  fig7, figS4, figS6-S8

ORDER = ["fig2a-c", "fig2d", "fig4", "fig5", "fig6", "fig7", "figS1", "figS2-S3", "figS4", "figS5",
         "figS6-S8", "figS9", "table1", "tableS3", "implicit-bias"]


def _reorder() -> None:
    from ..registry import EXPERIMENTS

    items = dict(EXPERIMENTS)
    EXPERIMENTS.clear()
    for k in ORDER:
        EXPERIMENTS[k] = items.pop(k)
    EXPERIMENTS.update(items)


_reorder()
