"""The annotation app (ratio_utils.human_eval.annotation_app): the label store and HTTP API on 127.0.0.1, and the page
itself in a real headless Chromium driven by Selenium (Debian's chromium + chromium-driver; tools/install_browser.sh
installs them). Browser tests skip, saying why, only where no browser can be had."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from forwarder import prefix_proxy, tcp_forward
from human_eval_helpers import make_packets
from loopback import serving

from ratio_utils.apps import annotate as annotate_cli
from ratio_utils.human_eval import annotation_app as annotate
from ratio_utils.human_eval import labels, packets
from ratio_utils.io import InputError
from ratio_utils.local_server import TOKEN_SLOT, allowed_host


@pytest.fixture
def packets_dir(tmp_path, tiny_benchmark) -> Path:
    return make_packets(tmp_path, tiny_benchmark)[0]


@contextlib.contextmanager
def _serving(packets_dir: Path, annotator: str = "ann1"):
    """A running app on a free port; stopped (and its lock released) afterwards."""
    with contextlib.closing(annotate.open_store(packets_dir, annotator)) as store:
        app = annotate.AnnotateServer(store, port=0)
        with serving(app):
            yield app


@pytest.fixture
def server(packets_dir):
    """A running app for ann1."""
    with _serving(packets_dir) as app:
        yield app


def _request(app, path: str, body: bytes | None = None, **headers: str) -> tuple[int, dict]:
    """(status, JSON answer) of a request as the app's own page makes it, with `headers` changed (None: left out)."""
    origin = app.url.rstrip("/")
    sent = {"Content-Type": "application/json", "Origin": origin, annotate.TOKEN_HEADER: app.token}
    sent = {k: v for k, v in {**sent, **headers}.items() if v is not None}
    request = urllib.request.Request(app.url + path, data=body, method="GET" if body is None else "POST", headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _post(app, change: dict, **headers: str) -> tuple[int, dict]:
    return _request(app, "api/answer", json.dumps(change).encode(), **headers)


def _state(app) -> dict:
    status, body = _request(app, "api/state")
    assert status == 200, body
    return body


def _label_rows(packets_dir: Path, annotator: str = "ann1") -> list[dict]:
    path = packets_dir / "labels" / f"{annotator}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# --- store and API, no browser ------------------------------------------------------------------------


def test_answers_are_saved_at_once_in_the_documented_format(server, packets_dir):
    state = _state(server)
    item = state["queries"][0]
    status, body = _post(server, {"etag": state["etag"], "kind": "label", "item": item["item"], "list": "B", "rank": 3,
                                  "value": "useful"})
    assert status == 200 and body["progress"] == {"complete": 0, "assigned": len(state["queries"])}
    status, body = _post(server, {"etag": body["etag"], "kind": "preference", "item": item["item"], "value": "tie"})
    assert status == 200
    rows = _label_rows(packets_dir)
    assert len(rows) == 20 and list(rows[0]) == list(packets.LABEL_FIELDS)
    marked = [r for r in rows if r["label"] is not None]
    assert [(r["list"], r["rank"], r["label"]) for r in marked] == [("B", 3, "useful")]
    assert marked[0]["candidate_id"] == item["lists"]["B"][2]["candidate_id"]
    assert {r["preference"] for r in rows} == {"tie"}
    # no unblinding information in a label row
    assert not {"setup", "system", "gold"} & set(rows[0])


def test_a_stale_version_is_refused_and_nothing_is_overwritten(server, packets_dir):
    state = _state(server)
    item = state["queries"][0]["item"]
    assert _post(server, {"etag": state["etag"], "kind": "label", "item": item, "list": "A", "rank": 1,
                          "value": "useful"})[0] == 200
    before = (packets_dir / "labels" / "ann1.jsonl").read_bytes()
    status, body = _post(server, {"etag": state["etag"], "kind": "label", "item": item, "list": "A", "rank": 1,
                                  "value": "not_useful"})
    assert status == 409 and "another tab" in body["error"]
    assert (packets_dir / "labels" / "ann1.jsonl").read_bytes() == before


def test_bad_answers_are_refused(server):
    state = _state(server)
    item = state["queries"][0]["item"]
    for change, message in (
        ({"kind": "label", "item": item, "list": "C", "rank": 1, "value": "useful"}, "no candidate"),
        ({"kind": "label", "item": item, "list": "A", "rank": 11, "value": "useful"}, "no candidate"),
        ({"kind": "label", "item": item, "list": "A", "rank": 1, "value": "maybe"}, "label must be"),
        ({"kind": "preference", "item": item, "value": "C"}, "preference must be"),
        ({"kind": "label", "item": "specify/unknown", "list": "A", "rank": 1, "value": "useful"}, "not assigned"),
    ):
        status, body = _post(server, {"etag": state["etag"], **change})
        assert status == 400 and message in body["error"]


def test_restart_resumes_and_unknown_annotators_are_refused(packets_dir):
    store = annotate.open_store(packets_dir, "ann1")
    item = store.items[0]
    store.answer({"etag": store.etag, "kind": "label", "item": item["item"], "list": "A", "rank": 2,
                  "value": "not_useful"})
    store.answer({"etag": store.etag, "kind": "comment", "item": item["item"], "value": "hard one"})
    store.close()
    again = annotate.open_store(packets_dir, "ann1")
    assert again.answers[item["item"]]["labels"]["A"][1] == "not_useful"
    assert again.answers[item["item"]]["comment"] == "hard one"
    again.close()
    with pytest.raises(annotate.AnnotateError, match="unknown annotator 'nobody'.*ann1, ann2"):
        annotate.open_store(packets_dir, "nobody")


def test_broken_packets_and_label_files_stop_the_app_with_file_and_line(packets_dir, capsys):
    lines = (packets_dir / "queries.jsonl").read_text().splitlines()
    broken = packets_dir.parent / "broken"
    shutil.copytree(packets_dir, broken)
    (broken / "queries.jsonl").write_text(lines[0] + "\n{not json\n")
    with pytest.raises(InputError, match=r"queries.jsonl:2: malformed JSON"):
        packets.load_packet(broken)
    assert annotate_cli.main(["--packets", str(broken), "--annotator", "ann1"]) == 2
    assert "queries.jsonl:2" in capsys.readouterr().err
    assert annotate_cli.main(["--packets", str(packets_dir), "--annotator", "eve"]) == 2
    assert "unknown annotator 'eve'" in capsys.readouterr().err
    labels = packets_dir / "labels" / "ann1.jsonl"
    labels.parent.mkdir()
    labels.write_text('{"annotator": "ann1"\n')
    with pytest.raises(InputError, match=r"ann1.jsonl:1"):
        annotate.open_store(packets_dir, "ann1")
    assert labels.read_text() == '{"annotator": "ann1"\n'  # left as it was


# --- security: only the app's own page reads and writes ---------------------------------------------


def test_writes_from_another_origin_without_the_token_or_not_as_json_are_refused(server, packets_dir):
    state = _state(server)
    item = state["queries"][0]["item"]
    change = {"etag": state["etag"], "kind": "label", "item": item, "list": "A", "rank": 1, "value": "useful"}
    port = server.server_address[1]
    for headers, status, message in (
        ({"Content-Type": "text/plain"}, 415, "application/json"),  # the blind cross-origin POST of the issue
        ({"Origin": f"http://127.0.0.1:{port + 1}"}, 403, "own page"),
        ({"Origin": "null"}, 403, "own page"),
        ({"Origin": None}, 403, "own page"),
        ({"Origin": f"http://localhost:{port}"}, 403, "own page"),  # another origin than the Host asked for
        ({annotate.TOKEN_HEADER: None}, 403, "token"),
        ({annotate.TOKEN_HEADER: "x" * 43}, 403, "token"),
        ({"Host": f"rebound.example:{port}"}, 403, "answers only requests for"),
        ({"Host": f"127.0.0.1:{port + 1}"}, 403, "answers only requests for"),
    ):
        got, body = _post(server, change, **headers)
        assert (got, message in body["error"]) == (status, True), (headers, body)
    assert not (packets_dir / "labels").exists()  # nothing was written
    # the page's own request, from either loopback name, is taken
    assert _post(server, change, Host=f"localhost:{port}", Origin=f"http://localhost:{port}")[0] == 200
    assert [r["label"] for r in _label_rows(packets_dir) if (r["list"], r["rank"]) == ("A", 1)] == ["useful"]


def test_reads_need_the_host_and_the_token_the_page_carries(server):
    port = server.server_address[1]
    # a DNS-rebinding page reaches 127.0.0.1 under its own name: refused, for the page and the state
    for path in ("", "api/state", "static/app.js"):
        status, body = _request(server, path, Host=f"rebound.example:{port}")
        assert status == 403 and "answers only requests for" in body["error"]
    status, body = _request(server, "api/state", **{annotate.TOKEN_HEADER: None})
    assert status == 403 and "token" in body["error"]
    request = urllib.request.Request(server.url)
    with urllib.request.urlopen(request, timeout=10) as response:
        page = response.read().decode()
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    assert f'content="{server.token}"' in page and TOKEN_SLOT not in page
    # a random token per server
    other = annotate.AnnotateServer(server.store, port=0)
    try:
        assert other.token != server.token and len(server.token) >= 32
    finally:
        other.server_close()


def test_allowed_hosts_tunnels_and_proxies_and_their_origins(server, packets_dir):
    """--allow-host NAME[:PORT]: the Host of a tunnel's or a proxy's page is answered, its Origin (http or https)
    may write; the token and the other checks stay."""
    state = _state(server)
    change = {"etag": state["etag"], "kind": "label", "item": state["queries"][0]["item"], "list": "A", "rank": 1,
              "value": "useful"}
    tunnel = {"Host": "localhost:9000", "Origin": "http://localhost:9000"}
    status, body = _post(server, change, **tunnel)
    assert status == 403 and "start it again with --allow-host localhost:9000" in body["error"], body
    server.allow_hosts(["LocalHost:9000", "hub.example.org"])
    assert server.allowed_hosts == {"localhost:9000", "hub.example.org"}
    for headers, code, message in (
        ({**tunnel, "Origin": "http://localhost:9001"}, 403, "own page"),
        ({**tunnel, "Origin": "http://127.0.0.1:9000"}, 403, "--allow-host naming the address"),
        ({**tunnel, annotate.TOKEN_HEADER: None}, 403, "token"),
        ({**tunnel, "Content-Type": "text/plain"}, 415, "application/json"),
        ({"Host": "hub.example.org:8443", "Origin": "https://hub.example.org:8443"}, 403, "answers only requests for"),
        ({"Host": "rebound.example:9000", "Origin": "http://rebound.example:9000"}, 403, "answers only requests for"),
    ):
        got, body = _post(server, change, **headers)
        assert (got, message in body["error"]) == (code, True), (headers, body)
    assert not (packets_dir / "labels").exists()
    status, body = _post(server, change, **tunnel)  # the page of the tunnel
    assert status == 200, body
    # JupyterHub over https: Host as the hub's proxy passes it on (or rewritten to the server's own), Origin the hub's
    for headers in ({"Host": "hub.example.org", "Origin": "https://hub.example.org"},
                    {"Origin": "https://hub.example.org"}):
        status, body = _post(server, {**change, "etag": body["etag"]}, **headers)
        assert status == 200, (headers, body)
    assert _request(server, "api/state", Host="hub.example.org")[0] == 200


def test_allow_host_takes_a_name_and_a_port_as_the_address_bar_shows_them(packets_dir, capsys):
    for given, expected in (("localhost:9000", "localhost:9000"), ("Hub.Example.org", "hub.example.org"),
                            ("[::1]:9000", "[::1]:9000"), ("127.0.0.1:9000", "127.0.0.1:9000")):
        assert allowed_host(given) == expected
    for given, message in (("http://localhost:9000/", "without http://"), ("*", "no wildcards"), ("", "no wildcards"),
                           ("localhost:0", "port is a number"), ("[::1", "IPv6")):
        with pytest.raises(ValueError, match=re.escape(message)):
            allowed_host(given)
        with pytest.raises(SystemExit):  # the command refuses it before it opens anything
            annotate_cli.main(["--packets", str(packets_dir), "--annotator", "ann1", "--allow-host", given])
        assert message in capsys.readouterr().err
    assert not (packets_dir / "labels").exists()


def test_the_command_passes_allowed_hosts_to_the_server(packets_dir, monkeypatch, capsys):
    seen = []

    def serve(self):  # instead of serving until Ctrl+C
        seen.append(set(self.allowed_hosts))
        self.server_close()

    monkeypatch.setattr(annotate.AnnotateServer, "serve_until_interrupted", serve)
    argv = ["--packets", str(packets_dir), "--annotator", "ann1", "--port", "0"]
    assert annotate_cli.main([*argv, "--allow-host", "localhost:9000", "--allow-host", "hub.example.org"]) == 0
    assert seen == [{"localhost:9000", "hub.example.org"}]
    assert "Also answers a page opened at hub.example.org, localhost:9000" in capsys.readouterr().out
    assert annotate_cli.main(argv) == 0 and seen[-1] == set()


def test_the_key_lives_apart_and_the_app_refuses_packets_beside_or_holding_a_key(tmp_path, tiny_benchmark, capsys):
    packets_dir, key = make_packets(tmp_path, tiny_benchmark)
    assert not key.resolve().is_relative_to(packets_dir.parent.resolve())
    assert packets.exposed_keys(packets_dir) == []
    with pytest.raises(ValueError, match="inside or beside the packets"):
        make_packets(tmp_path, tiny_benchmark, key=packets_dir.parent / "unblinding_key.jsonl")
    with pytest.raises(ValueError, match="inside or beside the packets"):
        make_packets(tmp_path, tiny_benchmark, key=packets_dir / "secret" / "k.jsonl")
    for where in (packets_dir.parent / "unblinding_key.jsonl", packets_dir / "labels" / "notes.jsonl",
                  packets_dir.parent / "unblinding_key.jsonl.bak"):
        where.parent.mkdir(exist_ok=True)
        shutil.copy(key, where)  # the key beside the packets, a renamed copy inside them, a backup
        assert packets.exposed_keys(packets_dir) == [where.resolve()]
        with pytest.raises(annotate.AnnotateError, match="unblinding key lies inside or beside"):
            annotate.open_store(packets_dir, "ann1")
        assert annotate_cli.main(["--packets", str(packets_dir), "--annotator", "ann1", "--port", "0"]) == 2
        assert "Annotators get the packets folder only" in capsys.readouterr().err
        where.unlink()
    annotate.open_store(packets_dir, "ann1").close()


# --- validation: bad packets stop at start, bad answers get a 400 -----------------------------------


@pytest.mark.parametrize("ranks, message", [
    ([*range(1, 10), 12], r"ranks \[1, .*, 12\]"),
    ([1, 2, 2, *range(4, 11)], r"ranks \[1, 2, 2,"),
    ([True, *range(2, 11)], "ranks"),
])
def test_packets_with_bad_ranks_stop_the_app_at_start(packets_dir, capsys, ranks, message):
    path = packets_dir / "queries.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for candidate, rank in zip(rows[1]["lists"]["B"], ranks):
        candidate["rank"] = rank
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=rf"queries.jsonl:2: list B .* {message}"):
        packets.load_packet(packets_dir)
    assert annotate_cli.main(["--packets", str(packets_dir), "--annotator", "ann1", "--port", "0"]) == 2
    assert "queries.jsonl:2" in capsys.readouterr().err


