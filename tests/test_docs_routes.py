"""docs/api.md's index names every route the server answers."""

import re
from pathlib import Path

from django.urls import URLPattern, URLResolver, get_resolver

from .processes import ROOT


def _routes(patterns, prefix="") -> set[str]:
    """Every route as the docs write it: /v1/products/{productId}/rank."""
    found = set()
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found.add("/" + route)  # an included site (the admin) is named by its root
        elif isinstance(pattern, URLPattern):
            found.add("/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: "{" + _camel(m[1]) + "}", route))
    return found


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def test_every_route_is_in_the_index_of_the_api_docs():
    docs = (ROOT / "docs" / "api.md").read_text()
    index = docs[: docs.index("\n## ")]
    listed = set(re.findall(r"^\| `(?:GET|POST|DELETE|PUT|PATCH) ([^`]+)` \|", index, re.MULTILINE))
    assert _routes(get_resolver().url_patterns) - listed == set()


def test_the_repository_cites_no_document_outside_it():
    outside = re.compile(r"DESIGN\s§|DESIGN\.md|\.\./sha[r]ed|seed[s]/")
    cited = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in (
            "rankings",
            "catalogue",
            "salesrank_site",
            "tests",
            "bench",
            "docs",
            "templates",
            "salesrank_oscar",
            "examples",
        )
        for path in (ROOT / folder).rglob("*")
        if path.suffix in {".py", ".md", ".html", ".lua", ".sql"} and path.resolve() != Path(__file__)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if outside.search(line)
    ]
    assert cited == []


def test_every_test_the_worst_case_table_names_exists():
    """docs/architecture.md's "Every request bounded" table names, for each surface, the test that
    shows its bound: each name is a test of the file it is given with (or of the row's last file), a
    file of tests/ or, given with its folders, of another folder (salesrank_oscar/tests/)."""
    docs = (ROOT / "docs" / "architecture.md").read_text()
    table = docs[docs.index("## Every request bounded") :]
    table = table[: table.index("\n## ")] if "\n## " in table else table
    missing = []
    for row in (line for line in table.splitlines() if line.startswith("| ")):
        cited = row.rsplit(" | ", 1)[-1]
        path = None
        for file, name in re.findall(r"`(?:((?:\w+/)*test_\w+\.py)(?:::(?:\w+::)?)?)?(\w*)", cited):
            path = (ROOT / file if "/" in file else ROOT / "tests" / file) if file else path
            text = path.read_text() if path is not None and path.exists() else ""
            if name and f"def {name}(" not in text and f"class {name}" not in text:
                missing.append(f"{file or '(no file)'}::{name}")
            if file and not path.exists():
                missing.append(file)
    assert missing == []
