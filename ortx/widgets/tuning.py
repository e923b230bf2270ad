"""The tuning dashboard: `ortx tune` started and stopped from a notebook, watched live, its records applied.

A thin view over ortx.tune.tune_model: Start runs it in a background thread (the notebook stays responsive) with the
budget, trial limit and threads from the controls; every search round updates the best-so-far plot (best ms against trials, per
task) and the task table; Stop ends the search before the next round (tune_model still validates what was found);
Apply builds an ortx.InferenceSession that reads the new records (tuning "cached") and one with tuning "off", and
shows both medians side by side.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import threading
import time

import ipywidgets as widgets

from ortx.widgets._figures import figure_png


@dataclasses.dataclass
class TaskProgress:
    signature: str
    trials: list[int] = dataclasses.field(default_factory=list)  # after each round the task was in
    best_ms: list[float] = dataclasses.field(default_factory=list)
    best_schedule: dict | None = None  # the fastest ok record's schedule (read from the tuning database)


class TuningDashboard(widgets.VBox):
    """`TuningDashboard("model.onnx", cache_dir=...)`; display it, press Start (or call `.start()` from code)."""

    def __init__(self, model, *, input_shapes: dict | None = None, budget: str = "60s", trials: int = 0,
                 threads: int = 2, cache_dir: str | None = None, mode: str = "quick"):
        from ortx.config import Options
        from ortx.model_io import load
        from ortx.optimize import random_feeds

        self.model = load(model)
        feeds = random_feeds(self.model, dict(input_shapes or {}))  # every dim must be known: names the input
        self.feeds = feeds
        self.input_shapes = {name: tuple(array.shape) for name, array in feeds.items()}
        self.options = Options.from_environment(cache_dir=cache_dir)
        self.mode = mode
        self.tasks: dict[str, TaskProgress] = {}
        self.result = None  # the ModelTuning when a run finished
        self.error: BaseException | None = None
        self.session = None  # built by apply()
        self.apply_ms: tuple[float, float] | None = None  # (tuning off, tuning cached) medians
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

        self.budget = widgets.Text(value=budget, description="budget", layout=widgets.Layout(width="160px"))
        self.trials = widgets.BoundedIntText(value=trials, min=0, max=1_000_000, description="trials",
                                             tooltip="stop after this many new measurements (0: no limit)",
                                             layout=widgets.Layout(width="160px"))
        self.threads = widgets.BoundedIntText(value=threads, min=1, max=256, description="threads",
                                              layout=widgets.Layout(width="160px"))
        self.start_button = widgets.Button(description="Start", button_style="success", icon="play")
        self.stop_button = widgets.Button(description="Stop", button_style="warning", icon="stop", disabled=True)
        self.apply_button = widgets.Button(description="Apply", button_style="info", icon="check", disabled=True)
        self.status = widgets.HTML("idle")
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, description="budget")
        self.plot = widgets.Image(format="png")
        self.table = widgets.HTML()
        self.start_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.stop())
        self.apply_button.on_click(lambda _: self.apply())
        controls = widgets.HBox([self.budget, self.trials, self.threads, self.start_button, self.stop_button, self.apply_button])
        super().__init__([controls, self.status, self.progress, self.plot, self.table])

    # Actions ------------------------------------------------------------------------------------------------------
    def start(self) -> None:
        from ortx.tune.command import budget_duration

        if self._thread is not None and self._thread.is_alive():
            self.status.value = "already running"
            return
        try:
            budget_seconds = budget_duration(self.budget.value)
        except Exception as error:  # argparse's type error: show it where the value was typed
            self.status.value = f"<b>budget:</b> {error}"
            return
        self._stop.clear()
        self.tasks.clear()
        self.result = self.error = None
        self.start_button.disabled, self.stop_button.disabled, self.apply_button.disabled = True, False, True
        self.status.value = "starting"
        self._thread = threading.Thread(target=self._run, args=(budget_seconds, self.trials.value or None,
                                                                self.threads.value),
                                        daemon=True, name="ortx-tuning-dashboard")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.status.value = "stopping after this round"

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until the tuning thread ends (for scripts and tests)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def apply(self, runs: int = 20):
        """A session that reads the records (tuning "cached"), timed against one that ignores them."""
        import onnxruntime

        import ortx

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads.value
        sessions = {}
        for tuning in ("off", "cached"):
            provider_options = {"tuning": tuning, "jit_cache_dir": str(self.options.cache_dir)}
            sessions[tuning] = ortx.InferenceSession(self.model.SerializeToString(), options,
                                                     providers=["OrtxEP", "CPUExecutionProvider"],
                                                     provider_options=[provider_options, {}])
        medians = {}
        for tuning, session in sessions.items():
            session.run(None, self.feeds)
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                session.run(None, self.feeds)
                times.append(time.perf_counter() - start)
            medians[tuning] = 1e3 * statistics.median(times)
        self.session = sessions["cached"]
        self.apply_ms = (medians["off"], medians["cached"])
        self.status.value = (f"applied: untuned {medians['off']:.3f} ms, with the records {medians['cached']:.3f} ms "
                             f"(ratio {medians['cached'] / medians['off']:.2f}, median of {runs})")
        return self.session

    # The background thread ----------------------------------------------------------------------------------------
    def _run(self, budget_seconds: float | None, trials: int | None, threads: int) -> None:
        from ortx.tune.tune_model import tune_model

        started = time.perf_counter()
        try:
            self.result = tune_model(self.model, self.input_shapes, num_threads=threads, mode=self.mode,
                                     database_path=str(self.options.cache_dir / "tuning.sqlite"), jit=self.options,
                                     budget_seconds=budget_seconds, trials=trials, started=started,
                                     on_round=lambda report: self._on_round(report, budget_seconds, started),
                                     on_phase=self._on_phase, should_stop=self._stop.is_set)
            schedule = self.result.schedule
            self.status.value = (f"done in {time.perf_counter() - started:.1f} s: {len(schedule.rounds)} rounds, "
                                 f"stopped: {schedule.stopped}; untuned {self.result.untuned_ms:.3f} ms, estimated "
                                 f"{schedule.estimated_ms:.3f} ms. Apply builds a session with the records.")
            self.apply_button.disabled = False
        except Exception as error:  # shown in the dashboard; the thread must not die silently
            self.error = error
            self.status.value = f"<b>tuning failed:</b> {type(error).__name__}: {error}"
        finally:
            self.progress.value = 1.0
            self.start_button.disabled, self.stop_button.disabled = False, True

    def _on_phase(self, line: str) -> None:
        self.status.value = line

    def _on_round(self, report, budget_seconds: float | None, started: float) -> None:
        with self._lock:
            for signature, trials, best in zip(report.signatures, report.task_trials, report.task_best_ms):
                task = self.tasks.setdefault(signature, TaskProgress(signature))
                task.trials.append(trials)
                task.best_ms.append(best)
            self._read_best_schedules(report.signatures)
        elapsed = time.perf_counter() - started
        if budget_seconds:
            self.progress.value = min(1.0, elapsed / budget_seconds)
        self.status.value = (f"round {report.index + 1}: {report.measured} trials, estimated end to end "
                             f"{report.estimated_ms:.3f} ms ({elapsed:.1f} s)")
        self.plot.value = self.render_plot()
        self.table.value = self.render_table()

    def _read_best_schedules(self, signatures) -> None:
        """Each task's best schedule so far, from the records the search just wrote (a connection of our own)."""
        from ortx.tune.fingerprint import current
        from ortx.tune.records import TuningDatabase

        with TuningDatabase(self.options.cache_dir / "tuning.sqlite") as database:
            fingerprint = current(self.options).key
            for signature in signatures:
                best = database.best(signature, fingerprint)
                if best is not None:
                    self.tasks[signature].best_schedule = best.schedule

    # Views ---------------------------------------------------------------------------------------------------------
    def render_plot(self) -> bytes:
        def draw(axes):
            for task in self.tasks.values():
                points = [(t, b) for t, b in zip(task.trials, task.best_ms) if math.isfinite(b)]
                if points:
                    axes.step(*zip(*points), where="post", label=task.signature[:40])
            axes.set_xlabel("trials")
            axes.set_ylabel("best ms so far")
            axes.set_title("best-so-far per task")
            if self.tasks:
                axes.legend(fontsize=6, loc="upper right")

        return figure_png(draw, size=(6.0, 3.2))

    def render_table(self) -> str:
        import html
        import json

        rows = "".join(f"<tr><td><code>{html.escape(task.signature[:60])}</code></td><td>{task.trials[-1]}</td>"
                       f"<td>{task.best_ms[-1]:.4f}</td><td><code>"
                       f"{html.escape(json.dumps(task.best_schedule, sort_keys=True)[:80]) if task.best_schedule else '-'}"
                       "</code></td></tr>" for task in self.tasks.values())
        return ("<table><tr><th>task</th><th>trials</th><th>best ms</th><th>best schedule</th></tr>" + rows
                + "</table>")