def test_malformed_answers_get_a_400_not_a_dropped_connection(server, packets_dir):
    state = _state(server)
    item = state["queries"][0]["item"]
    etag = state["etag"]
    for change, message in (
        ({"etag": etag, "kind": "preference", "item": item}, "has the fields"),  # no value
        ({"etag": etag, "kind": "label", "item": [item], "list": "A", "rank": 1, "value": "useful"}, "not assigned"),
        ({"etag": etag, "kind": "label", "item": {"a": 1}, "list": "A", "rank": 1, "value": "useful"}, "not assigned"),
        ({"etag": etag, "kind": "label", "item": item, "list": "A", "rank": True, "value": "useful"}, "no candidate"),
        ({"etag": etag, "kind": "label", "item": item, "list": ["A"], "rank": 1, "value": "useful"}, "no candidate"),
        ({"etag": etag, "kind": "label", "item": item, "list": "A", "rank": 1.0, "value": "useful"}, "no candidate"),
        ({"etag": etag, "kind": "label", "item": item, "list": "A", "rank": 1, "value": ["useful"]}, "label must be"),
        ({"etag": etag, "kind": "preference", "item": item, "value": {"A": 1}}, "preference must be"),
        ({"etag": etag, "kind": "comment", "item": item, "value": 5}, "a comment is text"),
        ({"etag": etag, "kind": "comment", "item": item, "value": "x" * (packets.MAX_COMMENT + 1)}, "at most 5000"),
        ({"etag": etag, "kind": "label", "item": item, "list": "A", "rank": 1, "value": "useful", "extra": 1},
         "has the fields"),
        ({"etag": 5, "kind": "comment", "item": item, "value": "x"}, "etag must be text"),
        ({"kind": ["label"]}, "unknown kind"),
        ([], "a JSON object"),
    ):
        status, body = _post(server, change)
        assert (status, message in body.get("error", "")) == (400, True), (change, body)
    status, body = _request(server, "api/answer", b"{not json")
    assert status == 400 and "not JSON" in body["error"]
    status, body = _request(server, "api/answer", b"x" * (server.max_body + 1))
    assert status == 413
    port = server.server_address[1]
    head = (f"POST /api/answer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\n{annotate.TOKEN_HEADER}: {server.token}\r\n")
    assert _raw(server, head + "Content-Length: -1\r\n\r\n{}").startswith(b"HTTP/1.0 400")
    assert _raw(server, head + "\r\n{}").startswith(b"HTTP/1.0 411")
    assert not (packets_dir / "labels").exists()


