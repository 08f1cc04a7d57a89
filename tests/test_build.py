"""The rendered course: pages that load nothing from the network, and a lesson list."""

import json
import re
import sys

import nbformat

from course.build import execute, lesson_notebooks, to_html


def test_lessons_are_found_in_course_order():
    # The course map: lesson by lesson, part 1 before part 2.
    assert [notebook.stem for notebook in lesson_notebooks([])] == [
        "00_intro",
        "01_theory",
        "02_multigpu",
        "02_multigpu_topics",
        "02_multigpu_wrapper_options",
        "03_fault_tolerance",
        "03_fault_tolerance_elastic",
        "03_fault_tolerance_preemption",
        "04_multinode",
        "04_multinode_hangs",
        "05_mingpt",
    ]
    assert [notebook.stem for notebook in lesson_notebooks(["03_fault_tolerance"])] == [
        "03_fault_tolerance",
        "03_fault_tolerance_elastic",
        "03_fault_tolerance_preemption",
    ]


def test_rendered_pages_fetch_nothing_from_the_network():
    nb = nbformat.read(lesson_notebooks(["00_intro"])[0], as_version=4)
    page, _ = to_html(nb)
    assert "The first job" in page  # the lesson is there
    # Resources the browser would fetch (links a reader may follow are fine).
    external = re.findall(r'<(?:script|link|img|iframe)[^>]+(?:src|href)="(https?://[^"]+)"', page)
    assert external == []


def test_animations_are_rendered_without_their_cdn_icons():
    # matplotlib's to_jshtml links Font Awesome from a CDN for its buttons.
    import matplotlib

    matplotlib.use("Agg")  # no screen
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation

    fig, ax = plt.subplots()
    animation = FuncAnimation(fig, lambda i: ax.set_title(str(i)), frames=2)
    jshtml = animation.to_jshtml()
    plt.close(fig)
    assert "font-awesome" in jshtml  # what the build has to undo
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("animation"))
    nb.cells[0].outputs = [
        nbformat.v4.new_output("display_data", data={"text/html": jshtml, "text/plain": ""})
    ]

    page, _ = to_html(nb)

    assert 'class="anim-buttons"' in page  # the animation is there
    assert (
        re.findall(r'<(?:script|link|img|iframe)[^>]+(?:src|href)="(https?://[^"]+)"', page) == []
    )
    assert ".anim-buttons .fa-play::before" in page  # its icons, drawn without the font


def test_notebooks_run_in_this_python_whatever_kernelspec_comes_first(tmp_path, monkeypatch):
    # A user-level "python3" kernelspec that runs some other Python, found first.
    foreign = tmp_path / "jupyter" / "kernels" / "python3"
    foreign.mkdir(parents=True)
    spec = {"argv": ["/nonexistent/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]}
    (foreign / "kernel.json").write_text(
        json.dumps({**spec, "display_name": "other", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    lesson = tmp_path / "lesson"
    lesson.mkdir()
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import os, sys; print(sys.executable, os.getcwd())",
                metadata={"slideshow": {"slide_type": "slide"}},  # the build makes a deck too
            )
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(notebook, lesson / "probe.ipynb")
    ok, _ = execute(lesson / "probe.ipynb", tmp_path / "out")
    assert ok
    executed = nbformat.read(tmp_path / "out" / "probe.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == f"{sys.executable} {lesson}\n"
