"""Repository tooling: results-md, rehearse (and its own steps, rehearse-step), the course's
assignments (release, grade), student-repo (what a class is given), notebooks (run them in place)
and test-browser."""
import json
from pathlib import Path

from eagle_mini.cli.common import Parser, command_line, positive_int
from eagle_mini.errors import EagleMiniError


def add_results_md(sub):
    m = sub.add_parser("results-md", help="write RESULTS.md and the README's generated tables "
                                          "from the committed results files (runs no model)")
    m.add_argument("--root", default=".", help="the repository (README.md, data/)")
    m.add_argument("--check", action="store_true",
                   help="write nothing; exit 2 if a document differs from what the files produce")
    m.set_defaults(handler=cmd_results_md)


def cmd_results_md(args):
    from eagle_mini.tooling.report import stale, write
    if args.check:
        if stale(args.root):
            raise EagleMiniError(", ".join(map(str, stale(args.root))) + " differ from the results "
                                 "files: run `python -m eagle_mini results-md`")
        print("RESULTS.md and README.md match the results files")
        return
    changed = write(args.root)
    print("wrote " + ", ".join(map(str, changed)) if changed else "RESULTS.md and README.md are current")


def add_rehearse(sub):
    from eagle_mini.tooling.rehearsal import configs
    h = sub.add_parser("rehearse", help="the 7B dress rehearsal: every step a GPU user runs, as "
                                        "child processes, on a 7B-shaped model with random "
                                        "weights; time and peak RSS per step; resumable")
    h.add_argument("--config", default="vicuna-7b", choices=configs(),
                   help="the target's shape (tiny: the same path in minutes, for tests)")
    h.add_argument("--dir", default=None, help="model, features, heads, logs and finished steps "
                                               "(default runs/rehearsal_<config>)")
    h.add_argument("--out", default=None,
                   help="results JSON (default runs/rehearsal_<config>.json; a committed "
                        "result only by naming it here)")
    h.add_argument("--seed", type=int, default=0, help="the model's weights and the heads' init")
    h.add_argument("--threads", type=positive_int, default=None, help="torch threads of each step")
    h.set_defaults(handler=cmd_rehearse)


def cmd_rehearse(args):
    from eagle_mini.heads import HEAD_KINDS
    from eagle_mini.tooling.rehearsal import rehearse
    r = rehearse(args.config, args.dir, args.out, args.seed, args.threads, command=command_line())
    print(f"peak RSS {r['peak_rss_gb']:.2f} GB (budget {r['budget_gb']:.1f} GB), "
          f"{r['seconds'] / 60:.1f} min of steps ({len(r['ran_now'])} run now); resumed head = "
          "uninterrupted: " + ", ".join(f"{r['resume'][k]['identical']} ({k})" for k in HEAD_KINDS)
          + f"; wrote {r['out']}")


def add_rehearse_step(sub):
    """The rehearsal's own steps, run by `rehearse` as child processes so that they are measured
    alike (`tooling.rehearsal.STEP`)."""
    from eagle_mini.tooling.rehearsal import configs
    r = sub.add_parser("rehearse-step", help="one of rehearse's own steps (build, first-difference)")
    steps = r.add_subparsers(dest="step", required=True, parser_class=Parser)
    b = steps.add_parser("build", help="build the random model once (kept when complete)")
    b.add_argument("--config", required=True, choices=configs())
    b.add_argument("--dir", required=True)
    b.add_argument("--seed", type=int, default=0)
    f = steps.add_parser("first-difference", help="logit gaps where greedy EAGLE parts from vanilla")
    f.add_argument("--model", required=True)
    f.add_argument("--dtype", default="bf16")
    f.add_argument("--generations", required=True)
    f.add_argument("--out", required=True)
    for s in (b, f):
        s.add_argument("--threads", type=int, default=None)
    r.set_defaults(handler=cmd_rehearse_step)


def cmd_rehearse_step(args):
    from eagle_mini.results import results_json
    from eagle_mini.tooling.rehearsal import build_model, first_differences
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    if args.step == "build":
        info = build_model(args.config, args.dir, args.seed)
        print(f"{args.dir}: {info['parameters']:,} parameters, fingerprint {info['fingerprint']}")
    else:
        gens = json.loads(Path(args.generations).read_text())
        Path(args.out).write_text(results_json(first_differences(args.model, args.dtype, gens)))