def _raw(app, request: str) -> bytes:
    """The server's whole answer to a hand-written request; a socket timeout (not a hang) if none comes."""
    with socket.create_connection(("127.0.0.1", app.server_address[1]), timeout=5) as sock:
        sock.sendall(request.encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


# --- the label file ----------------------------------------------------------------------------------


def test_a_label_file_edited_by_hand_is_taken_up_when_the_page_reloads(server, packets_dir):
    state = _state(server)
    item = state["queries"][0]["item"]
    status, body = _post(server, {"etag": state["etag"], "kind": "label", "item": item, "list": "A", "rank": 1,
                                  "value": "useful"})
    path = packets_dir / "labels" / "ann1.jsonl"
    path.write_text(path.read_text().replace('"useful"', '"not_useful"'))  # edited while the server runs
    status, _ = _post(server, {"etag": body["etag"], "kind": "label", "item": item, "list": "A", "rank": 2,
                               "value": "useful"})
    assert status == 409  # the page had not seen the edit
    reloaded = _state(server)
    assert reloaded["answers"][item]["labels"]["A"][0] == "not_useful" and reloaded["etag"] != body["etag"]
    status, _ = _post(server, {"etag": reloaded["etag"], "kind": "label", "item": item, "list": "A", "rank": 2,
                               "value": "useful"})
    assert status == 200
    assert [r["label"] for r in _label_rows(packets_dir)][:2] == ["not_useful", "useful"]
    # an edit that breaks the file: the page is told what is wrong, and nothing is written
    path.write_text(path.read_text().replace('"rank": 2', '"rank": "two"'))
    broken = path.read_bytes()
    status, body = _request(server, "api/state")
    assert status == 409 and "ann1.jsonl:2" in body["error"] and "no longer reads" in body["error"]
    status, _ = _post(server, {"etag": reloaded["etag"], "kind": "label", "item": item, "list": "A", "rank": 3,
                               "value": "useful"})
    assert status == 409 and path.read_bytes() == broken


def test_clearing_a_label_or_a_comment_clears_its_time(server, packets_dir):
    state = _state(server)
    item = state["queries"][0]["item"]
    etag = state["etag"]
    for change in ({"kind": "label", "list": "B", "rank": 4, "value": "useful"},
                   {"kind": "comment", "value": "unclear"},
                   {"kind": "preference", "value": "A"}, {"kind": "label", "list": "B", "rank": 4, "value": None},
                   {"kind": "comment", "value": ""}, {"kind": "preference", "value": None}):
        status, body = _post(server, {"etag": etag, "item": item, **change})
        assert status == 200
        etag = body["etag"]
    fields = ("label", "labelled_at", "comment", "comment_at", "preference", "preference_at")
    row = next(r for r in _label_rows(packets_dir) if (r["list"], r["rank"]) == ("B", 4))
    assert {f: row[f] for f in fields} == dict.fromkeys(fields)
    # and it reads back
    labels.read_label_file(packets_dir / "labels" / "ann1.jsonl", server.store.packet.candidate_id)


def test_a_failed_start_leaves_the_packets_as_they_were(packets_dir, capsys):
    def tree() -> dict[str, bytes]:
        return {str(p.relative_to(packets_dir)): p.read_bytes() if p.is_file() else b""
                for p in sorted(packets_dir.rglob("*"))}

    before = tree()
    with socket.socket() as busy:  # a port another program holds
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert annotate_cli.main(["--packets", str(packets_dir), "--annotator", "ann1",
                                  "--port", str(busy.getsockname()[1])]) == 2
    assert "cannot listen" in capsys.readouterr().err
    assert tree() == before
    (packets_dir / "labels").mkdir()
    (packets_dir / "labels" / "ann1.jsonl").write_text('{"annotator": "ann1"}\n')
    before = tree()
    assert annotate_cli.main(["--packets", str(packets_dir), "--annotator", "ann1", "--port", "0"]) == 2
    assert "ann1.jsonl:1" in capsys.readouterr().err
    assert tree() == before  # no lock file, nothing else


def test_one_server_per_annotator_and_packets_whatever_the_labels_folder(packets_dir, tmp_path):
    first = annotate.open_store(packets_dir, "ann1")
    try:
        with pytest.raises(annotate.AnnotateError, match="open in another annotate server"):
            annotate.open_store(packets_dir, "ann1", labels=tmp_path / "elsewhere")
        with pytest.raises(annotate.AnnotateError, match="open in another annotate server"):
            annotate.open_store(packets_dir / ".." / packets_dir.name, "ann1")  # the same folder, spelled otherwise
        annotate.open_store(packets_dir, "ann2").close()  # another annotator is fine
    finally:
        first.close()


# --- the page in a real browser -----------------------------------------------------------------------


def _wait_saved(browser):
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10).until(lambda b: b.find_element("id", "status").text == "All answers saved")


