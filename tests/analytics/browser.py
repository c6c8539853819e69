"""Headless Debian Chromium for the console tests, and the API served from a thread of the test process.

Chromium and chromedriver come from Debian (``apt-get install chromium chromium-driver``),
installed here when missing (CI runs as root on a fresh machine); nothing is downloaded
at run time by Selenium itself: the driver path is given, so Selenium Manager never runs.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1700",
]


def ensure_chromium() -> None:
    """Install Debian's chromium and chromium-driver if they are missing (needs root, as in CI)."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.fail(
            "the console test needs /usr/bin/chromium and /usr/bin/chromedriver: "
            "apt-get install -y chromium chromium-driver (as root)"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "chromium", "chromium-driver"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    if done.returncode != 0:  # a fresh machine may have no package lists yet
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=600, check=False)
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    if done.returncode != 0 or not CHROMEDRIVER.exists():
        pytest.fail(f"could not install chromium: {done.stdout[-2000:]}\n{done.stderr[-2000:]}")


@contextmanager
def chromium(tmp: Path) -> Iterator[Any]:
    ensure_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in [*FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """uvicorn in a thread of this process (which holds the chdb store); yields the base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the API did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def wait_for(driver: Any, css: str, text: str | None = None, timeout_s: float = 15.0) -> Any:
    """The first element matching ``css`` (containing ``text``), or a failure with the page's text."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            for el in driver.find_elements(By.CSS_SELECTOR, css):
                if text is None or text in el.text:
                    return el
        except StaleElementReferenceException:
            pass  # the console re-rendered while we looked: look again
        time.sleep(0.1)
    body = driver.find_element(By.TAG_NAME, "body").text
    pytest.fail(f"{css!r}{f' with {text!r}' if text else ''} not found; the page shows:\n{body[:3000]}")


def screenshot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, max(900, min(int(height) + 40, 4000)))
    driver.save_screenshot(str(path))
    return path


def click(driver: Any, css: str, text: str | None = None, timeout_s: float = 15.0) -> None:
    """Click the element, looking it up again if the console re-renders it between lookup and click."""
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            wait_for(driver, css, text, timeout_s=max(0.1, deadline - time.monotonic())).click()
            return
        except StaleElementReferenceException:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
