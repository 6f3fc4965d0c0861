"""ratio_utils: the library behind the Ratio compendium notebooks.

Notebook ``NN_<name>`` calls its stage module :mod:`ratio_utils.stages.<name>`, which calls the library
modules (see docs/architecture.md); shared concepts live in :mod:`ratio_utils.schema`, file helpers in
:mod:`ratio_utils.io`, run configuration in :mod:`ratio_utils.config` and table/figure output in
:mod:`ratio_utils.published`. ``ratio_utils.evaluate(model_or_retriever, benchmark, split, move)`` scores a retriever.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `ratio_utils.evaluate(model_or_retriever, benchmark, split, move)`: the evaluate module is callable.
    # Imported on first use, so `python -m ratio_utils.evaluate` does not find it imported twice.
    if name == "evaluate":
        import importlib

        return importlib.import_module(".evaluate", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
