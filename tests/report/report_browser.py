"""Open a Snakemake HTML report in headless Chromium and look at every result it lists.

The report (Snakemake's default HTML report plugin) is a React page that embeds its data as
two globals: ``categories`` ({category: {subcategory: [result path, ...]}}) and
``results`` ({result path: {"labels", "mime_type", "data_uri", ...}}). The page is driven
as a reader would: the category in the menu, then the subcategory, then the eye button of
every row of the subcategory's table. For each result it checks that

- the table has exactly one row for it (labels that collide would hide results),
- a figure is shown and decodes (``naturalWidth > 0``),
- an HTML result shows a non-empty page, and any other result (markdown, CSV) is a
  non-empty download,

and it takes one screenshot per result. SEVERE messages in the browser console are
problems too.

Standalone, against a report built elsewhere:

    python tests/report/report_browser.py report.html [screenshot folder]
"""

from __future__ import annotations

import base64
import re
import shutil
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

WAIT_S = 20
VIEWABLE = {"image/svg+xml": "img", "image/png": "img", "image/jpeg": "img"}
VIEWABLE |= {"text/html": "html", "application/pdf": "pdf"}

# the page's data, without the (large) data URIs
READ_DATA = """
const out = {};
for (const [path, r] of Object.entries(results)) {
    out[path] = {labels: r.labels, mime_type: r.mime_type, data_uri_chars: r.data_uri.length};
}
return [categories, out];
"""
# the content pane: the last child of the app's row (after the navbar)
CONTENT_PANE = "return document.querySelector('#app > div').lastElementChild;"
IMAGE_STATE = """
const img = arguments[0].querySelector('img');
if (!img) return null;
return {src: img.getAttribute('src'), complete: img.complete, width: img.naturalWidth,
        height: img.naturalHeight, shown: img.getBoundingClientRect().height};
"""


@dataclass
class Item:
    """One result of the report and what was found wrong with it."""

    path: str
    category: str
    subcategory: str
    mime_type: str
    problems: list[str] = field(default_factory=list)
    screenshot: Path | None = None


@dataclass
class ReportCheck:
    items: list[Item]
    landing: Path
    console_errors: list[str]

    @property
    def problems(self) -> list[str]:
        found = [
            f"{i.category} / {i.subcategory} / {i.path}: {p}"
            for i in self.items
            for p in i.problems
        ]
        return found + [f"browser console: {message}" for message in self.console_errors]


def chrome(window: tuple[int, int] = (1600, 1200)) -> WebDriver:
    """Headless Chromium through the chromedriver on PATH (tests/report/install-chromium.sh)."""
    driver_path = shutil.which("chromedriver")
    browser_path = shutil.which("chromium")
    if driver_path is None or browser_path is None:
        raise RuntimeError("chromium and chromedriver must be on PATH (install-chromium.sh)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser_path
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={window[0]},{window[1]}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=options)


@contextmanager
def opened(report: Path) -> Iterator[WebDriver]:
    driver = chrome()
    try:
        driver.get(report.resolve().as_uri())
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#app nav li"), "the menu")
        yield driver
    finally:
        driver.quit()


def wait(driver: WebDriver, condition: Callable[[WebDriver], Any], what: str) -> Any:
    try:
        return WebDriverWait(driver, WAIT_S).until(condition)
    except TimeoutException:
        raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}") from None


def check_report(report: Path, screenshots: Path) -> ReportCheck:
    """Visit every result of ``report``; screenshots go to ``screenshots``."""
    screenshots.mkdir(parents=True, exist_ok=True)
    with opened(report) as driver:
        landing = screenshots / "00-landing.png"
        driver.save_screenshot(str(landing))
        categories, results = driver.execute_script(READ_DATA)
        items: list[Item] = []
        for category in sorted(categories):
            for subcategory in sorted(categories[category]):
                paths = categories[category][subcategory]
                subitems = [
                    Item(path, category, subcategory, results[path]["mime_type"]) for path in paths
                ]
                items += subitems
                open_subcategory(driver, categories, category, subcategory)
                check_table(driver, subitems, results, screenshots, len(items) - len(subitems))
        console = [
            entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"
        ]
    return ReportCheck(items, landing, console)


