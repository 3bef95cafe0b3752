"""Drives the atdp-audit console in Debian's headless Chromium over trajectories that a hostile
agent recorded: ids that look like paths (`../logout`, `a/b?c=1&tenant=other#d`) and a
trajectory whose every recorded text holds bidirectional overrides and isolates, a paragraph
separator, markup, and the role `banner ok`. Through the console's own buttons it opens each
id and reads where the browser landed, measures where the browser drew every character of
the console's own text on the bidi trajectory's page, and opens the full text of a long
message. Prints what it saw as one JSON object; the Rust test (audit/tests/it/browser.rs)
decides whether that is right.

    python console_hostile.py --base http://127.0.0.1:8710 --key sk-atdp-demo-auditor \
        --id ../logout --id 'a/b?c=1&tenant=other#d' --probe-marker ZQ-
"""

import argparse
import json
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from console_browser import click_and_wait

# For every text node of <main> outside a <bdi> (the console's own words), the characters
# that the browser drew out of their logical order: on one line, each visible character of
# a left-to-right text must be drawn right of the one before it.
MISORDERED = """
const out = [];
const walker = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  if (node.parentElement.closest('bdi, style, script, textarea, option')) continue;
  const text = node.data;
  let last = null;
  for (let i = 0; i < text.length; i++) {
    if (/\\s/.test(text[i])) continue;
    const range = document.createRange();
    range.setStart(node, i);
    range.setEnd(node, i + 1);
    const box = range.getBoundingClientRect();
    if (box.width === 0) continue;
    if (last && Math.abs(last.top - box.top) < 2 && box.left < last.left) {
      out.push(text.trim().slice(0, 60));
      break;
    }
    last = box;
  }
}
return out;
"""


def login(driver, base, key):
    driver.get(f"{base}/login")
    driver.find_element(By.ID, "key").send_keys(key)
    click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button"))


def search(driver, base, **fields):
    """Runs a search through the form and returns the hits' open buttons."""
    driver.get(f"{base}/search")
    for name, value in fields.items():
        box = driver.find_element(By.NAME, name)
        box.clear()
        box.send_keys(value)
    click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "form.filters button"))
    return driver.find_elements(By.CSS_SELECTOR, "table tbody button.link")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--id", action="append", required=True)
    parser.add_argument("--probe-marker", required=True)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = parser.parse_args()

    options = webdriver.ChromeOptions()
    options.binary_location = args.chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=args.chromedriver), options=options)
    driver.set_page_load_timeout(60)
    seen = {"opened": {}}
    try:
        login(driver, args.base, args.key)
        for wanted in args.id:
            hits = search(driver, args.base, trajectory=wanted)
            if len(hits) != 1:
                raise RuntimeError(f"{len(hits)} hits for {wanted!r}")
            click_and_wait(driver, hits[0])
            heading = driver.find_elements(By.TAG_NAME, "h1")
            seen["opened"][wanted] = {
                "path": driver.current_url.removeprefix(args.base).split("?")[0],
                "heading": heading[0].text if heading else "",
                "signed_in": bool(driver.find_elements(By.CSS_SELECTOR, "header .who")),
            }
            # The long message's full text, through its button: the whole text, as text.
            full = driver.find_elements(By.CSS_SELECTOR, ".cut button")
            if full and "full_text" not in seen:
                click_and_wait(driver, full[0])
                seen["full_text"] = {
                    "content_type": driver.execute_script("return document.contentType"),
                    "starts": driver.execute_script("return document.body.innerText.slice(0, 13)"),
                    "length": driver.execute_script("return document.body.innerText.length"),
                }

        # The bidi probe is the newest step: the first hit of an empty search.
        hits = search(driver, args.base)
        click_and_wait(driver, hits[0])
        main_text = driver.find_element(By.TAG_NAME, "main").text
        seen["probe_shown"] = args.probe_marker in main_text
        seen["probe_overrides_shown"] = "[U+202E]" in main_text
        seen["probe_isolates"] = len(driver.find_elements(By.CSS_SELECTOR, "main bdi"))
        seen["probe_misordered"] = driver.execute_script(MISORDERED)
        seen["probe_banners"] = len(driver.find_elements(By.CSS_SELECTOR, ".banner"))
        seen["probe_hit_marked"] = len(driver.find_elements(By.CSS_SELECTOR, ".step.hit #hit"))

    except Exception as error:  # report what was seen so far, and why it stopped
        seen["error"] = f"{type(error).__name__}: {error}"
        seen["url"] = driver.current_url
        print(json.dumps(seen))
        return 1
    finally:
        driver.quit()
    print(json.dumps(seen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
