"""`python3 -m standin` (from tests/integration): the same as tests/integration/apiserver.py."""

import sys

from .server import main

sys.exit(main())
