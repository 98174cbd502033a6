"""Bad command-line input is refused in one line (exit 2, no traceback) before any work starts, and
nothing the user has is overwritten; good input still works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refusal import refused
from scaling.cli import main

EXAMPLE_RESULTS = Path(__file__).resolve().parent.parent / "reports" / "examples" / "demo" / "results.csv"


@pytest.fixture
def no_benchmarks(monkeypatch):
    """scaling.bench's CPU benchmarks replaced: a call records its arguments and returns no rows."""
    from scaling import bench

    calls: list[dict] = []

    def record(**kwargs):
        calls.append(kwargs)
        return []

    monkeypatch.setattr(bench, "bench_cpu", lambda **kw: record(**kw))
    monkeypatch.setattr(bench, "bench_cpu_quantizer", lambda **kw: record(**kw))
    return calls


# --- scaling bench ------------------------------------------------------------------------------

@pytest.mark.parametrize("steps", ["-2", "0"])
def test_bench_refuses_a_step_count_below_one(steps, capsys, no_benchmarks):
    refused(["bench", "cpu", "--steps", steps, "--sizes", "0.5M"], capsys, "--steps must be at least 1", steps)
    assert no_benchmarks == []


def test_bench_cpu_keeps_its_default_steps_and_takes_a_given_count(capsys, no_benchmarks):
    assert main(["bench", "cpu", "--json"]) == 0
    assert main(["bench", "cpu", "--steps", "3", "--json"]) == 0
    assert [c["steps"] for c in no_benchmarks] == [8, 3]


@pytest.mark.parametrize("dims, words", [("abc", ["'abc'", "positive integer"]), ("0", ["'0'", "positive integer"]),
                                         ("128,-4", ["'-4'", "positive integer"]), (",", ["names no width"]),
                                         ("100", ["100", "multiple of 16", "nvfp4"])])
def test_bench_quantizer_refuses_a_width_it_cannot_use(dims, words, capsys, no_benchmarks):
    refused(["bench", "quantizer", f"--dims={dims}"], capsys, "--dims", *words)
    assert no_benchmarks == []


@pytest.mark.parametrize("argv, words", [
    (["cpu", "--sizes", ",,"], ["--sizes ',,' names nothing"]),  # ran nothing, exit 0
    (["cpu", "--families", ","], ["--families ',' names nothing"]),
    (["quantizer", "--recipes", ",,"], ["--recipes ',,' names nothing"]),  # ran the defaults
    (["quantizer", "--recipes", "bf16"], ["these recipes quantize none", "nvfp4"]),  # an empty table, exit 0
])
def test_bench_refuses_a_list_that_names_nothing_to_run(argv, words, capsys, no_benchmarks):
    refused(["bench", *argv], capsys, *words)
    assert no_benchmarks == []


def test_bench_list_items_may_have_spaces_after_the_commas(capsys, no_benchmarks):
    assert main(["bench", "quantizer", "--recipes", "nvfp4, mxfp4", "--json"]) == 0
    assert no_benchmarks[-1]["recipes"] == ("nvfp4", "mxfp4")


def test_bench_runs_a_repeated_item_once(capsys, no_benchmarks):
    """`--dims 128,128 --recipes nvfp4,nvfp4` timed each twice and wrote two rows of the same key."""
    assert main(["bench", "quantizer", "--recipes", "nvfp4,nvfp4", "--dims", "128,128,0128", "--json"]) == 0
    assert no_benchmarks[-1]["recipes"] == ("nvfp4",) and no_benchmarks[-1]["dims"] == (128,)
    assert main(["bench", "cpu", "--families", "nanochat, nanochat", "--sizes", "0.5M,0.5M", "--json"]) == 0
    assert no_benchmarks[-1]["families"] == ("nanochat",) and no_benchmarks[-1]["sizes"] == ("0.5M",)


def test_bench_dims_must_fit_each_recipes_blocks(capsys, no_benchmarks):
    refused(["bench", "quantizer", "--recipes", "nvfp4,quartet2", "--dims", "16"], capsys, "multiple of 128")
    assert main(["bench", "quantizer", "--recipes", "nvfp4,quartet2", "--dims", "128,256", "--json"]) == 0
    assert no_benchmarks[-1]["dims"] == (128, 256)


def test_bench_refuses_an_unknown_recipe_before_benchmarking_any(capsys, no_benchmarks):
    refused(["bench", "cpu", "--recipes", "bf16,nvfp5"], capsys, "--recipes", "unknown recipe 'nvfp5'", "nvfp4")
    assert no_benchmarks == []


