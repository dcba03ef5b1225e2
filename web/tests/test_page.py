"""The page in a real browser: headless Chromium (Debian's chromium and chromium-driver, driven by
selenium) opens build/web/index.html from file://, is given setups through its form and its
address, and shows the figures `build/memplan --json` gives for them, formatted as the command
line formats them; errors show as the command line's line next to the field. It writes
build/web/screenshot.png of a known setup. Skipped, visibly, where Chromium or the page is missing."""
import json
import os
import shutil
import subprocess
import urllib.parse

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD", "build")
PAGE = os.path.join(ROOT, BUILD, "web", "index.html")
MEMPLAN = os.environ.get("MEMPLAN_BIN", os.path.join(ROOT, BUILD, "memplan"))
GIB = 2 ** 30

selenium = pytest.importorskip("selenium")
from selenium import webdriver                                   # noqa: E402
from selenium.webdriver.common.by import By                      # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait          # noqa: E402

# (address, options document): a handful of setups across dimensions, each planned and searched by auto
SETUPS = [
    {"model": "llama2-7b", "gpus": 16, "gpu": "h100-80gb", "act_ckpt": "full", "strategy": "ddp,zero3,fsdp-full"},
    {"model": "llama2-7b", "gpus": 2, "gpu": "rtx4090", "lora": 16, "quant_base": "nf4", "seq": 2048},
    {"model": "llama2-13b", "gpus": 8, "tp": 2, "pp": 2, "microbatches": 8, "strategy": "ddp"},
    {"model": "mixtral-8x7b", "gpus": 8, "offload": "optimizer", "strategy": "zero3", "batch": 2},
]


def cli(args, cwd=None):
    r = subprocess.run([MEMPLAN] + args, capture_output=True, text=True, cwd=cwd)
    return r


def cli_json(command, doc, cwd=None):
    args = [command, "--json"] + [f"--{k.replace('_', '-')}={v}" for k, v in doc.items()]
    r = cli(args, cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def browser():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("skipped: Debian's chromium and chromium-driver are not installed (scripts/deps.sh installs them)")
    if not os.path.exists(PAGE):
        pytest.skip(f"skipped: {PAGE} is missing (make web)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,2300",
              "--allow-file-access-from-files"):
        opts.add_argument(a)
    d = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=driver))
    yield d
    d.quit()


def load(browser, doc):
    browser.get("about:blank")   # a fresh page: the link opened as a new visit would
    browser.get("file://" + PAGE + "#" + urllib.parse.urlencode(doc))
    wait_ready(browser)


def wait_ready(browser):
    WebDriverWait(browser, 60).until(lambda d: d.execute_script("return document.body.dataset.state") == "ready")


def cells(browser, table):
    """Per strategy row: {class of the cell: (text, data-v)}."""
    out = []
    for tr in browser.find_elements(By.CSS_SELECTOR, f"#{table} tr")[2:]:
        row = {}
        for td in tr.find_elements(By.TAG_NAME, "td"):
            row.setdefault(td.get_attribute("class") or "", (td.text, td.get_attribute("data-v")))
        row["_name"] = tr.find_element(By.TAG_NAME, "td").text
        out.append(row)
    return out


def check_figures(browser, doc):
    """The page's tables against the command line's document for the same setup."""
    want = cli_json("plan", doc)
    mem = cells(browser, "memory")
    assert [r["_name"] for r in mem] == [s["name"] for s in want["strategies"]]
    for row, s in zip(mem, want["strategies"]):
        for t in ("params", "grads", "comm_buffers", "optimizer", "transient", "overhead", "peak"):
            v = s["memory"][t]
            assert row[t] == (f"{v / GIB:.2f}", repr(v) if isinstance(v, float) else str(v)), (s["name"], t)
        assert row["headroom"][0] == f"{s['headroom_bytes'] / GIB:.2f}"
        assert row["max_batch"][0] == str(s["max_micro_batch"])
        assert row["fits oom" if not s["fits"] else "fits"][0] == ("yes" if s["fits"] else "OOM" if not s["gpu_fits"] else "host")
    step = cells(browser, "step")
    for row, s in zip(step, want["strategies"]):
        t = s["time"]
        assert row["step"][0] == f"{t['step_s'] * 1e3:.2f}" and row["compute"][0] == f"{t['compute_s'] * 1e3:.2f}"
        assert row["all_gpus"][0] == f"{t['tokens_per_s']:.0f}"
        assert row["wire"][0] == f"{s['comm']['bytes_per_gpu'] / GIB:.3f}"
    comm = [r for r in cells(browser, "comm") if "payload" in r]
    colls = [(s["name"], c) for s in want["strategies"] for c in s["comm"]["collectives"]]
    for row, (name, c) in zip(comm, colls):
        assert row["_name"] == name and row["payload"][0] == f"{c['payload_bytes'] / GIB:.3f}"
        assert row["ms"][0] == f"{c['seconds'] * 1e3:.2f}"
    table = cli(["plan"] + [f"--{k.replace('_', '-')}={v}" for k, v in doc.items()]).stdout
    rec_line = [ln for ln in table.splitlines() if ln.startswith("recommendation: ")]
    assert [browser.find_element(By.ID, "recommendation").text] == rec_line
    # the chart: seven terms per strategy, one curve per strategy
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart rect.bar")) == 7 * len(want["strategies"])
    assert {p.get_attribute("data-strategy") for p in browser.find_elements(By.CSS_SELECTOR, "#chart path.curve")} == \
        {s["name"] for s in want["strategies"]}
    r = cli(["auto", "--json"] + [f"--{k.replace('_', '-')}={v}" for k, v in doc.items()])
    shown = browser.find_element(By.ID, "auto-explain").get_attribute("textContent")
    if r.returncode != 0:   # auto refuses the setup: its line where the explanation goes
        assert shown == r.stderr.strip()[len("memplan: "):]
        return
    pick = json.loads(r.stdout)
    assert shown == pick["auto"]["explain"]
    if pick["auto"]["found"]:
        assert browser.find_element(By.ID, "auto-pick").text.startswith(pick["recommendation"]["strategy"] + " ")
    assert browser.find_element(By.ID, "table-text").get_attribute("textContent") == table


