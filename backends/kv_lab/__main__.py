"""``python -m backends.kv_lab``: the lab in the worker venv (see ``backends.kv_lab.main``)."""

import sys

from backends.kv_lab.main import main

sys.exit(main())
