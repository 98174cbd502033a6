"""The training bar (scaling/progress.py's StepBar) as it draws on a terminal of a given width."""

import io

from rich.console import Console
from rich.progress import Progress

from scaling.progress import StepBar

METRICS = {"train_loss": 5.2881, "val_loss": 5.3362, "val_bpb": 1.8351}


def _drawn(width: int, metrics: dict = METRICS, rate: float = 244.0, step: int = 89, total: int = 146,
           seconds_a_step: float = 9.36) -> list[str]:
    """The bar's line at `step` of `total` on a terminal `width` columns wide, each step `seconds_a_step` long."""
    bar = StepBar(2048, rate=lambda: rate)
    bar.metrics = metrics
    now = [0.0]
    console = Console(file=io.StringIO(), width=width)
    progress = Progress(*bar.configure_columns(None), console=console, get_time=lambda: now[0], auto_refresh=False)
    task = progress.add_task("", total=total)
    for done in range(1, step + 1):
        now[0] += seconds_a_step
        progress.update(task, completed=done)
    console.print(progress.get_renderable())
    return console.file.getvalue().splitlines()


def test_the_bar_shows_all_of_its_line_where_it_fits():
    """(Drawn without colour: the bar's part to come is blank.)"""
    assert _drawn(200) == ["step 89/146 " + "━" * 24 + " " * 16 + " 182.3k/299.0k tokens 0:13:53 • 0:08:54 244 tokens/s "
                           "train_loss: 5.288 val_loss: 5.336 val_bpb: 1.835"]


def test_a_narrow_terminal_gets_one_shorter_line_with_the_step_bar_time_left_rate_and_train_loss():
    """On 80 columns the 153-column line wrapped over seven rows, its metrics a word a row: the parts a user needs
    least go first (the tokens, which the step says already; the time elapsed; the evaluations), for a bar of 10
    columns at least, then the rate and the loss are shortened; under that the line is cut at the edge."""
    assert _drawn(100) == ["step 89/146 ━━━━━━━╸      0:08:54 left 244 tokens/s train_loss: 5.288 val_loss: 5.336 "
                           "val_bpb: 1.835"]
    assert _drawn(80) == ["step 89/146 ━━━━━━━━━━━━━━╸          0:08:54 left 244 tokens/s train_loss: 5.288"]
    assert _drawn(61) == ["step 89/146 ━━━━━━━━╸      0:08:54 left 244 tok/s loss: 5.288"]
    assert _drawn(40) == ["step 89/146 ━━━━━━     0:08:54 left 244…"]
    assert _drawn(80, rate=1234567.0, step=12345, total=100000, seconds_a_step=0.01) == [
        "step 12345/100000 ━            0:14:37 left 1,234,567 tokens/s train_loss: 5.288"]
    for width in range(57, 160):
        [line] = _drawn(width)
        assert len(line) <= width and "step 89/146 ━" in line and "0:08:54" in line, (width, line)
        assert "244 tok" in line and "loss: 5.288" in line, (width, line)


def test_a_bar_before_its_first_timed_step_and_evaluation_shows_what_it_knows():
    """(No rate, no metrics: the tokens and the time elapsed fit 80 columns, beside a bar of 35.)"""
    assert _drawn(80, metrics={}, rate=float("nan"), step=0) == [
        "step 0/146 " + " " * 35 + " 0/299.0k tokens 0:00:00 • -:--:--"]


def test_the_bar_overrides_none_of_lightnings_private_methods():
    """The bar overrode Lightning's private `_add_task` to start a resumed run at its step: a Lightning release may
    rename it or change its arguments with no notice, and the bar would draw 'step 0/146' again, or fail, with no test
    of Lightning's to say so. It overrides no private method (its on_train_start still removes the metrics column
    Lightning appends and sets train_progress_bar_id: test_train.py's resumed-run test draws those)."""
    from lightning.pytorch.callbacks import RichProgressBar

    private = [name for name in vars(StepBar) if name.startswith("_") and not name.startswith("__")]
    assert [name for name in private if hasattr(RichProgressBar, name)] == []


def test_a_progress_line_says_100_percent_only_of_a_run_that_trained_all_of_its_steps():
    """A line's share was rounded: a run stopped at step 99,999 of 100,000 read '(100%) ...; stopped', one at 7 of 40
    '(18%)' of its 17.5%. It is rounded down. (The line is 100 to 111 columns for runs of 10^3 to 10^5 steps.)"""
    from scaling.progress import progress_line

    metrics = {"train_loss": 5.231, "val_loss": 5.402, "val_bpb": 1.859}
    assert progress_line(99_999, 100_000, 0, 0.0, 3600.0, metrics, 1234567.0, "stopped") == (
        "step 99999 of 100000 (99%): train_loss 5.2310, val_loss 5.4020, val_bpb 1.8590; 1,234,567 tokens/s; stopped")
    assert progress_line(7, 40, 0, 0.0, 0.0, {}).startswith("step 7 of 40 (17%)")
    assert progress_line(40, 40, 0, 0.0, 0.0, {}).startswith("step 40 of 40 (100%)")
