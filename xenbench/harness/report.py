"""An executed notebook made into a report: offline HTML, the answer first, and no noise.

Each step takes the executed notebook (a dict in nbformat's layout) and returns it changed or a copy:
:func:`without_widget_state` (saved widget state that renders nothing offline), :func:`final_progress` (progress bars
in their finished state), :func:`summarize_warnings` (each library warning once, with a count), :func:`summary_first`
(the outputs of the cells tagged :data:`SUMMARY_TAG` repeated at the top), and :func:`light_html` (no CDN scripts;
plotly.js inline or shared). :func:`xenbench.harness.runner.run_notebook` applies them all.
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xenbench._io import write_text_atomic

__all__ = ["SUMMARY_TAG", "FINDINGS_TAG", "without_widget_state", "without_plotly_bundle", "summarize_warnings",
           "final_progress", "summary_first", "light_html", "warning_key"]

_CDN_SCRIPT = re.compile(r'<script[^>]*\bsrc="https?://[^"]*(?:mathjax|require\.js|requirejs)[^"]*"[^>]*>\s*</script>',
                         re.IGNORECASE)
_PLOTLY_INLINE = re.compile(r'<script[^>]*>\s*/\*\*\s*\* plotly\.js v([0-9][\w.-]*)\b.*?</script>',
                            re.DOTALL)


_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def without_widget_state(nb: Any) -> Any:
    """Drop saved widget state; an output that also has a static ``text/html`` form keeps only that form.

    A live widget's saved state (for the explorers: the whole plotly bundle, ~5 MB) renders nothing offline;
    :class:`xenbench.viz.widgets.Explorer` outputs carry a static snapshot of their figure instead. A progress bar
    (a tqdm widget) becomes the text of its finished state, read from the saved state; any other widget output
    without a static form is left out (its plain text shows the widget as it was created, e.g. a bar at 0 %).
    """
    state = nb.get("metadata", {}).pop("widgets", None) or {}
    models = state.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for cell in nb.get("cells", []):
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if _WIDGET_VIEW in data:
                if "text/html" not in data:
                    text = _progress_text(models, data[_WIDGET_VIEW].get("model_id", ""))
                    if text is None:
                        continue
                    data["text/plain"] = text
                del data[_WIDGET_VIEW]
            kept.append(output)
        if "outputs" in cell:
            cell["outputs"] = kept
    return nb


def without_plotly_bundle(nb: Any) -> Any:
    """A copy of an executed notebook without the plotly.js bundle (4.6 MB) that the first figure's HTML output carries:
    what ``reports/<stem>.ipynb`` keeps. JupyterLab draws its figures from their plotly JSON output (and the HTML
    report, made from the notebook before this copy, keeps the bundle, so it draws offline on its own)."""
    import copy

    out = copy.deepcopy(nb)
    for output in (o for c in out.get("cells", []) for o in c.get("outputs", [])):
        html = output.get("data", {}).get("text/html")
        if isinstance(html, str) and _PLOTLY_INLINE.search(html):
            output["data"]["text/html"] = _PLOTLY_INLINE.sub("", html)
    return out


def _progress_text(models: Mapping[str, Any], model_id: str) -> str | None:
    """``"CCSA steps: 100%|██████████| 30/30 [00:01<00:00, 25.3it/s]"`` from a tqdm widget's saved state (an HBox of
    an HTML description, a progress bar and an HTML counter), or None for another widget."""
    import html as _html

    def state(ref: Any) -> dict[str, Any]:
        key = ref[len("IPY_MODEL_"):] if isinstance(ref, str) and ref.startswith("IPY_MODEL_") else ref
        return models.get(key, {}).get("state", {}) if isinstance(key, str) else {}

    children = [state(c) for c in state(model_id).get("children", [])]
    bars = [c for c in children if c.get("_model_name") in ("FloatProgressModel", "IntProgressModel")]
    if len(children) != 3 or len(bars) != 1:
        return None
    left, bar, right = children
    plain = [_html.unescape(re.sub(r"<[^>]*>", "", str(c.get("value", "")))).strip() for c in (left, right)]
    done = min(1.0, float(bar.get("value") or 0) / float(bar.get("max") or 1))
    return f"{plain[0]} {done:4.0%}|{'█' * round(10 * done):<10}| {plain[1]}".strip()


# A warning line of a library (faiss's "WARNING clustering 639 points to 256 centroids: ...", Python's
# "UserWarning: ...") in a cell's stderr; numbers are masked to find the repeats of one message.
_WARNING_LINE = re.compile(r"\bwarn(ing)?\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def warning_key(line: str) -> str | None:
    """A library warning line's message with its numbers masked (its repeats share it); None for another line."""
    return _NUMBER.sub("#", line.strip()) if _WARNING_LINE.search(line) else None


