"""``python -m retrysafe``: the ``retrysafe`` command, for where its script is not on the
``PATH`` (a virtual environment not activated, an interpreter run by its full path)."""

import sys

from retrysafe.cli import main

if __name__ == "__main__":
    sys.exit(main())
