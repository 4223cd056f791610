"""The explorer page in a real browser: Debian's headless Chromium driven by Selenium through the system's
ChromeDriver (nothing downloads a browser). Skipped, saying why, where the browser or driver is missing.

The page is opened from disk; the test fails on any console error or network request, and checks that
every panel draws, that the numbers shown are the model's, that the slider moves through the snapshots,
that a graph node shows its numbers, and that a panel exports. The screenshot is kept as an artefact
(in $TA_TEST_ARTIFACTS when set, else the test's temporary folder).
"""

import json
import os
import shutil
import time

import numpy as np
import pytest

from tinygrad_attn.explorer import explore_run
from tinygrad_attn.explorer.snapshots import Snapshots
from tinygrad_attn.runs import TrainConfig, load_run
from tinygrad_attn.train import train
from tinygrad_attn.viz import attention_maps

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        pytest.skip("no headless Chromium here: apt-get install chromium chromium-driver (the browser test is skipped)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1300,1600"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    folder = tmp_path_factory.mktemp("explorer")
    train(TrainConfig(task="reverse", steps=30, out=str(folder / "run"), progress=False, target=2.0), [Snapshots(3)])
    explorer = explore_run(str(folder / "run"), "3 1 4 1 5 9 2 6")
    path = explorer.save(folder / "explain.html")
    return path, explorer, str(folder / "run")


def _value(driver, selector):
    return float(driver.find_element("css selector", selector).get_attribute("data-v"))


def test_the_page_works_in_headless_chromium(browser, page, tmp_path):
    path, explorer, run = page
    started = time.perf_counter()
    browser.get("file://" + os.path.abspath(path))
    opened = time.perf_counter() - started
    sections = ["overview", "head", "inputs", "graph", "training", "check"]
    for section in sections:
        drawn = browser.find_elements("css selector", f"#{section} svg, #{section} table")
        assert drawn, f"the {section} panel drew nothing"

    # the numbers shown are the model's: P of layer 0 head 0, then of layer 1 head 2 after a click
    task, model, _ = load_run(run)
    _, batch = task.answer(model, "3 1 4 1 5 9 2 6")
    maps = attention_maps(task, model, batch)["self-attention"]
    assert abs(_value(browser, '#maps svg[data-name="P"] rect[data-i="9"][data-j="2"]') - maps[0][0, 9, 2]) < 1e-3
    browser.find_element("id", "thumb-1-2").click()
    assert "layers.1.self_attn" in browser.find_element("id", "head-title").text
    assert "head 2" in browser.find_element("id", "head-title").text
    assert abs(_value(browser, '#maps svg[data-name="P"] rect[data-i="12"][data-j="4"]') - maps[1][2, 12, 4]) < 1e-3
    shown_ds = _value(browser, '#maps svg[data-name="dS"] rect[data-i="12"][data-j="4"]')
    assert shown_ds == explorer.data["attention"][1]["dS"][2][12][4]

    # the slider moves through the snapshots: the label and the heatmap change
    before = [c.get_attribute("data-v") for c in browser.find_elements("css selector", '#snapshot-row svg rect.cell')]
    first_label = browser.find_element("id", "snapshot-label").text
    browser.execute_script("const s = document.getElementById('snapshot'); s.value = s.max;"
                           "s.dispatchEvent(new Event('input'));")
    after = [c.get_attribute("data-v") for c in browser.find_elements("css selector", '#snapshot-row svg rect.cell')]
    assert browser.find_element("id", "snapshot-label").text != first_label and before != after
    last = explorer.data["snapshots"]
    assert f"step {last['steps'][-1]}" in browser.find_element("id", "snapshot-label").text

    # a graph node shows its value and gradient; a panel exports as SVG and as PNG
    browser.find_element("css selector", '#graphs g.node[data-op="FlashAttention"]').click()
    assert "FlashAttention" in browser.find_element("id", "nodeinfo").text
    assert "gradient: min" in browser.find_element("id", "nodeinfo").text
    backward = browser.find_elements("css selector", '#graphs svg[data-kernel="backward"] g.node')
    assert len(backward) == len(explorer.data["graph"]["backward"]["nodes"]) > 10  # the backward, drawn as a graph
    softmax = '#graphs svg[data-kernel="backward"] g.node[data-op="Softmax (forward)"]'
    browser.find_element("css selector", softmax).click()
    assert "backward · Softmax (forward)" in browser.find_element("id", "nodeinfo").text
    svg = browser.execute_script("return window.explorer.exportPanel(document.getElementById('head'), 'svg')")
    assert svg.startswith("<svg") and "rect" in svg
    browser.execute_script("window.explorer.exportPanel(document.getElementById('overview'), 'png')")
    for _ in range(50):
        if browser.execute_script("return document.body.dataset.lastPng"):
            break
        time.sleep(0.1)
    assert browser.execute_script("return document.body.dataset.lastPng")

    # nothing went wrong and nothing was fetched
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    requests = [json.loads(e["message"])["message"] for e in browser.get_log("performance")]
    urls = [m["params"]["request"]["url"] for m in requests if m.get("method") == "Network.requestWillBeSent"]
    assert all(u.startswith(("file:", "data:", "blob:")) for u in urls), urls

    folder = os.environ.get("TA_TEST_ARTIFACTS") or str(tmp_path)
    os.makedirs(folder, exist_ok=True)
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1300, height + 40)
    shot = os.path.join(folder, "explorer.png")
    browser.save_screenshot(shot)
    assert os.path.getsize(shot) > 50_000
    print(f"opened in {opened:.2f} s; page {explorer.stats['bytes']} bytes; screenshot {shot}")
    assert np.isfinite(opened)