def _open(browser, app):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(app.url)
    WebDriverWait(browser, 10).until(lambda b: b.find_element("id", "query").text != "")


def _pressed(browser, css: str) -> bool:
    return browser.find_element("css selector", css).get_attribute("aria-pressed") == "true"


def test_browser_marking_preference_and_reload(browser, server, packets_dir):
    _open(browser, server)
    first = server.store.items[0]
    assert browser.find_element("id", "query").text == first["query"]
    assert browser.find_element("id", "move-name").text.lower() == first["move"]
    assert browser.find_element("css selector", "#cand-A-1 .text").text == first["lists"]["A"][0]["text"]
    browser.find_element("css selector", "#cand-A-1 .mark.useful").click()
    browser.find_element("css selector", "#cand-B-2 .mark.not_useful").click()
    browser.find_element("css selector", ".pref[data-value='B']").click()
    _wait_saved(browser)
    rows = {(r["list"], r["rank"]): r for r in _label_rows(packets_dir)}
    assert rows[("A", 1)]["label"] == "useful" and rows[("B", 2)]["label"] == "not_useful"
    assert rows[("A", 2)]["label"] is None and rows[("A", 1)]["preference"] == "B"
    _open(browser, server)  # a reload: a fresh page that knows only what the server saved
    assert _pressed(browser, "#cand-A-1 .mark.useful") and _pressed(browser, "#cand-B-2 .mark.not_useful")
    assert not _pressed(browser, "#cand-A-2 .mark.useful")
    assert _pressed(browser, ".pref[data-value='B']")


