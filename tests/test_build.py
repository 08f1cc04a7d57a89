"""The rendered course: pages that load nothing from the network, and a lesson list."""

import re

import nbformat

from common.build import lesson_notebooks, to_html


def test_lessons_are_found_in_course_order():
    names = [notebook.parent.name for notebook in lesson_notebooks([])]
    assert names[0] == "00_intro"
    assert names == sorted(names)


def test_rendered_pages_fetch_nothing_from_the_network():
    nb = nbformat.read(lesson_notebooks(["00_intro"])[0], as_version=4)
    page, _ = to_html(nb)
    assert "The first job" in page  # the lesson is there
    # Resources the browser would fetch (links a reader may follow are fine).
    external = re.findall(r'<(?:script|link|img|iframe)[^>]+(?:src|href)="(https?://[^"]+)"', page)
    assert external == []
