"""The shape docs/architecture.md promises, checked: thin notebooks (one statement per code cell),
parameters cells that take `params_file` and `overrides`, params validated at load through one
registry, one output root per params file, and no machine path in any committed output."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
import subprocess

import nbformat
import pytest

from ratio_utils.config import OUTPUTS_DIR, PARAMS_SECTIONS, REPO_ROOT, _dataclass_fields, load_config

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MACHINE_PATH = re.compile(r"/work/|/home/|/tmp/|/Users/|[A-Z]:\\\\Users")


def _code_cells(path):
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def _is_parameters(cell) -> bool:
    return "parameters" in cell.metadata.get("tags", [])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_code_cell_is_one_statement(path):
    for number, cell in enumerate(_code_cells(path)):
        if _is_parameters(cell):
            continue
        body = ast.parse(cell.source).body
        assert len(body) == 1, (
            f"{path.name} code cell {number} holds {len(body)} statements; a notebook cell is one call or "
            f"expression (move the logic into ratio_utils/stages/):\n{cell.source}"
        )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_cell_has_params_file_and_overrides(path):
    cells = [c for c in _code_cells(path) if _is_parameters(c)]
    assert len(cells) == 1, f"{path.name}: exactly one cell tagged 'parameters'"
    values = {}
    for node in ast.parse(cells[0].source).body:
        assert isinstance(node, ast.Assign), f"{path.name}: the parameters cell only assigns values"
        values[node.targets[0].id] = ast.literal_eval(node.value)
    assert values.get("params_file") == "params/default.yaml"
    assert values.get("overrides") == {}
    body = "\n".join(c.source for c in _code_cells(path) if not _is_parameters(c))
    assert "overrides" in body, f"{path.name}: `overrides` is never passed on, so papermill -p overrides has no effect"


def test_every_registered_section_names_its_dataclass_fields():
    """config reads the fields from source (no heavy import at load); they must be the real ones."""
    for name, spec in PARAMS_SECTIONS.items():
        module, _, cls_name = spec.partition(":")
        cls = getattr(importlib.import_module(module), cls_name)
        assert _dataclass_fields(spec) == {f.name for f in dataclasses.fields(cls)}, name


def test_a_typo_fails_at_load_naming_file_section_and_key(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("extends: " + str(REPO_ROOT / "params" / "smoke.yaml") + "\ntrain: {max_trian_pairs: 3}\n")
    with pytest.raises(ValueError, match=r"typo\.yaml.*'train'.*max_trian_pairs"):
        load_config(path)
    with pytest.raises(ValueError, match=r"unknown key.*typo"):
        load_config("params/smoke.yaml", {"mining": {"typo": 1}})


def test_each_params_file_has_its_own_output_root(monkeypatch):
    monkeypatch.delenv("RATIO_OUTPUT_ROOT", raising=False)
    roots = {p.stem: load_config(p).paths.root for p in sorted((REPO_ROOT / "params").glob("*.yaml"))}
    assert roots["default"] == REPO_ROOT
    assert roots["smoke"] == OUTPUTS_DIR / "smoke" and roots["paper"] == OUTPUTS_DIR / "paper"
    assert len(set(roots.values())) == len(roots)


def test_tuned_model_dir_is_spelled_once(cfg):
    assert cfg.paths.tuned_model_dir("sentence-transformers/all-MiniLM-L6-v2", "address").name == "all-MiniLM-L6-v2__address"
    assert cfg.paths.tuned_model_dir("/x/all-MiniLM-L6-v2/", "broaden", "colbert").name == "all-MiniLM-L6-v2-colbert__broaden"
    assert cfg.paths.tuned_runs_dir("all-MiniLM-L6-v2", "specify") == cfg.paths.models / "_runs" / "all-MiniLM-L6-v2__specify"


def test_no_committed_output_holds_a_machine_path():
    listed = subprocess.run(
        ["git", "ls-files", "--", "tables", "figures", "notebooks"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    offenders = []
    for name in listed:
        path = REPO_ROOT / name
        if path.suffix in {".png", ".pdf"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if MACHINE_PATH.search(line):
                offenders.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not offenders, "absolute paths in committed outputs:\n" + "\n".join(offenders[:20])


def test_provenance_records_relative_paths(cfg):
    from ratio_utils.report import provenance

    cfg.paths.pairs.parent.mkdir(parents=True)
    cfg.paths.pairs.write_text("x")
    record = provenance(cfg, [cfg.paths.pairs, cfg.paths.shared / "lexicon" / "x.csv"], [f"read {cfg.paths.pairs}"])
    assert set(record["inputs"]) == {"data/interim/pairs.parquet", "shared:lexicon/x.csv"}
    assert record["notes"] == ["read data/interim/pairs.parquet"]
    assert not MACHINE_PATH.search(str(record["params"]))


def test_model_folder_model_name_and_column_checks_are_spelled_in_one_place():
    """models/<base>__<move>/ is built by Paths.tuned_model_dir only, model names normalised by models.model_name only,
    required columns checked by io.require_columns only."""
    folder = re.compile(r"f\"\{[^}]*\}(-colbert)?__\{(move|m)\b")
    normalise = re.compile(r"\.split\(\"/\"\)\[-1\]|rstrip\(\"/\"\)\)?\.name|rstrip\(\"/\"\)\.split")
    column_check = re.compile(r"\[\w+ for \w+ in [^\]]+ if \w+ not in \w+\.columns\]")
    for path in sorted((REPO_ROOT / "ratio_utils").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if path.name != "config.py":
            assert not folder.search(text), f"{path}: build the folder with cfg.paths.tuned_model_dir"
        if path.name != "models.py":
            assert not normalise.search(text), f"{path}: normalise model names with ratio_utils.models.model_name"
        assert not column_check.search(text), f"{path}: check columns with ratio_utils.io.require_columns"


def test_params_paths_follow_one_rule(tmp_path, monkeypatch):
    """Repo-relative by default; `shared:` and `output:` name the two other roots; absolute stays."""
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path / "out"))
    paths = load_config().paths
    assert paths.from_params("params/finetune/smoke.yaml") == REPO_ROOT / "params/finetune/smoke.yaml"
    assert paths.from_params("shared:lexicon/x.csv") == paths.shared / "lexicon/x.csv"
    assert paths.from_params("output:cache/llm") == tmp_path / "out" / "cache/llm"
    assert paths.from_params(tmp_path / "abs") == tmp_path / "abs"
    # the shipped defaults resolve where the stages expect them
    from ratio_utils.judge import JudgeParams
    from ratio_utils.lexicon import LexiconParams
    from ratio_utils.llm import LLMSettings

    assert paths.from_params(LLMSettings().cache_dir) == paths.cache / "llm"
    assert paths.from_params(JudgeParams().labels_dir) == paths.interim / "judge" / "labels"
    assert paths.from_params(LexiconParams().released_csv) == paths.shared / "lexicon" / "all_query_terms5.csv"


def test_every_interval_the_docs_quote_is_held_by_a_committed_table():
    """A doc that quotes a result `value [low, high]` quotes one of the committed tables (names it beside)."""
    cell = re.compile(r"[-+]?\d+\.\d\s+\[-?\d+\.\d,\s*-?\d+\.\d\]")
    tables = " ".join(p.read_text(encoding="utf-8") for p in (REPO_ROOT / "tables").glob("*.md"))
    docs = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    quoted = [(doc.name, " ".join(m.group().lstrip("+").split())) for doc in docs
              for m in cell.finditer(doc.read_text(encoding="utf-8"))]
    assert quoted, "the pattern finds the intervals the docs quote"
    missing = [(name, text) for name, text in quoted if text not in tables]
    assert not missing, f"quoted intervals no committed table holds: {missing}"
