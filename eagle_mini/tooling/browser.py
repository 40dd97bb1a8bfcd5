"""`make test-browser`: every numbered notebook with widgets, run in a real browser.

nbval checks a notebook's outputs, but never draws a widget or sends it an event. Here each
numbered notebook with widgets (its code imports ipywidgets, or its saved widget state holds a
slider or a button) is opened in JupyterLab in headless Chromium, run (Run All, at
`EAGLE_MINI_SCALE=ci`), and then used as a learner would: the first slider moves one step with
the arrow key (a notebook with buttons only: the first button is clicked). The check is
that the notebook's outputs changed - their text, images, canvases and form values, the control
itself left out, since its own readout always changes. Screenshots of the control's cell before
and after go to `runs/browser/`.

The browser is Debian's `chromium` with its matching `chromium-driver`, installed here with apt
when missing and running as root; otherwise the run stops with one line saying what to install.
Selenium drives it through that driver's path, so Selenium Manager never downloads anything.
JupyterLab runs on 127.0.0.1 on a free port with a token, its root a throwaway folder holding
copies of the notebooks (the notebooks find the repository through `eagle_mini.__file__`), so the
committed files are never touched. Selenium is a development dependency, imported only by
`check_notebooks`.

    python -m eagle_mini test-browser                      # what `make test-browser` runs
    python -m eagle_mini test-browser notebooks/04_draft_trees.ipynb
"""
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from difflib import SequenceMatcher
from pathlib import Path

from eagle_mini.errors import EagleMiniError

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "runs" / "browser"   # screenshots and the JupyterLab log
TIMEOUT = 600.0                   # seconds for one Run All
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
INSTALL = "apt-get install -y chromium chromium-driver"
TRACEBACK = "Traceback (most recent call last)"
WIDGETS = re.compile(r"^\s*(import|from) ipywidgets\b", re.MULTILINE)
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# IntSliderModel, ToggleButtonsModel, ...; not a quiz's RadioButtonsModel (`course.quiz`), whose
# choices are no button this check can press
CONTROL_MODEL = re.compile(r"(Slider|(?<!Radio)Buttons?)Model$")

# JupyterLab user settings for the run: no autosave, no news or update checks (nothing may leave
# this machine), and every cell kept in the page so a widget's output can be read wherever it is.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


def uses_widgets(notebook: dict) -> bool:
    """Whether a notebook has widgets to use: its code imports ipywidgets, or its saved widget state
    holds a slider or a button (a widget built by a package helper, such as `course.stepper`'s).
    Progress bars (tqdm's) and a quiz's radio buttons are neither; markdown and outputs do not
    count.

    >>> uses_widgets({"cells": [{"cell_type": "code", "source": ["import ipywidgets as w\\n"]}]})
    True
    """
    saved = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    return (any(cell["cell_type"] == "code" and WIDGETS.search("".join(cell["source"]))
                for cell in notebook["cells"])
            or any(CONTROL_MODEL.search(m.get("model_name", "")) for m in saved.values()))


def widget_notebooks(folder: Path) -> list[Path]:
    """The numbered notebooks `NN_*.ipynb` in `folder` that use widgets, in course order."""
    return [p for p in sorted(folder.glob("[0-9]*.ipynb"))
            if uses_widgets(json.loads(p.read_text()))]


def describe_change(before: list[str], after: list[str]) -> str | None:
    """None when the outputs show the same parts (`OUTPUT_PARTS_JS`), else one line on what changed.

    >>> describe_change(["round", "0", "x"], ["round", "1", "x"])
    "1 change in 3 parts, first '0' -> '1'"
    """
    if before == after:
        return None
    ops = [op for op in SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
           if op[0] != "equal"]
    tag, i, _, j, _ = ops[0]
    if tag == "replace":
        first = f"{short(before[i])!r} -> {short(after[j])!r}"
    else:
        first = f"{short(before[i])!r} gone" if tag == "delete" else f"{short(after[j])!r} new"
    return f"{len(ops)} change{'s' * (len(ops) > 1)} in {len(after)} parts, first {first}"


