"""The study's report: everything computed from its records, by job (`python -m specviz study`,
runner.py makes the runs).

- figures.py: per-suite figures (sums per policy, the oracle's jumps, modeled times);
- verdicts.py: the verdict rules (`RULES`, `STUDY_HEADLINE`) and the functions that apply them;
- sections.py: one pair's sections of a report, each with its verdict;
- current.py: choosing the run of record across the kept folders;
- write.py: STUDY.md, results.csv and the page of record;
- text.py: how a figure is written.

Pure: records in, numbers and markdown out; no model and no torch (tests/test_no_torch.py), so a
report can be rebuilt from `results.jsonl` alone. The names below are the report's interface to
the runner, the tests and the docs.
"""

from ..records import ModeResult, PromptResult, RoundRecord
from .current import Run, current_runs, page_order, runs_in_folder
from .figures import SuiteFigures, judged_tokens, jump_stats, modeled_time, percentile, prompt_wins, suite_figures
from .text import duration
from .verdicts import PAIR_DRAFT_MARK, RULES, STUDY_HEADLINE, STUDY_MODES, majority, model_preset, suited_policy
from .write import draft_section, page_of_record, report_markdown, write_csv

__all__ = [
    "PAIR_DRAFT_MARK", "RULES", "STUDY_HEADLINE", "STUDY_MODES", "ModeResult", "PromptResult", "RoundRecord", "Run",
    "SuiteFigures", "current_runs", "draft_section", "duration", "judged_tokens", "jump_stats", "majority",
    "model_preset", "modeled_time", "page_of_record", "page_order", "percentile", "prompt_wins", "report_markdown",
    "runs_in_folder", "suite_figures", "suited_policy", "write_csv",
]
