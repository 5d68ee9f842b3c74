"""``python -m backends.kv.lab``: the lab in the worker venv (see ``backends.kv.lab.main``)."""

import sys

from backends.kv.lab.main import main

sys.exit(main())
