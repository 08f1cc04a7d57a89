"""Alt text for the course's figures: what a figure shows, in words, beside its picture.

Used by every lesson notebook through `notebook_device.choose` (its first cell): from
then on, each matplotlib figure displays with its titles as the PNG's "alt" metadata,
which the slide decks write into the `<img>` tag (course/templates/slides): a screen
reader reads it, and a deck has no image without a description. Every figure of the
course has a title for this; an animation gets its description from `animation_html`.
"""

import html
import io

from matplotlib.animation import Animation
from matplotlib.figure import Figure


def alt_text(fig: Figure) -> str:
    """The figure's titles: its own (suptitle), else each of its axes'."""
    return fig.get_suptitle() or "; ".join(ax.get_title() for ax in fig.axes if ax.get_title())


def _png_with_alt(fig: Figure) -> tuple[bytes, dict]:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")  # as the inline backend does
    return buffer.getvalue(), {"alt": alt_text(fig)}


def describe_figures_in_notebooks() -> None:
    """In a notebook's kernel (nothing elsewhere), show figures as PNGs with alt text."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return
    # Turn matplotlib's inline display on now: turned on later, it would put its own PNG
    # formatter over ours.
    shell.run_line_magic("matplotlib", "inline")
    shell.display_formatter.formatters["image/png"].for_type(Figure, _png_with_alt)


def animation_html(movie: Animation, description: str) -> str:
    """`movie` as HTML with its controls (matplotlib's `to_jshtml`), its frame's `<img>`
    described by `description`: the frames change, so no one title says it."""
    page = movie.to_jshtml()
    return page.replace("<img ", f'<img alt="{html.escape(description)}" ', 1)
