"""The shape docs/architecture.md promises, checked: thin notebooks (one statement per code cell),
parameters cells that take `params_file` and `overrides`, params validated at load through one
registry, one output root per params file, no machine path in any committed output, imports that point one
way (notebook -> stage -> library: no library module imports a stage, no stage another, no cycle), and one stage
shape (one `publish.display.Stage` subclass per stage module, built by every notebook with `from_params`)."""

from __future__ import annotations

import ast
import dataclasses
import graphlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ratio_utils.config import OUTPUTS_DIR, PARAMS_SECTIONS, REPO_ROOT, load_config

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


def test_every_registered_section_is_a_dataclass_of_a_light_module():
    """config imports the dataclasses themselves (no reading of source), from modules that import no stage."""
    for name, cls in PARAMS_SECTIONS.items():
        assert dataclasses.is_dataclass(cls), name
        assert cls.__module__ == "ratio_utils.param_sections", f"{name}: {cls.__module__}"


def test_loading_a_config_imports_neither_torch_nor_a_stage():
    """Notebook 00 and `load_config` stay light: checked in a fresh interpreter, where nothing is imported yet."""
    script = ("import json, sys; from ratio_utils.config import load_config; load_config('params/default.yaml'); "
              "print(json.dumps(sorted(sys.modules)))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True,
                                       check=True).stdout)
    heavy = [name for name in loaded
             if name.split(".")[0] in {"torch", "sentence_transformers", "transformers", "pandas"}]
    assert not heavy, f"loading a config imports {heavy[:5]}"
    assert "ratio_utils.param_sections" in loaded
    assert not [name for name in loaded if name.startswith("ratio_utils.stages")]


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
    assert (cfg.paths.tuned_model_dir("sentence-transformers/all-MiniLM-L6-v2", "address").name
            == "all-MiniLM-L6-v2__address")
    assert (cfg.paths.tuned_model_dir("/x/all-MiniLM-L6-v2/", "broaden", "colbert").name
            == "all-MiniLM-L6-v2-colbert__broaden")
    assert (cfg.paths.tuned_runs_dir("all-MiniLM-L6-v2", "specify")
            == cfg.paths.models / "_runs" / "all-MiniLM-L6-v2__specify")


def test_no_committed_output_holds_a_machine_path():
    listed = subprocess.run(
        ["git", "ls-files", "--", "tables", "figures", "notebooks"], cwd=REPO_ROOT, capture_output=True, text=True,
        check=True
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
    from ratio_utils.publish.published import provenance

    cfg.paths.pairs.parent.mkdir(parents=True)
    cfg.paths.pairs.write_text("x")
    record = provenance(cfg, [cfg.paths.pairs, cfg.paths.shared / "lexicon" / "x.csv"], [f"read {cfg.paths.pairs}"])
    assert set(record["inputs"]) == {"data/interim/pairs.parquet", "shared:lexicon/x.csv"}
    assert record["notes"] == ["read data/interim/pairs.parquet"]
    assert not MACHINE_PATH.search(str(record["params"]))


# models/<base>__<move>/ is built by Paths.tuned_model_dir only, model names normalised by models.model_name only,
# required columns checked by io.require_columns only: each regex, the file allowed to spell it.
SPELLED_ONCE = {
    "config.py": (re.compile(r"\{[^}]*\}(-colbert)?__\{(?:getattr\()?(move|m)\b"),
                  "build the folder with cfg.paths.tuned_model_dir"),
    "models/names.py": (re.compile(r"\.split\(\"/\"\)\[-1\]|rstrip\(\"/\"\)\)?\.name|rstrip\(\"/\"\)\.split"),
                  "normalise model names with ratio_utils.models.model_name"),
    "io.py": (re.compile(r"\[\w+ for \w+ in [^\]]+ if \w+ not in (?:set\(|list\()?\w+\.columns\)?\]"),
              "check columns with ratio_utils.io.require_columns"),
}


def _spelling_faults(name: str, text: str) -> list[str]:
    return [f"{name}: {advice}" for allowed, (pattern, advice) in SPELLED_ONCE.items()
            if name != allowed and pattern.search(text)]


def test_model_folder_model_name_and_column_checks_are_spelled_in_one_place():
    library = REPO_ROOT / "ratio_utils"
    faults = [fault for path in sorted(library.rglob("*.py"))
              for fault in _spelling_faults(path.relative_to(library).as_posix(), path.read_text(encoding="utf-8"))]
    assert not faults, "\n".join(faults)


def test_the_spelling_check_finds_each_planted_fault_and_the_one_real_place():
    planted = {
        "config.py": 'out = models / f"{base}__{move}"\n',
        "models/names.py": 'name = str(path).rstrip("/").split("/")[-1]\n',
        "io.py": "missing = [c for c in needed if c not in set(frame.columns)]\n",
    }
    for allowed, text in planted.items():
        (_, advice), = [v for k, v in SPELLED_ONCE.items() if k == allowed]
        assert _spelling_faults("stage.py", text) == [f"stage.py: {advice}"], text
        assert _spelling_faults(allowed, text) == []  # the one place that may spell it
    # each regex sees the real definition it protects (a regex that matches nothing would pass the check above)
    for allowed, (pattern, _) in SPELLED_ONCE.items():
        assert pattern.search((REPO_ROOT / "ratio_utils" / allowed).read_text(encoding="utf-8")), allowed


def test_params_paths_follow_one_rule(tmp_path, monkeypatch):
    """Repo-relative by default; `shared:` and `output:` name the two other roots; absolute stays."""
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path / "out"))
    paths = load_config().paths
    assert paths.from_params("params/finetune/smoke.yaml") == REPO_ROOT / "params/finetune/smoke.yaml"
    assert paths.from_params("shared:lexicon/x.csv") == paths.shared / "lexicon/x.csv"
    assert paths.from_params("output:cache/llm") == tmp_path / "out" / "cache/llm"
    assert paths.from_params(tmp_path / "abs") == tmp_path / "abs"
    # the shipped defaults resolve where the stages expect them
    from ratio_utils.llm import LLMSettings
    from ratio_utils.param_sections import JudgeParams, LexiconParams

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