def test_browser_keyboard_shortcuts_and_completion(browser, server, packets_dir):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    _open(browser, server)
    total = len(server.store.items)
    assert browser.find_element("id", "progress-text").text == f"0 of {total} queries complete"
    keys = ActionChains(browser)
    for i in range(20):  # y / n mark the candidate under the cursor and move it down: A1..A10, then B1..B10
        keys.send_keys("y" if i % 3 == 0 else "n")
    # the cursor stays on B10: mark it useful; two up is B8: useful too; then preference tie
    keys.send_keys("y").send_keys(Keys.ARROW_UP).send_keys(Keys.ARROW_UP).send_keys("1").send_keys("t").perform()
    _wait_saved(browser)
    assert browser.find_element("id", "progress-text").text == f"1 of {total} queries complete"
    assert "complete" in browser.find_elements("css selector", ".dot")[0].get_attribute("class")
    rows = _label_rows(packets_dir)
    assert len(rows) == 20 and all(r["label"] is not None for r in rows)
    assert [r["label"] == "useful" for r in rows] == [i % 3 == 0 or i in (17, 19) for i in range(20)]
    assert {r["preference"] for r in rows} == {"tie"}
    assert server.store.progress()["complete"] == 1
    ActionChains(browser).send_keys("]").perform()
    assert browser.find_element("id", "position").text == f"Query 2 of {total}"
    # a comment is typed without triggering shortcuts, and saved
    ActionChains(browser).send_keys("c").send_keys("y n a").send_keys(Keys.ESCAPE).perform()
    _wait_saved(browser)
    second = server.store.items[1]["item"]
    assert server.store.answers[second]["comment"] == "y n a"
    assert all(v is None for v in server.store.answers[second]["labels"]["A"])
    # reload: the page opens at the first incomplete query and keeps the finished one
    _open(browser, server)  # a reload: a fresh page that knows only what the server saved
    assert browser.find_element("id", "position").text == f"Query 2 of {total}"


