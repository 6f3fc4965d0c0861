"""Fixtures shared by every test module: the shared data folder, a config writing to a temporary
root, a loopback HTTP server, OpenAI-compatible stubs (`openai_stub`), and a tiny benchmark directory in the
official release layout (sentences written for the tests, not taken from any corpus).

Without ../shared (or $RATIO_SHARED) the tests about the real data (the `shared_dir` fixture) are skipped
with the reason; tests of code behaviour use the invented corpus in tests/fixtures/corpus/mini instead. The
download fallback the stages use without ../shared is exercised against the loopback server
(tests/test_corpus.py, tests/test_lexicon.py).

The suite leaves the user's caches alone: every cache default of the commands (RATIO_EMBEDDING_CACHE,
RATIO_MODEL_CACHE) points under one session temp folder, and the run fails if ~/.cache/ratio changed anyway
(`user_caches_untouched`)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from loopback import serving
from openai_stub_server import StubOpenAI

from ratio_utils.config import find_checkout, load_config
from ratio_utils.dataset.benchmark import write_pairs, write_pool
from ratio_utils.schema import Move, Split, sentence_id

FIXTURES = Path(__file__).parent / "fixtures"
# The cache defaults of the commands (retrieval.embedding_cache, models.packaged), each under ~/.cache/ratio otherwise
CACHE_ENV = ("RATIO_EMBEDDING_CACHE", "RATIO_MODEL_CACHE")
USER_CACHE = Path.home() / ".cache" / "ratio"


def cache_snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """{file relative to `folder`: (size, mtime in ns)}; empty when the folder does not exist."""
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session", autouse=True)
def user_caches_untouched(tmp_path_factory):
    """Every cache default under a session temp folder (subprocesses inherit it); the run fails if ~/.cache/ratio
    changed during the suite all the same (a test that deletes the variable and writes to the default)."""
    before = cache_snapshot(USER_CACHE)
    caches = tmp_path_factory.mktemp("caches")
    with pytest.MonkeyPatch.context() as patch:
        for name in CACHE_ENV:
            patch.setenv(name, str(caches / name.removeprefix("RATIO_").lower()))
        yield caches
    after = cache_snapshot(USER_CACHE)
    if after != before:
        changed = sorted(set(after) ^ set(before) | {k for k in set(after) & set(before) if after[k] != before[k]})
        pytest.fail(f"the test suite changed {USER_CACHE}: {changed[:5]} (a test wrote to a cache default; point it "
                    "under tmp_path)", pytrace=False)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = Path(os.environ.get("RATIO_SHARED", find_checkout().parent / "shared")).resolve()
    if not (path / "corpora").is_dir():
        pytest.skip(f"shared data not found at {path} (set RATIO_SHARED); the stages would download it")
    return path


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    """The default config with every output under tmp_path (shared: ../shared or $RATIO_SHARED, if present)."""
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    return load_config()


class _QuietFileHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def loopback(tmp_path) -> Iterator[tuple[Path, str]]:
    """A static file server on 127.0.0.1: (the folder it serves, its base URL)."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(_QuietFileHandler, directory=str(served))
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as base_url:
        yield served, base_url


@pytest.fixture
def openai_stub() -> Iterator[Callable[..., StubOpenAI]]:
    """Starts OpenAI-compatible servers on 127.0.0.1 (tests/openai_stub_server.py), each stopped when the test ends:
    `openai_stub(api_key, **options)` returns a running StubOpenAI."""
    with contextlib.ExitStack() as running:
        def start(api_key: str, **options) -> StubOpenAI:
            """api_key: the key the stub takes (any other is answered 401).
            options: StubOpenAI's keyword arguments (responder, batch_polls_before_done, batch_fail_once, ...)."""
            return running.enter_context(StubOpenAI(api_key, **options))

        yield start


