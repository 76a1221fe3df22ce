"""The built site: ``mkdocs build --strict`` with the notebooks executed, then checks over every page.

The site is built once per test session (about 15 s: the notebooks run in a kernel during the
build, which is also the test that they run top to bottom; a failing cell fails the build). The
checks apply to every page the build writes, whoever added it:

- an example box in the API reference is code, never a pile of nested blockquotes;
- user pages name no private module (``_render_memo.py``, ``dspy_imp._turn``) and no spec code
  ("(E1)"); the pages written for contributors (the decisions log, the architecture) are exempt;
- every type in an API signature links to its entry, and every documented name is one name;
- every link between pages resolves, the notebooks' links to the guide included;
- nothing loads from another host at run time: the diagrams use the vendored Mermaid;
- every notebook is on the site with its outputs, the HTML view of a prediction included;
- no code block is wider than its content area at 1280 px (measured in headless Chromium), and
  no page names one of the project's issue numbers;
- the notebooks' kernels print no warning that their ports are unencrypted (their manager gives
  them CurveZMQ keys: ``docs/generate/jupyter/``, on Jupyter's config path for the build).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytestmark = pytest.mark.slow  # left out of `make check`; under `pytest -n`, `--dist loadfile` builds once

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
JUPYTER_CONFIG = ROOT / "docs" / "generate" / "jupyter"  # jupyter_nbconvert_config.json
# Written for contributors, about the code itself: the decisions log and the architecture page.
EXEMPT = {"decisions/index.html", "architecture/index.html"}
PRIVATE_MODULE = re.compile(r"\b_[a-z][a-z0-9_]*\.py\b|\bdspy_imp[./]_[a-z][a-z0-9_./]*")
SPEC_CODE = re.compile(r"\([A-Z][0-9]{1,2}\)")
# "issue 29", "issues 28 and 103", "#1273": a page speaks of the topic, and links an external report.
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+|(?<![\w&])#\d{2,}\b", re.IGNORECASE)


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The built site and what the build printed on standard error."""
    out = tmp_path_factory.mktemp("site")
    env = {
        **os.environ,
        # The notebooks' kernels get CurveZMQ keys from their manager, as `make docs` does.
        "JUPYTER_CONFIG_PATH": os.pathsep.join(
            [str(JUPYTER_CONFIG), *filter(None, [os.environ.get("JUPYTER_CONFIG_PATH")])]
        ),
        "NO_MKDOCS_2_WARNING": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONWARNINGS": "ignore",
        "IPYTHONDIR": str(tmp_path_factory.mktemp("ipython")),  # the kernels' history stays out of ~
        # The notebooks' kernels run in notebooks/: they import this checkout, whatever is installed.
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    env.pop("DSPY_IMP_MODEL", None)
    built = subprocess.run(
        # No --quiet: it drops mkdocs' warnings before --strict counts them (a broken anchor passed).
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    return out, built.stderr


@pytest.fixture(scope="session")
def site(build: tuple[Path, str]) -> Path:
    return build[0]


def test_the_notebooks_kernels_do_not_warn_of_unencrypted_ports(build: tuple[Path, str]) -> None:
    _, printed = build  # ipykernel's warning: "Kernel is running over TCP without encryption ..."
    assert "eavesdropping" not in printed, printed


def pages(site: Path) -> dict[str, str]:
    """Every page of the site (``api/index.html``: its HTML), the 404 page aside."""
    return {
        path.relative_to(site).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(site.rglob("*.html"))
        if path.name != "404.html"
    }


class Page(HTMLParser):
    """A page's visible text, its links and scripts, and what sits inside admonitions."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.links: list[tuple[str, str]] = []  # (tag, url)
        self.scripts: list[str] = []  # inline script bodies
        self.in_admonition_blockquotes = 0
        self.unlinked: list[str] = []  # cross-references to our names that found no entry
        self._stack: list[tuple[str, bool]] = []  # (tag, opens an admonition)
        self._hidden = 0  # inside <script> or <style>
        self._span_title: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        classes = values.get("class", "").split()
        admonition = tag == "details" or "admonition" in classes
        if tag == "blockquote" and any(opens for _, opens in self._stack):
            self.in_admonition_blockquotes += 1
        if tag not in ("br", "hr", "img", "input", "meta", "link", "wbr", "source"):
            self._stack.append((tag, admonition))
        if tag in ("script", "style"):
            self._hidden += 1
        for name in ("href", "src"):
            if values.get(name) and tag in ("a", "link", "script", "img"):
                self.links.append((tag, values[name]))
        title = values.get("title", "")
        self._span_title = title if tag == "span" and title.startswith("dspy_imp") else None

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            open_tag, _ = self._stack.pop()
            if open_tag == tag:
                break
        if tag in ("script", "style"):
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if self._hidden:
            if self._stack and self._stack[-1][0] == "script":
                self.scripts.append(data)
            return
        self.text.append(data)
        if self._span_title is not None:
            last = self._span_title.rsplit(".", 1)[-1]
            if not (data.isidentifier() and data == last and data[:1].islower()):
                self.unlinked.append(f"{self._span_title} shown as {data!r}")
            self._span_title = None

    @property
    def visible(self) -> str:
        return " ".join(" ".join(self.text).split())


def parsed(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


def test_no_example_box_holds_a_blockquote(site: Path) -> None:
    bad = [path for path, html in pages(site).items() if parsed(html).in_admonition_blockquotes]
    assert not bad, f"blockquotes inside admonitions (write examples as fenced code): {bad}"


def test_the_api_examples_are_code(site: Path) -> None:
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    boxes = re.findall(r'<details class="example"[^>]*>(.*?)</details>', api, re.DOTALL)
    assert len(boxes) >= 10 and all("<code>" in box and "highlight" in box for box in boxes)


def test_user_pages_name_no_private_module_and_no_spec_code(site: Path) -> None:
    found = {}
    for path, html in pages(site).items():
        if path in EXEMPT:
            continue
        text = parsed(html).visible
        hits = sorted(set(PRIVATE_MODULE.findall(text)) | set(SPEC_CODE.findall(text)))
        if hits:
            found[path] = hits
    assert not found, f"internal names on user pages: {found}"


def test_every_type_in_the_api_reference_links_to_its_entry(site: Path) -> None:
    page = parsed((site / "api" / "index.html").read_text(encoding="utf-8"))
    assert not page.unlinked, f"names with no entry (export and document them): {page.unlinked}"


def test_every_link_between_pages_resolves(site: Path) -> None:
    broken = []
    for path, html in pages(site).items():
        base = (site / path).parent
        for tag, url in parsed(html).links:
            parts = urlsplit(url)
            if parts.scheme or parts.netloc or not parts.path or url.startswith("#"):
                continue
            target = (base / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{path}: <{tag}> {url}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_nothing_loads_from_another_host(site: Path) -> None:
    remote = []
    for path, html in pages(site).items():
        page = parsed(html)
        remote += [f"{path}: <{tag}> {url}" for tag, url in page.links if tag != "a" and urlsplit(url).netloc]
        imports = [m for script in page.scripts for m in re.findall(r"import\(\s*['\"](https?:[^'\"]+)", script)]
        remote += [f"{path}: a script imports {url}" for url in imports]
    assert not remote, "fetched from another host at run time:\n" + "\n".join(remote)


def test_the_diagrams_render_with_the_vendored_mermaid(site: Path) -> None:
    with_diagrams = {path: html for path, html in pages(site).items() if '<pre class="mermaid">' in html}
    assert {"finish-modes/index.html", "termination/index.html", "controls/index.html"} <= set(with_diagrams)
    assert with_diagrams["finish-modes/index.html"].count('<pre class="mermaid">') >= 4
    script = site / "assets" / "javascripts" / "mermaid.min.js"
    assert script.stat().st_size > 1_000_000  # the whole library, not a stub
    for path, html in with_diagrams.items():
        depth = "../" * path.count("/")
        assert f'<script src="{depth}assets/javascripts/mermaid.min.js"></script>' in html, path


def test_every_notebook_is_on_the_site_with_its_outputs(site: Path) -> None:
    assert {path.stem for path in NOTEBOOKS} >= {"tour", "optimizing", "streaming"}
    for notebook in NOTEBOOKS:
        html = (site / "notebooks" / notebook.stem / "index.html").read_text(encoding="utf-8")
        code_cells = [c for c in json.loads(notebook.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
        assert html.count("jp-CodeCell") >= len(code_cells), notebook.name
        assert "jp-OutputArea-output" in html, f"{notebook.name} shows no outputs"
        assert "Traceback" not in parsed(html).visible, f"{notebook.name} shows an error"


def test_the_streaming_notebook_shows_the_html_view_and_a_clean_progress_line(site: Path) -> None:
    html = (site / "notebooks" / "streaming" / "index.html").read_text(encoding="utf-8")
    views = re.findall(r'<div class="dspy-imp">', html)
    assert len(views) >= 2 and 'class="dspy-imp-usage"' in html  # the prediction and its metadata
    text = parsed(html).visible
    assert "✓ Turn ended: answered" in text
    assert not re.search("[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]", text), "a spinner glyph was left behind"


def test_the_notebooks_show_no_progress_bar_and_no_logged_warning(site: Path) -> None:
    # What a notebook prints on standard error is on its page: an optimizer's tqdm bars (one line
    # per update) and a library's logged warning would be, in red.
    for notebook in NOTEBOOKS:
        html = (site / "notebooks" / notebook.stem / "index.html").read_text(encoding="utf-8")
        printed = re.findall(r'data-mime-type="application/vnd\.jupyter\.stderr"[^>]*>\s*<pre>(.*?)</pre>', html, re.S)
        shown = [line for line in printed if line.strip()]
        assert not shown, f"{notebook.name} prints on standard error: {shown[:3]}"
        bars = re.findall(r"\d+%\|.*?\| \d+/\d+ \[", html)  # tqdm's bars on stdout too
        assert not bars, f"{notebook.name} shows {len(bars)} progress bars: {bars[:3]}"


def test_no_page_names_an_issue_number(site: Path) -> None:
    found = {}
    for path, html in pages(site).items():
        hits = sorted(set(ISSUE_NUMBER.findall(parsed(html).visible)))
        if hits:
            found[path] = hits
    assert not found, f"issue numbers on the site: {found}"


# The code blocks of a page: Markdown's (`pre > code`) and a notebook's cells, its inputs
# (`.highlight-ipynb pre`, with no `code`) and its outputs (`.jp-OutputArea-output pre`).
_CODE = ".md-content pre:not(.mermaid) > code, .md-content .jp-Cell pre"
_NOTEBOOK_CODE = ".md-content .jp-Cell pre"
# Every code block of a page whose lines are wider than the block, at 1280 px: what would scroll.
_OVERFLOWING = """(code) => [...document.querySelectorAll(code)]
    .filter(code => code.scrollWidth > code.clientWidth + 1)
    .map(code => code.innerText.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), ''))"""


def test_no_code_block_is_wider_than_the_page_at_1280_px(site: Path) -> None:
    from playwright.sync_api import sync_playwright

    wide = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(120_000)  # a wait on a loaded machine, not a timed assertion
        # The widths are the stylesheets' (with the scripts, every block measured the same), and
        # running the scripts, the 3.5 MB Mermaid on every page, took two thirds of the check.
        page.route("**/*.js", lambda route: route.abort())
        measured = in_notebooks = 0
        count = "(code) => document.querySelectorAll(code).length"
        for path in pages(site):
            page.goto((site / path).as_uri(), wait_until="load")
            measured += page.evaluate(count, _CODE)
            in_notebooks += page.evaluate(count, _NOTEBOOK_CODE)
            if lines := page.evaluate(_OVERFLOWING, _CODE):
                wide[path] = lines
        browser.close()
    assert measured > 150  # the code blocks were found: the check can fail
    assert in_notebooks > 50  # the notebooks' cells too, inputs and outputs
    assert not wide, f"code wider than the page at 1280 px (longest line of each): {wide}"


def test_the_copy_button_shows_only_over_a_hovered_block(site: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(120_000)
        page.goto((site / "quickstart" / "index.html").as_uri(), wait_until="load")
        button = page.locator(".md-typeset pre > .md-code__nav").first
        button.wait_for(state="attached")
        page.mouse.move(0, 0)
        resting = button.evaluate("nav => getComputedStyle(nav).opacity")
        page.locator(".md-typeset pre").first.hover()
        page.wait_for_function("nav => getComputedStyle(nav).opacity === '1'", arg=button.element_handle())
        browser.close()
    assert resting == "0"
