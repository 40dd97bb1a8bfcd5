"""`make notebooks`: run the numbered notebooks the way their committed outputs are made.

Each notebook runs top to bottom in a fresh kernel, one after the other (never two at once: the
notebooks time things), at `EAGLE_MINI_SCALE=classroom` unless told otherwise, with its folder as
the working directory, and is written back in place with its outputs, execution counts, each cell's
timestamps and its widgets' state. The notebook's metadata gains what the run was:

    "eagle_mini": {"scale": ..., "minutes": ..., "machine": {...machine_info()...},
                   "command": "python -m eagle_mini notebooks ...", "nudges": ...}

so the README's run-time table (`python -m eagle_mini results-md`) can name the machine beside
each time. A cell that raises stops that notebook and leaves its file as it was.

ipykernel 7 can strand a shell request unread until another message reaches the kernel's socket
(ipython/ipykernel#1554; seen once here, on a run of notebook 03): the kernel sits idle and the
cell never replies. A watchdog (`Nudger`) sends the kernel a `kernel_info` request from a second
client whenever the kernel has used under 2% of a core for `IDLE` seconds, which wakes such a
request; on a healthy run it costs nothing (our notebooks never sit idle that long), and the record
counts the nudges sent.

    python -m eagle_mini notebooks                                 # what `make notebooks` runs
    python -m eagle_mini notebooks notebooks/04_draft_trees.ipynb --scale ci
"""
import os
import threading
import time
from pathlib import Path

from eagle_mini.course import SCALES
from eagle_mini.course.assignments import numbered_notebooks
from eagle_mini.errors import EagleMiniError
from eagle_mini.results import machine_info

TIMEOUT = 1200          # seconds one cell may run
KEY = "eagle_mini"      # the notebook metadata entry this writes
IDLE = 90.0             # seconds of an idle kernel before the watchdog nudges it


class Nudger(threading.Thread):
    """Watches a running kernel; when it uses under 2% of a core for `idle` seconds, sends it a
    `kernel_info` request from a client of its own (this thread's sockets only), then waits
    another `idle` seconds before the next. `nudges` counts them."""

    def __init__(self, client, idle: float = IDLE, every: float | None = None):
        super().__init__(daemon=True)
        self.client, self.idle = client, idle
        self.every = every if every is not None else min(5.0, idle / 4)
        self.nudges, self.stopped = 0, threading.Event()

    def run(self):
        import psutil   # ipykernel's own dependency
        self.km = self.client.km   # started by now: `execute` starts this thread once it is up
        provisioner = getattr(self.km, "provisioner", None)   # a local kernel's process
        pid = provisioner and getattr(provisioner, "pid", None)
        if pid is None:
            return

        def cpu():
            times = process.cpu_times()
            return times.user + times.system
        try:
            process = psutil.Process(pid)
            mark = (cpu(), time.monotonic())
            while not self.stopped.wait(self.every):
                used, now = cpu(), time.monotonic()
                if used - mark[0] > 0.05 + 0.02 * (now - mark[1]):   # busy: over 2% of a core
                    mark = (used, now)
                elif now - mark[1] >= self.idle:
                    self.nudge()
                    mark = (cpu(), time.monotonic())
        except psutil.Error:   # the kernel is gone: nothing to watch
            return

    def nudge(self):
        from queue import Empty

        from jupyter_client import BlockingKernelClient
        kc = BlockingKernelClient()   # its sockets belong to this thread alone
        kc.load_connection_info(self.km.get_connection_info(session=True))
        kc.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
        try:
            kc.kernel_info()
            self.nudges += 1
            try:
                kc.get_shell_msg(timeout=10)   # the reply, once the kernel is free
            except Empty:
                pass
        finally:
            kc.stop_channels()


def execute(path, scale: str = "classroom", timeout: int = TIMEOUT, command: str = "",
            idle: float = IDLE) -> dict:
    """Run one notebook in place; returns the run's record (also stored in its metadata)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    path = Path(path)
    if scale not in SCALES:
        raise EagleMiniError(f"scale must be one of {', '.join(SCALES)}, not {scale!r}")
    if path.suffix != ".ipynb" or not path.is_file():
        raise EagleMiniError(f"{path}: not a notebook file")
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # nbformat raises several kinds for a file that is not a notebook
        raise EagleMiniError(f"{path}: not a readable notebook ({type(e).__name__})") from None
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=True,
                            store_widget_state=True,
                            resources={"metadata": {"path": str(path.resolve().parent)}})
    nudger = Nudger(client, idle)
    client.on_notebook_start = lambda notebook: nudger.start()
    start = time.perf_counter()
    try:
        client.execute(env={**os.environ, "EAGLE_MINI_SCALE": scale})   # the kernel's environment
    except CellTimeoutError:
        raise EagleMiniError(f"{path}: a cell ran past {timeout} s; the file is unchanged") from None
    except CellExecutionError as e:
        last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise EagleMiniError(f"{path}: a cell raised ({last}); the file is unchanged") from None
    finally:
        if nudger.is_alive():
            nudger.stopped.set()
            nudger.join()
    run = {"scale": scale, "minutes": round((time.perf_counter() - start) / 60, 2),
           "machine": machine_info(), "command": command, "nudges": nudger.nudges}
    nb.metadata[KEY] = run
    nbformat.write(nb, path)
    return run


def execute_all(paths=None, scale: str = "classroom", timeout: int = TIMEOUT, command: str = "",
                report=print) -> dict[Path, dict]:
    """Run each notebook in turn (default: every numbered one); stops at the first that fails."""
    paths = [Path(p) for p in paths] if paths else list(numbered_notebooks().values())
    if not paths:
        raise EagleMiniError("no notebooks to run")
    runs = {}
    for path in paths:
        runs[path] = execute(path, scale, timeout, command)
        run = runs[path]
        report(f"{path}: {run['minutes']:.1f} min at {scale} scale ({run['machine']['cpu']})"
               + (f"; the kernel sat idle and was nudged {run['nudges']} time(s)" if run["nudges"] else ""))
    return runs