def test_bench_refuses_a_gpu_section_before_running_the_cpu_ones(capsys, monkeypatch, no_benchmarks):
    """`bench quantizer kernels` on a machine without a GPU ran the quantizer section (~20 s) and was
    then refused for kernels, its rows lost."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    refused(["bench", "quantizer", "kernels"], capsys, "needs a CUDA GPU", "drop kernels", "quantizer alone")
    assert no_benchmarks == []


@pytest.mark.parametrize("argv, words", [
    (["cpu", "--sizes", "0.5M,160m"], ("--sizes", "unknown model size '160m'", "160M")),
    (["cpu", "--sizes", "1e6"], ("--sizes", "unknown model size '1e6'")),
    (["cpu", "--families", "nanochat,llama"], ("--families", "unknown model family 'llama'", "llama2")),
    (["cpu", "--sizes", "0.5M", "--recipes", "bf16,quartet2"], ("quartet2", "0.5M", "multiple of 128")),
    (["train", "--sizes", "40m"], ("--sizes", "unknown model size '40m'")),
    (["profile", "--families", "llama"], ("--families", "unknown model family 'llama'")),
])
def test_bench_refuses_a_model_it_cannot_run_before_benchmarking_any(argv, words, capsys, no_benchmarks):
    """A mistyped size or family, or a recipe the size's widths do not tile, was refused only when its
    turn came, after the rows before it had run (minutes each) and were lost."""
    refused(["bench", *argv], capsys, *words)
    assert no_benchmarks == []


@pytest.mark.parametrize("section", ["sass"])
def test_bench_refuses_a_recipe_the_fused_kernel_does_not_cover(section, tmp_path, capsys, monkeypatch):
    """A recipe file with a 1x24 block in `bench sass` ended in Triton's CompilationError traceback. The
    refusal names the operand in the words of train's note and bench kernels' skip (`kernels.no_kernel`)."""
    from scaling import bench, kernels
    from scaling.recipes import get_recipe

    monkeypatch.setattr(bench, "bench_sass", lambda **kw: pytest.fail("benchmarked"))
    path = tmp_path / "odd.toml"
    path.write_text('name = "odd"\nbase = "nvfp4"\n[fprop.x]\nblock = [1, 24]\n')
    spec = get_recipe(str(path)).fprop_x
    said = kernels.no_kernel("fprop_x", spec, kernels.unsupported(spec))
    assert "fprop.x (NV e2m1 1x24" in said and "has no fused kernel: the kernels take blocks of 16 or 32 along K" in said
    refused(["bench", section, "--recipes", f"nvfp4,{path}"], capsys, f"{path}.{said} (QLinear quantizes it with "
             "the reference), and sass compiles", "leave")


@pytest.mark.parametrize("section", ["sass"])
def test_bench_kernel_sections_refuse_recipes_that_quantize_nothing(section, capsys, monkeypatch):
    """`bench sass --recipes bf16` printed an empty table and exited 0."""
    from scaling import bench

    monkeypatch.setattr(bench, "bench_sass", lambda **kw: pytest.fail("benchmarked"))
    refused(["bench", section, "--recipes", "bf16"], capsys, "quantize nothing", "nvfp4")


def test_bench_quantizer_refuses_recipes_that_quantize_only_weights(tmp_path, capsys, no_benchmarks):
    """A recipe file quantizing fprop.w alone printed an empty table and exited 0."""
    path = tmp_path / "wonly.toml"
    path.write_text('name = "wonly"\n[fprop.w]\nelem = "e2m1"\nblock = [1, 16]\nscale = "e4m3"\n')
    refused(["bench", "quantizer", "--recipes", str(path)], capsys, "activation operands", "quantize none")
    assert no_benchmarks == []


@pytest.mark.parametrize("argv, flag", [(["cpu", "--batch", "4"], "--batch"), (["quantizer", "--steps", "3"], "--steps"),
                                        (["cpu", "--dims", "128"], "--dims"), (["targets", "--recipes", "nvfp4"], "--recipes"),
                                        (["quantizer", "--sizes", "1M"], "--sizes"), (["cpu", "--top", "3"], "--top"),
                                        (["fit", "--sweeps", "5"], "--sweeps"), (["fit", "--shared"], "--shared"),
                                        (["fit", "--noise-dist", "t3"], "--noise-dist"),
                                        (["cpu", "--compile-mode", "reduce-overhead"], "--compile-mode")])
def test_bench_refuses_an_option_no_section_it_runs_reads(argv, flag, capsys, no_benchmarks):
    """`bench cpu --batch 4` ran the trainer's batch and said nothing of the 4 (and, options with a
    default, `bench fit --sweeps 5` and `bench cpu --compile-mode reduce-overhead`, until they had none)."""
    refused(["bench", *argv], capsys, f"{flag} applies only to the", f"(it runs {argv[0]})", f"leave {flag} out",
            f"scaling bench {argv[0]} ")
    assert no_benchmarks == []
    assert main(["bench", "cpu", "quantizer", "--dims", "128", "--steps", "1", "--json"]) == 0  # one section reads each


def test_bench_refusing_an_unread_option_says_which_sections_read_it_and_the_command_that_would(capsys, no_benchmarks):
    """`bench fit --bootstrap 100` said "--bootstrap is read by calibration, and none of them runs here (fit)": which
    "them", where "here"? It names the section (or sections) that read it and gives the command with it added."""
    err = refused(["bench", "fit", "--bootstrap", "100"], capsys)
    assert err == ("error: --bootstrap applies only to the calibration section, which this call does not run (it runs "
                   "fit); leave --bootstrap out, or add it: scaling bench fit calibration --bootstrap 100\n")
    err = refused(["bench", "cpu", "--batch", "4"], capsys)
    assert "--batch applies only to the train or profile sections, none of which this call runs (it runs cpu)" in err
    assert err.endswith("or add one of them: scaling bench cpu train --batch 4\n")
    assert refused(["bench", "fit", "--shared"], capsys).endswith("scaling bench fit calibration --shared\n")
    assert no_benchmarks == []


@pytest.mark.parametrize("argv, words", [(["--bootstrap", "1"], ("--bootstrap must be at least 2", "or 0 for the kappa = 0 test alone", "got 1")),
                                         (["--bootstrap", "-3"], ("--bootstrap must be at least 2", "got -3")),
                                         (["--shared", "--bootstrap", "0"], ("--bootstrap must be at least 2", "got 0"))])
def test_bench_calibration_refuses_a_bootstrap_too_small_for_an_interval(argv, words, capsys, no_benchmarks):
    """--bootstrap gives the replicates of each sweep's intervals: 1 makes no percentile interval, and 0 (the kappa = 0
    test alone) leaves --shared's check, which is the bootstrap's, nothing to test by."""
    err = refused(["bench", "calibration", *argv], capsys, *words)
    assert ("or 0" in err) == ("--shared" not in argv)
    assert no_benchmarks == []


@pytest.mark.parametrize("value, words", [("cauchy", ("--noise-dist cauchy", "normal, laplace, t3")),
                                          ("t3,gauss", ("--noise-dist t3,gauss", "'gauss'")),
                                          (",", ("--noise-dist ','", "names nothing"))])
def test_bench_calibration_refuses_a_noise_distribution_it_has_no_cases_of(value, words, capsys):
    """--noise-dist names the noise distributions whose calibration cases run; one with no cases (a typo) ran
    nothing and wrote an unchanged file."""
    refused(["bench", "calibration", "--shared", "--noise-dist", value], capsys, *words)


@pytest.mark.parametrize("argv", [["train", "--batch", "0"], ["train", "--accumulate", "-1"],
                                  ["linear", "--top", "-1"], ["calibration", "--sweeps", "0"]])
def test_bench_refuses_other_counts_below_their_least(argv, capsys):
    refused(["bench", *argv], capsys, argv[1], "must be at least")



def test_bench_out_must_be_a_json_file_and_never_replaces_another_kind(tmp_path, capsys, no_benchmarks):
    base = ["bench", "cpu", "--sizes", "0.5M", "--json"]
    refused([*base, "--out", str(tmp_path / "cpu.csv")], capsys, "must end in .json", "cpu.json")
    notes = tmp_path / "notes.json"
    notes.write_text("my notes, not JSON\n")
    refused([*base, "--out", str(notes)], capsys, "exists and is not a JSON file")
    assert notes.read_text() == "my notes, not JSON\n" and not (tmp_path / "cpu.csv").exists()
    assert no_benchmarks == []
    assert main([*base, "--out", str(tmp_path / "cpu.json")]) == 0 and len(no_benchmarks) == 1


@pytest.mark.parametrize("content, section", [('{"kernels": [1, 2]}', "kernels"), ('{"train": [[]]}', "train"),
                                              ('{"notes": [{"a": 1}]}', "notes")])
def test_bench_targets_refuses_rows_that_are_not_rows(tmp_path, capsys, content, section):
    """A section of numbers (not row objects) crashed the targets check (AttributeError), and `bench
    fit --out` merged into such a file and wrote it back."""
    path = tmp_path / "odd.json"
    path.write_text(content)
    refused(["bench", "targets", "--out", str(path)], capsys, f"its {section} must be a list of rows")
    refused(["bench", "fit", "--out", str(path)], capsys, f"its {section} must be a list of rows")
    assert path.read_text() == content


@pytest.mark.parametrize("row, section, said", [
    ('{"name": "quantize", "gbps": 100, "copy_gbps": 200}', "kernels", "its recipe must be a name, and it lacks it"),
    ('{"name": "quantize", "recipe": "nvfp4", "operand": "fprop.x", "gbps": "100"}', "kernels",
     'its gbps must be a number, and it has "100"'),
    ('{"name": "quantize", "recipe": "nvfp4", "operand": "fprop.x", "gbps": 100, "gbps_back_to_back": "x"}',
     "kernels", 'its gbps_back_to_back must be a number, and it has "x"'),
    ('{"recipe": "nvfp4", "d": 2048, "tokens": 16384, "ratio_vs_bf16": 1.2, "ratio_range": 1}', "linear",
     "its ratio_range must be a [low, high] pair of numbers"),
    ('{"recipe": "nvfp4", "family": "nanochat", "size": "160M", "ratio_vs_bf16": "fast"}', "train",
     'its ratio_vs_bf16 must be a number, and it has "fast"')])
def test_bench_targets_refuses_a_row_with_a_field_missing_or_of_another_kind(tmp_path, capsys, row, section, said):
    """A row edited by hand (a field gone, a number written as text) stopped the targets check on a
    KeyError's, TypeError's or ValueError's traceback; `bench fit --out` merged into such a file."""
    path = tmp_path / "edited.json"
    content = f'{{"device": "test GPU", "copy_gbps": 4000.0, "{section}": [{row}]}}'
    path.write_text(content)
    refused(["bench", "targets", "--out", str(path)], capsys, f"{section} row 1: {said}")
    refused(["bench", "fit", "--out", str(path)], capsys, f"{section} row 1: {said}")
    assert path.read_text() == content


