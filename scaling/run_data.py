"""Which corpus a run trains on: resolving --data, what a run records of it, the checks on resume and on a moved corpus.

`resolve_data_dir` turns a run's --data into its prepared folder; `data_identity` is what a run records of
that corpus (its data.json, and its checkpoints); `check_run_data` refuses a resume on another corpus;
`moved_corpus` and `moved_corpus_link` tell a corpus moved to another path (which names another run) from
another corpus, and say how to go on with the run.

Torch-free (tests/test_torch_free.py): `scaling sweep launch` words its refusal of a moved corpus with these
without importing torch. scaling.data is imported inside the functions that read a corpus (polars reads corpora there).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from pathlib import Path

from scaling.config import RunConfig
from scaling.errors import UserError
from scaling.files import checkpoint_run, write_json_atomic


def resolve_data_dir(config: RunConfig) -> Path:
    """The prepared data folder a run trains on: --data's folder, or the built-in corpus (prepared here once);
    a UserError where the folder is missing, unprepared or damaged."""
    from scaling import data

    if config.data == "builtin":
        return data.builtin_data_dir(config.vocab_size)
    path = Path(config.data).expanduser()
    if not path.exists():  # (a typo of builtin, a path on another machine): not "prepare it there"
        raise UserError(f"data {config.data} does not exist; give builtin (the built-in corpus) or a folder "
                        f"that `scaling data prepare SOURCES --out DIR` made{_on_this_node()}")
    data.read_meta(path)  # UserError when unprepared or damaged
    return path


def _on_this_node() -> str:
    """Where a SLURM job meets missing data, which node (a sweep's launch found the data on the login node: a
    folder only it sees, such as its /tmp, is missing on the compute nodes); "" outside SLURM."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return ""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    return (f"; SLURM job {job} looked for it on node {node}: keep the data on a "
            "filesystem that every compute node mounts at the same path")


# What identifies a prepared corpus to a run: a data folder prepared again (other sources, another
# vocabulary) under a run that has started would otherwise be trained on silently, mixing two corpora
# in one result, or fail deep in the checkpoint's restore (an embedding of another size).
DATA_IDENTITY = ("vocab_size", "dtype", "eot_id", "train_tokens", "val_tokens", "train_docs", "val_docs",
                 "sources", "val_sources", "text_column", "val_fraction", "seed")


def data_identity(meta: dict) -> dict:
    """What a run records of its corpus (data.json, and its checkpoints): meta.json's DATA_IDENTITY fields."""
    return {k: meta.get(k) for k in DATA_IDENTITY}


def check_run_data(run_dir: Path, meta: dict, data: str, ckpt: Path | None = None) -> None:
    """Record the corpus a run trains on (run_dir/data.json) when it starts; when it resumes, refuse a corpus
    other than the one data.json records or the one its checkpoint `ckpt` records (checkpoints name their
    corpus: `checkpoint_run`'s "data"). A data.json lost after a checkpoint is written again only once the
    data match the checkpoint's record; where the checkpoint has none (older code), the resume is refused: the
    corpus the first steps trained on can no longer be known (writing the current data's record would vouch for it)."""
    identity = data_identity(meta)
    path = run_dir / "data.json"
    try:
        records = [json.loads(path.read_text())]
    except FileNotFoundError:
        records = []
    except (UnicodeDecodeError, json.JSONDecodeError):
        records = [None]
    if records and not isinstance(records[0], dict):  # not JSON, or JSON but no record (`5`, `[]`)
        raise UserError(f"{path} is damaged: move it away (mv {path} {path}.bad) and run again: the data are then checked "
                        "against the corpus the run's checkpoint records") from None
    saved = (checkpoint_run(ckpt) or {}).get("data") if ckpt is not None else None
    records += [saved] if isinstance(saved, dict) else []
    for started in records:
        changed = [f"{k} {started.get(k)!r} then, {identity[k]!r} now" for k in DATA_IDENTITY
                   if started.get(k) != identity[k]]
        if changed:
            raise UserError(f"the data {data} is not the corpus the run in {run_dir} started on "
                            f"({'; '.join(changed[:2])}): prepare it again as it was, or train on the new data in "
                            "another --out directory")
    if path.exists():
        return
    if ckpt is not None and not records:
        raise UserError(f"{path} is missing and the checkpoint {ckpt} predates checkpoints recording their corpus, "
                        f"so the data {data} cannot be checked against what the run's first steps trained on: restore "
                        f"{path.name} (a run trained on the same corpus holds the same one), or move the checkpoint "
                        f"away (mv {ckpt} {ckpt}.old) to train the run from the start")
    write_json_atomic(path, identity, indent=2)  # a new run's, or one the checkpoint's record has vouched for


def moved_corpus(existing: RunConfig, config: RunConfig, run_dir: Path) -> bool:
    """Whether the run in run_dir (`existing`) differs from `config` in its data's path alone and the data there
    are the corpus it recorded (data.json): the corpus moved. A run's id includes its data's path (the corpus's
    content is checked on every resume, `check_run_data`), so a moved corpus names another run. The same data path
    is no move: a run id computed from a config hashes its recipe file as the file is now, so a run under a recipe
    file edited since it started (its only difference) read as one whose corpus "moved" to where it was."""
    if existing.data == config.data or dataclasses.replace(existing, data=config.data).run_id != config.run_id:
        return False
    try:
        from scaling.data import read_meta

        return json.loads((run_dir / "data.json").read_text()) == data_identity(read_meta(resolve_data_dir(config)))
    except (OSError, ValueError, UserError):
        return False


def moved_corpus_link(existing: RunConfig, config: RunConfig) -> str:
    """How to give a moved corpus its old path again (`moved_corpus`), where that path is gone."""
    return ("" if existing.data == "builtin" else f" (where that path is gone, a link to the new place does: ln -s "
            f"{resolve_data_dir(config).resolve()} {existing.data})")
