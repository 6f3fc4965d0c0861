"""The inspiration explorer (ratio_utils.apps.explorer): three columns for one statement, marks saved to the
user's JSONL file, refusals (stale or foreign index, untrained model, long statement, cross-origin writes), and the
page in a real browser. Fixture corpus and index with a fake encoder; one test loads a real model through the CLI."""

from __future__ import annotations

import contextlib
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from fake_encoder import FakeEncoder
from forwarder import prefix_proxy, tcp_forward
from loopback import serving

from ratio_utils.apps import explorer, search
from ratio_utils.io import InputError
from ratio_utils.local_server import RequestError
from ratio_utils.schema import MOVES, Move

# (paper, para, sent, text) — invented for the test: two short papers read in order.
_SENTENCES = [
    ("P1", 0, 0, "Neural parsers need large treebanks."),
    ("P1", 0, 1, "Dropout between recurrent layers reduces overfitting in parsers."),
    ("P1", 0, 2, "We evaluate on the Penn Treebank."),
    ("P2", 0, 0, "Gazetteers bootstrap named entity labels cheaply."),
    ("P2", 0, 1, "Seed rules bootstrap named entity labels from gazetteers."),
    ("P2", 0, 2, "Distant supervision labels entities from a knowledge base."),
]
STATEMENT = "How can parsers avoid overfitting?"


@pytest.fixture
def index_folder(tmp_path):
    sentences = pd.DataFrame(_SENTENCES, columns=["paper_id", "para", "sent", "text"])
    papers = pd.DataFrame({"paper_id": ["P1", "P2"], "title": ["Regularising parsers", "Cheap NER labels"],
                           "year": [2011, 2015]})
    rows, counts = search.sentence_rows(sentences, papers)
    folder = tmp_path / "index"
    search.build_index(rows, FakeEncoder(doc_prefix="document: "), folder, model=None, counts=counts,
                       sources={"sentences.parquet": "a" * 64})
    return folder


def _column(move: Move, folder, retrievers="per-move") -> explorer.Column:
    index = search.SearchIndex.open(folder, "fake-model-1")
    return explorer.Column(move, retrievers, model=f"fake__{move.value}", index=folder.name, size=index.index.ntotal,
                           encoder=FakeEncoder(), search=index, query_prefix="query: ")


@pytest.fixture
def the_explorer(index_folder):
    """Per-move columns over the fixture index; the unified retriever is not trained."""
    return explorer.Explorer({
        "per-move": {move: _column(move, index_folder) for move in MOVES},
        "unified": {move: explorer.Column(move, "unified", problem="no unified retriever: run notebook 13")
                    for move in MOVES},
    }, top=3)


def test_one_statement_fills_three_columns_with_paper_and_context(the_explorer):
    answer = the_explorer.ask(STATEMENT, "per-move")
    assert [c["move"] for c in answer["columns"]] == ["address", "broaden", "specify"]
    for column in answer["columns"]:
        assert column["problem"] is None and len(column["hits"]) == 3 and column["model"] == f"fake__{column['move']}"
    top = answer["columns"][0]["hits"][0]
    assert top["sentence"] == "Dropout between recurrent layers reduces overfitting in parsers."
    assert (top["title"], top["year"], top["paper_id"]) == ("Regularising parsers", 2011, "P1")
    assert (top["previous"], top["next"]) == ("Neural parsers need large treebanks.",
                                              "We evaluate on the Penn Treebank.")


def test_an_untrained_retriever_says_so_instead_of_failing(the_explorer):
    answer = the_explorer.ask(STATEMENT, "unified")
    assert all(c["hits"] == [] and "run notebook 13" in c["problem"] for c in answer["columns"])
    info = the_explorer.info()
    assert info["retrievers"]["unified"][0]["problem"] and info["retrievers"]["per-move"][0]["size"] == 6


def test_bad_requests_are_refused_with_a_reason(the_explorer):
    with pytest.raises(RequestError, match="at most 1000 characters"):
        the_explorer.ask("x" * (explorer.MAX_STATEMENT + 1), "per-move")
    with pytest.raises(RequestError, match="empty"):
        the_explorer.ask("  ", "per-move")
    with pytest.raises(RequestError, match="unknown retrievers"):
        the_explorer.ask(STATEMENT, "bm25")
    with pytest.raises(RequestError, match="top is a whole number"):
        the_explorer.ask(STATEMENT, "per-move", top=0)
    with pytest.raises(RequestError, match="unknown retrievers"):
        the_explorer.ask(STATEMENT, ["per-move"])
    with pytest.raises(RequestError, match="not available: no unified retriever"):
        explorer.JudgmentLog(Path("unused.jsonl")).mark(the_explorer.column("unified", "address"), STATEMENT, "d",
                                                        "useful")