@pytest.mark.parametrize("copy", ['"fast"', "true", "[4000]"])
def test_bench_targets_refuses_a_header_copy_rate_of_another_kind(tmp_path, capsys, copy):
    """A kernel row is judged against the header's copy_gbps where it has none of its own: one written as
    text stopped the targets on a ValueError's traceback (and `true` judged the row against 1 GB/s)."""
    path = tmp_path / "edited.json"
    content = (f'{{"device": "test GPU", "copy_gbps": {copy}, "kernels": [{{"name": "quantize", "recipe": "nvfp4", '
               '"operand": "fprop.x", "gbps": 3000}]}')
    path.write_text(content)
    said = f"edited.json's copy_gbps must be a number (or null), and it has {copy}"
    refused(["bench", "targets", "--out", str(path)], capsys, said)
    refused(["bench", "fit", "--out", str(path)], capsys, said)
    assert path.read_text() == content


@pytest.mark.parametrize("header, argv", [('"cpu_machine": "AMD EPYC", "cpu": []', ["quantizer", "--recipes", "nvfp4"]),
                                          ('"sass_versions": "3.6", "sass": []', ["sass", "--recipes", "nvfp4"])])
def test_bench_refuses_a_machine_header_that_is_no_object(tmp_path, capsys, no_benchmarks, header, argv):
    """The header naming the CPU or Triton of a file's rows, edited into text, stopped `bench quantizer`
    and `bench sass --out` on an AttributeError's traceback."""
    path = tmp_path / "edited.json"
    path.write_text(f"{{{header}}}")
    field = header.split('"')[1]
    refused(["bench", *argv, "--out", str(path)], capsys, f"edited.json's {field} must be an object (or null)")
    assert path.read_text() == f"{{{header}}}" and no_benchmarks == []


