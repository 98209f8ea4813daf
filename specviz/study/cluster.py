"""`python -m specviz study --ray`: the study's prompts computed by Ray workers, side by side, on
this machine or on a cluster.

Each worker is a Ray actor that loads one preset's pair once and computes whole comparisons. It
writes nothing: it hands each comparison back as data to the driver, the command's own process,
which records it in the study's folder exactly as a run in one process does (runner.py). So a run
on Ray resumes a run in one process and the other way round, and the report is made the same way.

Faults. A worker that dies mid-prompt (its process killed or crashed, its node lost) has written
nothing: its prompt goes back to the front of the queue, for a new worker; after MAX_ATTEMPTS
deaths on one prompt it is left for the next run. Ctrl-C stops every worker; results.jsonl keeps
every line the driver wrote before it, each one flushed to disk whole.

Ray is optional (requirements-study.txt): it is imported here only, and only with --ray.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..decoding.trace import Comparison
from ..errors import SpecVizError

LOCAL = "local"  # `--ray` without an address: start Ray on this machine
MAX_ATTEMPTS = 3  # workers that may die on one prompt before it is left for the next run
RAY_MISSING = "--ray needs Ray: pip install -r requirements-study.txt"


def preset_pair(preset: str) -> Any:
    """A worker's pair: the preset's, loaded as every SpecViz process loads it (`models.get_pair`)."""
    from ..pair.models import get_pair

    return get_pair(preset)


# What each worker calls to get its pair. Ray sends it to the workers by name, so it must be a
# top-level function they can import; the tests put one here that builds a tiny pair.
PAIR_FACTORY: Callable[[str], Any] = preset_pair


# ---- the options ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RayOptions:
    """Where the workers run, and what each one asks Ray for."""

    address: str  # LOCAL, or the address of a running cluster ("auto", "HEAD:6379")
    threads: int  # torch threads per worker, and the CPUs it asks for
    workers: int | None  # per preset; None: as many as the cluster holds


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SpecVizError(RAY_MISSING) from None
    return ray


def ray_options(args: argparse.Namespace) -> RayOptions | None:
    """The `study` command's --ray options, checked before any work; None without --ray."""
    if args.ray is None:
        if args.ray_threads is not None or args.ray_actors is not None:
            raise SpecVizError("--ray-threads and --ray-actors go with --ray.")
        return None
    if args.threads is not None:
        raise SpecVizError("With --ray, the workers' torch threads are set by --ray-threads, not --threads.")
    for flag, value in (("--ray-threads", args.ray_threads), ("--ray-actors", args.ray_actors)):
        if value is not None and value < 1:
            raise SpecVizError(f"{flag} must be at least 1.")
    import_ray()
    return RayOptions(args.ray, args.ray_threads or 1, args.ray_actors)


# ---- a worker ---------------------------------------------------------------------------------


class StudyWorker:
    """One worker, run by Ray as an actor: a preset's pair, loaded on its first prompt and kept,
    and comparisons on it."""

    def __init__(self, preset: str, threads: int, pair_factory: Callable[[str], Any]):
        from .bench import set_threads

        set_threads(threads)  # before the pair loads: the workers of a node share its cores
        self.preset = preset
        self.pair_factory = pair_factory
        self.pair: Any = None

    def compare(self, prompt: str, modes: list[Any], max_new_tokens: int, limits: Any) -> dict[str, Any]:
        """One prompt's comparison as data (`Comparison.to_dict`), with what recording it needs; or,
        for a user error (a pair that does not load, a prompt too long), its one-line message, which
        the driver raises as a run in one process would."""
        import torch

        from ..decoding.pipeline import compare, make_request
        from ..pair.models import ModelLoadError

        try:
            if self.pair is None:
                self.pair = self.pair_factory(self.preset)
            started = time.perf_counter()
            # On the worker's own pair, not through pipeline.run_preset: that door to model work
            # matters on a ZeroGPU Space only, where no Ray worker runs.
            comparison = compare(self.pair, make_request(prompt, modes, max_new_tokens, limits=limits), limits)
            seconds = time.perf_counter() - started
        except SpecVizError as error:
            return {"error": str(error), "load_failed": isinstance(error, ModelLoadError)}
        return {"comparison": comparison.to_dict(), "seconds": seconds, "torch_threads": torch.get_num_threads(),
                "setup": self.pair.setup, "eos_ids": sorted(self.pair.eos_token_ids)}


# ---- the driver -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One prompt to compute, as the runner lists it: a preset, a suite's PromptItem, its index."""

    preset: str
    item: Any
    index: int

    def __str__(self) -> str:
        return f"{self.preset} {self.item.suite} {self.item.id}"


