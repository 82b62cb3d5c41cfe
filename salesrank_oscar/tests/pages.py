"""What a shopper reads of salesrank on the shop's pages: the texts of the badges and best sellers."""

import re
from html.parser import HTMLParser

WANTED = ("salesrank-badge", "salesrank-bestseller")


class _Texts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.texts: dict[str, list[str]] = {name: [] for name in WANTED}
        self.open: list[tuple[str, str | None]] = []  # (tag, the wanted class it opened, if any)

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        wanted = next((name for name in WANTED if name in classes), None)
        self.open.append((tag, wanted))
        if wanted:
            self.texts[wanted].append("")

    def handle_endtag(self, tag):
        while self.open:
            if self.open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for _, wanted in self.open:
            if wanted:
                self.texts[wanted][-1] += data


def salesrank_texts(html: str) -> dict[str, list[str]]:
    """{"salesrank-badge": ["#1 in Board games"], "salesrank-bestseller": ["#1 Chess set", …]}."""
    parser = _Texts()
    parser.feed(html)
    return {
        name: [re.sub(r"\s+", " ", text).strip() for text in texts] for name, texts in parser.texts.items()
    }


class _Form(HTMLParser):
    """The fields of one form as a browser would submit them untouched."""

    def __init__(self, form_id: str):
        super().__init__()
        self.form_id, self.inside, self.fields = form_id, False, []
        self.select: str | None = None
        self.textarea: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.inside = attrs.get("id") == self.form_id
        if not self.inside or not attrs.get("name") and tag != "option":
            return
        if tag == "input" and attrs.get("type") not in ("submit", "button", "file", "checkbox", "radio"):
            self.fields.append((attrs["name"], attrs.get("value") or ""))
        elif tag == "input" and attrs.get("type") in ("checkbox", "radio") and "checked" in attrs:
            self.fields.append((attrs["name"], attrs.get("value") or "on"))
        elif tag == "select":
            self.select = attrs["name"]
        elif tag == "option" and self.select and "selected" in attrs:
            self.fields.append((self.select, attrs.get("value") or ""))
        elif tag == "textarea":
            self.textarea = attrs["name"]
            self.fields.append((self.textarea, ""))

    def handle_endtag(self, tag):
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self.select = None
        elif tag == "textarea":
            self.textarea = None

    def handle_data(self, data):
        if self.textarea:
            name, value = self.fields[-1]
            self.fields[-1] = (name, value + data)


def form_fields(html: str, form_id: str) -> dict[str, list[str]]:
    """name -> values of the form `form_id` as the page shows it (for a test client to post back)."""
    parser = _Form(form_id)
    parser.feed(html)
    fields: dict[str, list[str]] = {}
    for name, value in parser.fields:
        fields.setdefault(name, []).append(value)
    return fields