@pytest.mark.parametrize("row, said", [
    ('{"recipe": "nvfp4", "family": "nanochat", "size": "160M", "ratio_vs_bf16": "fast"}',
     'train row 1: its ratio_vs_bf16 must be a number, and it has "fast"'),
    ('{"recipe": "nvfp4", "family": "nanochat", "size": 160, "ratio_vs_bf16": 0.8}',
     "train row 1: its size must be a name, and it has 160"),
    ('{"recipe": "bf16", "family": "nanochat", "size": "160M", "ratio_vs_bf16": 1.0, "tokens_per_s": "fast"}',
     'train row 1: its tokens_per_s must be a number, and it has "fast"')])  # (BF16's speed: read, not skipped)
def test_sweep_plan_refuses_a_bench_train_row_of_another_kind(tmp_path, capsys, row, said):
    """sweep plan --bench prices runs from the file's train rows: a hand-edited one stopped it on float()'s
    ValueError traceback (read_bench checks the rows' fields, for the targets and the plan alike)."""
    path = tmp_path / "edited.json"
    path.write_text(f'{{"device": "test GPU", "train": [{row}]}}')
    spec = Path(__file__).parent.parent / "sweeps" / "demo.toml"
    refused(["sweep", "plan", str(spec), "--bench", str(path), "--device", "gpu"], capsys, said)


