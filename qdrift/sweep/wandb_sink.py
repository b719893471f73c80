"""Log each finished sweep cell to Weights & Biases: one run per cell, grouped by sweep.

A run holds as config the cell's full configuration (model, spec, task, horizon, seeds, ...), its
key, the sweep name and the parsed spec fields; as metrics the cell's numbers (`cell_metrics`)
and, for a variant whose baseline cell is done, the paired comparison with it; the tidy rows as
tables (steps and episodes, or items); and plots as images. A failed cell's run holds its error
and exits with code 1.

W&B runs offline (files under `<dir>/wandb/offline-run-*`, `wandb sync` uploads them later)
unless an API key is configured or online mode is asked for: `choose_mode`. qdrift never reads
the key's value into anything it logs or writes; it only checks where one is configured.

wandb is an optional dependency (`pip install 'qdrift[wandb]'`), imported only when a sink is made.
"""

from __future__ import annotations

import hashlib
import json
import netrc
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from qdrift.sweep.cells import Cell
from qdrift.sweep.execute import CellResult
from qdrift.sweep.file import BASELINE, WANDB_MODES, AgentTask, WandbOptions

DEFAULT_HOST = "api.wandb.ai"
_MODE_ALIASES = {"online": "online", "offline": "offline", "dryrun": "offline", "run": "online"}


def api_key_source(environ: Mapping[str, str] | None = None, netrc_path: str | Path | None = None) -> str | None:
    """Where a W&B API key is configured ('WANDB_API_KEY' or the netrc file), or None; never the key.

    By hand because wandb's own lookup (`wandb.sdk.lib.wbauth`) is private and moves between
    releases; the rule is short: the environment variable, else a netrc entry for the W&B host.
    """
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_API_KEY"):
        return "WANDB_API_KEY"
    path = Path(netrc_path or environ.get("NETRC") or Path.home() / ".netrc")
    host = (environ.get("WANDB_BASE_URL") or DEFAULT_HOST).split("://")[-1].split("/")[0]
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return None
    return f"{path} (machine {host})" if entry and entry[2] else None


def choose_mode(requested: str | None = None, environ: Mapping[str, str] | None = None,
                netrc_path: str | Path | None = None) -> tuple[str, str]:
    """('online' | 'offline', why): the asked-for mode, else WANDB_MODE, else online only with an API key."""
    environ = os.environ if environ is None else environ
    if requested is not None:
        if requested not in WANDB_MODES:
            raise ValueError(f"W&B mode must be one of {', '.join(WANDB_MODES)}, got {requested!r}")
        return requested, "asked for"
    env_mode = environ.get("WANDB_MODE")
    if env_mode:
        if env_mode not in _MODE_ALIASES:
            raise ValueError(f"WANDB_MODE={env_mode!r} cannot log cells; use one of {', '.join(WANDB_MODES)} "
                             f"(or drop --wandb / the sweep file's wandb block to log nothing)")
        return _MODE_ALIASES[env_mode], f"WANDB_MODE={env_mode}"
    source = api_key_source(environ, netrc_path)
    if source:
        return "online", f"API key configured in {source}"
    return "offline", "no API key configured (WANDB_API_KEY or ~/.netrc); `wandb sync` uploads the runs later"


