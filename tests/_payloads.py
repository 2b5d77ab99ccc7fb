"""Strings that would run script were they pasted into a report's HTML unescaped (issue 54), and committed results
documents with them put in each field a user chooses (a first stage's run file, a dataset name, a CE folder's name,
the caveat that names a CE, the results file's own name)."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "notebooks" / "results"


def payload(field: str) -> str:
    """An ``<img>`` whose error handler renames the page: ``document.title`` becomes ``pwned-<field>`` if it runs."""
    return f"<img src=x onerror=\"document.title='pwned-{field}'\">"


#: Further forms: a script element, a javascript: link in Markdown, an event handler on a tag that needs no load.
EXTRA = ["</script><script>document.title='pwned-script'</script>", "[click](javascript:document.title='pwned-link')",
         "<svg onload=\"document.title='pwned-svg'\"></svg>", "<details open ontoggle=\"document.title='pwned-toggle'\">"]


def poisoned_results(folder: Path) -> list[tuple[Path, list[str]]]:
    """Results files of 00 and 03 (copies of the committed full runs) with a payload in each user-chosen field each
    one's findings print, written into ``folder`` under a payload-named file; each with the payloads it holds."""
    out = []
    doc = json.loads((RESULTS / "00_data.full.results.json").read_text(encoding="utf-8"))
    data = copy.deepcopy(doc)
    run = "run " + payload("run-file") + ".trec"  # a first stage read from a run file: labelled by its name
    for row in data["results"]["label_metrics"]:
        if row["retriever"] == "BM25":
            row["retriever"] = run
    data["results"]["domain"]["name"] = "beir:" + payload("dataset") + " " + EXTRA[0]
    data["caveats"] = [payload("caveat") + " " + EXTRA[2]]
    path = folder / (payload("file") + ".results.json")
    path.write_text(json.dumps(data), encoding="utf-8")
    out.append((path, [payload(f) for f in ("run-file", "dataset", "caveat", "file")] + [EXTRA[0], EXTRA[2]]))
    doc = json.loads((RESULTS / "03_adacur_rounds.full.results.json").read_text(encoding="utf-8"))
    adacur: dict[str, Any] = copy.deepcopy(doc)
    adacur["results"]["protocol"]["ce"] = payload("model") + EXTRA[1] + EXTRA[3]  # -p model <folder of that name>
    path = folder / "03.results.json"
    path.write_text(json.dumps(adacur), encoding="utf-8")
    out.append((path, [payload("model"), EXTRA[1], EXTRA[3]]))
    return out
