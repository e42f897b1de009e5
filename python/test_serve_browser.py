"""The live page of `tessera serve` (GET /, issue 44) in a real browser: Debian's headless
Chromium driven by selenium loads the page, types a prompt, picks a method and a seed, submits,
and waits for the streamed image; then checks that the image is the one the API gives for the
same request, that the acceptance heatmap covers every token with both target-sampled and
accepted cells, and that the stats appear. The screenshot is kept as the test's artifact.

usage: test_serve_browser.py TESSERA_BIN SCREENSHOT.png
"""
import base64
import json
import os
import subprocess
import sys
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT, METHOD, SEED = "red apple", "sd", 3


def start_server(tessera):
    srv = subprocess.Popen(
        [tessera, "serve", "-m", os.path.join(ROOT, "models/emoji/target"), "--port", "0",
         "-t", "1", "-q"],
        stdout=subprocess.PIPE, text=True)
    line = srv.stdout.readline()
    if not line.startswith("listening on "):
        srv.kill()
        sys.exit(f"tessera serve did not start: {line!r}")
    return srv, line.split()[-1].strip()


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=900,900"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def api_image(url):
    body = json.dumps({"prompt": PROMPT, "method": METHOD, "seed": SEED}).encode()
    with urllib.request.urlopen(urllib.request.Request(
            url + "/v1/images/generations", body, {"Content-Type": "application/json"})) as r:
        return json.load(r)["data"][0]["b64_json"]


def main():
    tessera, shot = sys.argv[1], sys.argv[2]
    srv, url = start_server(tessera)
    driver = None
    try:
        driver = browser()
        driver.get(url + "/")
        wait = WebDriverWait(driver, 60)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#method option")) > 1)
        methods = [o.get_attribute("value")
                   for o in driver.find_elements(By.CSS_SELECTOR, "#method option")]
        assert METHOD in methods and "vanilla" in methods, methods
        driver.find_element(By.ID, "prompt").send_keys(PROMPT)
        Select(driver.find_element(By.ID, "method")).select_by_value(METHOD)
        seed = driver.find_element(By.ID, "seed")
        seed.clear()
        seed.send_keys(str(SEED))
        driver.find_element(By.ID, "generate").click()
        wait.until(lambda d: d.find_element(By.ID, "stats").get_attribute("data-done") == "1"
                   or d.find_element(By.ID, "error").text)
        error = driver.find_element(By.ID, "error").text
        assert not error, f"the page shows an error: {error}"
        wait.until(ec.element_to_be_clickable((By.ID, "generate")))

        # The image is the API's for the same request, decoded by the browser at its size.
        src = driver.find_element(By.ID, "image").get_attribute("src")
        assert src.startswith("data:image/png;base64,"), src[:40]
        assert src.split(",", 1)[1] == api_image(url), "the page's image is not the API's"
        width = driver.execute_script("return document.getElementById('image').naturalWidth")
        assert width == 64, width

        # The heatmap: every token drawn (16 x 16 cells), dark cells where the target sampled and
        # coloured ones where drafts were accepted, none left grey.
        cells = driver.execute_script("""
            const c = document.getElementById('heatmap'), ctx = c.getContext('2d');
            const n = 16, cell = c.width / n, out = [];
            for (let i = 0; i < n * n; ++i) {
              const p = ctx.getImageData((i % n) * cell + cell / 2,
                                         Math.floor(i / n) * cell + cell / 2, 1, 1).data;
              out.push([p[0], p[1], p[2]]);
            }
            return [c.dataset.tokens, out];""")
        tokens, colours = cells
        assert tokens == "256", tokens
        dark = sum(c == [40, 40, 40] for c in colours)
        grey = sum(c == [200, 200, 200] for c in colours)
        coloured = len(colours) - dark - grey
        assert grey == 0 and dark > 0 and coloured > 0, (dark, grey, coloured)

        stats = driver.find_element(By.ID, "stats").text
        for want in ("method", METHOD, "target forwards", "mean accepted", "tokens/s"):
            assert want in stats, (want, stats)
        status = driver.find_element(By.ID, "status").text
        assert status.startswith("done: red apple"), status

        os.makedirs(os.path.dirname(os.path.abspath(shot)), exist_ok=True)
        driver.save_screenshot(shot)
        print(f"ok: {dark} cells sampled by the target, {coloured} accepted drafts; "
              f"screenshot {shot}")
    finally:
        if driver is not None:
            driver.quit()
        srv.terminate()
        srv.wait(timeout=30)


if __name__ == "__main__":
    main()
