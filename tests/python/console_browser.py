"""Drives the atdp-audit console in Debian's headless Chromium, as a reviewer would: log in,
search for steps with masked e-mail addresses, open a trajectory, reveal one value with a
written reason, and read the audit trail. Prints what it saw as one JSON object; the Rust
test (audit/tests/it/browser.rs) decides whether that is right.

    python console_browser.py --base http://127.0.0.1:8710 --key sk-atdp-demo-auditor \
        --reason "Subject access request #4411" --screenshot trajectory.png
"""

import argparse
import json
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.support.ui import WebDriverWait


def click_and_wait(driver, element):
    """Clicks something that loads a new page, and waits until the new page is there."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()

    def replaced(_driver):
        # Chromium reports a node of an unloaded document either as stale or, while the
        # new one is being built, as "does not belong to the document": both mean gone.
        try:
            old.tag_name
            return False
        except (StaleElementReferenceException, WebDriverException):
            return True

    WebDriverWait(driver, 30).until(replaced)
    WebDriverWait(driver, 30, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--reason", required=True)
    parser.add_argument("--entity", default="EMAIL_ADDRESS")
    parser.add_argument("--screenshot", required=True)
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
    seen = {}
    try:
        driver.get(f"{args.base}/login")
        driver.find_element(By.ID, "key").send_keys(args.key)
        click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button"))
        seen["after_login"] = driver.current_url.removeprefix(args.base)

        entity = driver.find_element(By.NAME, "entity")
        entity.clear()
        entity.send_keys(args.entity)
        click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "form.filters button"))
        links = driver.find_elements(By.CSS_SELECTOR, "table tbody a.mono")
        seen["search_url"] = driver.current_url.removeprefix(args.base)
        seen["search_hits"] = len(links)
        if not links:
            raise RuntimeError("the search found no step")
        click_and_wait(driver, links[0])

        seen["trajectory_title"] = driver.find_element(By.TAG_NAME, "h1").text
        spans = driver.find_elements(By.CSS_SELECTOR, ".pii .entity")
        seen["masked_entities"] = sorted({s.text for s in spans})
        seen["messages"] = len(driver.find_elements(By.CSS_SELECTOR, ".msg"))
        seen["page_text_has_at_sign"] = "@" in driver.find_element(By.TAG_NAME, "main").text
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, min(max(int(height) + 40, 800), 4000))
        driver.execute_script("window.scrollTo(0, 0)")
        driver.save_screenshot(args.screenshot)

        reveal = None
        for span in driver.find_elements(By.CSS_SELECTOR, ".pii"):
            if span.find_element(By.CSS_SELECTOR, ".entity").text == args.entity:
                found = span.find_elements(By.LINK_TEXT, "reveal")
                if found:
                    reveal = found[0]
                    break
        if reveal is None:
            raise RuntimeError(f"no revealable {args.entity} on the trajectory page")
        click_and_wait(driver, reveal)
        driver.find_element(By.ID, "reason").send_keys(args.reason)
        click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "form[action='/reveal'] button"))
        seen["revealed"] = driver.find_element(By.ID, "revealed-value").text

        driver.get(f"{args.base}/audit")
        seen["chain_status"] = driver.find_element(By.ID, "chain-status").text
        rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "table tbody tr")]
        seen["audit_rows_with_reason"] = [r for r in rows if args.reason in r]
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