def add_assignments(sub):
    from eagle_mini.course.assignments import RELEASE, STUDENT
    from eagle_mini.course.autograde import CELL_TIMEOUT
    a = sub.add_parser("assignments", help="release and autograde the assignments and the "
                                           "numbered notebooks' exercises")
    commands = a.add_subparsers(dest="action", required=True, parser_class=Parser)
    commands.add_parser("release", help=f"write the student editions to {RELEASE} and {STUDENT} "
                                        "(nbgrader)")
    grading = commands.add_parser("grade", help="autograde one submitted notebook, each graded "
                                                "cell in a fresh process")
    grading.add_argument("submission", nargs="?", default="", help="path to the .ipynb")
    grading.add_argument("--assignment", default="",
                         help="the exercise it must answer (an assignment or a numbered notebook); "
                              "grades a notebook whose grading marks were lost")
    grading.add_argument("--timeout", type=positive_int, default=CELL_TIMEOUT,
                         help="seconds one graded cell may run")
    a.set_defaults(handler=cmd_assignments)


def cmd_assignments(args):
    from eagle_mini.course.assignments import release
    from eagle_mini.course.autograde import grade
    if args.action == "release":
        for path in release():
            print(f"wrote {path}")
        return
    if not args.submission:
        raise EagleMiniError("say which notebook to grade: "
                             "make grade SUBMISSION=path/to/notebook.ipynb")
    result = grade([args.submission], expected=args.assignment, timeout=args.timeout)[0]
    if result.verdict:
        raise EagleMiniError(result.verdict)
    print(result.report())


def add_student_repo(sub):
    s = sub.add_parser("student-repo", help="write what a class is given to a new folder: the "
                                            "student editions, the released assignments, the "
                                            "package and its data; no solution, hidden test, "
                                            "predicted answer or instructor guide")
    s.add_argument("dir", nargs="?", default="",
                   help="a new or empty folder outside this repository")
    s.set_defaults(handler=cmd_student_repo)


def cmd_student_repo(args):
    from eagle_mini.course.student_repo import write
    if not args.dir:
        raise EagleMiniError("say where: make student-repo DIR=path/to/a/new/folder")
    out = write(args.dir)
    print(f"wrote {out}: student editions, released assignments, the package and its data; "
          "checked: no solution, hidden test, predicted answer or instructor guide")


def add_notebooks(sub):
    from eagle_mini.course import SCALES
    from eagle_mini.tooling.execute import TIMEOUT
    n = sub.add_parser("notebooks", help="run the numbered notebooks in place, one at a time, "
                                         "recording the scale, run time and machine in each")
    n.add_argument("notebooks", nargs="*", type=Path,
                   help="default: every numbered notebook in notebooks/, in order")
    n.add_argument("--scale", default="classroom", choices=SCALES,
                   help="EAGLE_MINI_SCALE of the run (classroom: the committed outputs)")
    n.add_argument("--timeout", type=positive_int, default=TIMEOUT, help="seconds one cell may run")
    n.set_defaults(handler=cmd_notebooks)


def cmd_notebooks(args):
    from eagle_mini.tooling.execute import execute_all
    execute_all(args.notebooks, args.scale, args.timeout, command=command_line())


def add_test_browser(sub):
    from eagle_mini.tooling.browser import OUT, TIMEOUT
    t = sub.add_parser("test-browser", help="every numbered notebook with widgets, run in "
                                            "JupyterLab in headless Chromium and used")
    t.add_argument("notebooks", nargs="*", type=Path,
                   help="default: every numbered notebook in notebooks/ with widgets")
    t.add_argument("--out", type=Path, default=OUT, help="screenshots and the JupyterLab log")
    t.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds for one Run All")
    t.set_defaults(handler=cmd_test_browser)


def cmd_test_browser(args) -> int:
    from eagle_mini.tooling.browser import check_notebooks
    return check_notebooks(args.notebooks, args.out, args.timeout)


def register(sub):
    for add in (add_results_md, add_rehearse, add_rehearse_step, add_assignments,
                add_student_repo, add_notebooks, add_test_browser):
        add(sub)