@dataclass
class Finished:
    """A prompt a worker computed: what the driver records."""

    job: Job
    comparison: Comparison
    seconds: float
    eos_ids: list[int]
    torch_threads: int
    setup: str  # what ran on the worker (the pair's set-up line)


@contextlib.contextmanager
def ray_cluster(options: RayOptions, say: Callable[[str], None]) -> Iterator[RayCluster]:
    """Ray for one run of the study: started here, or joined, and let go at the end. A Ray this
    process had already joined (the tests start one per module) is used and left running."""
    ray = import_ray()
    joined = ray.is_initialized()
    if not joined:
        _connect(ray, options.address, say)
    try:
        yield RayCluster(ray, options, say)
    except KeyboardInterrupt:
        say("interrupted: the Ray workers are stopped; results.jsonl holds every prompt finished so far, "
            "and the same command computes the rest")
        raise
    finally:
        if not joined:
            ray.shutdown()


def _connect(ray: Any, address: str, say: Callable[[str], None]) -> None:
    if address == LOCAL:
        say("Starting Ray on this machine")
        # A Ray of its own even if another runs here, without the dashboard (the study prints its own
        # progress), on the loopback: it serves this process alone.
        ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1")
        return
    say(f"Joining the Ray cluster at {address}")
    try:
        ray.init(address=address)
    except ConnectionError:
        raise SpecVizError(f"No Ray cluster answers at {address}: start one with `ray start --head`, or give "
                           "--ray without an address to start Ray on this machine.") from None


class RayCluster:
    """The workers a run can have, and the prompts computed on them: each preset's prompts on
    workers of its own, one prompt at a time each; a worker that dies is replaced, and its prompt
    handed out again."""

    def __init__(self, ray: Any, options: RayOptions, say: Callable[[str], None]):
        self.ray = ray
        self.options = options
        self.say = say
        # How a lost worker shows: its process or its node died, or Ray's memory monitor killed it
        self.lost = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                     ray.exceptions.OutOfMemoryError)
        nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
        cpus = sum(int(node.get("CPU", 0)) for node in nodes)
        gpus = sum(int(node.get("GPU", 0)) for node in nodes)
        self.gpus = 1 if gpus else 0  # on a cluster with GPUs, each worker asks for one
        fit = sum(workers_that_fit(node, options.threads, self.gpus) for node in nodes)
        each = f"{options.threads} torch thread(s)" + (" and one GPU" if gpus else "")
        if not fit:
            raise SpecVizError(f"No node of the Ray cluster ({cpus} CPUs, {gpus} GPUs) has room for a worker of "
                               f"{each}.")
        # No more workers than fit at once: one waiting for room would hold its prompt until the end
        self.workers = min(options.workers or fit, fit)
        asked = f" (--ray-actors {options.workers}: {fit} fit at once)" if (options.workers or 0) > fit else ""
        say(f"Ray: {cpus} CPUs, {gpus} GPUs in the cluster; {self.workers} worker(s) per preset, {each} each{asked}")
        self.summary = {"address": options.address, "workers": self.workers, "threads": options.threads,
                        "gpus": self.gpus}  # for meta.json
        self.left: list[Job] = []  # prompts given up on, for the next run

    def compute(self, todo: list[tuple[str, Any, int]], modes: list[Any], max_new_tokens: int,
                limits: Any) -> Iterator[Finished]:
        """Every prompt of `todo` (preset, PromptItem, index), one preset after another (a worker
        holds one pair); each finished prompt once, as it comes back."""
        jobs = [Job(*job) for job in todo]
        for preset in dict.fromkeys(job.preset for job in jobs):
            yield from self._compute_preset(preset, [job for job in jobs if job.preset == preset], modes,
                                            max_new_tokens, limits)
        if self.left:
            self.say(f"{len(self.left)} prompt(s) left for the next run, {MAX_ATTEMPTS} workers having died on "
                     "each: " + ", ".join(str(job) for job in self.left))

    def _compute_preset(self, preset: str, jobs: list[Job], modes: list[Any], max_new_tokens: int,
                        limits: Any) -> Iterator[Finished]:
        pool = _Workers(self, preset, jobs, modes, max_new_tokens, limits)
        finished: set[Job] = set()
        try:
            pool.start(min(self.workers, len(jobs)))
            self.say(f"{preset}: {len(jobs)} prompt(s) on {len(pool.workers)} Ray worker(s)")
            while pool.running:
                # With a timeout, so that Ctrl-C is seen within a second however long a prompt takes
                ready, _ = self.ray.wait(list(pool.running), num_returns=1, timeout=1.0)
                if not ready:
                    continue
                worker, job = pool.running.pop(ready[0])
                outcome, died = self._outcome(ready[0])
                if died is not None:
                    pool.lose(worker, job, died)
                    continue
                pool.hand_out(worker)  # its next prompt first: it computes while this one is recorded
                if job not in finished:  # each prompt once in results.jsonl, whatever befell the workers
                    finished.add(job)
                    yield Finished(job, Comparison.from_dict(outcome["comparison"]), outcome["seconds"],
                                   outcome["eos_ids"], outcome["torch_threads"], outcome["setup"])
        finally:
            # Before the next preset's workers load their pairs, and on Ctrl-C: stop the work now
            pool.stop()


    def _outcome(self, result: Any) -> tuple[dict | None, Exception | None]:
        """A prompt's result, or (None, the error) when its worker died on it. A worker that cannot
        start, or a pair that cannot load, ends the study: every other worker would fail alike."""
        try:
            outcome = self.ray.get(result)
        except self.lost as error:
            if getattr(error, "actor_init_failed", False):
                raise SpecVizError(f"A Ray worker could not start ({_line(error, -1)}): SpecViz must be "
                                   "importable on every node, from the folder this command runs in.") from None
            return None, error
        if "error" in outcome:
            from ..pair.models import ModelLoadError

            raise (ModelLoadError if outcome["load_failed"] else SpecVizError)(outcome["error"])
        return outcome, None


