"""`python -m benchmarks.bench ...` from a checkout: the same as `star bench ...` (the code is star.bench)."""

import sys

from star.bench import main

if __name__ == "__main__":
    sys.exit(main())
