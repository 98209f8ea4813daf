"""ZeroGPU (specviz/pair/gpu.py): what this machine can prove without a GPU. Model work goes
through the decorated functions, the duration rule, and `spaces` installed changes nothing here."""

import ast
import inspect
import sys
import types
from pathlib import Path

import pytest
import torch

from specviz.decoding import pipeline
from specviz.pair import gpu

ROOT = Path(__file__).resolve().parents[1]


def test_the_duration_grows_with_tokens_and_runs_and_is_capped():
    assert gpu.comparison_gpu_s(0, 5) == gpu.GPU_BASE_S
    short, longer, more_runs = gpu.comparison_gpu_s(64, 5), gpu.comparison_gpu_s(128, 5), gpu.comparison_gpu_s(128, 7)
    assert gpu.GPU_BASE_S < short < longer < more_runs <= gpu.GPU_MAX_S
    assert longer == gpu.GPU_BASE_S + round(gpu.GPU_S_PER_TOKEN * 128 * 5)
    assert gpu.comparison_gpu_s(100_000, 7) == gpu.GPU_MAX_S
    request = pipeline.make_request("hi", "static:5,oracle", 128)
    assert pipeline._gpu_seconds("any", request) == gpu.comparison_gpu_s(128, 3)  # two policies + target-only


def test_the_device_and_dtype_rule():
    assert gpu.device() == torch.device("cpu")  # no GPU here
    assert gpu.model_dtype(torch.device("cuda")) == torch.bfloat16
    assert gpu.model_dtype(torch.device("cuda"), torch.float32) == torch.bfloat16
    assert gpu.model_dtype(torch.device("cpu")) == torch.float32
    assert gpu.model_dtype(torch.device("cpu"), torch.bfloat16) == torch.bfloat16
    assert gpu.warms_up(torch.device("cpu")) and not gpu.warms_up(torch.device("cuda"))


def test_gpu_work_marks_each_step_and_nothing_between():
    seen = []

    @gpu.gpu_work(duration=lambda n: 1)
    def steps(n):
        for i in range(n):
            seen.append(gpu.inside_gpu_work())
            yield i
        return "end"

    @gpu.gpu_work(duration=lambda: 1)
    def call():
        return gpu.inside_gpu_work()

    assert inspect.isgeneratorfunction(steps)  # spaces.GPU picks its generator wrapper by this
    between = []
    for _ in steps(3):
        between.append(gpu.inside_gpu_work())
    assert seen == [True] * 3 and between == [False] * 3
    assert call() is True and gpu.inside_gpu_work() is False

    closed = []

    @gpu.gpu_work(duration=lambda: 1)
    def endless():
        try:
            while True:
                yield 1
        finally:
            closed.append(True)

    run = endless()
    next(run)
    run.close()  # a consumer that stops (Stop, a client gone) frees what the work holds
    assert closed == [True]


def test_on_zerogpu_the_work_runs_under_spaces_gpu_with_its_duration(monkeypatch):
    calls = []
    fake = types.ModuleType("spaces")

    def GPU(duration=None):
        def wrap(function):
            calls.append((function, duration))
            return function
        return wrap

    fake.GPU = GPU
    monkeypatch.setitem(sys.modules, "spaces", fake)

    def seconds(n):
        return 10 + n

    @gpu.gpu_work(duration=seconds)
    def steps(n):
        yield gpu.inside_gpu_work()

    ((wrapped, duration),) = calls
    assert duration is seconds and wrapped is steps and inspect.isgeneratorfunction(wrapped)
    assert list(steps(1)) == [True]


def test_spaces_installed_without_zerogpu_changes_nothing():
    spaces = pytest.importorskip("spaces")  # in requirements.txt

    def f():
        return 1

    assert not gpu.on_zerogpu()
    assert spaces.GPU(duration=5)(f) is f
    assert inspect.isgeneratorfunction(pipeline.run_preset)
    assert pipeline.run_preset.__wrapped__.__name__ == "run_preset"  # our own marker, not a ZeroGPU wrapper


# The app (specviz/ui), the study's runner and the CLI's study reach the models only through
# pipeline.run_preset / compare_preset (gpu_work). A new path that imported the engine, a drafter, the oracle or
# pipeline's pair-taking functions there would bypass the GPU slot on ZeroGPU.
BYPASSES = {"specviz.decoding.engine": None, "specviz.decoding.drafters": None, "specviz.decoding.oracle": None,
            "specviz.decoding.pipeline": {"run_comparison", "compare"}}


def _imports(path: Path) -> list[tuple[str, str]]:
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            module = f"{base}.{node.module}" if node.level else node.module
            found += [(module, alias.name) for alias in node.names]
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "specviz" / "ui").glob("*.py")) + [
    ROOT / "specviz" / "study" / "runner.py"], ids=lambda p: p.name)
def test_the_app_and_the_study_reach_the_models_only_through_gpu_work(path):
    for module, name in _imports(path):
        if module in BYPASSES:
            names = BYPASSES[module]
            assert names is not None and name not in names, f"{path.name} imports {name} from {module}"


@pytest.mark.slow
def test_every_forward_pass_of_the_app_the_api_and_the_study_is_gpu_work(tmp_path, restore_threads):
    """Hooks on both models record, for every forward pass, whether it ran inside gpu_work (on the
    token embeddings, which every pass reads once, the lean pass of pair/forward.py too)."""
    from specviz.cli import main
    from specviz.pair.models import get_pair
    from specviz.pair.presets import DEFAULT_PRESET
    from specviz.ui import api, events
    from specviz.ui.inputs import DRAFT_WIDGETS
    from specviz.ui.outputs import COMPARISON_OUTPUTS

    pair = get_pair(DEFAULT_PRESET)  # the process's pair, which the app, the API and the study use
    calls: list[bool] = []
    hooks = [model.get_input_embeddings().register_forward_pre_hook(lambda *_: calls.append(gpu.inside_gpu_work()))
             for model in (pair.target, pair.draft)]
    try:
        drafts = [w.setting.default for w in DRAFT_WIDGETS]  # the draft settings boxes, then the policies'
        app_run = list(events.run(None, "Say hi.", DEFAULT_PRESET, 8, 0, None, "model", *drafts, 3, 3, 0.4, 8))
        status = COMPARISON_OUTPUTS.read(app_run[-1])["status"]
        assert "done" in status, status
        app_calls = len(calls)
        assert app_calls > 0
        result = list(api.compare("Say hi.", DEFAULT_PRESET, 8, "static:3,oracle"))[-1]
        assert all(m["lossless"] for m in result["modes"])
        api_calls = len(calls) - app_calls
        assert api_calls > 0
        assert main(["study", "--preset", DEFAULT_PRESET, "--suites", str(ROOT / "assets/prompts/coding.jsonl"),
                     "--limit", "1", "--max-new-tokens", "8", "--out", str(tmp_path / "out")]) == 0
        assert len(calls) > app_calls + api_calls
    finally:
        for hook in hooks:
            hook.remove()
    assert all(calls), f"{calls.count(False)} of {len(calls)} forward calls ran outside gpu_work"