def _cell_value(value: Any) -> Any:
    """A table cell: scalars as they are, anything else (lists, dicts) as JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, default=str)


def rows_table(rows: list[dict]):
    """Tidy rows as a wandb.Table, columns in first-seen order, missing fields as None."""
    import wandb

    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    names = list(columns)
    data = [[_cell_value(r.get(c)) for c in names] for r in rows]
    return wandb.Table(columns=names, data=data, allow_mixed_types=True)


def run_config(cell: Cell, sweep_name: str, code: str | None = None) -> dict[str, Any]:
    """The run's config: the cell's configuration and key, the sweep, the parsed spec fields, and the
    fingerprint of the code that ran it (`qdrift.code_fingerprint`; None where it was not recorded)."""
    from qdrift.spec import QuantSpec

    config = dict(cell.config())
    config["cell_key"] = cell.key
    config["sweep"] = sweep_name
    config["spec_fields"] = None if cell.spec == BASELINE else QuantSpec.parse(cell.spec).to_dict()
    config["qdrift_code"] = code
    return config


class WandbSink:
    """Callable on each finished `CellResult` (pass as `run_sweep(..., on_result=sink)`)."""

    def __init__(self, options: WandbOptions, sweep_name: str, store=None, default_dir: str | Path = ".",
                 announce=print):
        try:
            import wandb  # noqa: F401
        except ImportError as e:
            raise ImportError(f"logging to W&B needs wandb: pip install 'qdrift[wandb]' ({e})") from None
        self.options, self.sweep_name, self.store = options, sweep_name, store
        self.mode, reason = choose_mode(options.mode)
        self.dir = Path(options.dir or default_dir).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        # What the store notes cells this sink missed under (run_sweep logs them on the next run with it).
        entity = options.entity or os.environ.get("WANDB_ENTITY") or "(default entity)"
        self.name = f"wandb:{entity}/{options.project or os.environ.get('WANDB_PROJECT') or '(default project)'}"
        self.seconds = 0.0  # wall time spent logging, over all cells
        self.runs = 0
        announce(f"wandb: {self.mode} mode ({reason}); runs under {self.dir / 'wandb'}")

    def __call__(self, result: CellResult) -> None:
        import wandb

        t0 = time.perf_counter()
        cell = result.cell
        run = wandb.init(
            # One run per cell whatever the tries: a run interrupted while logging is resumed by the next,
            # not left beside it (offline, each try writes its folder under the same id and `wandb sync`
            # uploads them into one run). Under `wandb agent` the agent names the run (WANDB_RUN_ID) instead.
            id=None if os.environ.get("WANDB_RUN_ID") else self.run_id(cell), resume="allow",
            project=self.options.project, entity=self.options.entity, group=self.sweep_name,
            name=cell.label, job_type=cell.task.kind, tags=[t[:64] for t in (cell.model, cell.spec, cell.task.name)],  # W&B caps tags at 64
            config=run_config(cell, self.sweep_name, result.code), dir=str(self.dir), mode=self.mode,
            # No system-metrics sampling, console capture, code or pip-freeze upload: per cell they cost
            # about a second (the pip scan alone ~0.9 s) and say nothing the config (qdrift_version) does not.
            settings=wandb.Settings(console="off", x_disable_stats=True, disable_git=True, save_code=False,
                                    x_save_requirements=False, silent=True),
        )
        try:
            if result.error is None:
                run.log(self._payload(cell, result.rows or {}))
                # error/traceback cleared: a done retry resumes the run of the cell's failed try
                run.summary.update({"status": "done", "error": None, "traceback": None,
                                    "wall_s": result.finished - result.started})
                exit_code = 0
            else:
                run.summary.update({"status": "failed", "error": result.error.splitlines()[0],
                                    "traceback": result.error, "wall_s": result.finished - result.started})
                exit_code = 1
        except BaseException:
            run.finish(exit_code=1)
            raise
        run.finish(exit_code=exit_code)
        self.seconds += time.perf_counter() - t0
        self.runs += 1

    def run_id(self, cell: Cell) -> str:
        """The W&B run id of `cell` under this sink: a hash of the sink's name (entity/project) and the
        cell's key, so every try at logging one cell writes one run (wandb ids: no ':;,#?/' characters)."""
        return hashlib.sha256(f"{self.name}\0{cell.key}".encode()).hexdigest()[:24]

    def _payload(self, cell: Cell, rows: dict[str, list[dict]]) -> dict[str, Any]:
        import matplotlib.pyplot as plt
        import wandb

        from qdrift.sweep import cell_metrics as cm

        if isinstance(cell.task, AgentTask):
            kind, own = "agent", rows.get("episode", [])
            payload: dict[str, Any] = cm.agent_metrics(own, rows.get("step", []))
            payload["episodes_table"] = rows_table(own)
            if rows.get("step"):
                payload["steps_table"] = rows_table(rows["step"])
                fig = cm.step_accuracy_figure(rows["step"], cell.label)
                payload["step_accuracy_plot"] = wandb.Image(fig)
                plt.close(fig)
            payload.update({f"drift/{k}": v for k, v in cm.drift_metrics(rows.get("drift", [])).items()})
        else:
            kind, own = "short_form", rows.get("item", [])
            payload = cm.short_form_metrics(own)
            payload["items_table"] = rows_table(own)
        baseline = self._baseline_rows(cell, "episode" if kind == "agent" else "item")
        if baseline:
            try:
                paired = cm.paired_with_baseline(kind, own, baseline, cell.spec)
            except ValueError as e:  # e.g. items that do not pair: say so in the run, log the rest
                payload["paired/not_computed"] = str(e)
            else:
                payload.update({f"paired/{k}": v for k, v in cm.paired_metrics(paired).items()})
                fig = cm.paired_figure(paired)
                payload["paired_plot"] = wandb.Image(fig)
                plt.close(fig)
        return payload

    def _baseline_rows(self, cell: Cell, kind: str) -> list[dict] | None:
        """The done baseline cell's rows of the same model and task, when there is a store and one."""
        if self.store is None or cell.spec == BASELINE:
            return None
        key = cell.baseline().key
        if self.store.status(key) != "done":
            return None
        return self.store.rows(kind, keys=[key])


def sink_from(options: WandbOptions | None, sweep_name: str, store, default_dir: str | Path) -> WandbSink | None:
    """A sink for `options` (None: no W&B logging)."""
    return None if options is None else WandbSink(options, sweep_name, store, default_dir)
