"""The kernels that run the notebooks for the build (`course.build`) and the tests (nbmake,
as a pytest plugin): this Python, and no TCP port.

- This Python. Asked for "python3", Jupyter takes the first kernelspec of that name it
  finds, and a user-level one (another Python, another environment) comes first: the
  notebooks then fail with "No module named 'common'".
- No TCP port. Jupyter's default transport gives a kernel five TCP ports, each found by
  binding port 0 and closing it; the kernel binds them a moment later. Port 0 comes from
  the ephemeral range, where every outgoing connection takes its local port, and the
  course runs notebooks beside DDP jobs that open hundreds of connections (gloo's, the
  store's): one took a kernel's port in CI ("ZMQError: Address already in use", then
  "Kernel didn't respond in 60 seconds"). common/ports.py keeps the course's own servers
  out of that range; a kernel needs no port at all, as Jupyter can talk to it over Unix
  sockets (transport "ipc": files in a folder of its own, removed at shutdown). The
  course runs on Linux and macOS (Windows through WSL2), which all have them.

The build passes `CourseKernel` to nbclient. For nbmake, this module is also a pytest
plugin (`-p course.kernels`, in pyproject's addopts, and in every pytest run that a test
starts on a notebook): nbmake offers no option for the kernel manager, so
`pytest_configure` gives its `NotebookRun` a `NotebookClient` whose default is ours.
"""

import os
import shutil
import tempfile

from ipykernel.kernelspec import get_kernel_dict
from jupyter_client import AsyncKernelManager
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from nbclient import NotebookClient
from traitlets import default


class ThisPython(KernelSpecManager):
    """Whatever kernel a notebook names, ipykernel's own spec for this Python."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(**get_kernel_dict())  # runs sys.executable


class CourseKernel(AsyncKernelManager):
    """nbclient's kernel manager, with `ThisPython` as its kernelspecs and Unix sockets."""

    @default("kernel_spec_manager")
    def _this_python(self) -> KernelSpecManager:
        return ThisPython()

    @default("transport")
    def _unix_sockets(self) -> str:
        return "ipc"

    @default("ip")
    def _socket_files(self) -> str:
        # An absolute path: Jupyter's default ("kernel-ipc") is relative, and the kernel,
        # started in the notebook's folder, would look for it somewhere else than we do.
        # Short, too: a socket's path may have at most 104 bytes on macOS.
        return os.path.join(tempfile.mkdtemp(prefix="course-kernel-"), "k")

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart:  # a restarted kernel binds the same files again
            shutil.rmtree(os.path.dirname(self.ip), ignore_errors=True)


class CourseNotebookClient(NotebookClient):
    @default("kernel_manager_class")
    def _course_kernel(self):
        return CourseKernel


def pytest_configure(config):
    """In every process that runs notebooks (xdist's workers too): nbmake's NotebookRun
    makes its client by this module-level name."""
    import nbmake.nb_run  # here: the build needs no nbmake

    nbmake.nb_run.NotebookClient = CourseNotebookClient