def test_bench_targets_of_a_file_without_gpu_rows_prints_no_none(tmp_path, capsys):
    """A CPU-only benchmark file's targets were titled "targets (None, cpu.json, copy None GB/s)"."""
    path = tmp_path / "cpu.json"
    path.write_text('{"quantizer": []}')
    assert main(["bench", "targets", "--out", str(path)]) == 0
    out = capsys.readouterr().out
    assert "None" not in out and "no GPU rows" in out and "no target is measured in this file" in out


def test_bench_refuses_a_json_with_none_of_a_benchmarks_keys(tmp_path, capsys):
    """{"foo": 1} passed as a benchmark file ("0 of 4 met; not measured"), and `bench fit` merged into it."""
    path = tmp_path / "other.json"
    path.write_text('{"foo": 1}')
    for verb in ("targets", "fit"):
        refused(["bench", verb, "--out", str(path)], capsys, "has none of its keys", "but foo")
    assert path.read_text() == '{"foo": 1}'


# --- scaling demo -------------------------------------------------------------------------------

def test_demo_refuses_a_negative_bootstrap_before_training(tmp_path, capsys, monkeypatch):
    import sweeps.launch

    monkeypatch.setattr(sweeps.launch, "launch", lambda *a, **k: pytest.fail("the demo trained"))
    out = tmp_path / "demo"
    refused(["demo", "--bootstrap", "-1", "--out", str(out)], capsys, "--bootstrap", "-1")
    assert not out.exists()


# --- scaling fit --------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [(["--workers", "0"], ["--workers: must be 1 or more"]),
                                         (["--workers", "-3"], ["--workers: must be 1 or more"]),
                                         (["--seed", "-1"], ["--seed: must be 0 or more"]),
                                         (["--bootstrap", "x"], ["--bootstrap: not a whole number: 'x'"]),
                                         (["--drop-highest", "-1"], ["--drop-highest: must be 0 or more"])])
def test_fit_refuses_bad_counts(argv, words, capsys):
    refused(["fit", str(EXAMPLE_RESULTS), "--bootstrap", "0", *argv], capsys, *words)


