"""One report written twice: Markdown (images as files) and self-contained HTML (images inline)."""
from __future__ import annotations

import base64
import html
import math
import re


def fmt(entry) -> str:
    """A number with its 95% interval ("0.644 [0.203, 1.084]"); the number alone where the interval
    has no width or was not measured; "n/a" where the number was not measured."""
    if entry is None:
        return "n/a"
    value, low, high = entry[:3]
    if isinstance(low, float) and (math.isnan(low) or high - low <= 1e-12 * max(1.0, abs(value))):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def file_stem(name: str) -> str:
    """A domain name as a portable file name: a family member's `PREFIX:GAME(k=v)` holds a colon
    (read as a URL scheme by a markdown link) and brackets, so every run of other characters
    becomes one underscore."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "domain"


NUMBER = re.compile(r"^(n/a|-|[-+]?\d[\d.,/ \[\]e+-]*( \(.*\))?)$")
"""A table cell that holds a number (with its interval, a list of seeds, a λ point): right-aligned."""
STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222;"
         "line-height:1.4}"
         "table.results{border-collapse:collapse;margin:1em 0;font-size:13px}"
         "table.results td,table.results th{border:1px solid #888;padding:3px 7px;text-align:right}"
         "table.results th{background:#dde6f0}table.results td{white-space:nowrap}"
         "table.results .text{text-align:left;white-space:normal}"
         "img.figure{max-width:100%;border:1px solid #ccc}figure{margin:1em 0}"
         "figcaption{font-size:13px;color:#444;max-width:75em}"
         "p.warning{background:#fff3cd;border:1px solid #c9a227;padding:.5em .8em;font-weight:bold}"
         "ul.lines{font-size:14px}")


class Document:
    """One report written twice: Markdown (images as files) and self-contained HTML (images inline)."""

    def __init__(self, title: str):
        self.md: list[str] = [f"# {title}", ""]
        self.html: list[str] = [f"<h1>{html.escape(title)}</h1>"]
        self.images: dict[str, bytes] = {}
        self.title = title

    def heading(self, text: str, level: int = 2, anchor: str | None = None):
        self.md += [f"{'#' * level} {text}", ""]
        ident = f' id="{html.escape(anchor)}"' if anchor else ""
        self.html.append(f"<h{level}{ident}>{html.escape(text)}</h{level}>")

    def para(self, text: str):
        self.md += [text, ""]
        self.html.append(f"<p>{html.escape(text)}</p>")

    def warning(self, text: str):
        """A paragraph a reader must not miss (the report is incomplete, ...)."""
        self.md += [f"**{text}**", ""]
        self.html.append(f'<p class="warning">{html.escape(text)}</p>')

    def bullets(self, items: list[str]):
        self.md += [f"- {item}" for item in items] + [""]
        listed = "".join(f"<li>{html.escape(i)}</li>" for i in items)
        self.html.append(f'<ul class="lines">{listed}</ul>')

    def table(self, header: list[str], rows: list[list[str]], anchor: str, titles: list[str] | None = None):
        """A table; in HTML a column of labels is left-aligned, one of numbers (every cell a number, an
        interval, a list of seeds, a λ point, or n/a) right-aligned; `titles` are each row's HTML tooltip."""
        self.md.append("| " + " | ".join(header) + " |")
        self.md.append("|" + "---|" * len(header))
        for row in rows:
            self.md.append("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |")
        self.md.append("")

        numeric = [bool(rows) and all(NUMBER.match(row[k]) for row in rows if k < len(row))
                   for k in range(len(header))]

        def cell(tag: str, text: str, k: int) -> str:
            align = "" if k < len(numeric) and numeric[k] else " class=text"
            return f"<{tag}{align}>{html.escape(text)}</{tag}>"

        body = "".join("<tr" + (f' title="{html.escape(titles[i])}"' if titles else "") + ">"
                       + "".join(cell("td", c, k) for k, c in enumerate(row)) + "</tr>"
                       for i, row in enumerate(rows))
        self.html.append(f'<table class="results" id="{html.escape(anchor)}"><thead><tr>'
                         + "".join(cell("th", h, k) for k, h in enumerate(header))
                         + f"</tr></thead><tbody>{body}</tbody></table>")

    def figure(self, name: str, png: bytes, caption: str, alt: str | None = None):
        """An image with its caption; `alt` (default: the caption) is the text shown where it cannot be."""
        self.images[name] = png
        alt = alt or caption
        self.md += [f"![{alt}]({name})", "", f"*{caption}*", ""]
        data = base64.b64encode(png).decode()
        self.html.append(f'<figure id="fig-{html.escape(name)}"><img class="figure" alt="{html.escape(alt)}" '
                         f'src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}</figcaption>'
                         "</figure>")

    def render_html(self) -> str:
        # marks, once the page has loaded, how many figures decoded: a browser test reads it back
        script = ("<script>window.addEventListener('load',function(){"
                  "var i=document.querySelectorAll('img.figure'),n=0;"
                  "i.forEach(function(m){if(m.complete&&m.naturalWidth>0)n++});"
                  "document.body.setAttribute('data-figures-decoded',n+'/'+i.length);});</script>")
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{STYLE}</style>{script}</head><body>" + "\n".join(self.html) + "</body></html>\n")
