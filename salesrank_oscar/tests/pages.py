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
