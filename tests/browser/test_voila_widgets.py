"""A real browser on the widgets (issue #8): Voilà serves a notebook with ortx's MemoryView on 127.0.0.1, headless
Debian Chromium renders it, the test picks another buffer in the rendered list and waits for the kernel's answer
(the details panel, which only the kernel-side observer rewrites), and screenshots go to test-artifacts/browser/.

Marked `browser`: deselected unless pytest runs with --run-browser (CI has no Chromium). Needs Debian's chromium and
chromium-driver packages and `pip install voila selenium`.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.browser
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARTIFACTS = os.path.join(ROOT, "test-artifacts", "browser")
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _notebook(path, model_path: str) -> None:
    cells = [f"import sys\nsys.path.insert(0, {ROOT!r})",
             "from ortx.widgets import MemoryView\n"
             f"view = MemoryView.for_model({model_path!r}, {{'input': (1, 3, 32, 32)}}, num_threads=1)\nview"]
    document = {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                           "source": source, "id": f"c{index}"} for index, source in enumerate(cells)],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(document))


@pytest.fixture
def voila(tmp_path):
    for tool in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(tool):
            pytest.fail(f"{tool} is missing: apt-get install chromium chromium-driver")
    import onnx

    from tests import _models

    model_path = tmp_path / "mobilenet.onnx"
    onnx.save(_models.mobilenetv2_style(size=32), model_path)
    notebook = tmp_path / "memory_view.ipynb"
    _notebook(notebook, str(model_path))
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "voila", "--no-browser", f"--port={port}",
                               "--Voila.ip=127.0.0.1", "--ServerApp.token=", str(notebook)],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("voila did not start: " + server.stdout.read1().decode(errors="replace")
                                       if server.poll() is not None else "voila did not answer in 60 s")
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(10)


def _browser(profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={profile}", "--window-size=1280,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def test_choosing_a_buffer_in_the_browser_updates_the_kernels_view(voila, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    os.makedirs(ARTIFACTS, exist_ok=True)
    driver = _browser(str(tmp_path / "profile"))
    try:
        driver.get(voila)
        wait = WebDriverWait(driver, 120)
        select = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".widget-select select"))[0]
        details = driver.find_elements(By.CSS_SELECTOR, ".widget-html-content")
        before = [element.text for element in details]
        assert any("offset" in text for text in before), before
        driver.save_screenshot(os.path.join(ARTIFACTS, "memory_view_before.png"))
        options = Select(select).options
        assert len(options) >= 2
        Select(select).select_by_index(len(options) - 1)  # the smallest buffer
        chosen = options[-1].text.split(" (")[0]
        wait.until(lambda d: any(chosen[:20] in e.text and "offset" in e.text
                                 for e in d.find_elements(By.CSS_SELECTOR, ".widget-html-content")))
        driver.save_screenshot(os.path.join(ARTIFACTS, "memory_view_after.png"))
        after = [element.text for element in driver.find_elements(By.CSS_SELECTOR, ".widget-html-content")]
        assert after != before
    finally:
        driver.quit()
    assert os.path.getsize(os.path.join(ARTIFACTS, "memory_view_after.png")) > 1000
