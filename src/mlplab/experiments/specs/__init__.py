"""The published experiments (docs/science.md §7), one ``@experiment``-registered function each;
how to add one: ``docs/adding-an-experiment.md``.

``MODULES`` lists the spec modules; importing this package imports each of them, which
registers their experiments in :data:`mlplab.experiments.plan.EXPERIMENTS`. ``ORDER`` is the order
in which ``mlplab reproduce --list`` shows them (the order of docs/science.md §7, then
``implicit-bias``, §5); ids not in it follow in registration order. Specs import ``plan``, ``claims`` and ``verdicts``,
never the registry; they hold settings, claims and wiring only (``tests/test_layering.py``). The modules not
in ``MODULES`` hold what several specs share: ``common``, ``budget``, ``pretraining``, ``timing``.
"""
from importlib import import_module

MODULES = ["cka",  # fig2a-c
           "monarch",  # fig2d
           "fig4", "fig5", "fig6", "figS1", "figS2_S3", "table1",  # at a fixed budget Ω (shared: budget)
           "rp",  # fig7, figS4, figS6-S8: random-permuted Mixers
           "patch_size",  # figS5
           "pictures",  # figS9
           "runtime",  # tableS3
           "implicit_bias",  # Prop. 3.3
           "scaling",  # Scaling MLPs in miniature
           "sm_table1", "sm_weights",  # Scaling MLPs Table 1, Figs. 10–11 (shared: sm_table1)
           "sm_transfer", "sm_batch_size",  # Scaling MLPs Tables 2–3, Fig. 4 (shared: pretraining)
           "sm_inference", "mixer_cost",  # Scaling MLPs Table 4, MLP-Mixer Table 2 (shared: timing)
           "mixer_ablations", "mixer_weights"]  # the MLP-Mixer supplement

ORDER = ["fig2a-c", "fig2d", "fig4", "fig5", "fig6", "fig6-imagenet", "fig7", "figS1", "figS2-S3", "figS4", "figS5",
         "figS6-S8", "figS9", "table1", "table1-imagenet", "tableS3", "implicit-bias", "scaling",
         "sm-table1", "sm-batch-size", "sm-transfer", "sm-weights", "sm-inference", "mixer-ablations", "mixer-weights",
         "mixer-cost"]

for _m in MODULES:
    import_module(f"{__name__}.{_m}")
