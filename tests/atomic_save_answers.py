"""Answers to lesson 03's exercise atomic_save, which has more ways to go wrong than
the others: the save must survive a killed process (rename), a power cut (fsync) and a
cluster's filesystems (a temporary file beside the snapshot), and leave nothing behind.
In the format of `exercise_answers.py`, which lists them with the other exercises'."""

# The solution's lines that write and rename, and answers that differ from it in more
# than one line.
SOLUTION_WRITES = """\
    with open(temporary, "wb") as file:
        torch.save(state, file)
        file.flush()  # from Python's buffer to the operating system
        os.fsync(file.fileno())  # and from the operating system to the disk
    os.replace(temporary, path)  # readers see the old file or the new one, never half
"""
FSYNCS_AFTER_THE_RENAME = """\
    with open(temporary, "wb") as file:
        torch.save(state, file)
    os.replace(temporary, path)
    with open(path, "rb+") as file:
        os.fsync(file.fileno())
"""
SAYS_NOTHING_WHEN_INTERRUPTED = """\
    try:
        with open(temporary, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except Exception:
        temporary.unlink(missing_ok=True)
"""
RAISES_ITS_OWN_ERROR = """\
    try:
        with open(temporary, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except Exception as error:
        temporary.unlink(missing_ok=True)
        raise RuntimeError(f"could not save {path}") from error
"""
SAVES_BY_PATH_THEN_FSYNCS = """\
    torch.save(state, temporary)
    with open(temporary, "rb+") as file:
        os.fsync(file.fileno())
    os.replace(temporary, path)
"""
IN_THE_SYSTEM_TEMP_FOLDER = """\
import os
import tempfile

import torch


def save_atomic(state, path):
    file = tempfile.NamedTemporaryFile(delete=False)
    with file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(file.name, path)
"""
IN_THE_SYSTEM_TEMP_FOLDER_REMOVED_ON_FAILURE = """\
import os
import tempfile

import torch


def save_atomic(state, path):
    file = tempfile.NamedTemporaryFile(delete=False)
    try:
        with file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(file.name, path)
    except BaseException:
        os.unlink(file.name)
        raise
"""
A_NEW_NAME_EACH_TIME = """\
import os
import tempfile
from pathlib import Path

import torch


def save_atomic(state, path):
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name)
    with os.fdopen(descriptor, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
"""
A_NEW_NAME_EACH_TIME_REMOVED_ON_FAILURE = """\
import os
import tempfile
from pathlib import Path

import torch


def save_atomic(state, path):
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name)
    try:
        with os.fdopen(descriptor, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
"""

ATOMIC_SAVE_WRONG = [
    (
        "03_fault_tolerance",
        "atomic_save",
        "writes in place, as the official series does",
        None,
        "import torch\n\n\ndef save_atomic(state, path):\n    torch.save(state, path)\n",
        r"after a save interrupted half-way, snapshot.pt cannot be loaded",
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "copies the temporary file over the snapshot instead of renaming it",
        "    os.replace(temporary, path)",
        "    import shutil\n\n    shutil.copyfile(temporary, path)\n    temporary.unlink()",
        r"the second snapshot is the same file \(same inode\) as the first",
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "never fsyncs",
        "        file.flush()  # from Python's buffer to the operating system\n"
        "        os.fsync(file.fileno())  # and from the operating system to the disk\n",
        "",
        r"after save number 1, snapshot.pt was never passed to os.fsync",
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "fsyncs the file before writing into it",
        "        torch.save(state, file)\n"
        "        file.flush()  # from Python's buffer to the operating system\n"
        "        os.fsync(file.fileno())  # and from the operating system to the disk\n",
        "        os.fsync(file.fileno())\n        torch.save(state, file)\n",
        r"snapshot.pt had 0 of its \d+ bytes when it was fsynced",
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "fsyncs the snapshot after the rename",
        SOLUTION_WRITES,
        FSYNCS_AFTER_THE_RENAME,
        r"snapshot.pt was fsynced only after os.replace had named it",
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "writes in the system temp folder, and removes the file when a save fails",
        None,
        IN_THE_SYSTEM_TEMP_FOLDER_REMOVED_ON_FAILURE,
        r"the file that became snapshot.pt was not in its folder when it was fsynced",
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "leaves half a file in the system temp folder when a save fails",
        None,
        IN_THE_SYSTEM_TEMP_FOLDER,
        r"after the save that follows an interrupted one, the system temp folder .*holds "
        r"\['tmp",
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "leaves half a file of a new name beside the snapshot when a save fails",
        None,
        A_NEW_NAME_EACH_TIME,
        r"after the save that follows an interrupted one, the folder should hold only "
        r"snapshot.pt, it holds \['snapshot.pt', 'snapshot.pt\w+'\]",
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "removes the temporary file when a save fails, and says nothing",
        SOLUTION_WRITES,
        SAYS_NOTHING_WHEN_INTERRUPTED,
        r"the interrupted save returned as if it had saved",
    ),
]

ATOMIC_SAVE_RIGHT = [
    (
        "03_fault_tolerance",
        "atomic_save",
        "removes the temporary file and raises its own error from the interruption",
        SOLUTION_WRITES,
        RAISES_ITS_OWN_ERROR,
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "saves by path, then fsyncs the file opened again",
        SOLUTION_WRITES,
        SAVES_BY_PATH_THEN_FSYNCS,
    ),
    (
        "03_fault_tolerance",
        "atomic_save",
        "a new name beside the snapshot each time, removed when a save fails",
        None,
        A_NEW_NAME_EACH_TIME_REMOVED_ON_FAILURE,
    ),
]