def test_an_index_of_another_model_or_corpus_is_refused(index_folder):
    model = search.describe_model(index_folder)  # generic prefixes; the fake encoder's fingerprint differs
    encoders = {str(model.path): FakeEncoder(fingerprint="fake-model-2")}
    column = explorer.open_column(Move.ADDRESS, "per-move", model, index_folder, encoders, None, "rebuild")
    assert column.search is None and "stale index" in column.problem
    encoders = {str(model.path): FakeEncoder()}
    column = explorer.open_column(Move.ADDRESS, "per-move", model, index_folder, encoders,
                                  {"sentences.parquet": "b" * 64}, "rebuild")
    assert "built from another sentences.parquet" in column.problem
    column = explorer.open_column(Move.ADDRESS, "per-move", model, index_folder, encoders,
                                  {"sentences.parquet": "a" * 64}, "rebuild")
    assert column.problem is None and column.size == 6


def test_marks_are_saved_taken_back_and_read_again(the_explorer, tmp_path):
    path = tmp_path / "marks" / "judgments.jsonl"
    log = explorer.JudgmentLog(path)
    column = the_explorer.column("per-move", "address")
    hit = the_explorer.ask(STATEMENT, "per-move")["columns"][0]["hits"][1]
    marks = log.mark(column, STATEMENT, hit["docid"], "useful")
    assert marks["address"] == {hit["docid"]: "useful"} and marks["specify"] == {}
    log.mark(column, STATEMENT, hit["docid"], "not_useful")  # a second mark replaces the first
    row = json.loads(path.read_text())
    assert (row["label"], row["sentence"], row["paper_id"], row["model"]) == ("not_useful", hit["sentence"],
                                                                            hit["paper_id"], "fake__address")
    assert explorer.JudgmentLog(path).marks(STATEMENT)["address"] == {hit["docid"]: "not_useful"}
    assert explorer.JudgmentLog(path).marks("another statement")["address"] == {}
    log.mark(column, STATEMENT, hit["docid"], None)
    assert path.read_text() == ""
    with pytest.raises(RequestError, match="no sentence 'nope'"):
        log.mark(column, STATEMENT, "nope", "useful")
    with pytest.raises(RequestError, match="label is one of"):
        log.mark(column, STATEMENT, hit["docid"], "maybe")
    path.write_text('{"statement": "s", "move": "address", "docid": "d", "label": "useful"}\n{broken\n')
    with pytest.raises(InputError, match=r"judgments.jsonl:2"):
        explorer.JudgmentLog(path)


def test_the_listen_address_is_this_machine_unless_named():
    assert explorer.listen_address("127.0.0.1") == "127.0.0.1"
    with pytest.raises(search.SearchError, match="every network"):
        explorer.listen_address("0.0.0.0")
    with pytest.raises(search.SearchError, match="IP address"):
        explorer.listen_address("example.org")


# --- over HTTP -------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _serving(the_explorer, path):
    server = explorer.ExplorerServer(the_explorer, explorer.JudgmentLog(path), port=0)
    with serving(server):
        yield server


@pytest.fixture
def server(the_explorer, tmp_path):
    with _serving(the_explorer, tmp_path / "judgments.jsonl") as running:
        yield running