# -- imports point one way --------------------------------------------------------------------------------------------


def _module_names(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package's name is its __init__.py)."""
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and ast.unparse(test) in {"TYPE_CHECKING", "typing.TYPE_CHECKING"}


def _imported_modules(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of `modules` that an import statement anywhere in the tree names (function-level ones too; not
    those under `if TYPE_CHECKING:`, which never run), relative imports resolved. `from p import x` names p.x when
    that is a module, else p (x is then an attribute of p's __init__)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    pending = [tree]
    while pending:
        node = pending.pop()
        if _is_type_checking_block(node):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names)
        pending.extend(ast.iter_child_nodes(node))
    return (found & modules) - {module}


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Every module of the package -> the package's modules it imports."""
    modules = _module_names(package_dir)
    return {name: _imported_modules(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py",
                                    set(modules))
            for name, path in modules.items()}


def _layer_violations(graph: dict[str, set[str]], stages: str) -> list[str]:
    wrong = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if not target.startswith(stages + "."):
                continue
            if not module.startswith(stages + "."):
                wrong.append(f"library module {module} imports the stage {target}")
            elif module != stages:
                wrong.append(f"stage {module} imports the stage {target} (move what they share into the library)")
    return wrong


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return list(error.args[1])
    return []


RATIO_GRAPH = import_graph(REPO_ROOT / "ratio_utils")


def test_no_library_module_imports_a_stage_and_no_stage_another():
    assert not _layer_violations(RATIO_GRAPH, "ratio_utils.stages"), "\n".join(
        _layer_violations(RATIO_GRAPH, "ratio_utils.stages"))


def test_no_import_cycle_among_ratio_utils_modules():
    cycle = _cycle(RATIO_GRAPH)
    assert not cycle, "import cycle (function-level imports count): " + " -> ".join(cycle)


# The floors of ratio_utils, lowest first (docs/architecture.md, "Floors"): a package or top-level module imports
# only from a lower floor, or from itself. Two packages of one floor never import each other.
FLOORS: list[tuple[str, ...]] = [
    ("schema", "text", "paper_values"),                     # the definitions: a move, a split, a sentence id; the
                                                            # paper's values
    ("io", "param_sections"),                               # files and params dataclasses
    ("parts", "cluster", "distributed", "local_server"),    # tables in parts, Dask, torchrun, the local page server
    ("models",),                                            # a model reference: registry, resolution, loading
    ("config",),                                            # params files, the paths of a run
    ("publish",),                                           # tables, figures, provenance, run records, label sources
    ("llm",),                                               # the OpenAI-compatible client and prompt files
    ("corpora",),                                           # 00
    ("lexicon", "mining"),                                  # 01-04, 05
    ("dataset",),                                           # 06: the benchmark on disk
    ("judge",),                                             # 07
    ("retrieval",),                                         # 08, 10: retrievers and the run-file format
    ("systems",),                                           # a system run: spec, family registry, recording
    ("evaluation",),                                        # scoring a run, statistics, intervals
    ("retrieval_analysis",),                                # 11, 13
    ("train", "human_eval"),                                # 09, 13; 12
    ("reporting",),                                         # Tables 1, 7, 8, claims, the summary
    ("pipeline",),                                          # run_all.sh: the notebooks in order
    ("stages", "apps"),                                     # one stage per notebook; the command-line applications
]


def _unit(module: str) -> str:
    """The floor unit of a module: its package under ratio_utils, or the top-level module itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _floor_violations(graph: dict[str, set[str]], floors: list[tuple[str, ...]]) -> list[str]:
    floor_of = {unit: number for number, units in enumerate(floors) for unit in units}
    wrong = []
    for module, targets in sorted(graph.items()):
        if "." not in module:
            continue  # the root package's lazy `evaluate` re-export stands above every floor
        for target in sorted(targets):
            source_unit, target_unit = _unit(module), _unit(target)
            if source_unit == target_unit or "." not in target:
                continue
            if source_unit not in floor_of or target_unit not in floor_of:
                wrong.append(f"{module} -> {target}: {source_unit if source_unit not in floor_of else target_unit} "
                             "has no floor in FLOORS")
            elif floor_of[target_unit] >= floor_of[source_unit]:
                where = "the same floor" if floor_of[target_unit] == floor_of[source_unit] else "a higher floor"
                wrong.append(f"{module} imports {target}, on {where} ({source_unit} -> {target_unit})")
    return wrong


def _package_cycle(graph: dict[str, set[str]]) -> list[str]:
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if "." in module:
            units.setdefault(_unit(module), set()).update(_unit(t) for t in targets
                                                          if "." in t and _unit(t) != _unit(module))
    return _cycle(units)


def test_every_import_points_down_the_floors():
    wrong = _floor_violations(RATIO_GRAPH, FLOORS)
    assert not wrong, "imports that run up or sideways (docs/architecture.md, Floors):\n" + "\n".join(wrong)


def test_every_package_has_a_floor_and_the_package_graph_has_no_cycle():
    units = {_unit(m) for m in RATIO_GRAPH if "." in m}
    assert units == {u for floor in FLOORS for u in floor}, units ^ {u for floor in FLOORS for u in floor}
    assert not _package_cycle(RATIO_GRAPH), " -> ".join(_package_cycle(RATIO_GRAPH))


def test_the_floor_check_fails_on_a_planted_upward_import():
    planted = {name: set(targets) for name, targets in RATIO_GRAPH.items()}
    planted["ratio_utils.retrieval.dense"].add("ratio_utils.train.run")  # the kind of import issue 35 removed
    planted["ratio_utils.llm.client"].add("ratio_utils.corpora.base")
    assert _floor_violations(planted, FLOORS) == [
        "ratio_utils.llm.client imports ratio_utils.corpora.base, on a higher floor (llm -> corpora)",
        "ratio_utils.retrieval.dense imports ratio_utils.train.run, on a higher floor (retrieval -> train)",
    ]
    planted["ratio_utils.lexicon.curation"] = {"ratio_utils.mining.matcher"}
    assert "the same floor" in _floor_violations(planted, FLOORS)[0]
    knot = {**RATIO_GRAPH, "ratio_utils.corpora.base": {"ratio_utils.llm.types"},
            "ratio_utils.llm.client": {"ratio_utils.corpora.base"}}
    assert set(_package_cycle(knot)) == {"corpora", "llm"}


def test_the_import_check_sees_relative_function_level_and_package_imports(tmp_path):
    """The checks above on a package with each fault: they must find every one (a checker that sees nothing passes)."""
    files = {
        "pkg/__init__.py": "",
        "pkg/config.py": "from .lib import helper\n",
        "pkg/lib.py": "def helper():\n    from . import config  # function-level: a cycle all the same\n",
        "pkg/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .stages.one import x\n",
        "pkg/uses_stage.py": "def f():\n    from pkg.stages import one\n",
        "pkg/stages/__init__.py": "",
        "pkg/stages/one.py": "from ..lib import helper\n",
        "pkg/stages/two.py": "from .one import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path / "pkg")
    assert graph["pkg.stages.one"] == {"pkg.lib"}
    assert "pkg.stages.one" not in graph["pkg.typed"]  # TYPE_CHECKING imports never run
    assert _layer_violations(graph, "pkg.stages") == [
        "stage pkg.stages.two imports the stage pkg.stages.one (move what they share into the library)",
        "library module pkg.uses_stage imports the stage pkg.stages.one",
    ]
    assert set(_cycle(graph)) == {"pkg.config", "pkg.lib"}


# -- what the docs and docstrings name exists ------------------------------------------------------------------------

_DOTTED = re.compile(r"\bratio_utils(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_REPO_FILE = re.compile(r"(?<![\w/.-])((?:docs|tests|tools|benchmarks|params|notebooks|prompts|ratio_utils)/[\w./-]*\w"
                        r"\.(?:md|py|sh|yaml|ipynb|toml))")


def _names_a_real_module(root: Path, dotted: str) -> bool:
    """`ratio_utils.a.b[.attribute]`: the longest prefix that is a module exists, and at most one attribute follows."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        path = root.joinpath(*parts[:end])
        module = path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"
        if module.is_file():
            # an attribute must be defined or imported in that module's text (a moved module leaves none behind)
            return end == len(parts) or (end == len(parts) - 1
                                         and re.search(rf"\b{parts[-1]}\b",
                                                       module.read_text(encoding="utf-8")) is not None)
    return False


def stale_references(root: Path, texts: dict[str, str]) -> list[str]:
    """Module paths (`ratio_utils.x.y`) and repository files (`docs/x.md`, `tests/y.py`) named in `texts` that do
    not exist under `root`."""
    faults = []
    for name, text in texts.items():
        faults += [f"{name}: {m.group()}" for m in _DOTTED.finditer(text) if not _names_a_real_module(root, m.group())]
        faults += [f"{name}: {m.group(1)}" for m in _REPO_FILE.finditer(text)
                   if not any(c in m.group(1) for c in "*<{") and not (root / m.group(1)).exists()]
    return faults


def test_every_module_and_file_the_docs_and_docstrings_name_exists():
    sources = [*sorted((REPO_ROOT / "ratio_utils").rglob("*.py")), *sorted((REPO_ROOT / "docs").rglob("*.md")),
               REPO_ROOT / "README.md", *sorted((REPO_ROOT / "benchmarks").glob("*.py")),
               *sorted(REPO_ROOT.glob("results/*/README.md"))]
    texts = {str(p.relative_to(REPO_ROOT)): p.read_text(encoding="utf-8") for p in sources}
    faults = stale_references(REPO_ROOT, texts)
    assert not faults, "names of modules or files that do not exist:\n" + "\n".join(faults)


def test_the_stale_reference_check_finds_planted_names():
    texts = {"a.md": "see `ratio_utils.retrieval.ranking` and docs/nowhere.md; `ratio_utils.schema.Move` is real",
             "b.py": "ratio_utils.publish.published.write_table, tests/conftest.py, params/<name>.yaml"}
    assert stale_references(REPO_ROOT, texts) == ["a.md: ratio_utils.retrieval.ranking", "a.md: docs/nowhere.md"]


# -- one definition of each name --------------------------------------------------------------------------------------

# Names that every module of one kind defines for the same job: the applications' argument parsers.
SAME_JOB_NAMES = {"build_parser", "main", "PROG", "EPILOG", "logger"}


def defined_names(package_dir: Path) -> dict[str, list[str]]:
    """Public module-level names (functions, classes, assignments) -> the modules defining them (not importing)."""
    found: dict[str, list[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [target.id for target in node.targets if isinstance(target, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                names = []
            for name in names:
                if not name.startswith("_") and name not in SAME_JOB_NAMES:
                    found.setdefault(name, []).append(path.relative_to(package_dir.parent).as_posix())
    return found


def test_no_name_is_defined_in_two_modules():
    twice = {name: where for name, where in defined_names(REPO_ROOT / "ratio_utils").items() if len(where) > 1}
    assert not twice, "one definition per name (import it, or name the two things apart): " + str(twice)


def test_the_name_check_finds_a_planted_second_definition(tmp_path):
    for name, text in {"pkg/a.py": "def combine():\n    pass\n", "pkg/b.py": "COMBINE = 1\ncombine = None\n",
                       "pkg/c.py": "from .a import combine\ndef main():\n    pass\n",
                       "pkg/d.py": "def main():\n    pass\n"}.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    twice = {name: where for name, where in defined_names(tmp_path / "pkg").items() if len(where) > 1}
    assert twice == {"combine": ["pkg/a.py", "pkg/b.py"]}


# -- docs/architecture.md keeps in step with the tree -----------------------------------------------------------------

ARCHITECTURE_DOC = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _doc_name(module: str) -> str:
    """How the page names a module: its path under ratio_utils/ without .py (`retrieval/runs`); a package ends in /."""
    path = "/".join(module.split(".")[1:])
    return path + "/" if (REPO_ROOT / "ratio_utils" / path / "__init__.py").exists() else path


def _names_in(text: str) -> set[str]:
    """Module names in backticks: `retrieval/runs`, `corpus/`, `ratio_utils.schema` (read as `schema`)."""
    tokens = re.findall(r"`([^`\s(]+)`", text)
    return {re.sub(r"^ratio_utils[./]", "", token).replace(".", "/") for token in tokens}


def _section(title: str) -> str:
    start = ARCHITECTURE_DOC.index(f"## {title}")
    return ARCHITECTURE_DOC[start:ARCHITECTURE_DOC.find("\n## ", start + 1)]


def _table_rows(section: str) -> list[list[str]]:
    rows = [line.strip().strip("|").split(" | ") for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row] for row in rows]


def _closure(graph: dict[str, set[str]], module: str) -> set[str]:
    seen, pending = set(), [module]
    while pending:
        for target in graph.get(pending.pop(), ()):
            if target not in seen:
                seen.add(target)
                pending.append(target)
    return seen


def test_the_architecture_page_names_every_module():
    missing = [_doc_name(m) for m in sorted(RATIO_GRAPH)
               if m != "ratio_utils" and _doc_name(m) not in _names_in(ARCHITECTURE_DOC)]
    assert not missing, f"docs/architecture.md does not name {missing} (write each as its path under ratio_utils/)"


def test_each_notebook_row_names_the_library_modules_its_stage_imports():
    """Row by row: the stage exists, every library module it imports is named (beside the shared definitions), and
    every module named is one it uses (directly or through another)."""
    shared = _names_in(_section("Shared definitions").split("| where |")[1])
    by_name = {_doc_name(m): m for m in RATIO_GRAPH if m != "ratio_utils"}
    rows = _table_rows(_section("Notebook ↔ stage module ↔ library modules"))
    assert [row[0].strip("`") for row in rows] == [p.stem for p in NOTEBOOKS]
    assert {row[1].strip("`") for row in rows} == {_doc_name(m) for m in RATIO_GRAPH
                                                   if m.startswith("ratio_utils.stages.")}
    for notebook, stage, library in rows:
        stage_module = by_name[stage.strip("`")]
        named = _names_in(library)
        assert named <= set(by_name), f"{notebook}: {sorted(named - set(by_name))} are no modules"
        imported = {_doc_name(m) for m in RATIO_GRAPH[stage_module]} - shared
        used = {_doc_name(m) for m in _closure(RATIO_GRAPH, stage_module)}
        assert imported <= named, f"{notebook}: the row leaves out {sorted(imported - named)}, which {stage} imports"
        assert named <= used, f"{notebook}: the row names {sorted(named - used)}, which {stage} does not use"


# -- names say which file does which job ------------------------------------------------------------------------------


def _singular(name: str) -> str:
    """The name with a plural ending dropped, so `report` meets `reports` and `analysis` meets `analyses`."""
    if name.endswith("sis"):
        return name
    if name.endswith("ses"):
        return name[:-2] + "is"
    return name.removesuffix("s")


def name_collisions(graph: dict[str, set[str]], package: str, folders: set[str]) -> set[tuple[str, str]]:
    """(library module, what it shares a name with) for each top-level library module of the package (a module or a
    package directly under it, the stages aside) whose name, plural or singular, is also a stage module's, a top-level
    folder's of the repository, or a module's inside one of the library's packages."""
    stages = f"{package}.stages"
    top = {m for m in graph if m.count(".") == 1 and m != stages}
    others = {f"stage {m}": m.rpartition(".")[2] for m in graph if m.startswith(stages + ".")}
    others |= {f"folder {name}/": name for name in folders}
    others |= {f"module {m}": m.rpartition(".")[2] for m in graph
               if m.count(".") > 1 and not m.startswith(stages + ".") and m.rpartition(".")[2] != "__main__"}
    return {(module, other) for module in top for other, name in others.items()
            if _singular(name) == _singular(module.rpartition(".")[2])}


def _tracked_top_level_folders() -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    return {name.split("/")[0] for name in listed.splitlines() if "/" in name}


# None left open: a new collision is renamed, not listed here.
KNOWN_NAME_COLLISIONS: set[tuple[str, str]] = set()


def test_no_library_module_shares_its_name_with_a_stage_a_folder_or_another_module():
    found = name_collisions(RATIO_GRAPH, "ratio_utils", _tracked_top_level_folders())
    assert found - KNOWN_NAME_COLLISIONS == set(), "rename the library module (a name says which job): " + str(
        sorted(found - KNOWN_NAME_COLLISIONS))
    assert KNOWN_NAME_COLLISIONS - found == set(), "resolved: drop from KNOWN_NAME_COLLISIONS " + str(
        sorted(KNOWN_NAME_COLLISIONS - found))


def test_the_name_check_finds_each_kind_of_collision():
    """The collisions this tree once had, on a made-up graph: the check must name every one."""
    graph = {name: set() for name in (
        "pkg", "pkg.analysis", "pkg.report", "pkg.benchmark", "pkg.s2orc", "pkg.corpus", "pkg.corpus.s2orc",
        "pkg.train", "pkg.train.__main__", "pkg.evaluation", "pkg.stages", "pkg.stages.analyses", "pkg.stages.summary",
    )}
    assert name_collisions(graph, "pkg", {"reports", "benchmarks", "docs", "train"}) == {
        ("pkg.analysis", "stage pkg.stages.analyses"),
        ("pkg.report", "folder reports/"),
        ("pkg.benchmark", "folder benchmarks/"),
        ("pkg.s2orc", "module pkg.corpus.s2orc"),
        ("pkg.train", "folder train/"),
    }


# -- one stage shape --------------------------------------------------------------------------------------------------

STAGES_DIR = REPO_ROOT / "ratio_utils" / "stages"


def _stage_shape_faults(module: str, source: str) -> tuple[str | None, list[str]]:
    """The stage class of a stage module and what breaks the shape: exactly one public class deriving from
    `ratio_utils.publish.display.Stage`, built by the inherited `from_params`/`from_config` from a config
    (`__init__(self, cfg, ...)`); no public module-level function named like a notebook step is asked for here, only
    the class."""
    tree = ast.parse(source)
    faults = []
    imports_stage = any(isinstance(node, ast.ImportFrom) and node.module == "publish.display" and node.level == 2
                        and any(alias.name == "Stage" for alias in node.names) for node in tree.body)
    if not imports_stage:
        faults.append(f"{module}: does not import Stage from ratio_utils.publish.display")
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
               and any(isinstance(base, ast.Name) and base.id == "Stage" for base in node.bases)]
    if len(classes) != 1:
        faults.append(f"{module}: {len(classes)} public Stage subclasses ({[c.name for c in classes]}); "
                      "a stage module has one")
        return None, faults
    stage = classes[0]
    methods = {node.name: node for node in stage.body if isinstance(node, ast.FunctionDef)}
    for inherited in ("from_params", "from_config"):
        if inherited in methods:
            faults.append(f"{module}.{stage.name} redefines {inherited}: build state in __init__(self, cfg) instead")
    init = methods.get("__init__")
    arguments = [a.arg for a in init.args.args] if init else []
    if arguments[:2] != ["self", "cfg"]:
        faults.append(f"{module}.{stage.name}.__init__ takes {arguments}, not (self, cfg, ...)")
    return stage.name, faults


def _root_name(node: ast.AST) -> str | None:
    """The name an expression like `stage.summary.claims` or `stage.table("x")` starts from."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _notebook_shape_faults(notebook: str, cells: list[str], parameters: list[str], module: str,
                           stage: str) -> list[str]:
    """A notebook imports its stage class, builds it with `XStage.from_params(params_file, overrides, <other
    parameters by name>)`, and every other code cell is one call or attribute of `stage` with literal arguments."""
    expected_import = f"from ratio_utils.stages.{module} import {stage}"
    others = [p for p in parameters if p not in ("params_file", "overrides")]
    expected_build = f"stage = {stage}.from_params(params_file, overrides{''.join(f', {p}={p}' for p in others)})"
    faults = []
    if cells[:1] != [expected_import]:
        faults.append(f"{notebook}: the first code cell is {cells[:1]}, not {expected_import!r}")
    if cells[1:2] != [expected_build]:
        faults.append(f"{notebook}: the second code cell is {cells[1:2]}, not {expected_build!r}")
    for source in cells[2:]:
        body = ast.parse(source).body
        expression = body[0].value if len(body) == 1 and isinstance(body[0], ast.Expr) else None
        calls = [n for n in ast.walk(expression) if isinstance(n, ast.Call)] if expression is not None else []
        arguments = [a for call in calls for a in [*call.args, *(k.value for k in call.keywords)]]
        if (expression is None or _root_name(expression) != "stage"
                or not all(isinstance(a, ast.Constant) for a in arguments)):
            faults.append(f"{notebook}: {source!r} is not one call or attribute of `stage` with literal arguments")
    return faults


def _parameters(path) -> list[str]:
    cell = next(c for c in _code_cells(path) if _is_parameters(c))
    return [node.targets[0].id for node in ast.parse(cell.source).body]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_builds_its_one_stage_class_from_params_and_only_calls_it(path):
    module = path.stem.split("_", 1)[1]
    stage, faults = _stage_shape_faults(module, (STAGES_DIR / f"{module}.py").read_text(encoding="utf-8"))
    assert not faults, "\n".join(faults)
    cells = [c.source for c in _code_cells(path) if not _is_parameters(c)]
    faults = _notebook_shape_faults(path.name, cells, _parameters(path), module, stage)
    assert not faults, "\n".join(faults)


def test_every_stage_module_serves_a_notebook():
    modules = {p.stem for p in STAGES_DIR.glob("*.py") if p.stem != "__init__"}
    assert modules == {p.stem.split("_", 1)[1] for p in NOTEBOOKS}


def test_stage_classes_are_built_the_same_way_from_params_and_from_a_config(cfg):
    """`from_params` loads the params file with the overrides and hands the config (and 09's `move`) to __init__."""
    from ratio_utils.publish.display import Stage

    class Probe(Stage):
        def __init__(self, cfg, move="all"):
            super().__init__(cfg)
            self.move = move

    built = Probe.from_params("params/smoke.yaml", '{"mining": {"extension_max_words": 2}}', move="address")
    assert built.cfg.name == "smoke" and built.move == "address"
    assert built.cfg.section("mining", PARAMS_SECTIONS["mining"]).extension_max_words == 2
    assert Probe.from_config(cfg).cfg is cfg and Probe.from_config(cfg).move == "all"


def test_the_stage_shape_check_finds_each_fault():
    """The two checks above on a module and a notebook with each fault: they must name every one."""
    two_classes = ("from ..publish.display import Stage\n"
                   "class AStage(Stage):\n    def __init__(self, params_file, overrides):\n        pass\n"
                   "    @classmethod\n    def from_config(cls, cfg):\n        pass\n"
                   "class BStage(Stage):\n    pass\n")
    assert _stage_shape_faults("x", two_classes)[1] == ["x: 2 public Stage subclasses (['AStage', 'BStage']); "
                                                        "a stage module has one"]
    one_class = two_classes.split("class BStage")[0]
    name, faults = _stage_shape_faults("x", one_class)
    assert name == "AStage" and faults == [
        "x.AStage redefines from_config: build state in __init__(self, cfg) instead",
        "x.AStage.__init__ takes ['self', 'params_file', 'overrides'], not (self, cfg, ...)"]
    assert _stage_shape_faults("x", "def run(cfg):\n    pass\n")[1] == [
        "x: does not import Stage from ratio_utils.publish.display",
        "x: 0 public Stage subclasses ([]); a stage module has one"]
    good = ["from ratio_utils.stages.x import XStage", "stage = XStage.from_params(params_file, overrides, move=move)",
            "stage.params", 'stage.table("t")', "stage.summary.claims"]
    assert _notebook_shape_faults("n", good, ["params_file", "overrides", "move"], "x", "XStage") == []
    bad = ["from ratio_utils.stages import x", "stage = XStage(params_file, overrides)", "cfg = stage.cfg",
           "x.run(stage.cfg)", "stage.table(cfg)"]
    assert len(_notebook_shape_faults("n", bad, ["params_file", "overrides"], "x", "XStage")) == 5


# -- a module docstring names only modules and files that exist -------------------------------------------------------

def _top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names.update(ast.literal_eval(node.value))  # names a module's __getattr__ gives on first use
    return names


def _docstring_faults(module: str, docstring: str, modules: dict[str, Path], root: Path) -> list[str]:
    """Dotted names `ratio_utils.a.b` whose module does not exist or lacks the name, module paths `pkg/mod` under a
    package that does not exist, and `.md` files that are neither under `root` nor under its docs/ (`shared/x.md`
    under the shared folder beside `root`; a folder's own README.md or PROVENANCE.md is not checked)."""
    faults = []
    for dotted in re.findall(r"\bratio_utils(?:\.\w+)+", docstring):
        parts = dotted.split(".")
        depth = max(i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules)
        rest = parts[depth:]
        if rest and rest[0] not in _top_level_names(modules[".".join(parts[:depth])]):
            faults.append(f"{module}: names {dotted}, but {'.'.join(parts[:depth])} has no {rest[0]}")
    for path in re.findall(r"`(\w+/\w+)`", docstring):
        package = path.split("/")[0]
        if f"ratio_utils.{package}" in modules and f"ratio_utils.{path.replace('/', '.')}" not in modules:
            faults.append(f"{module}: names {path}, which is no module")
    for name in re.findall(r"(?<![\w/<>.-])([\w/-]+\.md)\b", docstring):
        if name in {"README.md", "PROVENANCE.md"}:
            continue
        if name.startswith("shared/"):
            if (root.parent / "shared").is_dir() and not (root.parent / name).exists():
                faults.append(f"{module}: names {name}, which does not exist")
            continue
        if not ((root / name).exists() or (root / "docs" / name).exists()):
            faults.append(f"{module}: names {name}, which does not exist")
    return faults


def test_module_docstrings_name_only_modules_and_files_that_exist():
    modules = _module_names(REPO_ROOT / "ratio_utils")
    faults = [fault for name, path in sorted(modules.items())
              for fault in _docstring_faults(name,
                                             ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "",
                                             modules, REPO_ROOT)]
    assert not faults, "\n".join(faults)


def test_the_docstring_check_finds_each_kind_of_stale_reference(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "mod.py").write_text("def read_records():\n    pass\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "scale.md").write_text("")
    modules = {name.replace("pkg", "ratio_utils", 1): path for name, path in _module_names(tmp_path / "pkg").items()}
    good = "Reads `ratio_utils.sub.mod.read_records` (`sub/mod`, docs/scale.md, scale.md)."
    assert _docstring_faults("m", good, modules, tmp_path) == []
    bad = "Reads `ratio_utils.report.read_records`, ratio_utils.sub.mod.gone, `sub/old` (design.md)."
    assert _docstring_faults("m", bad, modules, tmp_path) == [
        "m: names ratio_utils.report.read_records, but ratio_utils has no report",
        "m: names ratio_utils.sub.mod.gone, but ratio_utils.sub.mod has no gone",
        "m: names sub/old, which is no module",
        "m: names design.md, which does not exist",
    ]


# -- stages orchestrate; the tree passes the linter -------------------------------------------------------------------

STAGE_MAX_LINES = 200


def test_no_stage_module_is_over_200_lines():
    """A stage reads params, calls the library and publishes; computation that makes it longer belongs to a package."""
    long = {p.name: n for p in sorted(STAGES_DIR.glob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > STAGE_MAX_LINES}
    assert not long, f"stage modules over {STAGE_MAX_LINES} lines (move their computation into the library): {long}"


def test_ruff_passes_under_the_committed_config():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (it is in the `test` extra and the lock)")
    done = subprocess.run([ruff, "check", "--no-cache", "."], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]