def test_fit_on_a_folder_points_at_the_sweeps_results_table(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    refused(["fit", str(runs)], capsys, f"{runs} is a folder", str(runs / "results.parquet"), "scaling sweep collect",
             "scaling report")


@pytest.mark.parametrize("name, content, words", [
    ("results.txt", EXAMPLE_RESULTS.read_text(), ["results.txt is not named as a results table", "rename it .csv"]),
    ("recipe.toml", 'name = "mine"\nbase = "nvfp4"\n', ["recipe.toml is not named as a results table"]),
    ("sweep.json", '{"name": "mine"}\n', ["sweep.json holds JSON, not a table"]),
], ids=["txt", "toml", "json"])
def test_fit_and_report_read_the_same_files_and_refuse_the_others_alike(tmp_path, capsys, name, content, words):
    """`scaling fit` read any file not named .parquet as CSV (a recipe's TOML refused as lacking columns named by its
    first line, a .txt table fitted) where `scaling report` refused what is not named .csv or .parquet: both read
    tables through one function (`fits.table.read_file`), and say the same line."""
    path = tmp_path / name
    path.write_text(content)
    said = refused(["fit", str(path), "--bootstrap", "0"], capsys, *words)
    assert refused(["report", str(path), "--out", str(tmp_path / "r")], capsys) == said
    assert not (tmp_path / "r").exists()


def test_fit_out_must_be_a_json_file_and_never_replaces_another_kind(tmp_path, capsys):
    spec = tmp_path / "tiny.toml"
    spec.write_text('name = "tiny"\n')
    base = ["fit", str(EXAMPLE_RESULTS), "--bootstrap", "0", "--starts", "1", "--json"]
    refused([*base, "--out", str(spec)], capsys, "must end in .json", "tiny.json")
    not_json = tmp_path / "notes.json"
    not_json.write_text("my notes, not JSON\n")
    refused([*base, "--out", str(not_json)], capsys, "exists and is not a JSON file")
    assert spec.read_text() == 'name = "tiny"\n' and not_json.read_text() == "my notes, not JSON\n"
    plan = tmp_path / "sweep.json"  # JSON, but no fit's: a sweep's plan, diagnostics, a run's result.json were replaced
    plan.write_text('{"name": "ladder", "runs": []}')
    refused([*base, "--out", str(plan)], capsys, "holds another JSON than a fit's", "is not overwritten")
    assert plan.read_text() == '{"name": "ladder", "runs": []}'
    earlier = tmp_path / "fits.json"  # an earlier fit's output: replaced, as always
    earlier.write_text('{"law": "chinchilla", "groups": {}, "penalty": {}}')
    assert main([*base, "--out", str(earlier)]) == 0
    assert "groups" in json.loads(earlier.read_text())


def test_fit_and_report_out_after_an_equals_sign_expand_its_tilde(tmp_path, monkeypatch, capsys):
    """`--out=~/fits.json` (no shell expands a ~ after '='): check_output checked the home folder's path,
    and the file was written under a folder named '~' in the working folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path)
    base = [str(EXAMPLE_RESULTS), "--bootstrap", "0", "--json"]
    assert main(["fit", *base, "--starts", "1", "--out=~/fits.json"]) == 0
    assert (tmp_path / "home" / "fits.json").is_file()
    import reports

    built = []  # (the report's own build takes ~13 s: what matters here is the folder it is given)
    monkeypatch.setattr(reports, "build", lambda source, out, **kw: built.append(Path(out)) or {})
    assert main(["report", *base, "--out=~/report"]) == 0
    capsys.readouterr()
    assert built == [tmp_path / "home" / "report"] and not (tmp_path / "~").exists()


# --- scaling sweep collect ----------------------------------------------------------------------

@pytest.fixture
def collected(tmp_path):
    """A real sweep folder of one finished run (its result record), for `sweep collect` to read."""
    run = tmp_path / "run0"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({
        "run_id": "run0", "family": "nanochat", "size": "0.5M", "n_params": 500_000, "tokens": 4096, "recipe": "bf16",
        "seed": 0, "status": "completed", "val_loss": 3.0}))


def test_collect_out_must_be_a_parquet_file_and_never_replaces_another_kind(tmp_path, capsys, collected):
    refused(["sweep", "collect", str(tmp_path), "--out", str(tmp_path / "out.csv")], capsys,
             "must end in .parquet", "out.parquet")
    assert not (tmp_path / "out.csv").exists()
    spec = tmp_path / "tiny.toml"
    spec.write_text('name = "tiny"\n')
    refused(["sweep", "collect", str(tmp_path), "--out", str(spec)], capsys, "must end in .parquet")
    assert spec.read_text() == 'name = "tiny"\n'
    fake = tmp_path / "fake.parquet"
    fake.write_text("not parquet\n")
    refused(["sweep", "collect", str(tmp_path), "--out", str(fake)], capsys, "exists and is not a Parquet table")
    assert fake.read_text() == "not parquet\n"


def test_collect_replaces_its_own_parquet_output(tmp_path, capsys, collected):
    import polars as pl

    out = tmp_path / "results.parquet"
    pl.DataFrame({"old": [1]}).write_parquet(out)
    assert main(["sweep", "collect", str(tmp_path), "--out", str(out), "--json"]) == 0
    table = pl.read_parquet(out)
    assert table["run_id"].to_list() == ["run0"] and table["val_loss"].to_list() == [3.0]


# --- scaling report -----------------------------------------------------------------------------

@pytest.mark.parametrize("out", ["--out=", "--ou="])
def test_report_refuses_an_empty_out_before_writing_into_the_working_folder(tmp_path, monkeypatch, capsys, out):
    """`--out ""` was the working folder: the report's files replaced any of the same names there
    (a report.md, results.csv or fits.json of the user's), and its figures/*.png were deleted."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "report.md").write_text("my notes\n")
    with pytest.raises(SystemExit) as e:
        main(["report", str(EXAMPLE_RESULTS), "--bootstrap", "0", out])
    assert e.value.code == 2 and "argument --out: empty value" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]
    assert (tmp_path / "report.md").read_text() == "my notes\n"


def test_report_refuses_to_replace_the_table_it_reads(tmp_path, capsys):
    """A table named results.csv in --out was replaced by the report's own results.csv (the fits' column
    names, one row per run): the user's column names and earlier checkpoints were gone."""
    table = tmp_path / "results.csv"
    table.write_bytes(EXAMPLE_RESULTS.read_bytes())
    refused(["report", str(table), "--out", str(tmp_path), "--bootstrap", "0"], capsys,
             "is the results.csv this report writes in --out", "pass another --out")
    assert table.read_bytes() == EXAMPLE_RESULTS.read_bytes() and sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


def test_report_refuses_a_diagnostics_file_with_no_table(tmp_path, capsys):
    fits_json = tmp_path / "fits.json"
    fits_json.write_text(json.dumps({"law": "chinchilla", "groups": {}, "penalty": {}}))
    out = tmp_path / "report"
    refused(["report", str(EXAMPLE_RESULTS), "--out", str(out), "--diagnostics", str(fits_json)], capsys,
             "--diagnostics", "holds no table", "scaling diagnose --json")
    (tmp_path / "numbers.json").write_text(json.dumps({"gemm": [1], "quant": [2]}))  # lists, but not of records
    refused(["report", str(EXAMPLE_RESULTS), "--out", str(out), "--diagnostics", str(tmp_path / "numbers.json")],
             capsys, "holds no table")
    record = tmp_path / "result.json"  # a run's record: its `processes` list of records was shown as diagnostics
    record.write_text(json.dumps({"run_id": "0123456789ab", "recipe": "nvfp4", "status": "completed", "val_loss": 3.9,
                                  "processes": [{"host": "node1", "device": "cpu"}]}))
    refused(["report", str(EXAMPLE_RESULTS), "--out", str(out), "--diagnostics", str(record)], capsys,
             "is a run's result record (result.json), not diagnostics", "scaling diagnose --json")
    (tmp_path / "utf16.json").write_bytes('{"gemm": []}'.encode("utf-16"))  # a Windows editor's save: a traceback
    refused(["report", str(EXAMPLE_RESULTS), "--out", str(out), "--diagnostics", str(tmp_path / "utf16.json")],
             capsys, "utf16.json is not JSON (not UTF-8 text)")
    refused(["report", str(EXAMPLE_RESULTS), "--out", str(out), "--seed", "-1"], capsys, "--seed: must be 0 or more",
             "scaling report --help")
    assert not out.exists()


# --- scaling data prepare --seed ------------------------------------------------------------------

@pytest.mark.parametrize("seed, words", [(str(2**63), ["--seed", "9223372036854775807 or less"]),
                                         (str(-2**63 - 1), ["--seed", "-9223372036854775808 or more"])])
def test_data_prepare_refuses_a_seed_the_split_hash_cannot_take(tmp_path, capsys, seed, words):
    """The split hash keys on the seed's 8 signed bytes: a larger seed was an OverflowError's traceback."""
    (tmp_path / "a.txt").write_text("a document")
    refused(["data", "prepare", str(tmp_path / "a.txt"), "--out", str(tmp_path / "out"), "--seed", seed], capsys, *words)
    assert not (tmp_path / "out").exists()


# --- scaling train --tokens ---------------------------------------------------------------------

def test_train_refuses_a_fraction_of_a_token(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "bf16", "--tokens", "1.5"])
    assert e.value.code == 2 and "'1.5' is not a whole number of tokens" in capsys.readouterr().err


