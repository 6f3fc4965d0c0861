"""Redraw docs/annotation_app.png: the annotation app (ratio_utils.human_eval.annotation_app) in headless Chromium.

    PYTHONPATH=. .venv/bin/python tools/annotation_screenshot.py [--out docs/annotation_app.png]

The packet is a small fixture written here (sentences invented for the picture, none from a corpus),
so the screenshot shows no study data. Needs selenium and Debian's chromium + chromium-driver, as
the browser tests do (tools/bootstrap.sh).
"""

from __future__ import annotations

import argparse
import base64
import shutil
import tempfile
import threading
from pathlib import Path

from ratio_utils.human_eval import annotation_app as annotate
from ratio_utils.human_eval.packets import StudyPackets, write_packets

QUERY = "Speech recognisers trained on read news degrade sharply on spontaneous conversational speech."
LIST_A = [
    "We fine-tune the acoustic model on a small set of transcribed dialogues collected from call centres.",
    "Disfluencies such as fillers and restarts are modelled as explicit tokens in the output vocabulary.",
    "The corpus contains 400 hours of broadcast news recorded over six years.",
    "Speed and tempo perturbation of the training audio narrows the gap between read and spontaneous speech.",
    "Our evaluation reports word error rate on both test sets.",
    "A language model trained on forum posts better predicts informal word sequences.",
    "Annotators were paid an hourly rate above the local minimum wage.",
    "Pseudo-labelling untranscribed conversations lets the recogniser adapt without manual transcripts.",
    "Section 4 describes the decoding setup in detail.",
    "Speaker-adaptive training reduces the variability that casual pronunciation introduces.",
]
LIST_B = [
    "Pseudo-labelling untranscribed conversations lets the recogniser adapt without manual transcripts.",
    "Spontaneous speech contains more overlapping turns than scripted speech.",
    "We release our alignment scripts under an open licence.",
    "Self-supervised pretraining on unlabelled podcast audio makes the model robust to informal speaking styles.",
    "The recordings were downsampled to 16 kHz.",
    "Previous work has focused mostly on clean, read speech.",
    "Multi-condition training mixes clean and noisy recordings in each batch.",
    "Table 3 lists the hyperparameters of every model.",
    "Lattice rescoring with a conversational language model recovers many of the dropped function words.",
    "We thank the anonymous reviewers for their comments.",
]
OTHER_QUERIES = [  # so that the progress squares show a finished and an open query
    ("Labelling emotions in text by hand is slow.",
     ["Weak labels come from emoji in the posts.", "The data are in English."]),
    ("Topic models ignore the order of words.",
     ["A recurrent layer adds word order to the topic model.", "We use ten topics."]),
]


def fixture_packets(folder: Path) -> Path:
    """A three-query packet for one annotator, 'demo'; returns the packet folder."""
    def item(number: int, query: str, a: list[str], b: list[str]) -> dict:
        ids = {text: f"c{number}{i:02d}" for i, text in enumerate(dict.fromkeys(a + b))}
        lists = {name: [{"rank": r, "candidate_id": ids[t], "text": t} for r, t in enumerate(texts, start=1)]
                 for name, texts in (("A", a), ("B", b))}
        return {"item": f"address/q{number}", "move": "address", "query_id": f"q{number}", "query": query,
                "lists": lists, "subfield": None}

    items = [item(1, QUERY, LIST_A, LIST_B)] + [item(n, q, c, c[::-1])
                                                for n, (q, c) in enumerate(OTHER_QUERIES, start=2)]
    packets = StudyPackets(items, {"demo": [i["item"] for i in items]}, key=[], report={"notes": []})
    write_packets(packets, folder / "study" / "packets", folder / "key" / "unblinding_key.jsonl",
                  folder / "study" / "report.json", k=10)
    return folder / "study" / "packets"


def label(store: annotate.LabelStore, item: str, marks: dict[tuple[str, int], str]) -> None:
    for (name, rank), value in marks.items():
        store.answer({"etag": store.etag, "kind": "label", "item": item, "list": name, "rank": rank, "value": value})


def screenshot(url: str, out: Path, width: int = 1400) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},1000",
                "--hide-scrollbars"):
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options,
                               service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"))
    try:
        browser.get(url)
        WebDriverWait(browser, 10).until(lambda b: b.find_element("id", "query").text != "")
        size = browser.execute_script("return [document.documentElement.clientWidth, "
                                      "document.documentElement.scrollHeight]")
        # the whole page, not only the window: Chrome DevTools' screenshot beyond the viewport
        shot = browser.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}})
        out.write_bytes(base64.b64decode(shot["data"]))
    finally:
        browser.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parents[1] / "docs" / "annotation_app.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = annotate.open_store(fixture_packets(Path(tmp)), "demo")
        label(store, "address/q2", {(n, r): "not_useful" if r == 2 else "useful" for n in "AB" for r in (1, 2)})
        label(store, "address/q1", {("A", 1): "useful", ("A", 2): "useful", ("A", 3): "not_useful", ("A", 4): "useful",
                                    ("A", 5): "not_useful", ("B", 1): "useful"})
        server = annotate.AnnotateServer(store, port=0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            screenshot(server.url, args.out)
        finally:
            server.shutdown()
            server.server_close()
            store.close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
