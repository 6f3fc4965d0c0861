"""The installed package works anywhere (issue 46): a non-editable copy of ratio_utils (`pip install --no-deps
--target DIR`, then PYTHONPATH=DIR) runs every console script from a temp folder that is no checkout, on the tiny
fixture: evaluate, mteb, search index + query, explorer start + one request, export, card, annotate start, train
(--dry-run), models list/check, run --list / --check-models, s2orc's errors; any other script --help. Each script is
the real entry point pip wrote under DIR/bin, run as a subprocess with the working directory outside the source tree,
so a path into the checkout or into site-packages shows up as a failure here. Also: no `REPO_ROOT /` path outside the
checkout finder, and search and explorer import without IPython.

About two minutes on 2 shared cores (MiniLM loads four times); marked `slow` and `models`, which CI runs
(run_tests.sh deselects neither)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from human_eval_helpers import make_packets

from ratio_utils.config import find_checkout

CHECKOUT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.models]

# the sentence table of `ratio-search index` (as the corpus stage writes it): invented sentences of two papers
_SENTENCES = [
    ("P1", 0, 0, "Neural parsers need large treebanks."),
    ("P1", 0, 1, "Dropout between recurrent layers reduces overfitting in parsers."),
    ("P1", 0, 2, "We evaluate on the Penn Treebank."),
    ("P2", 0, 0, "Annotating named entities by hand is slow."),
    ("P2", 0, 1, "We bootstrap labels from a gazetteer and a few seed rules."),
    ("P2", 0, 2, "Rouge counts the n-grams shared by a summary and its references."),
]


@dataclass(frozen=True)
class Installation:
    """A non-editable ratio_utils and its console scripts.

    python: the interpreter that imports it.
    bin: the folder of its console scripts (ratio-*).
    pythonpath: the folder to put on PYTHONPATH (an install with --target), or None (a venv).
    """

    python: Path
    bin: Path
    pythonpath: Path | None


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installation:
    """ratio_utils installed non-editable into a folder (`pip install --no-deps --target`), or the fresh venv of
    tools/check_wheel.sh when $RATIO_INSTALLED_VENV names one (the wheel with its extras, as a user installs it).

    Built from a copy of the package (links followed, as a wheel holds files), so neither the build nor the install
    writes into the checkout; no build isolation and no index, so no network."""
    venv = os.environ.get("RATIO_INSTALLED_VENV")
    if venv:
        return Installation(Path(venv) / "bin" / "python", Path(venv) / "bin", None)
    base = tmp_path_factory.mktemp("installed")
    source = base / "source"
    shutil.copytree(CHECKOUT / "ratio_utils", source / "ratio_utils", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(CHECKOUT / name, source / name)
    site = base / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--disable-pip-version-check", "--target", str(site), str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return Installation(Path(sys.executable), site / "bin", site)


@pytest.fixture
def user_folder(tmp_path) -> Path:
    """The working directory of a user outside any checkout."""
    folder = tmp_path / "work"
    folder.mkdir()
    assert find_checkout(folder, required=False) is None
    return folder


def _env(installed: Installation) -> dict[str, str]:
    """The environment of a user: the installed copy first on the path, the hub offline, no output or shared root
    (the defaults apply); the cache variables of the test session (conftest) stay, so ~/.cache is not written."""
    env = {k: v for k, v in os.environ.items() if k not in ("RATIO_OUTPUT_ROOT", "RATIO_SHARED", "PYTHONPATH")}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONDONTWRITEBYTECODE": "1"}
    return env | ({"PYTHONPATH": str(installed.pythonpath)} if installed.pythonpath else {})


def _run(installed: Installation, cwd: Path, script: str, *args: str,
         timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(installed.bin / script), *args], cwd=cwd, env=_env(installed), capture_output=True,
                          text=True, timeout=timeout)


def _ok(done: subprocess.CompletedProcess) -> str:
    """stdout of a command that must exit 0 without a traceback; else the test fails with its output."""
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serve(installed: Installation, cwd: Path, script: str, *args: str, ready: str,
           timeout: float = 180) -> subprocess.Popen:
    """A server command started in the background; returned once its stdout says `ready` (else the test fails)."""
    process = subprocess.Popen([str(installed.bin / script), *args], cwd=cwd, env=_env(installed),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        if ready in line:
            return process
    process.kill()
    pytest.fail(f"{script} did not start (exit {process.poll()}):\n{''.join(seen)[-3000:]}")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_the_scripts_run_the_installed_copy_not_the_checkout(installed, user_folder):
    done = subprocess.run([str(installed.python), "-c", "import ratio_utils, ratio_utils.config as c; "
                           "print(ratio_utils.__file__); print(c.packaged('params/paper.yaml').is_file())"],
                          cwd=user_folder, env=_env(installed), capture_output=True, text=True, check=True)
    where, shipped = done.stdout.split()
    package = Path(where).parent
    assert not package.is_relative_to(CHECKOUT) and shipped == "True", where
    if installed.pythonpath:
        assert package.is_relative_to(installed.pythonpath)
    # the package data are files in the installed copy (no link back into the checkout)
    prompts = package / "resources" / "prompts"
    assert prompts.is_dir() and not prompts.is_symlink()
    # every prompt file and prompts/moves.toml (a move's texts, schema.move_text)
    shipped = sorted(p.relative_to(prompts).as_posix() for p in prompts.rglob("*") if p.is_file())
    assert "moves.toml" in shipped and shipped == sorted(p.relative_to(CHECKOUT / "prompts").as_posix()
                                                         for p in (CHECKOUT / "prompts").rglob("*") if p.is_file())
    for name in shipped:  # byte-identical: recorded LLM answers replay only on identical request texts
        assert (prompts / name).read_bytes() == (CHECKOUT / "prompts" / name).read_bytes(), name


def test_evaluate_scores_the_tiny_benchmark_as_the_checkout_does(installed, user_folder, tiny_benchmark):
    from ratio_utils.apps.evaluate import main

    _ok(_run(installed, user_folder, "ratio-evaluate", "--model", "bm25-unigram", "--benchmark", str(tiny_benchmark),
             "--split", "test", "--k", "5", "--out", "scores.json"))
    installed_scores = json.loads((user_folder / "scores.json").read_text())["scores"]  # --out under the cwd
    reference = user_folder.parent / "reference.json"
    assert main(["--model", "bm25-unigram", "--benchmark", str(tiny_benchmark), "--split", "test", "--k", "5",
                 "--out", str(reference)]) == 0
    assert set(installed_scores) == {"address", "broaden", "specify"}
    assert installed_scores == json.loads(reference.read_text())["scores"]


def test_evaluate_without_a_benchmark_says_so(installed, user_folder):
    done = _run(installed, user_folder, "ratio-evaluate", "--model", "bm25-unigram")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "site-packages" not in done.stderr and str(installed.bin.parent) not in done.stderr, done.stderr
    assert "--benchmark" in done.stderr


def test_mteb_scores_the_tiny_benchmark_into_the_working_directory(installed, user_folder, tiny_benchmark):
    out = _ok(_run(installed, user_folder, "ratio-mteb", "--model", "all-MiniLM-L6-v2", "--benchmark",
                   str(tiny_benchmark), "--output", "mteb_results", "--json"))
    records, _ = json.JSONDecoder().raw_decode(out[out.index("["):])  # one record per task (move)
    assert len(records) == 3, records
    assert any((user_folder / "mteb_results").rglob("*.json"))
    assert not (tiny_benchmark.parent / "mteb_results").exists()


def test_search_index_query_and_the_explorer_from_a_temp_folder(installed, user_folder):
    corpus = user_folder / "corpus"
    corpus.mkdir()
    pd.DataFrame(_SENTENCES, columns=["paper_id", "para", "sent", "text"]).to_parquet(corpus / "sentences.parquet")
    pd.DataFrame({"paper_id": ["P1", "P2"], "title": ["Regularising parsers", "Cheap NER labels"],
                  "year": [2011, 2015]}).to_parquet(corpus / "papers.parquet")
    _ok(_run(installed, user_folder, "ratio-search", "index", "--model", "all-MiniLM-L6-v2", "--corpus", "corpus"))
    indexes = user_folder / "data" / "search_index"  # the default: under the working directory
    assert [p.name for p in indexes.iterdir()] == ["all-MiniLM-L6-v2"]
    out = _ok(_run(installed, user_folder, "ratio-search", "query", "How can parsers avoid overfitting?",
                   "--move", "address", "--model", "all-MiniLM-L6-v2", "--top", "3", "--json"))
    hits = json.loads(out)["results"]
    assert len(hits) == 3 and hits[0]["paper_id"] in ("P1", "P2") and hits[0]["title"]

    port = _free_port()
    server = _serve(installed, user_folder, "ratio-explorer", "--model", "all-MiniLM-L6-v2", "--port", str(port),
                    "--top", "2", ready="Open http")
    try:
        url = f"http://127.0.0.1:{port}"
        page = urllib.request.urlopen(url + "/", timeout=30).read().decode()
        token = re.search(r'name="explorer-token" content="([^"]+)"', page).group(1)
        info = json.loads(urllib.request.urlopen(urllib.request.Request(
            url + "/api/info", headers={"X-Explorer-Token": token}), timeout=30).read())
        retrievers = next(name for name, columns in info["retrievers"].items()
                          if all(not c.get("problem") for c in columns))
        request = urllib.request.Request(
            url + "/api/ask", data=json.dumps({"statement": "Parsers overfit small treebanks.",
                                               "retrievers": retrievers}).encode(),
            headers={"Content-Type": "application/json", "Origin": url, "X-Explorer-Token": token})
        answer = json.loads(urllib.request.urlopen(request, timeout=60).read())
    finally:
        _stop(server)
    assert [c["move"] for c in answer["columns"]] == ["address", "broaden", "specify"]
    assert all(len(c["hits"]) == 2 for c in answer["columns"]), answer


def test_export_writes_trec_files_under_the_working_directory(installed, user_folder, tiny_benchmark):
    _ok(_run(installed, user_folder, "ratio-export", "--format", "trec", "--move", "all", "--split", "test",
             "--benchmark", str(tiny_benchmark), "exported"))
    written = sorted(p.relative_to(user_folder / "exported").as_posix() for p in (user_folder / "exported").rglob("*")
                     if p.is_file())
    assert written and all(name.split("/")[0] in ("address", "broaden", "specify") or "/" not in name
                           for name in written), written


def test_card_writes_the_card_of_a_benchmark_copy(installed, user_folder, tiny_benchmark):
    bench = user_folder / "official"
    shutil.copytree(tiny_benchmark, bench)
    _ok(_run(installed, user_folder, "ratio-card", "official", "--license", "cc-by-4.0"))
    card = (bench / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---") and "license: cc-by-4.0" in card


def test_annotate_starts_and_serves_its_page(installed, user_folder, tmp_path, tiny_benchmark):
    packets, _ = make_packets(tmp_path, tiny_benchmark)
    port = _free_port()
    server = _serve(installed, user_folder, "ratio-annotate", "--packets", str(packets), "--annotator", "ann1",
                    "--port", str(port), ready="Open http", timeout=60)
    try:
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30).read().decode()
    finally:
        _stop(server)
    assert "<html" in page.lower()


def test_train_dry_run_reads_the_packaged_params(installed, user_folder):
    out = _ok(_run(installed, user_folder, "ratio-train", "--params", "smoke", "--move", "address", "--dry-run"))
    lines = out.splitlines()
    assert lines[0].startswith("params smoke.yaml: benchmark ")
    assert lines[1].startswith("address: ") and "configurations [" in lines[1]
    assert not (user_folder / "outputs").exists()  # a dry run writes nothing
    assert "--dry-run" in _ok(_run(installed, user_folder, "ratio-train", "--help"))


def test_models_list_and_check_from_any_folder(installed, user_folder):
    listed = _ok(_run(installed, user_folder, "ratio-models", "list"))
    assert "all-MiniLM-L6-v2" in listed
    params = user_folder / "mine.yaml"
    params.write_text("retrieval:\n  dense_models: [all-MiniLM-L6-v2]\n", encoding="utf-8")
    checked = _ok(_run(installed, user_folder, "ratio-models", "check", "mine.yaml"))
    assert [line.split(":")[0] for line in checked.splitlines()] == ["all-MiniLM-L6-v2"]
    assert "available" in checked
    # the paper's params, shipped with the package: one line per model, available or how to get it
    paper = _run(installed, user_folder, "ratio-models", "check", "paper")
    assert paper.returncode in (0, 2) and "Traceback" not in paper.stderr, paper.stderr[-2000:]
    lines = paper.stdout.splitlines()
    assert len(lines) >= 5 and all(": available (" in line or ": missing: " in line for line in lines), lines
    assert (paper.returncode == 2) == any(": missing: " in line for line in lines)


def test_run_lists_a_checkout_named_by_root_and_checks_models_without_one(installed, user_folder):
    listed = _ok(_run(installed, user_folder, "ratio-run", "--root", str(CHECKOUT), "--list"))
    assert re.search(r"\b00_corpus\b", listed), listed
    done = _run(installed, user_folder, "ratio-run", "--list")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"ratio-run: error: not in a ratio checkout ({user_folder.resolve()}): pass --root DIR"], done.stderr
    checked = _run(installed, user_folder, "ratio-run", "--params", "smoke", "--check-models")
    assert checked.returncode in (0, 2) and "Traceback" not in checked.stderr, checked.stderr[-2000:]
    assert "no notebook" not in checked.stderr


# the console scripts the tests above run on the fixture; every other one (a new script) must at least answer --help
EXERCISED = {"ratio-evaluate", "ratio-mteb", "ratio-search", "ratio-explorer", "ratio-export", "ratio-card",
             "ratio-annotate", "ratio-train", "ratio-models", "ratio-run", "ratio-s2orc"}


def test_every_other_console_script_answers_help(installed, user_folder):
    scripts = {p.name for p in installed.bin.iterdir() if p.name.startswith("ratio-")}
    assert EXERCISED <= scripts, EXERCISED - scripts
    for script in sorted(scripts - EXERCISED):
        assert "usage:" in _ok(_run(installed, user_folder, script, "--help")), script


def test_no_path_is_built_on_the_package_folder_outside_the_checkout_finder():
    """`REPO_ROOT` is site-packages once installed: only `config.find_checkout` may read it."""
    uses = []
    for path in sorted((CHECKOUT / "ratio_utils").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"REPO_ROOT\s*/|REPO_ROOT\)\s*/|cwd=REPO_ROOT|REPO_ROOT\.(joinpath|glob|parent)", line):
                uses.append(f"{path.relative_to(CHECKOUT)}:{number}: {line.strip()}")
    assert not uses, "paths built on REPO_ROOT (use config.find_checkout, config.packaged or config.locate):\n" + \
        "\n".join(uses)
    config = (CHECKOUT / "ratio_utils" / "config.py").read_text(encoding="utf-8")
    readers = [line for line in config.splitlines() if "REPO_ROOT" in line and not line.lstrip().startswith("#")]
    assert len(readers) == 2 and any("for folder in" in line for line in readers), readers


def test_search_and_explorer_import_and_run_without_ipython(tmp_path):
    script = (
        "import sys\n"
        "sys.modules['IPython'] = None\n"  # any `import IPython` now raises ImportError
        "from ratio_utils.apps import search, explorer, card, annotate, export, evaluate\n"
        "from ratio_utils import pipeline\n"
        "from ratio_utils.models import __main__ as models_cli\n"
        "from ratio_utils.train import cli\n"
        "from ratio_utils.publish import display\n"
        "for main in (search.main, explorer.main):\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, exc.code\n"
        "print('imported without IPython')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(CHECKOUT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("imported without IPython")


def test_find_checkout_and_locate_resolve_user_paths_by_one_rule(tmp_path, monkeypatch):
    """--root must be a checkout; a relative path is the working directory's first, then the checkout's, then the
    package's copy; a params file the package ships is found by its name."""
    from ratio_utils.config import NotACheckoutError, load_config, locate, packaged

    with pytest.raises(NotACheckoutError, match=r"^not a ratio checkout: .* \(it has no notebooks"):
        find_checkout(tmp_path)
    assert find_checkout(CHECKOUT) == CHECKOUT
    monkeypatch.chdir(CHECKOUT / "docs")  # a folder inside the checkout: the checkout above it
    assert find_checkout() == CHECKOUT
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "smoke.yaml").write_text("name: mine\n", encoding="utf-8")
    assert locate("params/smoke.yaml") == tmp_path / "params" / "smoke.yaml"  # the working directory first
    assert locate("params/paper.yaml", CHECKOUT) == CHECKOUT / "params" / "paper.yaml"
    assert locate("params/paper.yaml", tmp_path / "nowhere") == packaged("params/paper.yaml")
    with pytest.raises(FileNotFoundError, match=r"^params file not found: params/nope.yaml \(looked in "):
        locate("params/nope.yaml", what="params file")
    assert load_config("smoke").name == "mine"  # by name: params/smoke.yaml, the working directory's
    assert load_config("paper").source.read_bytes() == (CHECKOUT / "params" / "paper.yaml").read_bytes()


def test_s2orc_without_a_key_or_with_a_missing_params_file_says_so_in_one_line(installed, user_folder, monkeypatch):
    monkeypatch.delenv("S2_API_KEY", raising=False)  # _env copies os.environ: the user has no key
    no_key = _run(installed, user_folder, "ratio-s2orc", "--params", "smoke")
    missing = _run(installed, user_folder, "ratio-s2orc", "--params", "nope.yaml")
    assert no_key.returncode == 2 and no_key.stderr.strip().splitlines() == [
        "ratio-s2orc: error: set S2_API_KEY to a Semantic Scholar API key to list S2ORC shards"], no_key.stderr
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert missing.stderr.startswith("ratio-s2orc: error: params file not found: nope.yaml (looked in ")