def test_train_refuses_an_out_folder_that_holds_other_things_than_a_run(tmp_path, capsys):
    """--out runs/demo (a sweep's folder) or --out . trained the run right there, its config.json,
    checkpoints/ and lightning/ among the folder's own files (a sweep's top beside its sweep.json)."""
    sweep = tmp_path / "demo"
    (sweep / "3fa0c1e2d4b5").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    argv = ["train", "--family", "nanochat", "--size", "0.5M", "--recipe", "bf16", "--tokens", "2k", "--seq-len", "64",
            "--batch-size", "4", "--no-progress", "--out", str(sweep)]
    refused(argv, capsys, f"--out {sweep} holds no run but other files (3fa0c1e2d4b5/, sweep.json)",
             "pass a new or empty folder")
    assert sorted(p.name for p in sweep.iterdir()) == ["3fa0c1e2d4b5", "sweep.json"]  # (no lock left either)
    # the folder it suggests is one that takes the run: not one that is there already
    (sweep / "run").mkdir()
    (sweep / "run" / "notes.txt").write_text("")
    refused(argv, capsys, f"such as {sweep / 'run-2'}")
    # a launcher's run folder before its run starts (job.json, train.log, a lock) is a run's own
    from scaling.commands.train import check_not_foreign

    run = tmp_path / "run"
    run.mkdir()
    for name in ("job.json", "train.log", "lock", "result.failed-1.json", ".config.json.tmp"):
        (run / name).write_text("")
    check_not_foreign(run)


def test_a_spec_or_run_config_that_is_not_utf8_is_one_line(tmp_path, capsys):
    """A binary or UTF-16 file given as a sweep spec or --config ended in a UnicodeDecodeError traceback."""
    binary = tmp_path / "spec.toml"
    binary.write_bytes("name = 't'\n".encode("utf-16"))
    for verb in ("plan", "launch"):
        refused(["sweep", verb, str(binary)], capsys, f"{binary}: not UTF-8 text (byte 0xff at offset 0)",
                 "save the sweep spec as UTF-8 TOML")
    config = tmp_path / "config.json"
    config.write_bytes(b"\x80{}")
    refused(["train", "--config", str(config), "--out", str(tmp_path / "run")], capsys,
             f"cannot read run config {config} (not UTF-8 text: byte 0x80 at offset 0)")
    assert not (tmp_path / "run").exists()


