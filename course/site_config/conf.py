"""Sphinx's settings for the course site (`python -m course.build` runs Sphinx with them).

The pages are the executed notebooks (myst-nb renders them; it executes nothing: our
build has executed them, with its own time limits and failure rule), the README (as the
home page), WORKSHOP.md and a highlighted page per script. `course.site` assembles
that source folder. The theme is sphinx-book-theme, the one Jupyter Book uses.
Nothing on a page loads from the network: the theme ships its icon font, search runs on
an index written beside the pages, and no lesson uses LaTeX, so there is no MathJax.
"""

from pathlib import Path

project = "DDP, by running it"
author = "the course's authors"
copyright = "the course's authors (see LICENSE)"
root_doc = "index"

extensions = ["myst_nb"]
# myst-nb adds sphinx.ext.mathjax; no page has math, and MathJax would come from a CDN.
suppress_warnings = ["myst.header"]
nb_execution_mode = "off"  # executed by course.build
nb_merge_streams = True  # a rank's lines stay in one block, as Jupyter shows them
myst_heading_anchors = 3  # README's links to its own sections (#the-lessons)
myst_enable_extensions = ["colon_fence"]
exclude_patterns = ["**/.ipynb_checkpoints"]

html_theme = "sphinx_book_theme"
html_title = project
html_static_path = [str(Path(__file__).parent / "static")]
html_css_files = ["course.css", "animation-icons.css"]
html_context = {"default_mode": "light"}  # the theme's light/dark switch starts light
html_copy_source = True  # the executed .ipynb behind the download button
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": True,
    "use_fullscreen_button": True,
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
}