def _post(server, path: str, body: dict, **headers) -> tuple[int, dict]:
    sent = {"Content-Type": "application/json", "Origin": server.url.rstrip("/"), server.token_header: server.token}
    sent = {k: v for k, v in {**sent, **headers}.items() if v is not None}
    request = urllib.request.Request(server.url + path, data=json.dumps(body).encode(), method="POST", headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_writes_only_from_the_page_and_long_statements_refused(server, tmp_path):
    status, answer = _post(server, "api/ask", {"statement": STATEMENT, "retrievers": "per-move"})
    assert status == 200 and len(answer["columns"]) == 3 and answer["marks"]["address"] == {}
    docid = answer["columns"][0]["hits"][0]["docid"]
    mark = {"statement": STATEMENT, "retrievers": "per-move", "move": "address", "docid": docid, "label": "useful"}
    port = server.server_address[1]
    for headers, code, message in (({"Origin": f"http://127.0.0.1:{port + 1}"}, 403, "own page"),
                                   ({"Origin": None}, 403, "own page"),
                                   ({"Content-Type": "text/plain"}, 415, "application/json"),
                                   ({server.token_header: None}, 403, "token"),
                                   ({"Host": f"rebound.example:{port}"}, 403, "answers only requests for")):
        assert _post(server, "api/mark", mark, **headers)[0] == code, headers
        assert message in _post(server, "api/mark", mark, **headers)[1]["error"]
    assert not (tmp_path / "judgments.jsonl").exists()  # nothing was written
    assert _post(server, "api/mark", mark) == (200, {"marks": {"address": {docid: "useful"}, "broaden": {},
                                                               "specify": {}}})
    status, body = _post(server, "api/ask", {"statement": "y" * 1001, "retrievers": "per-move"})
    assert status == 400 and "at most 1000 characters" in body["error"]


# --- the page in a real browser -------------------------------------------------------------------------------


def test_browser_type_a_statement_expand_a_context_mark_and_reload(browser, server, tmp_path):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server.url)
    wait = WebDriverWait(browser, 15, ignored_exceptions=[StaleElementReferenceException])  # the page re-renders
    wait.until(lambda b: b.find_element(By.ID, "status").text == "Ready")
    browser.find_element(By.ID, "statement").send_keys(STATEMENT)
    browser.find_element(By.ID, "go").click()
    wait.until(lambda b: all(len(b.find_elements(By.CSS_SELECTOR, f"#col-{m.value} li.hit-item")) == 3 for m in MOVES))
    first = browser.find_element(By.CSS_SELECTOR, "#col-address li.hit-item")
    assert (first.find_element(By.CSS_SELECTOR, ".sentence").text
            == "Dropout between recurrent layers reduces overfitting in parsers.")
    assert "Regularising parsers · 2011 · P1" in first.find_element(By.CSS_SELECTOR, ".paper").text
    assert "model fake__broaden" in browser.find_element(By.CSS_SELECTOR, "#col-broaden .source").text
    after = first.find_element(By.CSS_SELECTOR, ".context .after")
    assert not after.is_displayed()
    first.find_element(By.CSS_SELECTOR, ".context summary").click()
    assert after.is_displayed() and "We evaluate on the Penn Treebank." in after.text
    docid = first.get_attribute("data-docid")
    first.find_element(By.CSS_SELECTOR, ".mark.useful").click()
    pressed = f"#col-address li[data-docid='{docid}'] .mark.useful"
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, pressed).get_attribute("aria-pressed") == "true")
    assert json.loads((tmp_path / "judgments.jsonl").read_text())["docid"] == docid
    assert browser.find_element(By.CSS_SELECTOR,
                                f"#col-address li[data-docid='{docid}'] details").get_attribute("open")
    browser.refresh()  # the statement is in the address: the page asks again and shows the saved mark
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, pressed))
    assert browser.find_element(By.CSS_SELECTOR, pressed).get_attribute("aria-pressed") == "true"
    assert browser.find_element(By.ID, "statement").get_attribute("value") == STATEMENT
    browser.find_element(By.ID, "retrievers").send_keys("unified")
    wait.until(lambda b: "Not available" in b.find_element(By.CSS_SELECTOR, "#col-specify").text)


def _ask_and_mark(browser, url: str, move: str) -> str:
    """Open the page at `url`, ask the statement, mark the first hit of `move` useful; its docid."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    wait = WebDriverWait(browser, 15, ignored_exceptions=[StaleElementReferenceException])
    wait.until(lambda b: b.find_element(By.ID, "status").text == "Ready")
    assert browser.execute_script("return document.styleSheets[0].cssRules.length") > 0  # static/explorer.css
    browser.find_element(By.ID, "statement").send_keys(STATEMENT)
    browser.find_element(By.ID, "go").click()
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, f"#col-{move} li.hit-item")) == 3)
    first = browser.find_element(By.CSS_SELECTOR, f"#col-{move} li.hit-item")
    docid = first.get_attribute("data-docid")
    first.find_element(By.CSS_SELECTOR, ".mark.useful").click()
    pressed = f"#col-{move} li[data-docid='{docid}'] .mark.useful"
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, pressed).get_attribute("aria-pressed") == "true")
    return docid


def test_browser_through_a_port_forward_and_under_a_path_prefix(browser, server, tmp_path):
    """docs/tunnels.md: `ssh -L` to another port, and JupyterHub's /user/NAME/proxy/<port>/ (prefix stripped)."""
    from selenium.webdriver.common.by import By

    port = server.server_address[1]
    with tcp_forward(port) as forwarded:
        url = f"http://127.0.0.1:{forwarded}/"
        browser.get(url)  # not allowed: the page says what to do instead of loading
        assert f"--allow-host 127.0.0.1:{forwarded}" in browser.find_element(By.TAG_NAME, "body").text
        server.allow_hosts([f"127.0.0.1:{forwarded}"])  # what --allow-host does
        address = _ask_and_mark(browser, url, "address")
    with prefix_proxy() as proxy:
        server.allow_hosts([proxy.removeprefix("http://")])
        specify = _ask_and_mark(browser, f"{proxy}/user/tester/proxy/{port}/", "specify")
        assert browser.current_url.startswith(f"{proxy}/user/tester/proxy/{port}/#q=")
    marks = [json.loads(line) for line in (tmp_path / "judgments.jsonl").read_text().splitlines()]
    assert [(m["move"], m["docid"], m["label"]) for m in marks] == [("address", address, "useful"),
                                                                    ("specify", specify, "useful")]