def test_sweep_status_and_collect_on_a_run_folder_name_the_sweep_above_it(tmp_path, capsys):
    """They said 'not a sweep directory (no sweep.json and no run folders in it)' of a run's folder."""
    run = tmp_path / "demo" / "75186a71161e"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    for verb in ("status", "collect"):
        refused(["sweep", verb, str(run)], capsys, f"{run} is one run's folder, not a sweep's",
                 f"give the sweep folder that holds it ({tmp_path / 'demo'})")


def test_a_run_folder_named_by_train_out_is_named_as_such_not_as_a_damaged_record(tmp_path, capsys):
    """docs/training.md trains into `--out runs/try/nvfp4-1m`; `sweep status`/`collect` and `report` of runs/try
    then called its sound result.json "not a result record (run_id ... is another run's)" and its checkpoint another
    run's, and advised removing them and relaunching. The folder is the run's own, under a name of its own: collect
    and report refuse it so (status shows it as a row, tests/test_sweeps.py)."""
    from scaling.config import RunConfig

    config = RunConfig(family="nanochat", size="0.5M", recipe="bf16", tokens=4096).resolved()
    run = tmp_path / "try" / "nvfp4-1m"
    run.mkdir(parents=True)
    (run / "config.json").write_text(config.to_json())
    (run / "result.json").write_text(json.dumps({"run_id": config.run_id, "status": "completed", "recipe": "bf16",
                                                 "val_loss": 6.5}))
    renamed = tmp_path / "try" / config.run_id
    for argv in (["sweep", "collect", str(tmp_path / "try")], ["report", str(tmp_path / "try"), "--out",
                                                                  str(tmp_path / "report")]):
        err = refused(argv, capsys, f"{run} holds run {config.run_id} under a name of its own",
                       f"mv {run} {renamed}")
        assert "not a result record" not in err and "another run's" not in err, err
    assert sorted(p.name for p in (tmp_path / "try").iterdir()) == ["nvfp4-1m"]  # nothing written
    run.rename(renamed)  # as the message says: then it is read as the folder's run
    assert main(["sweep", "collect", str(tmp_path / "try")]) == 0
    (other := tmp_path / "try" / "copied").mkdir()  # a record copied into another run's folder is still damaged
    (other / "result.json").write_text((renamed / "result.json").read_text())
    refused(["sweep", "collect", str(tmp_path / "try")], capsys, "is not a result record",
             f"run_id {config.run_id!r} is another run's")


def test_train_config_given_a_run_folder_names_its_config_json(tmp_path, capsys):
    """--config RUN_DIR said "cannot read run config ... ([Errno 21] Is a directory: ...)"."""
    run = tmp_path / "run"
    run.mkdir()
    refused(["train", "--config", str(run)], capsys, f"run config {run} is a folder; give a run's config.json "
             "(a run folder holds one)")
    (run / "config.json").write_text("{}")
    refused(["train", "--config", str(run)], capsys, f"give a run's config.json: {run / 'config.json'}")


def test_token_counts_with_a_suffix_are_exact():
    from scaling.commands.train import _count

    assert [_count(t) for t in ("1.5M", "1.1M", "500k", "2000000", "1e6", "1.0")] == [
        1_500_000, 1_100_000, 500_000, 2_000_000, 1_000_000, 1]


# --- reports: numbers in sentences --------------------------------------------------------------

def test_short_numbers_have_no_trailing_dot():
    from reports.build import _short

    assert [_short(x) for x in (784.0, 784, 100.0, 0.5, 1.0, 123456.0)] == ["784", "784", "100", "0.500", "1.00",
                                                                            "1.23e+05"]
    assert [_short(x) for x in (None, float("nan"), float("inf"), -float("inf"))] == ["—", "—", "∞", "−∞"]
    assert [_short(x) for x in (0.0, -0.0, 0)] == ["0", "0", "0"]  # (an underflowed interval end; the tables' 0)


def test_train_config_that_does_not_exist_says_so(tmp_path, capsys):
    """--config of a mistyped path said "cannot read run config ... ([Errno 2] ...)" and advised restoring a run
    directory's config.json: there is nothing to restore, only a path to fix."""
    missing = tmp_path / "cfg.json"
    err = refused(["train", "--config", str(missing)], capsys, f"run config {missing} does not exist",
                  "RUN_DIR/config.json", "`scaling train`'s options")
    assert "restore" not in err and "Errno" not in err, err


def test_bench_calibration_shared_refuses_the_paired_noise_only_the_kappa_calibration_draws(capsys):
    """The twin-noise case ("paired") is the kappa = 0 calibration's alone: --shared with it ran no case."""
    refused(["bench", "calibration", "--shared", "--noise-dist", "paired"], capsys, "--noise-dist paired",
            "of --shared", "use normal, laplace, t3")