def summarize_warnings(nb: Any) -> int:
    """Keep one line per library warning in a notebook's stderr outputs: the first of each message (numbers
    aside), followed by how many more there were; the repeats are removed, and a stream left empty with them.

    Returns
    -------
    int
        The number of lines removed.
    """
    counts: dict[str, int] = {}
    streams = [o for c in nb.get("cells", []) for o in c.get("outputs", [])
               if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    for output in streams:
        for line in str(output.get("text", "")).splitlines():
            key = warning_key(line)
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
    first: set[str] = set()
    for output in streams:
        lines = []
        for line in str(output.get("text", "")).splitlines(keepends=True):
            key = warning_key(line)
            if key is None:
                lines.append(line)
            elif key not in first:
                first.add(key)
                more = counts[key] - 1
                lines.append(line.rstrip("\n") + (f" [and {more} more like it in this run]" if more else "")
                             + ("\n" if line.endswith("\n") else ""))
        output["text"] = "".join(lines)
    for cell in nb.get("cells", []):
        if "outputs" in cell:
            cell["outputs"] = [o for o in cell["outputs"] if not (o.get("output_type") == "stream" and not o["text"])]
    return sum(n - 1 for n in counts.values())


# A text progress bar's line: "CCSA seeds:  50%|█████     | 1/2 [...]" (its description is the group).
_BAR_LINE = re.compile(r"^(.*?)\s*\d+%\|")


def final_progress(nb: Any) -> int:
    """Keep only the last line of each text progress bar in a notebook's stream outputs.

    A bar redrawn with ``\\r`` keeps its last state once streams are coalesced, but an outer bar of nested loops
    leaves its first state (``CCSA seeds:   0%``) on a line of its own when an inner bar starts below it. Per
    stream output, every line of a bar but the last one with the same description is removed.

    Returns
    -------
    int
        The number of lines removed.
    """
    removed = 0
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            if output.get("output_type") != "stream":
                continue
            lines = str(output.get("text", "")).splitlines(keepends=True)
            last = {}
            for k, line in enumerate(lines):
                match = _BAR_LINE.match(line)
                if match:
                    last[match.group(1).strip()] = k
            keep = [line for k, line in enumerate(lines)
                    if not (m := _BAR_LINE.match(line)) or last[m.group(1).strip()] == k]
            removed += len(lines) - len(keep)
            output["text"] = "".join(keep)
    return removed


SUMMARY_TAG = "summary"
#: The tag of a notebook's closing cell, which shows the findings generated from its results (``xb.findings.show``).
FINDINGS_TAG = "findings"
_PLOTLY_DIV_ID = re.compile(r'<div id="([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"')
_COPY_NOTE = {SUMMARY_TAG: f"# The summary: a copy of the outputs of the cell tagged '{SUMMARY_TAG}' further down.",
              FINDINGS_TAG: "# The findings of this run in words: a copy of the outputs of the closing cell (tagged "
                            f"'{FINDINGS_TAG}'), generated from the run's results."}


def summary_first(nb: Any) -> Any:
    """A copy of an executed notebook for its HTML report with the answer first: right after the first cell (the title
    and question), the outputs of every cell tagged :data:`SUMMARY_TAG` (the summary figure), then those of the cell
    tagged :data:`FINDINGS_TAG` (the findings in words, generated from the run's results), so a reader sees the answer
    before the details.

    Each copy's source is a comment naming where it is made; a plotly figure's element id is renamed so both copies
    draw, and an inline plotly.js bundle (the first figure of a notebook carries it) moves to the first copy, which
    now comes first. The notebook itself is not changed (the executed ``.ipynb`` keeps its order).
    """
    import copy

    def tagged(cell: Any, tag: str) -> bool:
        return tag in cell.get("metadata", {}).get("tags", [])

    if not any(tagged(c, t) for c in nb.get("cells", []) for t in _COPY_NOTE):
        return nb
    out = copy.deepcopy(nb)
    copies = []
    for tag in (SUMMARY_TAG, FINDINGS_TAG):
        for cell in (c for c in out["cells"] if tagged(c, tag)):
            dup = copy.deepcopy(cell)
            dup["metadata"] = {"tags": [f"{tag}-copy"]}
            if "id" in dup:
                dup["id"] = uuid.uuid4().hex[:8]
            dup["source"] = _COPY_NOTE[tag]
            for output in dup.get("outputs", []):
                html = output.get("data", {}).get("text/html")
                if isinstance(html, str):
                    html = _PLOTLY_INLINE.sub("", html)  # the page's one bundle is placed below
                    for old in set(_PLOTLY_DIV_ID.findall(html)):
                        html = html.replace(old, str(uuid.uuid4()))
                    output["data"]["text/html"] = html
            copies.append(dup)
    # The page's one plotly.js bundle may sit in an earlier figure's output, below where the copies go: move it to
    # the first copy, so that no figure is drawn before Plotly is defined.
    bundle = None
    for output in (o for c in out["cells"] for o in c.get("outputs", [])):
        html = output.get("data", {}).get("text/html")
        if isinstance(html, str) and (m := _PLOTLY_INLINE.search(html)):
            bundle = m.group(0)
            output["data"]["text/html"] = html.replace(bundle, "", 1)
            break
    if bundle is not None and copies:
        first = next((o for o in copies[0].get("outputs", []) if isinstance(o.get("data", {}).get("text/html"), str)),
                     None)
        if first is None:
            copies[0].setdefault("outputs", []).insert(0, {"output_type": "display_data", "metadata": {},
                                                             "data": {"text/html": bundle}})
        else:
            first["data"]["text/html"] = bundle + first["data"]["text/html"]
    out["cells"] = [out["cells"][0], *copies, *out["cells"][1:]]
    return out


def light_html(body: str, out_dir: Path, *, self_contained: bool = True) -> str:
    """Make an nbconvert HTML report offline, and light on request.

    Drops ``<script src>`` tags that fetch MathJax or require.js from a CDN (no report typesets LaTeX, and
    plotly's inline bundle does not need require.js). ``self_contained`` (default) keeps plotly.js inline: the file
    draws its figures wherever it is copied. Otherwise the inline bundle becomes
    ``<script src="plotly-<version>.min.js">``, written once into ``out_dir`` (4.6 MB less per report, but a report
    copied without that file draws nothing).
    """
    body = _CDN_SCRIPT.sub("", body)
    if self_contained:
        return body
    match = _PLOTLY_INLINE.search(body)
    if match is None:
        return body
    name = f"plotly-{match.group(1)}.min.js"
    shared = out_dir / name
    if not shared.is_file():
        import plotly

        bundle = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
        write_text_atomic(shared, bundle.read_text(encoding="utf-8"))
    return body[: match.start()] + f'<script type="text/javascript" src="{name}"></script>' + body[match.end() :]
