"""Inspiration-explorer latency on the default corpus's index (issue 29): printed, not a timed test.

    .venv/bin/python benchmarks/explorer.py [--params params/default.yaml] [--from-year 2019] [--queries 20]
        [--screenshot docs/explorer.png]

Builds (or reuses: the explorer's `--build-missing`) the search index of `--model` (default all-MiniLM-L6-v2, the base
of every fine-tuned retriever here, so it costs what each of them costs) over the run's sentence table, papers from
`--from-year` on (as the README's example; `--from-year 0` indexes every paper), starts the explorer with that model in
all three columns (three encodes per statement, as with the three per-move retrievers), and sends statements to its
HTTP endpoint as the page does. Prints start-up time, then the end-to-end answer time for all three moves (median, 90th
percentile, max) against the goal of 1 s, and the share of it spent in the columns (encode + exact search + rows). With
`--screenshot`, also draws the page after one statement, a context opened and a hit marked, in headless Chromium.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STATEMENTS = [
    "Automatic metrics for text generation correlate poorly with human judgements.",
    "Neural machine translation degrades on rare words.",
    "Annotating training data for named entity recognition is expensive.",
    "Parsers trained on newswire perform poorly on social media text.",
    "Summarisation models hallucinate facts that are not in the source document.",
]
GOAL_S = 1.0


def ask(server, statement: str, retrievers: str) -> dict:
    body = json.dumps({"statement": statement, "retrievers": retrievers}).encode()
    headers = {"Content-Type": "application/json", "Origin": server.url.rstrip("/"), server.token_header: server.token}
    request = urllib.request.Request(server.url + "api/ask", data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def screenshot(server, statement: str, retrievers: str, out: Path) -> None:
    from urllib.parse import urlencode

    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1500,1150",
                "--hide-scrollbars"):
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options,
                               service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"))
    try:
        browser.get(server.url + "#" + urlencode({"q": statement, "r": retrievers, "k": "4"}))
        wait = WebDriverWait(browser, 60, ignored_exceptions=[StaleElementReferenceException])
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "li.hit-item")) == 12)
        browser.find_element(By.CSS_SELECTOR, "#col-broaden li.hit-item .context summary").click()
        browser.find_element(By.CSS_SELECTOR, "#col-address li.hit-item .mark.useful").click()
        wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#col-address li.hit-item .mark.useful")
                   .get_attribute("aria-pressed") == "true")
        out.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(out))
    finally:
        browser.quit()
    print(f"screenshot: {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--from-year", type=int, default=2019)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--screenshot", type=Path, default=None)
    args = parser.parse_args()

    import faiss
    import torch

    from ratio_utils.config import load_config
    from ratio_utils.retrieval import explorer

    faiss.omp_set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    cfg = load_config(args.params)
    started = time.perf_counter()
    loaded = explorer.Explorer.load(cfg, model=args.model, build_missing=True, from_year=args.from_year or None,
                                    progress=lambda line: print(line) if line.startswith("building") else None)
    print("explorer start-up (models loaded once, the index built if it was missing): "
          f"{time.perf_counter() - started:.1f} s")
    with tempfile.TemporaryDirectory() as tmp:
        server = explorer.ExplorerServer(loaded, explorer.JudgmentLog(Path(tmp) / "judgments.jsonl"), port=0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            ask(server, "warm-up statement", args.model)
            total, columns = [], []
            for i in range(args.queries):
                t0 = time.perf_counter()
                answer = ask(server, STATEMENTS[i % len(STATEMENTS)] + f" ({i})", args.model)
                total.append(time.perf_counter() - t0)
                columns.append(sum(c["seconds"] for c in answer["columns"]))
            size = answer["columns"][0]["size"]
            print(f"{args.queries} statements, three moves each, {size:,}-sentence index, {args.threads} threads:")
            print(f"  end to end over HTTP: median {statistics.median(total):.3f} s, "
                  f"p90 {statistics.quantiles(total, n=10)[-1]:.3f} s, max {max(total):.3f} s "
                  f"(goal {GOAL_S:.0f} s: median / goal = {statistics.median(total) / GOAL_S:.2f})")
            print(f"  in the three columns (encode + search + rows): median {statistics.median(columns):.3f} s "
                  f"({statistics.median(columns) / statistics.median(total):.0%} of end to end)")
            if args.screenshot:
                screenshot(server, STATEMENTS[0], args.model, args.screenshot)
        finally:
            server.shutdown()
            server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