def test_the_notebook_view_renders_inside_its_frame(browser, page, tmp_path):
    _, explorer, _ = page
    host = tmp_path / "notebook.html"  # what a notebook front end puts in an output cell, twice
    host.write_text(f"<html><body>{explorer._repr_html_()}{explorer._repr_html_()}</body></html>")
    browser.get("file://" + str(host))
    frames = browser.find_elements("css selector", "iframe")
    assert len(frames) == 2
    for frame in frames:
        browser.switch_to.frame(frame)
        assert browser.find_elements("css selector", "#thumbs svg") and "reverse" in browser.find_element(
            "tag name", "h1").text
        browser.switch_to.default_content()
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def _js_fmt(v, lang):
    """The page's `fmt`: 4 significant digits, exponent form beyond [1e-3, 1e4), a decimal comma in French."""
    if v is None:
        return "NaN"
    if abs(v) >= 1e4 or (v != 0 and abs(v) < 1e-3):
        mantissa, exponent = f"{v:.3e}".split("e")
        text = f"{mantissa}e{int(exponent):+d}".replace("e+", "e+")
    else:
        text = format(v, "#.4g").rstrip(".")
    return text.replace(".", ",") if lang == "fr" else text


# every text of the page inside its box: SVG text inside its picture, HTML captions, legends, notes and
# titles no wider than the room they have
_OVERFLOW = """
const bad = [];
for (const svg of document.querySelectorAll("svg")) {
  const box = svg.getBoundingClientRect();
  if (!box.width) continue;
  for (const t of svg.querySelectorAll("text")) {
    const r = t.getBoundingClientRect();
    if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
      bad.push(`svg text "${t.textContent}" outside its picture`);
  }
}
for (const e of document.querySelectorAll(".caption, .legend, .note, .formula, h1, h2, td, th, #readout, #nodeinfo"))
  if (e.scrollWidth > e.clientWidth + 1)
    bad.push(`${e.className || e.tagName} "${e.textContent.slice(0, 60)}" overflows`);
return bad;
"""


@pytest.mark.parametrize("lang, words", [
    ("en", ["Forward: every head", "Check: the formulas", "predicts", "The causal mask"]),
    ("fr", ["Passe avant : les poids", "Vérification : les formules", "prédit", "Le masque causal"]),
])
def test_the_page_in_each_language_shows_every_number_whole_and_no_text_outside_its_box(browser, page, tmp_path,
                                                                                        lang, words):
    _, _, run = page
    explorer = explore_run(run, "3 1 4 1 5 9 2 6", lang=lang)
    path = explorer.save(tmp_path / f"explain-{lang}.html")
    browser.get("file://" + os.path.abspath(path))
    assert browser.execute_script("return document.documentElement.lang") == lang
    text = browser.find_element("tag name", "body").text
    for word in words:
        assert word in text, word
    other = {"en": "Passe avant", "fr": "Forward: every"}[lang]
    assert other not in text  # no panel left in the other language
    for layer, head in ((0, 0), (1, 2)):
        browser.execute_script(f"window.explorer.select({layer}, {head})")
        assert not browser.execute_script(_OVERFLOW)
        panel = explorer.data["attention"][layer]
        legends = browser.find_elements("css selector", "#maps .legend")
        assert len(legends) == 4  # P, dP, dS and the mask with the kernel's tiles
        for legend, key in zip(legends[1:], ("dP", "dS")):  # the largest |value| printed is the data's, whole
            largest = max(abs(v) for row in panel[key][head] for v in row if v is not None)
            assert legend.text.endswith(_js_fmt(largest, lang)), (legend.text, largest)
    assert "pooled" not in text and "regroupées" not in text  # T = 16: nothing was pooled, so nothing says so
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


@pytest.mark.parametrize("lang", ["en", "fr"])
def test_a_translation_page_with_narrow_maps_cuts_no_text(browser, tmp_path, lang):
    """Cross-attention over three words: the narrow panels where legends and titles used to be cut off."""
    train(TrainConfig(task="translate", steps=3, out=str(tmp_path / "tr"), progress=False))
    explorer = explore_run(str(tmp_path / "tr"), "le chat dort", lang=lang)
    browser.get("file://" + os.path.abspath(explorer.save(tmp_path / "tr.html")))
    for layer, panel in enumerate(explorer.data["attention"]):
        browser.execute_script(f"window.explorer.select({layer}, 0)")
        assert not browser.execute_script(_OVERFLOW), panel["name"]
        legend = browser.find_elements("css selector", "#maps .legend")[2].text  # dS's
        largest = max(abs(v) for row in panel["dS"][0] for v in row if v is not None)
        assert legend.endswith(_js_fmt(largest, lang)), (legend, largest)
