"""A tiny HTML tree for assertions on built pages (stdlib html.parser; no extra package).

doc = parse(path.read_text())
doc.find("div", cls="admonition").text()
[a.attrs["href"] for a in doc.find_all("a")]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

_VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Node | str] = field(default_factory=list)
    parent: Node | None = None

    def text(self) -> str:
        """Text content, without the heading permalinks ("¶") the toc extension adds."""
        parts: list[str] = []
        for child in self.children:
            if isinstance(child, str):
                parts.append(child)
            elif "headerlink" not in child.classes():
                parts.append(child.text())
        return "".join(parts)

    def words(self) -> str:
        """Text with runs of whitespace folded to one space."""
        return " ".join(self.text().split())

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def iter(self):
        for child in self.children:
            if isinstance(child, Node):
                yield child
                yield from child.iter()

    def find_all(
        self, tag: str | None = None, *, cls: str | None = None, **attrs: str
    ) -> list[Node]:
        out: list[Node] = []
        for node in self.iter():
            if tag is not None and node.tag != tag:
                continue
            if cls is not None and cls not in node.classes():
                continue
            if any(node.attrs.get(k.rstrip("_")) != v for k, v in attrs.items()):
                continue
            out.append(node)
        return out

    def find(self, tag: str | None = None, *, cls: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, cls=cls, **attrs)
        if not found:
            raise AssertionError(f"no <{tag or '*'}> with class={cls!r} {attrs} in the page")
        return found[0]

    def following(self) -> list[Node]:
        """The element siblings after this one."""
        assert self.parent is not None
        siblings = [c for c in self.parent.children if isinstance(c, Node)]
        return siblings[siblings.index(self) + 1 :]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document")
        self.current = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, parent=self.current)
        self.current.children.append(node)
        if tag not in _VOID:
            self.current = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.current.children.append(Node(tag, {k: v or "" for k, v in attrs}, parent=self.current))

    def handle_endtag(self, tag: str) -> None:
        node: Node | None = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data: str) -> None:
        self.current.children.append(data)


def parse(html: str) -> Node:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root
