"""Is the machine busy? A timing is only as good as the moment it was taken.

A speedup is a ratio of two wall times, and on a shared machine another program can take the cores
for part of one and not the other. The timing commands (`generate`, `demo`, `bench`,
`profile-target`) therefore check the machine and say in one line on stderr when their numbers are
unreliable. Two signs, either one enough:

1. **Load.** The 1-minute load average (`os.getloadavg`: threads running or waiting for a core,
   averaged over the last minute, machine-wide) exceeds the cores this process may use
   (`os.sched_getaffinity`) by more than `LOAD_SLACK`. A run that uses every core holds the load
   near the core count by itself; beyond that, some thread waited for a core, and torch's threads
   wait for each other at every op, so one delayed thread delays the step. The load is taken when
   the timing starts and when it ends. In a container it is often the host's: a busy host warns
   too, and shares the memory bandwidth decoding lives on.
2. **Slow rounds.** Where a command repeats the same work in rounds (the demo's generations of one
   method, the cost curve's rounds of forwards), a round that took more than `SLOW_ROUND` times its
   series' median was interrupted: the work did not change, the machine did.

`LoadWatch` takes the first sample; its `check(rounds)` takes the second and judges (`judge`). The
record it returns is kept beside `machine_info` in the results files, under `"load"`, and `warn`
prints its one line, after the command's own output.

    >>> r = judge(before=0.4, after=3.1, cores=2, rounds={"vanilla": [1.0, 1.1, 2.0]})
    >>> r["busy"], r["slow_rounds"]
    (True, {'vanilla': {'slow': 1, 'of': 3}})
"""
import os
import statistics
import sys

LOAD_SLACK = 0.5    # the odd shell or daemon waking up: half a core above the core count is noise
SLOW_ROUND = 1.5    # a round this many times its series' median was interrupted


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # macOS, Windows
        return os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average, None where the OS has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def overloaded(load: float | None, cores: int) -> bool:
    """More threads wanted a core over the last minute than `cores` (plus `LOAD_SLACK`).

        >>> overloaded(2.3, 2), overloaded(2.6, 2), overloaded(None, 2)
        (False, True, False)
    """
    return load is not None and load > cores + LOAD_SLACK


def slow_rounds(rounds: dict[str, list[float]], factor: float = SLOW_ROUND) -> dict:
    """Per series of rounds of the same work, how many took more than `factor` times the series'
    median: {name: {"slow": k, "of": n}}, only the series with a slow round.

        >>> slow_rounds({"eagle2": [2.0, 2.1, 1.9], "vanilla": [1.0, 1.6, 1.0]})
        {'vanilla': {'slow': 1, 'of': 3}}
    """
    out = {}
    for name, times in rounds.items():
        if len(times) < 2:
            continue   # one round has nothing to be slower than
        median = statistics.median(times)
        slow = sum(t > factor * median for t in times)
        if slow:
            out[name] = {"slow": slow, "of": len(times)}
    return out


def judge(before: float | None, after: float | None, cores: int,
          rounds: dict[str, list[float]] | None = None, threads: int | None = None) -> dict:
    """The load record of one timing: the load average before and after, the usable cores, the
    torch threads, the slow rounds, and `busy` when either sign shows."""
    slow = slow_rounds(rounds or {})
    return {"load_average": {"before": before, "after": after}, "cores": cores,
            "torch_threads": threads, "slow_rounds": slow,
            "busy": bool(slow) or overloaded(before, cores) or overloaded(after, cores)}


def warning(record: dict) -> str | None:
    """One line saying why the timings of `record` (`judge`) are unreliable, None when not busy.

        >>> warning(judge(0.2, 0.3, 2))
        >>> warning(judge(0.2, 0.3, 2, {"auto": [1.0, 1.0, 3.0]}))[:48]
        'eagle-mini: warning: the machine looks busy (aut'
    """
    if not record.get("busy"):
        return None
    cores, signs = record["cores"], []
    loads = [x for x in record["load_average"].values() if x is not None]
    if any(overloaded(x, cores) for x in loads):
        signs.append(f"1-minute load average {max(loads):.1f} on {cores} usable "
                     f"core{'s' if cores != 1 else ''}")
    signs += [f"{name}: {s['slow']} of {s['of']} rounds over {SLOW_ROUND:g}x their median"
              for name, s in record["slow_rounds"].items()]
    threads = record.get("torch_threads")
    if threads and threads > cores:
        signs.append(f"this run itself asks for {threads} torch threads")
    return (f"eagle-mini: warning: the machine looks busy ({'; '.join(signs)}): these timings are "
            "unreliable; rerun when it is quiet")


class LoadWatch:
    """Samples the load average when made (just before a timing); `check` samples it again."""

    def __init__(self):
        self.before = load_average()

    def check(self, rounds: dict[str, list[float]] | None = None) -> dict:
        """This timing's load record (`judge`), for the results file and `warn`."""
        import torch
        return judge(self.before, load_average(), usable_cores(), rounds, torch.get_num_threads())


def warn(record: dict, file=None) -> None:
    """Print `warning(record)` on stderr (or `file`) when the machine was busy."""
    line = warning(record)
    if line:
        print(line, file=file or sys.stderr)


def curve_rounds(curve: dict) -> list[float]:
    """A cost curve's rounds as times of the same work, in ms: each round's forwards of every size,
    summed (a pooled curve's rounds by their medians, `rounds_ms`; one measurement's repeat by
    repeat, `samples_ms`).

        >>> curve_rounds({"samples_ms": [[1.0, 1.0, 3.0], [2.0, 2.0, 2.0]]})
        [3.0, 3.0, 5.0]
    """
    if "rounds_ms" in curve:
        return [sum(r) for r in curve["rounds_ms"]]
    return [sum(r) for r in zip(*curve["samples_ms"])]