def click_menu_item(driver: WebDriver, label: str) -> None:
    links = [
        a
        for a in driver.find_elements(By.CSS_SELECTOR, "nav li > a")
        if a.get_attribute("textContent").strip() == label
    ]
    if len(links) != 1:
        raise AssertionError(f"expected one menu entry {label!r}, found {len(links)}")
    links[0].click()


def open_subcategory(driver: WebDriver, categories: dict, category: str, sub: str) -> None:
    """From the main menu: the category, then (when it has several) the subcategory."""
    driver.execute_script("app.setView({navbarMode: 'menu'});")
    wait(driver, lambda d: d.execute_script("return app.state.navbarMode") == "menu", "the menu")
    click_menu_item(driver, "Results" if len(categories) == 1 else category)
    if len(categories[category]) > 1:
        wait(
            driver,
            lambda d: d.execute_script("return app.state.navbarMode") == "category",
            category,
        )
        click_menu_item(driver, sub)
    wait(
        driver,
        lambda d: (
            d.execute_script("return [app.state.navbarMode, app.state.subcategory]")
            == ["subcategory", sub]
        ),
        f"{category} / {sub}",
    )
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "nav table tbody tr"), "the table")


def text(element: WebElement) -> str:
    return (element.get_attribute("textContent") or "").strip()


def check_table(
    driver: WebDriver, items: list[Item], results: dict, screenshots: Path, offset: int
) -> None:
    """Match the table's rows to ``items`` by their labels, then view each row's result."""
    header = [text(th) for th in driver.find_elements(By.CSS_SELECTOR, "nav table thead th")]
    columns = [name for name in header if name]

    def row_key(path: str) -> tuple[str, ...]:
        labels = results[path]["labels"]
        if not labels:
            return (path,)
        return tuple(str(labels.get(column, "")) for column in columns)

    by_key: dict[tuple[str, ...], list[Item]] = {}
    for item in items:
        by_key.setdefault(row_key(item.path), []).append(item)
    for key, same in by_key.items():
        for item in same if len(same) > 1 else []:
            others = [other.path for other in same if other is not item]
            item.problems.append(
                f"same labels {list(key)} as {others}: the table shows one row for them"
            )
    rows = driver.find_elements(By.CSS_SELECTOR, "nav table tbody tr")
    keys = [tuple(text(td) for td in row.find_elements(By.TAG_NAME, "td")[:-1]) for row in rows]
    for key, same in by_key.items():
        if key not in keys:
            for item in same:
                item.problems.append(
                    f"no row in the table (columns {columns}, expected {list(key)})"
                )
    for index, key in enumerate(keys):
        same = by_key.get(key, [])
        if len(same) == 1:  # a row that stands for several results cannot be checked
            try:
                view(driver, index, same[0], results[same[0].path])
            except AssertionError as error:  # a timeout: record it, go on with the others
                same[0].problems.append(str(error))
            screenshot(driver, same[0], screenshots, offset + items.index(same[0]) + 1)
    for number, item in enumerate(items, start=offset + 1):
        if item.screenshot is None:
            screenshot(driver, item, screenshots, number)


def screenshot(driver: WebDriver, item: Item, screenshots: Path, number: int) -> None:
    name = re.sub(r"[^A-Za-z0-9-]+", "_", item.path)
    item.screenshot = screenshots / f"{number:02d}-{name}.png"
    driver.save_screenshot(str(item.screenshot))


