"""Drives the atdp-audit console in Debian's headless Chromium, as a reviewer would: log in,
search for steps with masked e-mail addresses, open a trajectory, reveal one value with a
written reason, and read the audit trail, all through the console's token-carrying forms.
On the way, a page of another origin (a local server on another port: same site, so the
browser does send the SameSite=Strict session cookie) tries what a hostile page would: post
the reveal form without the token, post it with a leaked token, log the browser in with the
attacker's own key, and frame the console. Prints what it saw as one JSON object; the Rust
test (audit/tests/it/browser.rs) decides whether that is right.

    python console_browser.py --base http://127.0.0.1:8710 --key sk-atdp-demo-auditor \
        --attacker-key sk-other --reason "Subject access request #4411" --screenshot t.png
"""

import argparse
import html
import http.server
import json
import sys
import threading
from urllib.parse import parse_qs, urlparse

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


class Attacker:
    """Serves one page at a time from another origin (127.0.0.1, another port)."""

    def __init__(self):
        self.page = ""
        attacker = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                body = attacker.page.encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def form(self, action, fields):
        inputs = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in fields.items()
        )
        self.page = (
            f'<!doctype html><title>prize</title><form id="forged" method="post" '
            f'action="{html.escape(action)}">{inputs}<button id="go">Claim your prize</button></form>'
        )
        return f"{self.origin}/"


def outcome(driver):
    """What a forged post led to: the page heading, and whether a value was revealed."""
    heading = driver.find_elements(By.TAG_NAME, "h1")
    return {
        "heading": heading[0].text if heading else "",
        "revealed": bool(driver.find_elements(By.ID, "revealed-value")),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--attacker-key", required=True)
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
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=args.chromedriver), options=options)
    driver.set_page_load_timeout(60)
    attacker = Attacker()
    seen = {}
    try:
        driver.get(f"{args.base}/login")
        driver.find_element(By.ID, "key").send_keys(args.key)
        click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button"))
        seen["after_login"] = driver.current_url.removeprefix(args.base)
        # The style block is allowed by its hash in the Content-Security-Policy: if the hash
        # did not match, the header would have no background.
        seen["header_background"] = driver.execute_script(
            "return getComputedStyle(document.querySelector('header')).backgroundColor"
        )

        entity = driver.find_element(By.NAME, "entity")
        entity.clear()
        entity.send_keys(args.entity)
        click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "form.filters button"))
        links = driver.find_elements(By.CSS_SELECTOR, "table tbody button.link")
        seen["search_url"] = driver.current_url.removeprefix(args.base)
        seen["search_hits"] = len(links)
        if not links:
            raise RuntimeError("the search found no step")
        click_and_wait(driver, links[0])

        seen["trajectory_title"] = driver.find_element(By.TAG_NAME, "h1").text
        spans = driver.find_elements(By.CSS_SELECTOR, ".pii .entity")
        seen["masked_entities"] = sorted({s.text for s in spans})
        seen["messages"] = len(driver.find_elements(By.CSS_SELECTOR, ".msg"))
        main_text = driver.find_element(By.TAG_NAME, "main").text
        seen["page_text_has_at_sign"] = "@" in main_text
        # The fixture's customer and company, which only the name detectors find.
        seen["page_text_has_names"] = [n for n in ("Jane", "Demo Corp") if n in main_text]
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
        # The reason form posts to the reveal link's own URL (the value it names is in the
        # query), with the reason and the form token in the body.
        target = reveal.get_attribute("href")
        if set(parse_qs(urlparse(target).query)) != {"trajectory", "tenant", "token"}:
            raise RuntimeError(f"unexpected reveal link {target}")
        leaked = driver.find_element(By.CSS_SELECTOR, "input[name='csrf']").get_attribute("value")
        click_and_wait(driver, reveal)
        driver.find_element(By.ID, "reason").send_keys(args.reason)
        click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "form[action^='/reveal?'] button"))
        seen["revealed"] = driver.find_element(By.ID, "revealed-value").text

        # A page of another origin posts the reveal form: without the token, then with a
        # token that leaked. The browser sends the session cookie both times.
        forged = {"reason": "forged by another site"}
        driver.get(attacker.form(target, forged))
        click_and_wait(driver, driver.find_element(By.ID, "go"))
        seen["forged_reveal"] = outcome(driver)
        driver.get(attacker.form(target, dict(forged, csrf=leaked)))
        click_and_wait(driver, driver.find_element(By.ID, "go"))
        seen["forged_reveal_with_leaked_token"] = outcome(driver)
        # It frames the console.
        attacker.page = f'<!doctype html><iframe id="frame" src="{args.base}/search"></iframe>'
        driver.get(f"{attacker.origin}/")
        WebDriverWait(driver, 30).until(
            lambda d: d.execute_script("return document.readyState") == "complete"
        )
        try:
            driver.switch_to.frame("frame")
            seen["framed_console_shown"] = bool(
                driver.find_elements(By.CSS_SELECTOR, "form.filters")
            )
        except WebDriverException:
            seen["framed_console_shown"] = False
        finally:
            driver.switch_to.default_content()

        driver.get(f"{args.base}/audit")
        seen["chain_status"] = driver.find_element(By.ID, "chain-status").text
        rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "table tbody tr")]
        seen["audit_rows_with_reason"] = [r for r in rows if args.reason in r]
        seen["audit_rows_forged"] = [r for r in rows if "forged by another site" in r]

        # Login forgery: another site logs the browser in with the attacker's key.
        who = driver.find_element(By.CSS_SELECTOR, "header .who").text
        driver.get(attacker.form(f"{args.base}/login", {"key": args.attacker_key}))
        click_and_wait(driver, driver.find_element(By.ID, "go"))
        seen["forged_login"] = outcome(driver)
        driver.get(f"{args.base}/search")
        seen["same_auditor_after_forged_login"] = (
            driver.find_element(By.CSS_SELECTOR, "header .who").text == who
        )
        # The console's own pages broke no rule of their policy; the framing did.
        messages = [
            e["message"]
            for e in driver.get_log("browser")
            if "Content Security Policy" in e["message"] or "Refused to" in e["message"]
        ]
        seen["framing_refused_by_csp"] = any("frame-ancestors 'none'" in m for m in messages)
        seen["csp_violations"] = [m for m in messages if "frame-ancestors" not in m]
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
