"""`python -m radixgate.linter` runs promptlint."""

import sys

from .cli import main

sys.exit(main())