def raised(after: list[str], before: list[str]) -> bool:
    """Whether a Python traceback appeared in the outputs: an exception inside a widget's
    callback is printed into its output widget, not into the cell's outputs.

    >>> raised(["Traceback (most recent call last)", "ValueError"], ["round 0"])
    True
    """
    count = lambda parts: sum(TRACEBACK in p for p in parts)  # noqa: E731
    return count(after) > count(before)


def short(text: str, n: int = 40) -> str:
    """A part as a log shows it: images by their hash, long text cut.

    >>> short("data:image/png;base64,iVBOR")[:12]
    'image sha256'
    """
    if text.startswith("data:"):
        return "image sha256 " + hashlib.sha256(text.encode()).hexdigest()[:10]
    return text if len(text) <= n else text[:n - 3] + "..."


def browser_problem(have_browser: bool, is_root: bool, has_apt: bool) -> str | None:
    """What stands between this machine and a browser run: None (ready), "install" (apt will
    fetch Debian's chromium here), or the one line to print before stopping."""
    if have_browser:
        return None
    if is_root and has_apt:
        return "install"
    return f"make test-browser needs Debian's chromium and its driver: sudo {INSTALL}"


def ensure_browser():
    """Install chromium + chromium-driver with apt when missing and allowed, or stop in one line."""
    have = all(os.access(p, os.X_OK) for p in (CHROMIUM, CHROMEDRIVER))
    problem = browser_problem(have, os.geteuid() == 0, shutil.which("apt-get") is not None)
    if problem is None:
        return
    if problem != "install":
        sys.exit(problem)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(INSTALL.split(), env=env).returncode != 0:
        # a fresh machine may have no package lists yet
        subprocess.run(["apt-get", "update"], env=env, check=True)
        subprocess.run(INSTALL.split(), env=env, check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lab_command(port: int, token: str, root_dir: Path, as_root: bool) -> list[str]:
    """The JupyterLab server: this interpreter, localhost only, the page exposing `jupyterapp`
    (the test runs the notebook through JupyterLab's own commands)."""
    return [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
            f"--port={port}", "--port-retries=0", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root_dir}", "--LabApp.expose_app_in_browser=True",
            *(["--allow-root"] if as_root else [])]


