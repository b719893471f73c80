"""The sweep file: a YAML grid of models x specs x tasks, validated whole before any cell runs.

    name: organism-pointer-chase        # optional; names the default store (<name>.sqlite)
    models: [organism]                  # 'organism', 'tiny:<arch>', or a local model directory
    specs: [baseline, w4g128-a16-kv:16] # 'baseline' is the unquantized model
    tasks:
      - kind: agent                     # the default kind
        env: pointer_chase              # a built-in environment or path/to/file.py@Class
        horizons: [1, 16, 64]
        seeds: 20                       # a count of held-out seeds, or a list of held-out seeds
        knobs: {distractors: 20}        # optional environment knobs
        max_new_tokens: 32              # optional, per step
        prompt: {mode: prompted, parser: hermes, prefill_opening: true}   # optional, tool_prompt_for options
        drift: true                     # optional: variant cells also replay the baseline's episodes
                                        # teacher-forced (per-token KL and top-1 flips; qdrift.envs.drift)
        sampling: {temperature: 0.7, top_p: 0.95, samples: 4, seed: 0}   # optional: k sampled episodes per
                                        # seed (trials 0..k-1, policy seeds seed..seed+k-1) instead of one greedy
      - kind: short_form
        runner: lmeval                  # a registered short-form runner (qdrift.sweep.shortform)
        task: gsm8k
        limit: 200                      # optional
        options: {num_fewshot: 5}       # optional, passed to the runner
    calibration: {env: pointer_chase}   # required when a spec has static scales (qdrift.sweep.calibration)
    dtype: bfloat16                     # optional: the models' dtype (float32 unless set; enters the cell key)
    device: cuda                        # optional: where the models run (cpu unless set; a GPU's cells are keyed apart)
    batch: 50                           # optional, episodes in lockstep
    threads: 2                          # optional, torch CPU threads (per worker under Ray)
    executor: ray                       # optional: 'local' (the default, cells one by one) or 'ray'
    workers: 4                          # optional, Ray workers running cells at once (executor: ray)
    wandb:                              # optional: log each finished cell to Weights & Biases
      project: qdrift                   # required in the block
      entity: my-team                   # optional
      mode: offline                     # optional, online | offline (default: offline unless an API key is set)
      dir: runs/                        # optional, where wandb/ goes (default: beside the store)

Every problem is reported at once, each with the file, its line, the field, the value and the
valid choices.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from qdrift.sweep.calibration import KEYS as CALIBRATION_KEYS
from qdrift.sweep.calibration import Calibration, needs_calibration
from qdrift.sweep.lines import LineDict, LineList, load_yaml

BASELINE = "baseline"
TOP_KEYS = ("name", "description", "models", "specs", "tasks", "calibration", "dtype", "device", "batch", "threads",
            "executor", "workers", "wandb")
DTYPES = ("float32", "bfloat16", "float16")
AGENT_KEYS = ("kind", "env", "horizons", "seeds", "knobs", "max_new_tokens", "prompt", "drift", "sampling")
SAMPLING_KEYS = ("temperature", "top_p", "samples", "seed")
SAMPLING_DEFAULTS = {"top_p": 1.0, "samples": 4, "seed": 0}
MAX_SAMPLES = 64
PROMPT_KEYS = ("mode", "parser", "prefill_opening", "prefill_extra")
PROMPT_MODES = ("auto", "native", "prompted")
PROMPT_DEFAULTS = {"mode": "auto", "parser": None, "prefill_opening": False, "prefill_extra": ""}  # tool_prompt_for's
BATCH = 50  # the default batch (episodes in lockstep)
# Every count is bounded, so a typo cannot build a billion-seed list (or a billion-token generation)
# before anything runs: each bound is far above any study these machines or a GPU node would run.
MAX_INT = 2**31 - 1
MAX_SEEDS = 100_000
MAX_HORIZON = 100_000
MAX_HORIZONS = 1_000
MAX_BATCH = 4_096
MAX_THREADS = 1_024
MAX_NEW_TOKENS = 32_768
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SHORT_FORM_KEYS = ("kind", "runner", "task", "limit", "options")
KINDS = ("agent", "short_form")
WANDB_KEYS = ("project", "entity", "mode", "dir")
WANDB_MODES = ("online", "offline")
EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class AgentTask:
    env: str
    horizons: tuple[int, ...]
    seeds: tuple[int, ...]
    knobs: tuple[tuple[str, int], ...] = ()
    max_new_tokens: int = 32
    prompt: tuple[tuple[str, Any], ...] = ()  # tool_prompt_for options; () is the model's default
    drift: bool = False  # variant cells also record teacher-forced drift against the baseline
    kind: str = "agent"
    # () is greedy, one episode per seed; else temperature, top_p, samples (k) and the policy seed
    sampling: tuple[tuple[str, Any], ...] = ()

    def sampling_options(self) -> dict[str, Any]:
        return {**SAMPLING_DEFAULTS, **dict(self.sampling)} if self.sampling else {}

    @property
    def name(self) -> str:
        return self.env


@dataclass(frozen=True)
class ShortFormTask:
    runner: str
    task: str
    limit: int | None = None
    options: tuple[tuple[str, Any], ...] = ()
    kind: str = "short_form"

    @property
    def name(self) -> str:
        return self.task


@dataclass(frozen=True)
class WandbOptions:
    """Where and how cells are logged to W&B (`mode` None: offline unless an API key is configured)."""

    project: str | None  # None: wandb's own default (WANDB_PROJECT, as under `wandb agent`)
    entity: str | None = None
    mode: str | None = None
    dir: str | None = None

    def __post_init__(self):
        if self.mode is not None and self.mode not in WANDB_MODES:
            raise ValueError(f"W&B mode must be one of {', '.join(WANDB_MODES)}, got {self.mode!r}")


@dataclass(frozen=True)
class Sweep:
    name: str
    models: tuple[str, ...]
    specs: tuple[str, ...]  # "baseline" or canonical spec strings
    tasks: tuple[AgentTask | ShortFormTask, ...]
    batch: int = BATCH
    threads: int | None = None
    description: str = ""
    source: str = field(default="<string>", compare=False)
    # How the cells run, not what they measure: neither enters a cell's key.
    executor: str = "local"
    workers: int | None = None
    wandb: WandbOptions | None = None
    calibration: Calibration | None = None  # enters the key of the cells whose spec calibrates
    dtype: str | None = None  # None: float32; a set dtype enters every cell's key
    device: str | None = None  # None: cpu; a GPU rounds differently, so cells.make_cell keys its cells apart


class SweepError(ValueError):
    """A sweep file that cannot run; `problems` lists every error, each naming its line."""

    def __init__(self, source: str, problems: list[tuple[int, str]]):
        self.problems = [f"{source}:{line}: {msg}" for line, msg in problems]
        super().__init__(f"{len(problems)} problem(s) in sweep file {source}:\n  " + "\n  ".join(self.problems))


def _hint(value, choices) -> str:
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Checker:
    def __init__(self, source: str):
        self.source = source
        self.problems: list[tuple[int, str]] = []

    def error(self, line: int, msg: str) -> None:
        self.problems.append((line, msg))

    def keys(self, data: LineDict, valid, where: str) -> None:
        for k in data:
            if k not in valid:
                self.error(data.line_of(k), f"{where}unknown key '{k}'{_hint(k, valid)}; valid keys: {', '.join(valid)}")

    def int_field(self, data: LineDict, key: str, where: str, minimum: int, default=None, maximum: int = MAX_INT):
        value = data.get(key, default)
        if key in data and (not _is_int(value) or not minimum <= value <= maximum):
            self.error(data.line_of(key), f"{where}{key}: must be an integer in {minimum}..{maximum}, got {value!r}")
            return default
        return value


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate the sweep file at `path` (SweepError listing every problem by line)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sweep file not found: {path}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SweepError(str(path), [(line, f"not UTF-8 text: byte 0x{raw[e.start]:02x} at offset {e.start} "
                                            "(save the file as UTF-8)")]) from None
    return parse_sweep(text, source=str(path), default_name=path.stem)


def parse_sweep(text: str, source: str = "<string>", default_name: str = "sweep") -> Sweep:
    """Validate sweep YAML `text`; `source` names it in errors."""
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise SweepError(source, [((mark.line + 1) if mark else 0, f"not valid YAML: {e}")]) from None
    if not isinstance(data, LineDict):
        raise SweepError(source, [(1, f"a sweep file is a mapping with keys {', '.join(TOP_KEYS)}; "
                                      f"got {type(data).__name__}")])
    c = _Checker(source)
    c.keys(data, TOP_KEYS, "")
    for key in ("models", "specs", "tasks"):
        if key not in data:
            c.error(data.line, f"missing required key '{key}'")
    models = _models(c, data)
    specs = _specs(c, data)
    tasks = _tasks(c, data)
    batch = c.int_field(data, "batch", "", 1, BATCH, MAX_BATCH)
    threads = c.int_field(data, "threads", "", 1, None, MAX_THREADS)
    executor = data.get("executor", "local")
    if executor not in EXECUTORS:
        c.error(data.line_of("executor"), f"executor: unknown executor {executor!r}{_hint(executor, EXECUTORS)}; "
                                          f"valid executors: {', '.join(EXECUTORS)}")
    workers = c.int_field(data, "workers", "", 1, None, MAX_THREADS)
    if workers is not None and executor == "local":
        c.error(data.line_of("workers"), "workers: the local executor runs one cell at a time; "
                                         "set 'executor: ray' to run cells on several workers")
    name = data.get("name", default_name)
    if "name" in data and not (isinstance(name, str) and SAFE_NAME.fullmatch(name) and ".." not in name):
        # the name becomes a file name (<name>.sqlite): no folders, no way out of the output folder
        c.error(data.line_of("name"), f"name: must be a file name of letters, digits, '.', '_' and '-' (at most "
                                      f"128, starting with a letter or digit, no '..'), got {name!r}")
    wandb = _wandb(c, data)
    calibration = _calibration(c, data, specs)
    dtype, device = data.get("dtype"), data.get("device")
    if dtype is not None and dtype not in DTYPES:
        c.error(data.line_of("dtype"), f"dtype: unknown dtype {dtype!r}{_hint(dtype, DTYPES)}; valid dtypes: "
                                       f"{', '.join(DTYPES)}")
    if device is not None and not (isinstance(device, str) and re.fullmatch(r"cpu|cuda(:\d+)?", device)):
        c.error(data.line_of("device"), f"device: {device!r} is not a device; valid: cpu, cuda, cuda:<index>")
    if c.problems:
        raise SweepError(source, c.problems)
    return Sweep(name, models, specs, tasks, batch, threads, str(data.get("description", "")), source,
                 executor, workers, wandb, calibration, dtype, device)


def _calibration(c: _Checker, data: LineDict, specs: tuple[str, ...]) -> Calibration | None:
    from qdrift.envs.registry import load_environment, make_environment

    static = [s for s in specs if needs_calibration(s)]
    block = data.get("calibration")
    if block is None:
        if static:
            c.error(data.line_of("specs"), f"specs: {', '.join(static)} set static scales from calibration data; "
                                           "add a block such as 'calibration: {env: pointer_chase, samples: 8}' "
                                           "(oracle trajectories on training seeds)")
        return None
    line = data.line_of("calibration")
    if not static:
        c.error(line, "calibration: no spec in this sweep has static scales (@static); drop the block")
        return None
    if not isinstance(block, LineDict):
        c.error(line, f"calibration: must be a mapping with keys {', '.join(CALIBRATION_KEYS)}, got {block!r}")
        return None
    c.keys(block, CALIBRATION_KEYS, "calibration.")
    before = len(c.problems)
    env = block.get("env")
    try:
        load_environment(env) if isinstance(env, str) else None
    except (ValueError, TypeError, FileNotFoundError, ImportError, SyntaxError) as e:
        c.error(block.line_of("env"), f"calibration.env: {e}")
    if not isinstance(env, str):
        c.error(block.line_of("env") if "env" in block else line,
                f"calibration.env: name the environment whose training-seed trajectories calibrate, got {env!r}")
    horizon = c.int_field(block, "horizon", "calibration.", 1, 16, MAX_HORIZON)
    samples = c.int_field(block, "samples", "calibration.", 1, 8, MAX_SEEDS)
    knobs = block.get("knobs", {})
    if not isinstance(knobs, dict):
        c.error(block.line_of("knobs"), f"calibration.knobs: must be a mapping of knob name to integer, got {knobs!r}")
    prompt = _prompt(c, block, "calibration.")
    if len(c.problems) > before:
        return None
    try:
        make_environment(env, horizon=horizon, seed=0, split="train", **knobs)
    except (ValueError, TypeError) as e:
        c.error(line, f"calibration: {e}")
        return None
    return Calibration(env, horizon, samples, tuple(sorted(without_defaults(load_environment(env), knobs).items())),
                       prompt)


def _prompt(c: _Checker, block: LineDict, where: str) -> tuple[tuple[str, Any], ...]:
    """Validated tool_prompt_for options (types here; the tokenizer checks the rest when a cell runs)."""
    from qdrift.envs.parsers import PARSERS

    prompt = block.get("prompt")
    if prompt is None:
        return ()
    if not isinstance(prompt, LineDict):
        c.error(block.line_of("prompt"), f"{where}prompt: must be a mapping with keys {', '.join(PROMPT_KEYS)}, "
                                         f"got {prompt!r}")
        return ()
    c.keys(prompt, PROMPT_KEYS, f"{where}prompt.")
    mode, parser = prompt.get("mode", "auto"), prompt.get("parser")
    if mode not in PROMPT_MODES:
        c.error(prompt.line_of("mode"), f"{where}prompt.mode: unknown mode {mode!r}{_hint(mode, PROMPT_MODES)}; "
                                        f"valid modes: {', '.join(PROMPT_MODES)}")
    if parser is not None and (not isinstance(parser, str) or parser not in PARSERS):
        c.error(prompt.line_of("parser"), f"{where}prompt.parser: unknown format {parser!r}{_hint(parser, PARSERS)}; "
                                          f"valid formats: {', '.join(PARSERS)}")
    if not isinstance(prompt.get("prefill_opening", False), bool):
        c.error(prompt.line_of("prefill_opening"), f"{where}prompt.prefill_opening: must be true or false")
    if not isinstance(prompt.get("prefill_extra", ""), str):
        c.error(prompt.line_of("prefill_extra"), f"{where}prompt.prefill_extra: must be a string")
    elif prompt.get("prefill_extra") and not prompt.get("prefill_opening"):
        c.error(prompt.line_of("prefill_extra"), f"{where}prompt.prefill_extra: follows the call opening; "
                                                 "set prefill_opening: true too")
    # Options at tool_prompt_for's defaults are dropped: writing one out measures the same thing, so it keeps the key.
    return tuple(sorted((k, v) for k, v in prompt.items() if k not in PROMPT_DEFAULTS or v != PROMPT_DEFAULTS[k]))


def _wandb(c: _Checker, data: LineDict) -> WandbOptions | None:
    if "wandb" not in data:
        return None
    block = data["wandb"]
    if not isinstance(block, LineDict):
        c.error(data.line_of("wandb"), f"wandb: must be a mapping with keys {', '.join(WANDB_KEYS)}, got {block!r}")
        return None
    c.keys(block, WANDB_KEYS, "wandb.")
    values = {}
    for key in WANDB_KEYS:
        value = block.get(key)
        if key in block and (not isinstance(value, str) or not value):
            c.error(block.line_of(key), f"wandb.{key}: must be a non-empty string, got {value!r}")
        values[key] = value
    if "project" not in block:
        c.error(data.line_of("wandb"), "wandb: missing required key 'project' (the W&B project the cells log to)")
    if values["mode"] is not None and values["mode"] not in WANDB_MODES:
        c.error(block.line_of("mode"), f"wandb.mode: unknown mode {values['mode']!r}{_hint(values['mode'], WANDB_MODES)}; "
                                       f"valid modes: {', '.join(WANDB_MODES)}")
        return None
    return WandbOptions(**values)


def _string_list(c: _Checker, data: LineDict, key: str) -> list[tuple[int, str]]:
    value = data.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        value, lines = [value], [data.line_of(key)]
    elif isinstance(value, LineList) and value:
        lines = value.lines
    else:
        c.error(data.line_of(key), f"{key}: must be a non-empty list of strings, got {value!r}")
        return []
    out = []
    for v, line in zip(value, lines, strict=True):
        if not isinstance(v, str) or not v:
            c.error(line, f"{key}: each entry must be a non-empty string, got {v!r}")
        else:
            out.append((line, v))
    return out


def _models(c: _Checker, data: LineDict) -> tuple[str, ...]:
    from qdrift.sweep.models import check_model_ref

    out = []
    for line, ref in _string_list(c, data, "models"):
        problem = check_model_ref(ref)
        if problem:
            c.error(line, f"models: {problem}")
        elif ref in out:
            c.error(line, f"models: '{ref}' is listed twice")
        else:
            out.append(ref)
    return tuple(out)


def _specs(c: _Checker, data: LineDict) -> tuple[str, ...]:
    from qdrift.spec import QuantSpec

    out: list[str] = []
    for line, text in _string_list(c, data, "specs"):
        if text == BASELINE:
            canon = BASELINE
        else:
            try:
                canon = str(QuantSpec.parse(text))
            except ValueError as e:
                c.error(line, f"specs: bad spec '{text}': {e} (or '{BASELINE}' for the unquantized model)")
                continue
        if canon in out:
            c.error(line, f"specs: '{text}' is listed twice (canonical form '{canon}')")
        else:
            out.append(canon)
    return tuple(out)


def _tasks(c: _Checker, data: LineDict) -> tuple:
    tasks = data.get("tasks")
    if tasks is None:
        return ()
    if not isinstance(tasks, LineList) or not tasks:
        c.error(data.line_of("tasks"), f"tasks: must be a non-empty list of task mappings, got {tasks!r}")
        return ()
    out = []
    for i, task in enumerate(tasks):
        where = f"tasks[{i}]."
        if not isinstance(task, LineDict):
            c.error(tasks.line_of(i), f"tasks[{i}]: must be a mapping with 'kind' ({', '.join(KINDS)}), got {task!r}")
            continue
        kind = task.get("kind", "agent")
        if kind == "agent":
            built = _agent_task(c, task, where)
        elif kind == "short_form":
            built = _short_form_task(c, task, where)
        else:
            c.error(task.line_of("kind"), f"{where}kind: unknown kind {kind!r}{_hint(kind, KINDS)}; "
                                          f"valid kinds: {', '.join(KINDS)}")
            continue
        if built is not None:
            out.append(built)
    return tuple(out)


def _agent_task(c: _Checker, task: LineDict, where: str) -> AgentTask | None:
    from qdrift.envs.registry import (
        TRAIN_SEEDS_BELOW,
        available,
        check_split,
        load_environment,
        make_environment,
        repeated_instance,
    )

    c.keys(task, AGENT_KEYS, where)
    before = len(c.problems)
    env = task.get("env")
    cls = None
    if not isinstance(env, str):
        c.error(task.line_of("env"), f"{where}env: name an environment ({', '.join(available())}) "
                                     f"or path/to/file.py@Class, got {env!r}")
    else:
        try:
            cls = load_environment(env)
        except (ValueError, TypeError, FileNotFoundError, ImportError, SyntaxError) as e:
            c.error(task.line_of("env"), f"{where}env: {e}")
    horizons = task.get("horizons")
    if _is_int(horizons):
        horizons = [horizons]
    if (not isinstance(horizons, list) or not horizons or len(horizons) > MAX_HORIZONS
            or not all(_is_int(h) and 1 <= h <= MAX_HORIZON for h in horizons)):
        shown = horizons if not isinstance(horizons, list) or len(horizons) <= 20 else f"a list of {len(horizons)}"
        c.error(task.line_of("horizons"), f"{where}horizons: must be a non-empty list of at most {MAX_HORIZONS} "
                                          f"integers in 1..{MAX_HORIZON}, got {shown!r}")
        horizons = []
    elif len(set(horizons)) != len(horizons):
        c.error(task.line_of("horizons"), f"{where}horizons: repeated horizon in {horizons}")
    elif cls is not None and max(horizons) > _max_horizon(cls):  # optional: an environment may have no cap
        c.error(task.line_of("horizons"), f"{where}horizons: {max(horizons)} exceeds {env}'s maximum "
                                          f"horizon {cls.max_horizon}; valid horizons: 1..{cls.max_horizon}")
    seeds = task.get("seeds", 20)
    if (_is_int(seeds) and seeds > MAX_SEEDS) or (isinstance(seeds, list) and len(seeds) > MAX_SEEDS):
        count = seeds if _is_int(seeds) else len(seeds)
        c.error(task.line_of("seeds"), f"{where}seeds: at most {MAX_SEEDS:,} seeds per task, got {count:,}")
        seeds = []
    elif _is_int(seeds) and seeds >= 1:
        seeds = list(range(TRAIN_SEEDS_BELOW, TRAIN_SEEDS_BELOW + seeds))
    elif isinstance(seeds, list) and seeds and all(_is_int(s) for s in seeds) and len(set(seeds)) == len(seeds):
        try:
            for s in seeds:
                check_split(s, "eval")
        except ValueError as e:
            c.error(task.line_of("seeds"), f"{where}seeds: {e}")
    else:
        c.error(task.line_of("seeds"), f"{where}seeds: a count >= 1 of held-out seeds, or a list of distinct "
                                       f"held-out seeds (>= {TRAIN_SEEDS_BELOW}); got {seeds!r}")
    knobs = task.get("knobs", {})
    if not isinstance(knobs, dict):
        c.error(task.line_of("knobs"), f"{where}knobs: must be a mapping of knob name to integer, got {knobs!r}")
        knobs = {}
    if cls is not None and knobs:  # checked even when the horizons or seeds are wrong, so all is said at once
        try:
            h0 = min((h for h in horizons if h <= _max_horizon(cls)), default=1)
            make_environment(env, horizon=h0, seed=TRAIN_SEEDS_BELOW, split="eval", **knobs)
        except (ValueError, TypeError) as e:
            c.error(task.line_of("knobs"), f"{where}knobs: {e}")
    max_new = c.int_field(task, "max_new_tokens", where, 1, 32, MAX_NEW_TOKENS)
    prompt = _prompt(c, task, where)
    drift = task.get("drift", False)
    if not isinstance(drift, bool):
        c.error(task.line_of("drift"), f"{where}drift: must be true or false, got {drift!r}")
    sampling = _sampling(c, task, where)
    if sampling and drift is True:
        c.error(task.line_of("drift"), f"{where}drift: replays the baseline's greedy episodes, which a sampled "
                                       "task does not have; drop drift or sampling")
    if len(c.problems) > before:
        return None
    if cls is not None:  # the environment checks its own knobs (names, ranges) at every horizon
        for h in horizons:
            try:
                make_environment(env, horizon=h, seed=seeds[0], split="eval", **knobs)
            except (ValueError, TypeError) as e:
                field = "knobs" if knobs else "horizons"
                c.error(task.line_of(field), f"{where}{field}: {e} (at horizon {h})")
                return None
        repeated = repeated_instance(env, cls, seeds, knobs)
        if repeated:
            c.error(task.line_of("seeds"), f"{where}seeds: {repeated}")
            return None
    knobs = without_defaults(cls, knobs) if cls is not None else knobs
    return AgentTask(env, tuple(horizons), tuple(seeds), tuple(sorted(knobs.items())), max_new, prompt, drift,
                     sampling=sampling)


def _sampling(c: _Checker, block: LineDict, where: str) -> tuple[tuple[str, Any], ...]:
    """Validated sampling options, defaults written out dropped (so they key as left out)."""
    sampling = block.get("sampling")
    if sampling is None:
        return ()
    if not isinstance(sampling, LineDict) or "temperature" not in sampling:
        c.error(block.line_of("sampling"), f"{where}sampling: must be a mapping with a temperature > 0 and optional "
                                           f"top_p, samples, seed; got {sampling!r}")
        return ()
    c.keys(sampling, SAMPLING_KEYS, f"{where}sampling.")
    t, p = sampling.get("temperature"), sampling.get("top_p", 1.0)
    if not _is_number(t) or not 0 < t <= 10:
        c.error(sampling.line_of("temperature"), f"{where}sampling.temperature: must be in (0, 10], got {t!r}")
    if not _is_number(p) or not 0 < p <= 1:
        c.error(sampling.line_of("top_p"), f"{where}sampling.top_p: must be in (0, 1], got {p!r}")
    c.int_field(sampling, "samples", f"{where}sampling.", 1, None)
    k = sampling.get("samples", 4)
    if _is_int(k) and k > MAX_SAMPLES:
        c.error(sampling.line_of("samples"), f"{where}sampling.samples: at most {MAX_SAMPLES}, got {k}")
    c.int_field(sampling, "seed", f"{where}sampling.", 0, None, 2**32 - 1)
    values = {k: sampling[k] for k in SAMPLING_KEYS if k in sampling}
    for k in ("temperature", "top_p"):  # 1 and 1.0 are one setting, and key as one
        if _is_number(values.get(k)):
            values[k] = float(values[k])
    return tuple(sorted((k, v) for k, v in values.items() if k not in SAMPLING_DEFAULTS or v != SAMPLING_DEFAULTS[k]))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def without_defaults(cls, knobs: dict) -> dict:
    """`knobs` less those set to the environment's default (its `knobs` table; a ToolEnv's `slack` too):
    the environment is the same with or without them, so writing a default out keeps the cells' keys."""
    from qdrift.envs.toolenv import ToolEnv

    defaults = {k: getattr(v, "default", v) for k, v in getattr(cls, "knobs", {}).items()}
    if isinstance(cls, type) and issubclass(cls, ToolEnv):
        defaults.setdefault("slack", 0)
    return {k: v for k, v in knobs.items() if k not in defaults or defaults[k] != v}


