"""Crawled HTML to text: tags, character references and boilerplate elements removed, with lxml.

Crawls carry markup (`<p>洗濯機の…</p>&nbsp;<br/>`): left in, it makes a row read as English to fastText and
score ~0 with the prefilter. A row is parsed only when it holds an HTML tag of a known element or a character
reference (`HTML_MARK`), so `a<b`, `x < 3` and `<3` in plain text are left as they are. Parsing is lxml's
HTML parser (libxml2: the entities, broken nesting and unclosed tags a browser tolerates). Removed with their
content: scripts, styles, comments and the page furniture elements (`nav`, `header`, `footer`, `aside`,
`form`, `iframe`, ...); block elements and `<br>` end a line, so words on two sides of a tag stay apart.
"""

from __future__ import annotations

import html
import re

_TAGS = ("a|abbr|address|article|aside|b|base|bdi|big|blockquote|body|br|button|caption|center|cite|code|col|"
         "colgroup|dd|del|details|dfn|div|dl|dt|em|embed|fieldset|figcaption|figure|font|footer|form|h[1-6]|"
         "head|header|hr|html|i|iframe|img|input|ins|kbd|label|legend|li|link|main|mark|meta|nav|noscript|"
         "object|ol|option|p|picture|pre|q|s|samp|script|section|select|small|source|span|strike|strong|style|"
         "sub|summary|sup|svg|table|tbody|td|template|textarea|tfoot|th|thead|time|title|tr|tt|u|ul|var|video|wbr")
# A tag of a known element (opening, closing or empty), a comment or doctype, or a character reference.
HTML_MARK = (rf"</?(?:{_TAGS})(?:\s[^<>]*)?/?>|<!--|<!DOCTYPE|"
             r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});")
_TAG_RE = re.compile(rf"</?(?:{_TAGS})(?:\s[^<>]*)?/?>|<!--|<!DOCTYPE", re.IGNORECASE)
# Dropped with everything inside them: code, and the furniture of a page around its text.
BOILERPLATE = ("script", "style", "noscript", "template", "head", "title", "nav", "header", "footer", "aside",
               "form", "iframe", "svg", "button", "select", "textarea", "object", "embed", "video")
# Elements that end a line (their text does not run into the next element's).
BLOCKS = ("address", "article", "blockquote", "br", "caption", "dd", "details", "div", "dl", "dt", "fieldset",
          "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li", "main", "ol", "p", "pre",
          "section", "summary", "table", "td", "th", "tr", "ul")


def html_to_text(text: str | None) -> str | None:
    """The text a reader of the page sees; text without markup only has its character references decoded."""
    if text is None:
        return None
    if not _TAG_RE.search(text):
        return html.unescape(text)
    from lxml import etree
    from lxml import html as lxml_html

    try:
        root = lxml_html.fragment_fromstring(text, create_parent="div")
    except (etree.ParserError, ValueError):  # nothing an HTML parser can read: tags cut out, references decoded
        return html.unescape(_TAG_RE.sub(" ", text))
    etree.strip_elements(root, etree.Comment, *BOILERPLATE, with_tail=False)
    for element in root.iter(*BLOCKS):
        element.tail = "\n" + (element.tail or "")
    return str(root.text_content())
