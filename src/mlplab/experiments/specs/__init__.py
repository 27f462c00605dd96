"""The published experiments (docs/science.md §7), one ``@experiment``-registered function each.

``MODULES`` lists the spec modules; importing this package imports each of them, which
registers their experiments in :data:`mlplab.experiments.plan.EXPERIMENTS`. ``ORDER`` is the order
in which ``mlplab reproduce --list`` shows them (SPEC order, then ``implicit-bias``, docs/science.md §5);
ids not in it follow in registration order. Specs import ``plan``, ``claims`` and ``verdicts``,
never the registry.
"""
from importlib import import_module

MODULES = ["misc", "budget", "rp", "scaling"]  # fig2a-c, fig2d, figS5, figS9, tableS3 | fig4-6, figS1-S3, table1 | fig7, figS4, figS6-S8 | scaling

ORDER = ["fig2a-c", "fig2d", "fig4", "fig5", "fig6", "fig7", "figS1", "figS2-S3", "figS4", "figS5",
         "figS6-S8", "figS9", "table1", "tableS3", "implicit-bias", "scaling"]

for _m in MODULES:
    import_module(f"{__name__}.{_m}")
