"""MkDocs hooks (``hooks:`` in mkdocs.yml) for the notebook pages.

The notebooks live in ``notebooks/`` (``docs/notebooks`` is a link to it) and link to the guide
the way Jupyter resolves links, relative to the repository: ``../docs/finish-modes.md``. On the
site a notebook is the page ``notebooks/<name>/``, so those links become ``../../finish-modes/``.

nbconvert's page template also carries a script that would import Mermaid from a CDN when a
notebook holds a Mermaid output; ours hold none, and the site loads nothing from another host,
so the script is dropped.
"""

from __future__ import annotations

import re
from typing import Any

_GUIDE_LINK = re.compile(r'href="\.\./docs/([\w-]+)\.md(#[^"]*)?"')
_CDN_SCRIPT = re.compile(
    r'<script type="module">(?:(?!</script>).)*?https://cdn(?:(?!</script>).)*?</script>', re.DOTALL
)


def _is_notebook(page: Any) -> bool:
    return str(page.file.src_uri).endswith(".ipynb")


def on_page_content(html: str, page: Any, **_: Any) -> str:
    if not _is_notebook(page):
        return html
    return _GUIDE_LINK.sub(lambda m: f'href="../../{m.group(1)}/{m.group(2) or ""}"', html)


def on_post_page(output: str, page: Any, **_: Any) -> str:
    return _CDN_SCRIPT.sub("", output) if _is_notebook(page) else output