class Lab:
    """A JupyterLab server in its own process group, stopped with its kernels on exit."""

    def __init__(self, work: Path, log: Path):
        self.port, self.token = free_port(), secrets.token_hex(16)
        settings = work / "settings"
        for plugin, values in LAB_SETTINGS.items():
            file = settings / f"{plugin}.jupyterlab-settings"
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(json.dumps(values))
        self.env = {**os.environ, "EAGLE_MINI_SCALE": "ci",
                    "JUPYTERLAB_SETTINGS_DIR": str(settings),
                    "JUPYTERLAB_WORKSPACES_DIR": str(work / "workspaces"),
                    "JUPYTER_CONFIG_DIR": str(work / "config"),
                    "JUPYTER_RUNTIME_DIR": str(work / "runtime")}
        self.root = work / "notebooks"
        self.root.mkdir()
        self.log = open(log, "w")
        command = lab_command(self.port, self.token, self.root, as_root=os.geteuid() == 0)
        self.proc = subprocess.Popen(command, cwd=self.root, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(self.url(f"api/{path}"), method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def wait_ready(self, timeout: float = 180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with code {self.proc.returncode}; "
                                   f"see {self.log.name}")
            try:
                return self.api("status")
            except OSError:
                time.sleep(1)
        raise RuntimeError(f"JupyterLab did not answer within {timeout:.0f} s; see {self.log.name}")

    def shutdown_kernels(self):
        for session in self.api("sessions"):
            self.api(f"sessions/{session['id']}", method="DELETE")

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.shutdown_kernels()
            except OSError:
                pass
            os.killpg(self.proc.pid, signal.SIGTERM)  # the server stops its kernels on SIGTERM
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


@contextmanager
def chromium(window=(1400, 1600)):
    """Headless Chromium through Debian's chromedriver, closed on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never try the network
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                f"--window-size={window[0]},{window[1]}",
                *(["--no-sandbox"] if os.geteuid() == 0 else [])):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


# The open notebook's panel, by path; every script below starts with it.
PANEL_JS = """
const app = window.jupyterapp;
const panel = app && Array.from(app.shell.widgets('main'))
    .find(w => w.context && w.context.path === arguments[0]);
"""

# Where the run stands: the kernel's status, Run All's result, and the cells' errors.
STATE_JS = PANEL_JS + """
const session = panel && panel.sessionContext.session;
if (!session || !session.kernel) return {kernel: 'starting'};
const cells = panel.content.model.cells, errors = [];
for (let i = 0; i < cells.length; i++) {
  const cell = cells.get(i);
  const tags = cell.getMetadata('tags') || [];
  if (cell.type !== 'code' || tags.includes('raises-exception')) continue;
  for (const out of cell.outputs.toJSON())
    if (out.output_type === 'error') errors.push(`cell ${i}: ${out.ename}: ${out.evalue}`);
}
return {kernel: session.kernel.status, run: window.eagleRunAll || null, errors};
"""

RUN_ALL_JS = PANEL_JS + """
window.eagleRunAll = null;
panel.sessionContext.ready
  .then(() => { app.shell.activateById(panel.id);
                return app.commands.execute('notebook:clear-all-cell-outputs'); })
  .then(() => app.commands.execute('notebook:run-all-cells'))
  .then(ok => { window.eagleRunAll = {ok: ok !== false}; },
        err => { window.eagleRunAll = {error: String(err)}; });
"""

# The first slider's handle, else the first button; its widget is marked so OUTPUT_PARTS_JS skips
# it. Returns the kind, the element to use, its widget and the outputs of its cell.
CONTROL_JS = PANEL_JS + """
const node = panel.content.node;
const handle = node.querySelector('.jp-OutputArea .widget-slider .noUi-handle');
const control = handle || node.querySelector('.jp-OutputArea button.jupyter-button');
if (!control) return null;
// its view (.lm-Widget: a SelectionSlider's view has no .jupyter-widgets class)
const widget = control.closest('.lm-Widget');
widget.setAttribute('data-browser-control', '');
return [handle ? 'slider' : 'button', control, widget,
        control.closest('.jp-Cell').querySelector('.jp-Cell-outputWrapper')];
"""

# What the notebook's outputs show, in page order: text, images, canvases, form values.
OUTPUT_PARTS_JS = PANEL_JS + """
const parts = [];
// the control and JupyterLab's own icons (their ids change when drawn again) are skipped
const skip = {acceptNode: n => n.nodeType === 1 && (n.hasAttribute('data-browser-control')
                                                   || n.hasAttribute('data-icon'))
                               ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT};
for (const area of panel.content.node.querySelectorAll('.jp-Cell-outputWrapper')) {
  const walk = document.createTreeWalker(area, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT,
                                         skip);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (n.nodeType === 3) { if (n.nodeValue.trim()) parts.push(n.nodeValue.trim()); }
    else if (n.tagName === 'IMG') parts.push(n.src);
    else if (n.tagName === 'CANVAS') { try { parts.push(n.toDataURL()); } catch (e) {} }
    else if (n.tagName.toLowerCase() === 'svg') parts.push(n.outerHTML);
    else if (['INPUT', 'TEXTAREA', 'SELECT'].includes(n.tagName)) parts.push(String(n.value));
  }
}
return parts;
"""


def wait_for(check, timeout: float, what: str, poll: float = 1.0):
    """Call `check` until it returns something truthy; a TimeoutError names `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError(f"{what}: nothing after {timeout:.0f} s")


def run_notebook(driver, lab: Lab, name: str, shots: Path, timeout: float) -> str:
    """Open, Run All, move the first control, check that the outputs changed; one line says how."""
    from selenium.webdriver.common.keys import Keys

    stem = Path(name).stem
    driver.get(lab.url(f"lab/workspaces/{stem}/tree/{name}"))  # its own workspace: no other tabs
    state = lambda: driver.execute_script(STATE_JS, name)  # noqa: E731
    wait_for(lambda: state()["kernel"] == "idle", 180, "notebook open with an idle kernel")
    start = time.monotonic()
    driver.execute_script(RUN_ALL_JS, name)
    result = wait_for(lambda: (s := state())["run"] and s["kernel"] == "idle" and s,
                      timeout, "Run All", poll=2)
    if result["errors"] or not result["run"].get("ok"):
        raise RuntimeError("; ".join(result["errors"]) or f"Run All failed: {result['run']}")
    ran = time.monotonic() - start

    found = wait_for(lambda: driver.execute_script(CONTROL_JS, name), 30,
                     "an ipywidgets slider or button in the outputs")
    kind, control, widget, outputs = found
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", outputs)
    outputs.screenshot(str(shots / f"{stem}-1-before.png"))
    before = driver.execute_script(OUTPUT_PARTS_JS, name)
    if kind == "slider":
        def shown():  # label and readout, and the handle's aria value (rounded to the slider's step)
            return widget.text.replace("\n", " "), control.get_attribute("aria-valuenow")
        was = shown()
        control.send_keys(Keys.ARROW_RIGHT)
        if shown() == was:  # at its maximum: step down instead
            control.send_keys(Keys.ARROW_LEFT)
        action = f"slider {was[0]!r} -> {shown()[0]!r}"
    else:
        action = f"button {control.text!r} clicked"
        control.click()

    def settled_change():
        if state()["kernel"] != "idle":
            return None
        after = driver.execute_script(OUTPUT_PARTS_JS, name)
        time.sleep(1)  # the same twice, a second apart: the callback has finished drawing
        same = after == driver.execute_script(OUTPUT_PARTS_JS, name)
        return same and describe_change(before, after)

    change = wait_for(settled_change, 180, f"{action}: a change in the outputs")
    outputs.screenshot(str(shots / f"{stem}-2-after.png"))
    errors = state()["errors"]
    if errors or raised(driver.execute_script(OUTPUT_PARTS_JS, name), before):
        raise RuntimeError(f"{action}: " + ("; ".join(errors) or "a traceback in the outputs"))
    return f"ran in {ran:.0f} s; {action}; {change}"


def check_notebooks(notebooks=(), out: Path = OUT, timeout: float = TIMEOUT) -> int:
    """Run and use each notebook (default: every numbered one with widgets); one line per
    notebook, screenshots in `out`. -> 1 if any failed, else 0."""
    out = Path(out)
    notebooks = [Path(p) for p in notebooks] or widget_notebooks(ROOT / "notebooks")
    missing = [str(p) for p in notebooks if p.suffix != ".ipynb" or not p.is_file()]
    if missing:   # before a browser or a server starts
        raise EagleMiniError(f"{', '.join(missing)}: not a notebook file")
    if not notebooks:
        print("no numbered notebook has widgets: nothing to test")
        return 0
    ensure_browser()
    try:
        import selenium  # noqa: F401
    except ImportError:
        sys.exit('make test-browser needs selenium: pip install -e ".[dev]"')
    # SIGTERM (a CI timeout) unwinds like Ctrl-C, so the browser and the server are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out.mkdir(parents=True, exist_ok=True)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="eagle_mini_browser_") as work:
        lab = Lab(Path(work), out / "jupyterlab.log")
        try:
            lab.wait_ready()
            for path in notebooks:
                shutil.copy(path, lab.root / path.name)
                start = time.monotonic()
                try:
                    with chromium() as driver:
                        try:
                            line = run_notebook(driver, lab, path.name, out, timeout)
                        except Exception:
                            driver.save_screenshot(str(out / f"{path.stem}-failed.png"))
                            raise
                    print(f"ok   {path.stem}: {line} ({time.monotonic() - start:.0f} s in all)",
                          flush=True)
                except Exception as err:  # report every notebook, then fail
                    failures += 1
                    message = (getattr(err, "msg", None) or str(err)).strip().splitlines() or [""]
                    print(f"FAIL {path.stem}: {type(err).__name__}: {message[0]}", flush=True)
                lab.shutdown_kernels()
        finally:
            lab.stop()
    print(f"screenshots in {out}")
    return 1 if failures else 0

