"""One report written twice: Markdown (images as files) and self-contained HTML (images inline)."""
from __future__ import annotations

import base64
import html
import math
import re

def fmt(entry) -> str:
    if entry is None:
        return "n/a"
    value, low, high = entry[:3]
    if isinstance(low, float) and (math.isnan(low) or low == high):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"

def file_stem(name: str) -> str:
    """A domain name as a portable file name: a family member's `PREFIX:GAME(k=v)` holds a colon
    (read as a URL scheme by a markdown link) and brackets, so every run of other characters
    becomes one underscore."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "domain"


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

    def table(self, header: list[str], rows: list[list[str]], anchor: str, titles: list[str] | None = None):
        self.md.append("| " + " | ".join(header) + " |")
        self.md.append("|" + "---|" * len(header))
        for row in rows:
            self.md.append("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |")
        self.md.append("")
        body = "".join(
            f"<tr{(' title=' + chr(34) + html.escape(titles[i]) + chr(34)) if titles else ''}>"
            + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for i, row in enumerate(rows))
        self.html.append(f'<table class="results" id="{html.escape(anchor)}"><thead><tr>'
                         + "".join(f"<th>{html.escape(h)}</th>" for h in header) + f"</tr></thead><tbody>{body}</tbody></table>")

    def figure(self, name: str, png: bytes, caption: str):
        self.images[name] = png
        self.md += [f"![{caption}]({name})", "", f"*{caption}*", ""]
        data = base64.b64encode(png).decode()
        self.html.append(f'<figure id="fig-{html.escape(name)}"><img class="figure" alt="{html.escape(caption)}" '
                         f'src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}</figcaption></figure>')

    def render_html(self) -> str:
        style = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222}"
                 "table.results{border-collapse:collapse;margin:1em 0;font-size:13px}"
                 "table.results td,table.results th{border:1px solid #888;padding:3px 7px;text-align:right}"
                 "table.results th{background:#dde6f0}table.results td:first-child{text-align:left}"
                 "img.figure{max-width:100%;border:1px solid #ccc}figcaption{font-size:12px;color:#555}")
        # marks, once the page has loaded, how many figures decoded: a browser test reads it back
        script = ("<script>window.addEventListener('load',function(){var i=document.querySelectorAll('img.figure'),n=0;"
                  "i.forEach(function(m){if(m.complete&&m.naturalWidth>0)n++});"
                  "document.body.setAttribute('data-figures-decoded',n+'/'+i.length);});</script>")
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{style}</style>{script}</head><body>" + "\n".join(self.html) + "</body></html>\n")
