"""`python -m tests.fuzz`: see run.py."""

import sys

from tests.fuzz import run

sys.exit(run.main())
