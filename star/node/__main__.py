"""`python -m star.node ...` (what torchrun runs) is `star node ...`.

Its own module so that the `star node` command (star.cli) and the node's logic
(star.node) do not import each other.
"""

import sys

from star.cli import main

if __name__ == "__main__":
    sys.exit(main(["node", *sys.argv[1:]]))
