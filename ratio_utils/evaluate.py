"""`python -m ratio_utils.evaluate`: runs the command line of `ratio_utils.evaluate(...)` (ratio_utils.evaluation).

On the package, `evaluate` is the function. Importing this file as a module would put the module in the
function's place, so it only runs as `__main__`.
"""

import sys

from .evaluation import main

if __name__ != "__main__":
    raise ImportError(f"{__name__} only runs the command line (`python -m ratio_utils.evaluate`); call "
                      "ratio_utils.evaluate(...) or import its names from ratio_utils.evaluation")

sys.exit(main())
