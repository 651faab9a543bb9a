"""mkdocs hooks: the configuration reference page is generated from posx's config schema."""

from __future__ import annotations

from posx.configure.reference import render_markdown

PLACEHOLDER = "<!-- posx:config-reference -->"


def on_page_markdown(markdown: str, page=None, config=None, files=None) -> str:
    """Replace the placeholder with the reference (pages without it are returned unchanged)."""
    if PLACEHOLDER not in markdown:
        return markdown
    return markdown.replace(PLACEHOLDER, render_markdown())