# (move, query, gold, marker) — invented for the tests.
_TINY_PAIRS = {
    Move.ADDRESS: [
        ("Our parser overfits badly when the training treebank is small.",
         "we add dropout between the recurrent layers of the parser.", "to address this issue"),
        ("Annotating named entities by hand is slow and expensive.",
         "we bootstrap labels from a gazetteer and a few seed rules.", "to reduce this cost"),
        ("Beam search often returns generic and repetitive responses.",
         "we rerank the beam with a diversity-promoting objective.", "to mitigate this problem"),
    ],
    Move.BROADEN: [
        ("Adding noise to word embeddings improved tagging accuracy.",
         "perturbing inputs during training acts as a regulariser for many neural models.", "more generally"),
        ("Our tagger transfers well from news to biomedical abstracts.",
         "models trained on one domain often carry over to related domains.", "more broadly"),
    ],
    Move.SPECIFY: [
        ("Morphologically rich languages pose problems for statistical translation.",
         "turkish words can carry several suffixes that each map to a separate english word.", "for example"),
        ("Several features capture the syntactic context of a word.",
         "the part-of-speech tags of the two preceding words are used as features.", "in particular"),
        ("Evaluation metrics for summarisation reward lexical overlap.",
         "rouge counts the n-grams shared by a system summary and the references.", "for instance"),
    ],
}
_TINY_DISTRACTORS = [
    ("the model is slower than the baseline on long documents.", "explicit_contrast"),
    ("the same trend holds for the smaller treebanks.", "explicit_similarity"),
    ("we report results averaged over five random seeds.", "common_irrelevant"),
]


@pytest.fixture
def embedding_cache_in_tmp(tmp_path, monkeypatch):
    """The commands' default on-disk embedding cache (~/.cache/ratio/embeddings) stays out of the tests, and each test
    starts with an empty in-process memo."""
    from ratio_utils.retrieval import dense

    monkeypatch.setenv("RATIO_EMBEDDING_CACHE", str(tmp_path / "embedding-cache"))
    dense.clear_embedding_memo()
    yield
    dense.clear_embedding_memo()


@pytest.fixture
def tiny_benchmark(tmp_path) -> Path:
    """A benchmark directory in the release layout; every split holds the same tiny data."""
    root = tmp_path / "tiny_benchmark"
    pool_rows = []
    for move, rows in _TINY_PAIRS.items():
        frame = pd.DataFrame(
            {
                "corpusid": [f"P{i:02d}-{move.value}" for i in range(len(rows))],
                "year": 2010,
                "publicationdate": pd.NaT,
                "queryTerm": [marker for _, _, marker in rows],
                "queryTerm_group": move.value,
                "querySentence": [q for q, _, _ in rows],
                "goldSentence": [g for _, g, _ in rows],
                "query_id": [sentence_id(q) for q, _, _ in rows],
                "gold_id": [sentence_id(g) for _, g, _ in rows],
                "marker_source": "manual",
                "marker_has_anaphor": [("this" in m) for _, _, m in rows],
            }
        )
        for split in (Split.TRAIN, Split.VALIDATION, Split.TEST):
            write_pairs(frame, root, move, split)
        pool_rows += [(sentence_id(g), g, move.value, c) for g, c in zip(frame.goldSentence, frame.corpusid)]
    pool_rows += [(sentence_id(t), t, cat, "D00-0000") for t, cat in _TINY_DISTRACTORS]
    pool = pd.DataFrame(pool_rows, columns=["docid", "text", "source", "corpusid"])
    for split in (Split.TRAIN, Split.VALIDATION, Split.TEST):
        write_pool(pool, root, split)
    return root


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through Selenium, for the pages of the annotation app and the explorer."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements.txt)")
    from selenium.webdriver.chrome.service import Service

    binary, driver = (shutil.which("chromium") or "/usr/bin/chromium",
                      shutil.which("chromedriver") or "/usr/bin/chromedriver")
    if not (Path(binary).exists() and Path(driver).exists()):
        pytest.skip("no browser: install Debian's chromium and chromium-driver (tools/install_browser.sh does as "
                    "root; run_tests.sh calls it)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    chrome.set_page_load_timeout(30)
    yield chrome
    chrome.quit()
