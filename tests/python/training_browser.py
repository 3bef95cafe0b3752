"""Watches a training run on the atdp-audit console's training page in Debian's headless
Chromium, as a reviewer would: log in, open the training page, and stay on it while the run
goes on. The page reloads itself while a run is running (a <meta> refresh: the console has no
script), so the browser is never told to reload; it only reads what each load shows. Prints
`ready` once the run is on screen (the Rust test then makes it go on), and at the end one
JSON object of what it saw; the Rust test (audit/tests/it/runs.rs) decides whether that is
right.

    python training_browser.py --base http://127.0.0.1:8710 --key sk-... --run RUN_ID
"""

import argparse
import json
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait


def sections(driver):
    """run id -> its section element, on the page as it is now."""
    found = {}
    for section in driver.find_elements(By.CSS_SELECTOR, "section.run"):
        found[section.find_element(By.CSS_SELECTOR, ".run-id").text] = section
    return found


def read_run(driver, run):
    """(state, steps done) of `run` on the page as it is now, or None while it loads."""
    try:
        section = sections(driver).get(run)
        if section is None:
            return None
        state = section.find_element(By.CSS_SELECTOR, ".run-state").text
        steps = int(section.find_element(By.CSS_SELECTOR, ".run-steps").text.split("/")[0])
        return state, steps
    except (StaleElementReferenceException, WebDriverException, ValueError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--screenshot", help="save the finished page here (PNG)")
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
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=args.chromedriver), options=options)
    driver.set_page_load_timeout(60)
    seen = {"observed": [], "loads": 0}
    try:
        driver.get(f"{args.base}/login")
        driver.find_element(By.ID, "key").send_keys(args.key)
        driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button").click()
        WebDriverWait(driver, 30).until(lambda d: "/login" not in d.current_url)
        driver.find_element(By.LINK_TEXT, "Training").click()
        WebDriverWait(driver, 30).until(lambda d: read_run(d, args.run) is not None)
        seen["first"] = read_run(driver, args.run)
        seen["reloads_itself_at_first"] = bool(
            driver.find_elements(By.CSS_SELECTOR, "meta[http-equiv='refresh']")
        )
        print("ready", flush=True)

        # Every load of the page is a new <html> element; count them and note what each shows.
        page = driver.find_element(By.TAG_NAME, "html")
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                current = driver.find_element(By.TAG_NAME, "html")
            except WebDriverException:
                continue
            if current != page:
                now = read_run(driver, args.run)
                if now is None:
                    continue
                page = current
                seen["loads"] += 1
                seen["observed"].append(now)
                if now[0] != "running":
                    break
        # Finished: the page no longer reloads itself.
        seen["reloads_itself_at_end"] = bool(
            driver.find_elements(By.CSS_SELECTOR, "meta[http-equiv='refresh']")
        )
        time.sleep(4)
        seen["reloaded_after_the_end"] = driver.find_element(By.TAG_NAME, "html") != page

        if args.screenshot:
            driver.save_screenshot(args.screenshot)
        runs = sections(driver)
        seen["runs"] = list(runs)
        section = runs[args.run]
        seen["charts"] = len(section.find_elements(By.CSS_SELECTOR, "svg.chart polyline"))
        seen["chart_titles"] = [
            c.text.split("\n")[0] for c in section.find_elements(By.CSS_SELECTOR, ".chart-box figcaption")
        ]
        seen["reward_histograms"] = len(section.find_elements(By.CSS_SELECTOR, "svg.histogram"))
        seen["alerts"] = {
            run: [a.text for a in s.find_elements(By.CSS_SELECTOR, ".alert")] for run, s in runs.items()
        }
        seen["events"] = {
            run: [e.text for e in s.find_elements(By.CSS_SELECTOR, ".event-action")]
            for run, s in runs.items()
        }
        seen["versions"] = {
            run: [v.text for v in s.find_elements(By.CSS_SELECTOR, ".run-versions")]
            for run, s in runs.items()
        }
        messages = [
            e["message"]
            for e in driver.get_log("browser")
            if "Content Security Policy" in e["message"] or "Refused to" in e["message"]
        ]
        seen["csp_violations"] = messages
    except Exception as error:  # report what was seen so far, and why it stopped
        seen["error"] = f"{type(error).__name__}: {error}"
        seen["url"] = driver.current_url
        print(json.dumps(seen), flush=True)
        return 1
    finally:
        driver.quit()
    print(json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
