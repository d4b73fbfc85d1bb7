"""A real browser for the tests: Debian's headless Chromium driven through selenium
(chromium + chromium-driver, installed by scripts/setup), and a `nestednet view`
server in a subprocess for it to look at."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "nestednet")
ARTEFACTS = Path(os.environ.get("NESTEDNET_VIEW_ARTEFACTS", ROOT / "results" / "view"))
"""Where screenshots go (git-ignored results/ by default)."""


def chromium() -> tuple[str, str]:
    """(browser, driver) paths; Debian names them chromium and chromedriver."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    assert browser and Path(driver).exists(), \
        "chromium and chromium-driver are missing: run scripts/setup"
    return browser, driver


@contextlib.contextmanager
def browser(width: int = 1600, height: int = 1000) -> Iterator[webdriver.Chrome]:
    binary, driver = chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--use-gl=swiftshader",
                "--enable-unsafe-swiftshader", "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Chromium leaves its singleton-socket directory in TMPDIR even after quit(): give it
    # one of ours, removed afterwards.
    scratch = tempfile.mkdtemp(prefix="nestednet-chromium-")
    service = Service(driver, env={**os.environ, "TMPDIR": scratch})
    try:
        chrome = webdriver.Chrome(service=service, options=options)
        try:
            yield chrome
        finally:
            chrome.quit()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def console_errors(chrome: webdriver.Chrome) -> list[dict]:
    """The page's console messages of level SEVERE (errors, failed loads) so far."""
    return [e for e in chrome.get_log("browser") if e.get("level") == "SEVERE"]


def wait_for(chrome: webdriver.Chrome, script: str, timeout: float, what: str,
              interval: float = 0.05) -> float:
    """Seconds until ``script`` (a JS expression) is truthy; AssertionError after timeout."""
    start = time.monotonic()
    while True:
        if chrome.execute_script(f"return {script}"):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(interval)


def screenshot(chrome: webdriver.Chrome, name: str) -> Path:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTEFACTS / name
    chrome.save_screenshot(str(path))
    return path


@contextlib.contextmanager
def view_server(*args: str) -> Iterator[dict]:
    """`nestednet view ARGS --port 0 --json`; yields what it printed (url, port, ...)
    once the page answers; stopped with SIGINT (Ctrl-C) afterwards."""
    proc = subprocess.Popen([CLI, "view", *args, "--port", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        text = ""
        while True:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"nestednet view exited: {proc.stderr.read()}")
            text += line
            if line.startswith("}"):
                break
        info = json.loads(text)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(info["url"].split("?")[0] + "api/info",
                                            timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        info["process"] = proc
        yield info
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