def test_a_setup_typed_into_the_form_shows_the_command_lines_figures_and_is_in_the_address(browser):
    browser.get("file://" + PAGE)
    wait_ready(browser)
    form = {"model": "gpt2-xl", "gpus": "8", "batch": "2", "act_ckpt": "full"}
    for name, value in form.items():
        el = browser.find_element(By.NAME, name)
        el.clear()
        el.send_keys(value)
    browser.execute_script("document.body.dataset.state = ''; document.getElementById('setup')"
                           ".dispatchEvent(new Event('change'))")
    wait_ready(browser)
    check_figures(browser, {k: int(v) if v.isdigit() else v for k, v in form.items()})
    shared = urllib.parse.parse_qs(urllib.parse.urlparse(browser.current_url).fragment)
    assert {k: v[0] for k, v in shared.items()} == form
    os.makedirs(os.path.dirname(PAGE), exist_ok=True)
    browser.save_screenshot(os.path.join(os.path.dirname(PAGE), "screenshot.png"))


@pytest.mark.parametrize("doc", SETUPS, ids=[d["model"] + "-" + str(i) for i, d in enumerate(SETUPS)])
def test_a_shared_link_reproduces_the_setup_with_the_command_lines_figures(browser, doc):
    load(browser, doc)
    for k, v in doc.items():
        assert browser.find_element(By.NAME, k).get_attribute("value") == str(v)
    check_figures(browser, doc)


def test_an_error_shows_the_command_lines_line_next_to_its_field(browser):
    load(browser, {"model": "gpt2-xl", "gpus": 8, "batch": 0})
    line = cli(["--model", "gpt2-xl", "--gpus", "8", "--batch", "0"]).stderr.strip()
    assert line.startswith("memplan: ")
    label = browser.find_element(By.NAME, "batch").find_element(By.XPATH, "..")
    assert "bad" in label.get_attribute("class")
    assert label.find_element(By.CLASS_NAME, "err").text == line[len("memplan: "):]


def test_a_pasted_deepspeed_config_plans_as_the_file_does(browser, tmp_path):
    ds = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
          "zero_optimization": {"stage": 3}}
    load(browser, {"model": "llama2-7b", "gpus": 8})
    browser.execute_script("const t = document.querySelector('[name=config_text]'); t.value = arguments[0];"
                           "document.body.dataset.state = ''; t.form.dispatchEvent(new Event('change'))", json.dumps(ds))
    wait_ready(browser)
    (tmp_path / "config").write_text(json.dumps(ds))   # the page names a pasted config "config"
    want = cli_json("plan", {"model": "llama2-7b", "gpus": 8, "config": "config"}, cwd=tmp_path)
    assert [r["_name"] for r in cells(browser, "memory")] == ["zero3"]
    peak = cells(browser, "memory")[0]["peak"]
    assert peak == (f"{want['strategies'][0]['memory']['peak'] / GIB:.2f}", str(want["strategies"][0]["memory"]["peak"]))


def test_the_page_served_over_http_plans_as_from_a_file(browser):
    """make web-serve's way: the same page from a local HTTP server."""
    import functools
    import http.server
    import threading
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass
    handler = functools.partial(Quiet, directory=os.path.dirname(PAGE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        doc = {"model": "gpt2", "gpus": 2, "strategy": "ddp,zero3"}
        browser.get("about:blank")
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/index.html#" + urllib.parse.urlencode(doc))
        wait_ready(browser)
        check_figures(browser, doc)
    finally:
        server.shutdown()