def view(driver: WebDriver, index: int, item: Item, result: dict) -> None:
    """Click the row's eye button and check what the page shows."""
    row = driver.find_elements(By.CSS_SELECTOR, "nav table tbody tr")[index]
    eye = row.find_elements(By.CSS_SELECTOR, "td:last-child a")[0]
    kind = VIEWABLE.get(item.mime_type)
    if kind is None:
        check_download(eye, item)
        return
    eye.click()
    wait(
        driver,
        lambda d: (
            d.execute_script("return [app.state.content, app.state.resultPath]")
            == [kind, item.path]
        ),
        f"{item.path} to be shown",
    )
    if kind == "img":
        check_image(driver, item, result)
    else:
        check_frame(driver, item)


def check_image(driver: WebDriver, item: Item, result: dict) -> None:
    pane = driver.execute_script(CONTENT_PANE)
    try:
        state = WebDriverWait(driver, WAIT_S).until(
            lambda d: (s := d.execute_script(IMAGE_STATE, pane)) and s["complete"] and s
        )
    except TimeoutException:
        item.problems.append("no figure shown (no img, or it never finished loading)")
        return
    if len(state["src"] or "") != result["data_uri_chars"]:
        item.problems.append("the figure shown is not this result's")
    if state["width"] == 0:
        item.problems.append("broken figure: the browser cannot decode it (naturalWidth 0)")
    elif state["shown"] == 0:
        item.problems.append("the figure is not displayed (height 0)")


def check_frame(driver: WebDriver, item: Item) -> None:
    pane = driver.execute_script(CONTENT_PANE)
    frames = pane.find_elements(By.TAG_NAME, "iframe")
    if not frames:
        item.problems.append("no frame shown")
        return
    if item.mime_type == "application/pdf":
        return  # Chromium's PDF viewer is not a page selenium can read
    driver.switch_to.frame(frames[0])
    try:
        wait(
            driver,
            lambda d: d.execute_script("return document.readyState") == "complete",
            item.path,
        )
        body = driver.execute_script(
            "const b = document.body; if (!b) return null;"
            "const imgs = [...b.querySelectorAll('img')];"
            "return {text: b.innerText.trim().length, tables: b.querySelectorAll('table').length,"
            " broken: imgs.filter(i => i.complete && i.naturalWidth === 0).length,"
            " imgs: imgs.length};"
        )
    finally:
        driver.switch_to.default_content()
    if body is None or (body["text"] == 0 and body["imgs"] == 0):
        item.problems.append("the HTML page is empty")
    elif body["broken"]:
        item.problems.append(f"{body['broken']} of {body['imgs']} images in the page are broken")


def check_download(eye: WebElement, item: Item) -> None:
    """A result the report cannot show (markdown, CSV): its download must not be empty."""
    href = eye.get_attribute("href") or ""
    if not href.startswith("data:"):
        item.problems.append(f"download link is not an embedded data URI: {href[:60]!r}")
        return
    meta, _, payload = href[len("data:") :].partition(",")
    raw = (
        base64.b64decode(payload)
        if meta.endswith(";base64")
        else urllib.parse.unquote_to_bytes(payload)
    )
    if not raw.strip():
        item.problems.append("empty download")


def main(argv: list[str]) -> int:
    if not 2 <= len(argv) <= 3:
        print(__doc__)
        return 2
    report = Path(argv[1])
    screenshots = Path(argv[2]) if len(argv) == 3 else report.with_name("report-screenshots")
    started = time.monotonic()
    check = check_report(report, screenshots)
    for item in check.items:
        status = "; ".join(item.problems) if item.problems else "ok"
        print(f"{item.category} / {item.subcategory} / {item.path} [{item.mime_type}]: {status}")
    for message in check.console_errors:
        print(f"browser console: {message}")
    print(
        f"{len(check.items)} results, {len(check.problems)} problems, landing "
        f"{check.landing.stat().st_size} bytes, {time.monotonic() - started:.1f} s; "
        f"screenshots in {screenshots}"
    )
    return 1 if check.problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
