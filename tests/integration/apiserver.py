#!/usr/bin/env python3
"""The local Kubernetes API server of the integration tests: the entry point.

The server is the package standin/ next to this file (see its __init__.py and README.md);
this file only runs standin.server.main, so that `python3 tests/integration/apiserver.py
--state-dir DIR ...` starts it from anywhere. (The package is not called apiserver: a
directory apiserver/ next to apiserver.py would make `import apiserver` ambiguous.)

Usage: apiserver.py --state-dir DIR [--port 0] [--token T] [--binder on|off] ...
"""

import sys

from standin.server import main

if __name__ == "__main__":
    sys.exit(main())
