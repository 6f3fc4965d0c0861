"""`python -m ratio_utils.train` / `torchrun -m ratio_utils.train`: stage 09's command line (cli.main).

Reads and writes what `cli.main` does (a params file in; models/ and tables/ out).
"""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