def workers_that_fit(node: dict[str, float], threads: int, gpus: int) -> int:
    """Workers of `threads` CPUs and `gpus` GPUs (0 or 1) that one node's resources hold: a worker's
    CPUs and GPU are on one node."""
    fit = int(node.get("CPU", 0)) // threads
    return min(fit, int(node.get("GPU", 0))) if gpus else fit


class _Workers:
    """One preset's Ray workers and the prompts they hold: each worker computes one prompt at a time;
    a worker that dies is replaced while prompts are left, and its prompt requeued, up to
    MAX_ATTEMPTS deaths a prompt (then it is left for the next run, in the cluster's `left`)."""

    def __init__(self, cluster: RayCluster, preset: str, jobs: list[Job], modes: list[Any], max_new_tokens: int,
                 limits: Any):
        self.cluster, self.ray = cluster, cluster.ray
        self.make = self.ray.remote(StudyWorker).options(num_cpus=cluster.options.threads, num_gpus=cluster.gpus)
        self.preset, self.modes, self.max_new_tokens, self.limits = preset, modes, max_new_tokens, limits
        self.queue = deque(jobs)
        self.deaths: dict[Job, int] = {}
        # a prompt's result to come (an object ref): its worker, the prompt
        self.running: dict[Any, tuple[Any, Job]] = {}
        self.workers: list[Any] = []  # the live ones, stopped at the end

    def start(self, count: int) -> None:
        for _ in range(count):
            self.workers.append(self.make.remote(self.preset, self.cluster.options.threads, PAIR_FACTORY))
        for worker in list(self.workers):
            self.hand_out(worker)

    def hand_out(self, worker: Any) -> None:
        if self.queue:
            job = self.queue.popleft()
            self.running[worker.compare.remote(job.item.prompt, self.modes, self.max_new_tokens, self.limits)] = (
                worker, job)

    def lose(self, worker: Any, job: Job, error: Exception) -> None:
        """A worker died on `job`: requeue it or give up on it; a new worker takes the next prompt if
        work is left."""
        _kill(self.ray, worker)
        self.workers.remove(worker)
        self.deaths[job] = self.deaths.get(job, 0) + 1
        if self.deaths[job] < MAX_ATTEMPTS:
            self.queue.appendleft(job)  # next in line, so that a prompt is not redone last of all
            what = "redone on a new worker"
        else:
            self.cluster.left.append(job)
            what = "left for the next run"
        self.cluster.say(f"a Ray worker died on {job} ({_line(error, 0)}): {what}")
        if self.queue:
            self.workers.append(self.make.remote(self.preset, self.cluster.options.threads, PAIR_FACTORY))
            self.hand_out(self.workers[-1])

    def stop(self) -> None:
        for worker in self.workers:
            _kill(self.ray, worker)


def _kill(ray: Any, worker: Any) -> None:
    # A worker may be gone already (it died, or its node did): nothing is left to stop
    with contextlib.suppress(Exception):
        ray.kill(worker)


def _line(error: BaseException, which: int) -> str:
    """One line of Ray's many-line message: the first says what happened, the last (in a traceback) why."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[which][:200] if lines else type(error).__name__