def _wait(browser, condition, timeout: float = 10):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(condition)


def _click(browser, css: str) -> None:
    """Click the element `css` names, found again if the page redraws it between finding and clicking."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda b: b.find_element("css selector", css).click() or True)


def _keys(browser, *keys: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    chain = ActionChains(browser)
    for key in keys:
        chain.send_keys(key)
    chain.perform()


def _rect(browser, css: str) -> dict:
    return browser.execute_script("return document.querySelector(arguments[0]).getBoundingClientRect().toJSON()", css)


def _in_view_below_the_bar(browser, css: str) -> bool:
    """Whether the element is whole on screen and not under the sticky header."""
    rect, bar = _rect(browser, css), _rect(browser, "#top")
    return rect["top"] >= bar["bottom"] and rect["bottom"] <= browser.execute_script("return window.innerHeight")


@contextlib.contextmanager
def _window(browser, width: int, height: int):
    size = browser.get_window_size()
    browser.set_window_size(width, height)
    try:
        yield
    finally:
        browser.set_window_size(size["width"], size["height"])


def _cursor(browser) -> str:
    return browser.find_element("css selector", ".candidate.cursor").get_attribute("id")


def test_browser_a_refused_answer_is_taken_back_shown_in_view_and_stops_the_page(browser, server, packets_dir):
    with _window(browser, 800, 600):
        _open(browser, server)
        first_tab = browser.current_window_handle
        browser.switch_to.new_window("tab")
        _open(browser, server)
        browser.find_element("css selector", "#cand-B-6 .mark.useful").click()
        _wait_saved(browser)
        browser.close()
        browser.switch_to.window(first_tab)
        _keys(browser, *"j" * 15)  # down to B6, far below the top of the page
        assert _cursor(browser) == "cand-B-6" and browser.execute_script("return window.scrollY") > 0
        before = (packets_dir / "labels" / "ann1.jsonl").read_bytes()
        _keys(browser, "n")
        _wait(browser, lambda b: b.find_element("id", "error").is_displayed())
        error = browser.find_element("id", "error").text
        assert "another tab" in error and "Reload this page" in error
        message = _rect(browser, "#error")  # in view although the page is scrolled down
        assert message["top"] >= 0 and message["bottom"] <= browser.execute_script("return window.innerHeight")
        # the refused "not useful" is taken back: the page does not show as saved what is not
        assert not _pressed(browser, "#cand-B-6 .mark.not_useful")
        assert browser.find_element("id", "status").text == "Not saving"
        # and it takes no more input, by key or by click
        _keys(browser, "y", "t", "]")
        assert not _pressed(browser, "#cand-B-7 .mark.useful") and not _pressed(browser, ".pref[data-value='tie']")
        assert not browser.find_element("css selector", "#cand-A-2 .mark.useful").is_enabled()
        assert browser.find_element("id", "position").text.startswith("Query 1 ")
        assert (packets_dir / "labels" / "ann1.jsonl").read_bytes() == before


def test_browser_an_answer_the_server_never_got_is_taken_back(browser, server, packets_dir):
    _open(browser, server)
    browser.find_element("css selector", "#cand-A-1 .mark.useful").click()
    _wait_saved(browser)
    server.shutdown()  # the server dies
    server.server_close()
    _click(browser, "#cand-A-1 .mark.not_useful")
    _click(browser, "#cand-A-2 .mark.useful")  # the list may be redrawn between the clicks (the first is taken back)
    _wait(browser, lambda b: b.find_element("id", "error").is_displayed())
    assert "could not reach the annotation server" in browser.find_element("id", "error").text
    assert _pressed(browser, "#cand-A-1 .mark.useful") and not _pressed(browser, "#cand-A-1 .mark.not_useful")
    assert not _pressed(browser, "#cand-A-2 .mark.useful")
    assert [r["label"] for r in _label_rows(packets_dir)][:2] == ["useful", None]


def test_browser_the_comment_box_holds_what_the_server_takes(browser, server, monkeypatch):
    monkeypatch.setattr(annotate, "MAX_COMMENT", 40)
    _open(browser, server)
    assert "of at most 40 characters" in browser.find_element("id", "comment-count").text
    _keys(browser, "c", "word " * 12)  # 60 characters typed
    comment = lambda: server.store.answers.get(server.store.items[0]["item"], {}).get("comment")  # noqa: E731
    _wait(browser, lambda b: comment() == "word " * 8)  # the first 40 characters
    assert not browser.find_element("id", "error").is_displayed()
    assert "40 of at most 40 characters" in browser.find_element("id", "comment-count").text


def test_browser_small_window_keeps_the_cursor_in_view(browser, server):
    with _window(browser, 800, 600):
        _open(browser, server)
        assert _rect(browser, "#list-B")["top"] > _rect(browser, "#list-A")["bottom"]  # stacked
        seen = []
        for key in ["\ue014", *"j" * 4, "\ue012", *"k" * 6, "\ue014", *"\ue013" * 12, *"j" * 19, *"\ue013" * 19]:
            _keys(browser, key)  # \ue012 / \ue013 / \ue014: arrow left / up / right
            seen.append(_cursor(browser))
            assert _in_view_below_the_bar(browser, ".candidate.cursor"), (key, seen)
        assert seen[0] == "cand-B-1" and seen[-1] == "cand-A-1"


def test_browser_a_long_unbroken_token_wraps(browser, packets_dir):
    path = packets_dir / "queries.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    first = json.loads((packets_dir / "assignments.json").read_text())["ann1"][0]
    for row in rows:
        if row["item"] == first:
            row["lists"]["B"][2]["text"] = "see " + "x" * 300 + " here"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with _serving(packets_dir) as app:
        for width, height in ((1400, 1000), (800, 600)):
            with _window(browser, width, height):
                _open(browser, app)
                page = browser.execute_script("return [document.documentElement.scrollWidth, "
                                              "document.documentElement.clientWidth]")
                assert page[0] <= page[1], (width, page)
                assert _rect(browser, "#list-B")["width"] <= page[1]
                # wrapped over lines
                assert _rect(browser, "#cand-B-3")["height"] > _rect(browser, "#cand-B-2")["height"]


def test_browser_resume_cue_capitals_and_a_comment_typed_as_the_tab_closes(browser, server, packets_dir):
    store, first = server.store, server.store.items[0]
    for rank in (1, 2, 3):
        store.answer({"etag": store.etag, "kind": "label", "item": first["item"], "list": "A", "rank": rank,
                      "value": "useful"})
    _open(browser, server)
    assert _cursor(browser) == "cand-A-4"  # the first candidate not labelled yet
    assert not browser.find_element("id", "complete").is_displayed()
    _keys(browser, "Y", "N", *"n" * 14)  # Shift or Caps Lock: the same as y / n
    assert _cursor(browser) == "cand-B-10" and not browser.find_element("id", "complete").is_displayed()
    _keys(browser, "y")
    _wait_saved(browser)
    assert browser.find_element("id", "complete").is_displayed()
    assert "Query complete" in browser.find_element("id", "complete").text
    assert [r["label"] for r in _label_rows(packets_dir)][3:5] == ["useful", "not_useful"]
    # a comment typed and the tab closed at once, well within the 600 ms the page waits before sending
    _keys(browser, "c", "seen at the last moment")
    browser.get("about:blank")
    _wait(browser, lambda b: store.answers[first["item"]]["comment"] == "seen at the last moment", timeout=5)


# --- the page through a tunnel and under a proxy's path prefix (docs/tunnels.md) ------------------------------


def test_browser_through_a_port_forward_and_under_a_path_prefix(browser, server, packets_dir):
    from selenium.webdriver.common.by import By

    port, first = server.server_address[1], server.store.items[0]
    with tcp_forward(port) as forwarded:  # ssh -L <forwarded>:localhost:<port>
        url = f"http://127.0.0.1:{forwarded}/"
        browser.get(url)  # not allowed: the page says what to do instead of loading
        assert (f"start it again with --allow-host 127.0.0.1:{forwarded}"
                in browser.find_element(By.TAG_NAME, "body").text)
        server.allow_hosts([f"127.0.0.1:{forwarded}"])
        _open_at(browser, url)
        assert browser.find_element("id", "query").text == first["query"]
        browser.find_element("css selector", "#cand-A-1 .mark.useful").click()
        _wait_saved(browser)
    # JupyterHub: https://hub/user/NAME/proxy/<port>/, jupyter-server-proxy strips the prefix
    with prefix_proxy() as proxy:
        url = f"{proxy}/user/tester/proxy/{port}/"
        server.allow_hosts([proxy.removeprefix("http://")])
        _open_at(browser, url)
        assert browser.current_url == url
        assert browser.execute_script("return document.styleSheets[0].cssRules.length") > 0  # static/app.css
        assert _pressed(browser, "#cand-A-1 .mark.useful")  # the state of the first write
        browser.find_element("css selector", "#cand-B-2 .mark.not_useful").click()
        _wait_saved(browser)
    rows = {(r["list"], r["rank"]): r["label"] for r in _label_rows(packets_dir)}
    assert rows[("A", 1)] == "useful" and rows[("B", 2)] == "not_useful"


def _open_at(browser, url: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    WebDriverWait(browser, 10).until(lambda b: b.find_element("id", "query").text != "")
