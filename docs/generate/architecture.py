"""Draw docs/architecture.svg from the package's real import graph (``python -m docs.generate.architecture``).

One box per floor, top to bottom in the order of the layers contract (pyproject.toml), and
one arrow per pair of floors where a module of one imports a module of the other, labelled
with how many such imports there are. ``tests/test_architecture.py`` redraws it and checks
that the committed picture is the same, so the picture cannot fall behind the code.
"""

from __future__ import annotations

import html
import pathlib
import sys

import grimp

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "architecture.svg"

# (floor, title, what it is); the order is the layers contract's, the public face on top.
FLOORS = [
    (
        "public",
        "dspy_imp · dspy_imp.durable · dspy_imp.testing · dspy_imp.tracing",
        "the public API: ReActV2, deadline, DBOS, ScriptedLM, the web, evals, MCP, GenAI spans",
    ),
    ("_durable", "_durable/", "durable turns on DBOS: the checkpointing driver and its codec"),
    ("_program", "_program/", "ReActV2 itself, its inner predictor, option checks, the prediction"),
    ("_drivers", "_drivers/", "perform effects, sync or async: requests through DSPy, tools, usage"),
    ("_watch", "_watch/", "streaming, status messages, progress, tracing, the HTML view"),
    ("_turn", "_turn/", "the I/O-free state machine: effects, tools, approval, meter (no DSPy)"),
    ("_prompt", "_prompt/", "what the model reads: sentences, guidance, dialects, rendering, memo"),
    ("_routes", "_routes/", "provider routes and quirks; the one module on DSPy's private API"),
    ("_records", "_records/", "steps, history, redaction, kinds, errors, usage, outcomes, clock"),
]
BOX_W, BOX_H, GAP, LEFT, TOP, LANE = 690, 58, 22, 64, 20, 18


def floor_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in {"durable", "evals", "hosted", "mcp", "testing", "tracing", "web"}:
        return "public"
    return parts[1]


def edges() -> dict[tuple[str, str], int]:
    graph = grimp.build_graph("dspy_imp", include_external_packages=False)
    found: dict[tuple[str, str], int] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            pair = (floor_of(module), floor_of(imported))
            if pair[0] != pair[1]:
                found[pair] = found.get(pair, 0) + 1
    return found


def modules_of(floor: str) -> str:
    if floor == "public":
        return ""
    names = sorted(p.stem for p in (ROOT / "dspy_imp" / floor).glob("*.py") if p.stem != "__init__")
    return " · ".join(names)


def draw(found: dict[tuple[str, str], int]) -> str:
    index = {name: i for i, (name, _, _) in enumerate(FLOORS)}
    y = {name: TOP + i * (BOX_H + GAP) for name, i in index.items()}
    # Every floor reads the records: one bar on the left says so, instead of an arrow from each.
    readers = sorted((a for a, b in found if b == "_records"), key=index.__getitem__)
    pairs = sorted((p for p in found if p[1] != "_records"), key=lambda p: (index[p[1]] - index[p[0]], index[p[0]]))
    width = LEFT + BOX_W + 30 + LANE * len(pairs) + 40
    height = TOP + len(FLOORS) * (BOX_H + GAP)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="system-ui, -apple-system, Segoe UI, sans-serif" role="img" '
        'aria-label="dspy_imp floors and the imports between them">',
        '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#5c6bc0"/></marker></defs>',
    ]
    for name, title, role in FLOORS:
        top = y[name]
        fill = "#e8eaf6" if name != "_turn" else "#fff3e0"
        out.append(
            f'<rect x="{LEFT}" y="{top}" width="{BOX_W}" height="{BOX_H}" rx="8" fill="{fill}" stroke="#3949ab"/>'
        )
        out.append(
            f'<text x="{LEFT + 12}" y="{top + 20}" font-size="15" font-weight="600" fill="#1a237e">'
            f"{html.escape(title)}</text>"
        )
        out.append(f'<text x="{LEFT + 12}" y="{top + 37}" font-size="12" fill="#37474f">{html.escape(role)}</text>')
        out.append(
            f'<text x="{LEFT + 12}" y="{top + 51}" font-size="10.5" fill="#607d8b" '
            f'font-family="ui-monospace, monospace">{html.escape(modules_of(name))}</text>'
        )
    for lane, (a, b) in enumerate(pairs):
        x0 = LEFT + BOX_W
        x = x0 + 24 + LANE * lane
        ya = y[a] + BOX_H / 2 + (lane % 5 - 2) * 5
        yb = y[b] + BOX_H / 2 + (lane % 5 - 2) * 5
        out.append(
            f'<path d="M {x0} {ya:.0f} H {x} V {yb:.0f} H {x0 + 2}" fill="none" stroke="#5c6bc0" '
            f'stroke-width="1.3" marker-end="url(#head)"><title>{a} imports {b}: {found[(a, b)]} imports'
            "</title></path>"
        )
        out.append(f'<text x="{x + 2}" y="{(ya + yb) / 2:.0f}" font-size="9" fill="#5c6bc0">{found[(a, b)]}</text>')
    bottom = y["_records"]
    out.append(
        f'<path d="M {LEFT - 30} {TOP + 10} V {bottom + BOX_H / 2:.0f} H {LEFT - 2}" fill="none" '
        f'stroke="#8d6e63" stroke-width="2" marker-end="url(#head)"><title>these floors import _records: '
        f"{', '.join(readers)}</title></path>"
    )
    label_y = (TOP + bottom) / 2
    out.append(
        f'<text x="{LEFT - 36}" y="{label_y:.0f}" font-size="11" fill="#6d4c41" '
        f'transform="rotate(-90 {LEFT - 36} {label_y:.0f})" text-anchor="middle">'
        "every floor above reads the records</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> None:
    picture = draw(edges())
    if "--check" in sys.argv:
        sys.exit(0 if OUT.read_text() == picture else "docs/architecture.svg is stale: run make architecture")
    OUT.write_text(picture)


if __name__ == "__main__":
    main()
