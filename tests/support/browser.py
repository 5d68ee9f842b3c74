"""A real headless browser for tests: Debian's chromium driven by selenium.

:func:`need_chromium` skips a test where chromium or its driver is missing, and fails it under CI
(``.ci/run`` installs them there); :func:`start_chromium` starts a driver with the flags tests use.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--window-size=1600,1000")


def need_chromium() -> None:
    """Skip (fail under CI) unless chromium and chromedriver are installed."""
    if os.path.exists(CHROMIUM) and os.path.exists(DRIVER):
        return
    message = "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
    if os.environ.get("CI"):
        pytest.fail(message)  # .ci/run installs them: missing there is a failure, not a skip
    pytest.skip(message)


def start_chromium() -> Any:
    """A started headless chromium ``selenium.webdriver.Chrome`` (the caller quits it)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(DRIVER), options=options)