# --- the command, with a real model ------------------------------------------------------------------------------


@pytest.mark.models
def test_one_command_builds_what_is_missing_and_loads_a_real_model_for_every_move(cfg, monkeypatch, capsys):
    cfg.paths.interim.mkdir(parents=True)
    pd.DataFrame(_SENTENCES, columns=["paper_id", "para", "sent", "text"]).to_parquet(cfg.paths.sentences)
    pd.DataFrame({"paper_id": ["P1", "P2"], "title": ["Regularising parsers", "Cheap NER labels"],
                  "year": [2011, 2015]}).to_parquet(cfg.paths.papers)
    served = {}

    def fake_serve(self):  # instead of serving until Ctrl+C: one request through the loaded explorer
        served["answer"] = self.explorer.ask("Labelling entities by hand is expensive.", "all-MiniLM-L6-v2")
        self.server_close()

    monkeypatch.setattr(explorer.ExplorerServer, "serve_until_interrupted", fake_serve)
    args = ["--model", "all-MiniLM-L6-v2", "--port", "0", "--top", "2", "--build-missing", "--from-year", "2012"]
    assert explorer.main(args) == 0
    err = capsys.readouterr().err
    assert "building the index all-MiniLM-L6-v2" in err  # once, for the one model three columns share
    assert re.search(r"per-move / address\s+not available: no fine-tuned address retriever", err)
    assert re.search(r"all-MiniLM-L6-v2 / specify\s+3 sentences", err)  # the 2015 paper only
    hits = {c["move"]: [h["paper_id"] for h in c["hits"]] for c in served["answer"]["columns"]}
    assert hits == {move.value: ["P2", "P2"] for move in MOVES}
    assert explorer.main(args) == 0 and "building" not in capsys.readouterr().err  # built once, then reused
    assert explorer.main(["--host", "0.0.0.0"]) == 2


def test_the_rerank_switch_reranks_each_column_through_the_stub_and_says_unavailable_without_a_key(
        cfg, the_explorer, monkeypatch, openai_stub):
    from ratio_utils.apps.search_rerank import SearchReranker

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    plain = the_explorer.ask(STATEMENT, "per-move")
    assert all(c["rerank"] is None for c in plain["columns"])
    with pytest.raises(RequestError, match="rerank is true or false"):
        the_explorer.ask(STATEMENT, "per-move", rerank="yes")
    unset = explorer.Explorer(the_explorer.columns, top=3, reranker=lambda: SearchReranker(cfg))
    without_key = unset.ask(STATEMENT, "per-move", rerank=True)
    for column, before in zip(without_key["columns"], plain["columns"]):
        assert column["rerank"]["status"] == "unavailable" and "no API key" in column["rerank"]["message"]
        assert [h["docid"] for h in column["hits"]] == [h["docid"] for h in before["hits"]]
    moves_asked = []

    def answer(body):
        moves_asked.append(body["messages"][0]["content"].split("The move is ")[1].split(":")[0])
        return json.dumps({"ranking": [2, 1]})

    stub = openai_stub("sk-explorer", responder=answer)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-explorer")
    monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
    switched = explorer.Explorer(the_explorer.columns, top=3, reranker=lambda: SearchReranker(cfg, max_retries=0))
    with _serving(switched, cfg.paths.explorer_judgments) as running:
        status, reranked = _post(running, "api/ask", {"statement": STATEMENT, "retrievers": "per-move",
                                                        "rerank": True})
    assert status == 200, reranked
    assert sorted(moves_asked) == ["Address", "Broaden", "Specify"]  # one request per move: its own prompt
    for column, before in zip(reranked["columns"], plain["columns"]):
        assert column["rerank"]["status"] == "reranked"
        first = [h["docid"] for h in before["hits"]]
        assert [h["docid"] for h in column["hits"]] == [first[1], first[0], first[2]]
