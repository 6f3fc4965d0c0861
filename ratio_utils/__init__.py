"""ratio_utils: the library behind the Ratio compendium notebooks.

Notebook ``NN_<name>`` calls its stage module :mod:`ratio_utils.stages.<name>`, which calls the library
modules (see docs/architecture.md); shared concepts live in :mod:`ratio_utils.schema`, file helpers in
:mod:`ratio_utils.io`, run configuration in :mod:`ratio_utils.config` and table/figure output in
:mod:`ratio_utils.publish.published`. ``ratio_utils.evaluate(model_or_retriever, benchmark, split, move)`` scores a
retriever (:func:`ratio_utils.evaluation.evaluate`).
"""

__version__ = "0.1.0"
__all__ = ["evaluate"]


def __getattr__(name: str):
    # `evaluate` is imported on first use: it pulls in pandas, and `import ratio_utils.config` must stay light.
    if name == "evaluate":
        from .evaluation.scoring import evaluate

        return evaluate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
