"""ratio_utils: the library behind the Ratio compendium notebooks.

One module per pipeline stage (see docs/architecture.md); shared concepts live in
:mod:`ratio_utils.schema`, file helpers in :mod:`ratio_utils.io`, run configuration in
:mod:`ratio_utils.config` and table/figure output in :mod:`ratio_utils.report`.
"""

__version__ = "0.1.0"