def _max_horizon(cls) -> float:
    """An environment's largest horizon: `max_horizon` where it declares one (qdrift's own do), else none."""
    return getattr(cls, "max_horizon", math.inf)


def _short_form_task(c: _Checker, task: LineDict, where: str) -> ShortFormTask | None:
    from qdrift.sweep import shortform

    c.keys(task, SHORT_FORM_KEYS, where)
    before = len(c.problems)
    runner = task.get("runner", "lmeval")
    if not isinstance(runner, str):
        c.error(task.line_of("runner"), f"{where}runner: must be a runner's name (a string), got {runner!r}")
    else:
        try:
            shortform.lookup(runner)
        except shortform.RunnerUnavailable as e:
            c.error(task.line_of("runner"), f"{where}runner: {e}")
    name = task.get("task")
    if not isinstance(name, str) or not name:
        c.error(task.line_of("task"), f"{where}task: name the benchmark task (a non-empty string), got {name!r}")
    limit = c.int_field(task, "limit", where, 1, None, 10_000_000)
    options = task.get("options", {})
    if not isinstance(options, dict):
        c.error(task.line_of("options"), f"{where}options: must be a mapping, got {options!r}")
    elif not all(isinstance(k, str) for k in options):
        c.error(task.line_of("options"), f"{where}options: option names must be strings, got "
                                         f"{', '.join(repr(k) for k in options if not isinstance(k, str))}")
    if len(c.problems) > before:
        return None
    problem = shortform.task_problem(runner, name)  # e.g. an unknown BFCL category or lm-eval task
    if problem:
        c.error(task.line_of("task"), f"{where}task: {problem}")
        return None
    return ShortFormTask(runner, name, limit, tuple(sorted(options.items())))
