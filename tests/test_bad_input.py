"""Bad input, table-driven, for every CLI: one clear line, a non-zero exit, nothing touched.

Each case runs a CLI on a prepared "world" folder (datasets, plans, runs, plain files,
foreign folders, malformed files) and expects:

* a non-zero exit;
* no ``Traceback`` in the output, and at most :data:`MAX_LINES` lines of it;
* nothing in the world changed outside the case's ``--out`` (a snapshot of every path's
  type, size and mtime before and after), and a fresh ``--out`` not created at all;
* where given, a substring of the error.

Most cases call the CLI's ``main(argv)`` in this process (each subprocess would import
torch, 1-2 s); :data:`SUBPROCESS_SAMPLE` runs a sample of them through the installed console
scripts, so the exit-code path of the real entry points is covered too. ``python
tests/test_bad_input.py`` prints the tally (used for the README's reliability section).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
#: Output lines a refusal may print (argparse: usage line + error line; ours: one line).
MAX_LINES = 3

ENTRY = {
    "gnnpipe-data": "gnnpipe.cli.data:main",
    "gnnpipe-partition": "gnnpipe.cli.partition:main",
    "gnnpipe-train": "gnnpipe.cli.train:main",
    "gnnpipe-plan": "gnnpipe.cli.plan:main",
    "gnnpipe-bench": "gnnpipe.bench.cli:main",
}

# ----------------------------------------------------------------------------- the cases
# (cli, argv, expected substring or None). Placeholders in argv: {W} the world folder, {NEW}
# a fresh path that must not be created, {T:name} a TOML file of the world's tomls/ folder.
T = "gnnpipe-train"
TRAIN_OK = ["--dataset", "sbm", "--synth-nodes", "300", "--synth-features", "8", "--layers", "2",
            "--hidden", "8", "--epochs", "1", "--no-progress"]
TOMLS = {
    "exact_str": 'exact = "false"',
    "epochs_bool": "epochs = true",
    "epochs_float": "epochs = 3.7",
    "seed_float": "seed = 1e20",
    "seed_big": "seed = 9223372036854775808",
    "seed_neg": "seed = -1",
    "timeout_inf": "timeout = inf",
    "timeout_nan": "timeout = nan",
    "lr_str": 'lr = "0.1"',
    "lr_bool": "lr = true",
    "lr_nan": "lr = nan",
    "out_int": "out = 5",
    "plan_int": "plan = 3",
    "root_list": "root = [1]",
    "dataset_int": "dataset = 1",
    "mode_bad": 'mode = "x"',
    "model_bad": 'model = "gcnn"',
    "hidden_float": "hidden = 1e8",
    "hidden_huge": "hidden = 100000000",
    "progress_int": "progress = 1",
    "shuffle_str": 'shuffle = "yes"',
    "heads_zero": "heads = 0",
    "wd_neg": "weight_decay = -1",
    "dropout_big": "dropout = 1.5",
    "layers_list": "layers = [16]",
    "nodes_huge": "synth_nodes = 2000000000",
    "hdtype_bad": 'history_dtype = "float16"',
    "comm_num": "comm = 0",
    "unknown_field": "hiden = 32",
    "syntax": "epochs = ",
    "table": "[train]\nepochs = 3",
    "date": "epochs = 1979-05-27",
    "threads_neg": "threads = -1",
    "timeout_zero": "timeout = 0",
    "device_bad": 'device = "tpu"',
    "overwrite_str": 'overwrite = "yes"',
}

TRAIN_FLAG_CASES = [
    # --exact-every (stage.py rule 8): the stale modes only, a count
    (["--exact-every", "-1"], "exact_every"), (["--exact-every", "x"], "--exact-every"),
    (["--exact-every", "1.5"], "--exact-every"), (["--mode", "graph", "--exact-every", "2"], "--exact-every 2"),
    (["--mode", "graph", "--parts", "2", "--exact-every", "3"], "not --mode graph"),
    (["--exact-every", "1e3"], "--exact-every"),
    # --boundary-sample: a fraction, graph mode, the models linear in their inputs
    (["--boundary-sample", "0"], "boundary_sample"), (["--boundary-sample", "x"], "--boundary-sample"),
    (["--boundary-sample", "1.5"], "boundary_sample"), (["--boundary-sample", "0.5"], "not --mode pipeline"),
    (["--mode", "graph", "--model", "gat", "--boundary-sample", "0.5"], "not --model gat"),
    # --shared-input: the pipelined modes, stale
    (["--mode", "graph", "--shared-input"], "not --mode graph"), (["--exact", "--shared-input"], "--exact forbids"),
    (["--shared-input", "yes"], "unrecognized arguments"), (["--shared-input"], "one stage or one chunk"),
    (["--refresh-epochs", "-1"], "refresh_epochs"), (["--grad-scale", "nan"], "grad_scale"),
    (["--snapshot-period", "x"], "--snapshot-period"), (["--stop-at-val-acc", "2"], "stop_at_val_acc"),
    (["--divergence-drop", "0"], "divergence_drop"),
    (["--lr", "nan"], "'lr' = nan"), (["--lr", "inf"], "finite"), (["--lr", "-1"], "lr"), (["--lr", "0"], "lr"),
    (["--lr", "abc"], "--lr"), (["--timeout", "nan"], "timeout"), (["--timeout", "inf"], "timeout"),
    (["--timeout", "0"], "timeout"), (["--timeout", "-5"], "timeout"), (["--timeout", "1e12"], "timeout"),
    (["--epochs", "0"], "epochs"), (["--epochs", "-1"], "epochs"), (["--epochs", "3.7"], "--epochs"),
    (["--epochs", "abc"], "--epochs"), (["--epochs", "1e3"], "--epochs"), (["--heads", "0"], "heads"),
    (["--heads", "-2"], "heads"), (["--weight-decay", "-1"], "weight_decay"), (["--weight-decay", "nan"], "weight_decay"),
    (["--hidden", "0"], "hidden"), (["--hidden", "100000000"], "GiB"), (["--hidden", "-5"], "hidden"),
    (["--hidden", "1e8"], "--hidden"), (["--layers", "0"], "layers"), (["--layers", "1000000000"], "GiB"),
    (["--dropout", "1"], "dropout"), (["--dropout", "-0.1"], "dropout"), (["--dropout", "nan"], "dropout"),
    (["--seed", "-1"], "seed"), (["--seed", "9223372036854775808"], "seed"), (["--seed", "1e20"], "--seed"),
    (["--synth-nodes", "2000000000"], "GiB"), (["--synth-nodes", "0"], "synth_nodes"),
    (["--synth-features", "0"], "synth_features"), (["--synth-features", "1000000000"], "GiB"),
    (["--synth-degree", "0"], "synth_degree"), (["--synth-degree", "nan"], "synth_degree"),
    (["--synth-homophily", "2"], "synth_homophily"), (["--synth-classes", "0"], "synth_classes"),
    (["--alpha", "2"], "alpha"), (["--alpha", "nan"], "alpha"), (["--lam", "-1"], "lam"),
    (["--mode", "x"], "--mode"), (["--model", "x"], "--model"), (["--backend", "x"], "--backend"),
    (["--comm", "x"], "--comm"), (["--device", "tpu"], "--device"), (["--history-dtype", "x"], "--history-dtype"),
    (["--method", "x"], "--method"), (["--threads", "-1"], "threads"), (["--threads", "100000"], "threads"),
    (["--stages", "-1"], "stages"), (["--chunks", "-1"], "chunks"), (["--parts", "-1"], "parts"),
    (["--ways", "0"], "ways"), (["--snapshot-period", "-1"], "snapshot_period"),
    (["--checkpoint-every", "-1"], "checkpoint_every"), (["--eval-every", "0"], "eval_every"),
    (["--unknown-flag"], "unrecognized"), (["--config", "{W}/missing.toml"], "not found"),
    (["--config", "nosuchpreset"], "presets"), (["--model", "gat", "--hidden", "10", "--heads", "4"], "heads"),
    (["--exact", "false"], "unrecognized"),
    # Bad only where torch sees no GPU (a machine with one would train).
    *([(["--device", "cuda"], "CUDA")] if not torch.cuda.is_available() else []),
]
TRAIN_DATA_CASES = [
    (["--dataset", "nosuch"], "not found"), (["--dataset", "{W}/file.txt"], "not found"),
    (["--dataset", "{W}/foreign"], "meta.json"), (["--dataset", "{W}/ds_notrain"], "train set is empty"),
    (["--dataset", "{W}/ds_noval"], "val set is empty"), (["--dataset", "{W}/ds_notest"], "test set is empty"),
    (["--dataset", "{W}/ds_metalist"], "JSON list"), (["--dataset", "{W}/ds_missing"], "labels.npy"),
    (["--dataset", "{W}/ds_trunc"], "features.npy"), (["--dataset", "{W}/ds_tampered"], "content hash mismatch"), (["--dataset", "{W}/ds", "--plan", "{W}/nosuchplan"], "no such"),
    (["--dataset", "{W}/ds", "--plan", "{W}/plan_list"], "JSON list"),
    (["--dataset", "{W}/ds", "--plan", "{W}/file.txt"], "plan"), (["--dataset", "{W}/ds", "--plan", "{W}/foreign"], "META.json"),
    (["--dataset", "{W}/ds", "--mode", "graph", "--plan", "{W}/plan"], "2 parts"),
    (["--dataset", "{W}/ds_other", "--mode", "graph", "--plan", "{W}/plan1"], "built for dataset"),
    (["--dataset", "{W}/ds", "--plan", "{W}/plan_badcount"], "META.json"),
    (["--mode", "graph", "--parts", "3"], "one rank per part"), (["--mode", "pipeline", "--stages", "2"], "stage"),
    (["--mode", "hybrid", "--ways", "2"], "ways"), (["--resume", "{W}/nosuchrun"], "no such directory"),
    (["--resume", "{W}/file.txt"], "no such directory"), (["--resume", "{W}/run_done"], "no committed checkpoint"),
    (["--resume", "{W}/foreign"], "no committed checkpoint"),
    (["--resume", "{W}/run_commit_list"], "JSON list"), (["--resume", "{W}/run_commit_cfg"], "'config'"),
    (["--resume", "{W}/run_commit_noid"], "'identity'"), (["--resume", "{W}/run_damaged"], "changed or damaged"),
    (["--resume", "{W}/run_ckpt/checkpoints/epoch-7"], "no such directory"),
    (["--dataset", ""], "'dataset'"), (["--config", "{W}/bin.toml"], "not a text file"),
    (["--config", "{W}"], "not found"), (["--root", "{W}/file.txt", "--dataset", "foo"], "not found"),
]
TRAIN_OUT_CASES = [
    (["--out", "{W}/file.txt"], "is a file"), (["--out", "{W}/file.txt/sub"], "is a file"),
    (["--out", "{W}/run_done"], "finished run"), (["--out", "{W}/run_foreign_cfg"], "config.json"),
    (["--out", "{W}/run_foreign_cfg", "--overwrite"], "config.json"), (["--out", "/"], "system"),
    (["--out", "{W}/run_ckpt", "--resume", "{W}/run_ckpt", "--overwrite"], "--overwrite"),
    (["--out", "{W}/run_ckpt"], "--resume"), (["--out", "{W}/link_to_file"], "a symbolic link"),
    (["--out", "{W}/ds/run"], "inside a prepared"), (["--out", "{W}/plan/run"], "inside a gnnpipe partition plan"),
]

DATA = "gnnpipe-data"
DATA_CASES = [
    ([], "required"), (["bogus"], "invalid choice"), (["prepare"], "NAME or --all"), (["prepare", "nosuchcard"], "unknown dataset"),
    (["prepare", "--all", "cora"], "--all takes no NAME"), (["prepare", "cora", "--raw", "{W}/nosuchraw", "--root", "{W}/newroot"], "raw folder"),
    (["prepare", "cora", "--raw", "{W}/file.txt", "--root", "{W}/newroot"], "cora"),
    (["prepare", "cora", "--raw", "{W}/empty", "--root", "{W}/newroot"], "cora"),
    (["prepare", "--all", "--raw-root", "{W}/empty", "--root", "{W}/newroot"], "no raw dataset folder"),
    (["prepare", "cora", "--root", "{W}/file.txt"], "is a file"), (["prepare", "cora", "--seed", "x"], "--seed"), (["prepare", "cora", "--split", "x"], "--split"),
    (["info", "nosuch", "--root", "{W}"], "not found"), (["info", "{W}/file.txt"], "not found"),
    (["info", "{W}/foreign"], "meta.json"), (["info", "{W}/ds_metalist"], "JSON list"),
    (["info", "{W}/ds_badformat"], "format"), (["info", "{W}/ds_missing"], "labels.npy"),
    (["info", "{W}/ds_trunc"], "features.npy"), (["info", "{W}/ds_tampered", "--verify"], "hash mismatch"),
    (["info", "{W}/ds_badjson"], "unreadable"),
    (["synth", "sbm", "--nodes", "0", "--out", "{NEW}"], None), (["synth", "sbm", "--nodes", "-5", "--out", "{NEW}"], None),
    (["synth", "sbm", "--nodes", "abc", "--out", "{NEW}"], "--nodes"), (["synth", "sbm", "--nodes", "2000000000", "--out", "{NEW}"], "GiB"),
    (["synth", "rmat", "--nodes", "2000000000", "--edges", "10", "--out", "{NEW}"], "GiB"),
    (["synth", "rmat", "--nodes", "100", "--edges", "100000000000", "--out", "{NEW}"], "GiB"),
    (["synth", "sbm", "--features", "100000000", "--out", "{NEW}"], "GiB"),
    (["synth", "sbm", "--homophily", "2", "--out", "{NEW}"], "homophily"), (["synth", "sbm", "--homophily", "nan", "--out", "{NEW}"], "homophily"),
    (["synth", "sbm", "--avg-degree", "-1", "--out", "{NEW}"], None), (["synth", "sbm", "--avg-degree", "nan", "--out", "{NEW}"], None),
    (["synth", "sbm", "--avg-degree", "inf", "--out", "{NEW}"], None),
    (["synth", "sbm", "--features", "0", "--out", "{NEW}"], None), (["synth", "sbm", "--classes", "0", "--out", "{NEW}"], None),
    (["synth", "sbm", "--signal", "nan", "--out", "{NEW}"], None), (["synth", "sbm", "--train-frac", "2", "--out", "{NEW}"], None),
    (["synth", "sbm", "--train-frac", "0.9", "--val-frac", "0.5", "--out", "{NEW}"], None),
    (["synth", "sbm", "--train-frac", "0", "--out", "{NEW}"], None),
    (["synth", "sbm", "--seed", "-1", "--out", "{NEW}"], None), (["synth", "sbm", "--name", "../x", "--out", "{NEW}"], "name"),
    (["synth", "sbm", "--name", "", "--out", "{NEW}"], "name"), (["synth", "sbm", "--name", "a\nb", "--out", "{NEW}"], "name"),
    (["synth", "sbm", "--nodes", "300", "--out", "{W}/file.txt"], "is a file"),
    (["synth", "sbm", "--nodes", "300", "--out", "{W}/ds/inner"], "inside a prepared"),
    (["synth", "sbm", "--nodes", "300", "--out", "{W}/plan/inner", "--force"], "inside a gnnpipe partition plan"),
    (["prepare", "cora", "--raw", "{W}/raw", "--root", "{W}/ds"], "inside a prepared"),
    (["synth", "sbm", "--nodes", "300", "--out", "{W}/file.txt", "--force"], "is a file"),
    (["synth", "sbm", "--nodes", "300", "--out", "{W}/foreign", "--force"], "will not replace"),
    (["synth", "sbm", "--nodes", "300", "--out", "{W}/plan", "--force"], "will not replace"),
    (["synth", "sbm", "--nodes", "300", "--out", "{W}/run_done", "--force"], "will not replace"),
    (["synth", "sbm", "--nodes", "300", "--out", "{W}/file.txt/sub"], "is a file"),
    (["synth", "sbm", "--nodes", "300", "--out", "/", "--force"], "system"),
    (["synth", "sbm", "--nodes", "300", "--out", "{W}/ds"], "use --force"),
    (["synth", "sbm", "--nodes", "300", "--out", "{W}/link_to_file", "--force"], "symbolic link"),
    (["synth", "rmat", "--edges", "-1", "--out", "{NEW}"], None), (["synth", "rmat", "--a", "2", "--out", "{NEW}"], None),
    (["synth", "rmat", "--a", "0.5", "--b", "0.5", "--c", "0.5", "--out", "{NEW}"], None),
    (["synth", "rmat", "--nodes", "0", "--out", "{NEW}"], None), (["synth", "rmat", "--a", "nan", "--out", "{NEW}"], None),
    (["synth", "sbm"], "--out"), (["synth"], "required"),
]

PART = "gnnpipe-partition"
PART_CASES = [
    ([], "required"), (["{W}/ds"], "--parts"), (["{W}/ds", "--parts", "0"], "--parts"), (["{W}/ds", "--parts", "-1"], "--parts"),
    (["{W}/ds", "--parts", "abc"], "--parts"), (["{W}/ds", "--parts", "100000"], "exceeds"),
    (["{W}/ds", "--parts", "2", "--chunks", "0"], "--chunks"), (["{W}/ds", "--parts", "2", "--chunks", "100000"], "exceeds"),
    (["{W}/ds", "--parts", "2", "--method", "x"], "--method"), (["{W}/ds", "--parts", "2", "--objective", "x"], "--objective"),
    (["{W}/ds", "--parts", "2", "--metis-mode", "x"], "--metis-mode"), (["{W}/ds", "--parts", "2", "--metis-budget", "0"], "--metis-budget"),
    (["{W}/ds", "--parts", "2", "--metis-budget", "-1"], "--metis-budget"), (["{W}/ds", "--parts", "2", "--weights", "x"], "--weights"),
    (["nosuch", "--parts", "2", "--root", "{W}"], "not found"), (["{W}/file.txt", "--parts", "2"], "not found"),
    (["{W}/foreign", "--parts", "2"], "meta.json"), (["{W}/ds_metalist", "--parts", "2"], "JSON list"),
    (["{W}/ds_evil", "--parts", "2"], "cannot name a folder"), (["{W}/ds_missing", "--parts", "2"], "labels.npy"),
    (["{W}/ds", "--parts", "2", "--out", "{W}/file.txt"], "is a file"),
    (["{W}/ds", "--parts", "2", "--out", "{W}/file.txt", "--force"], "is a file"),
    (["{W}/ds", "--parts", "2", "--out", "{W}/file.txt/sub"], "is a file"),
    (["{W}/ds", "--parts", "2", "--out", "{W}/foreign", "--force"], "will not replace"),
    (["{W}/ds", "--parts", "2", "--out", "{W}/ds", "--force"], "will not replace"),
    (["{W}/ds", "--parts", "2", "--out", "/", "--force"], "system"),
    (["{W}/ds", "--parts", "3", "--out", "{W}/plan"], "other parameters"),
    (["{W}/ds", "--parts", "2", "--method", "random", "--out", "{W}/plan_nostats"], "stats.json"),
    (["{W}/ds", "--parts", "2", "--out", "{W}/plan_list"], "will not replace"),
    (["{W}/ds", "--parts", "2", "--out", "{W}/link_to_file", "--force"], "symbolic link"),
    (["{W}/ds", "--parts", "2", "--out", "{W}/ds/plan"], "inside a prepared"),
    (["{W}/ds", "--parts", "2", "--out", "{W}/ds/plan", "--force"], "inside a prepared"),
    (["{W}/ds", "--parts", "2", "--out", "{W}/plan/sub"], "inside a gnnpipe partition plan"),
    (["{W}/ds", "--parts", "2", "--seed", "-1", "--out", "{NEW}"], "--seed"),
    (["{W}/ds", "--parts", "2", "--chunks", "100000", "--out", "{NEW}"], "--chunks"),
]

PLAN = "gnnpipe-plan"
PLAN_CASES = [
    ([], "--world"), (["--world", "0", "--stats", "1000,10000,16,4"], "--world"), (["--world", "-1", "--stats", "1000,10000,16,4"], "--world"),
    (["--world", "abc"], "--world"), (["--world", "4", "--stats", "a,b"], "--stats"), (["--world", "4", "--stats", "1,2"], "--stats"),
    (["--world", "4", "--stats", "-1,10,16,4"], "--stats"), (["--world", "4", "--stats", "1000,10000,16,4", "--model", "x"], "model"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--layers", "0"], "layers"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--hidden", "0"], "hidden"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--heads", "0"], "heads"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--profile", "nosuch"], "profile"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--profile", "{W}/file.txt"], "file.txt"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--chunk-factors", "abc"], "--chunk-factors"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--chunk-factors", "0"], "--chunk-factors"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--top", "-1"], "--top"),
    (["nosuch", "--world", "4", "--root", "{W}"], "not found"), (["{W}/file.txt", "--world", "4"], "file.txt"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--profile", "{W}/bin.toml"], "not a text file"),
    (["validate", "{W}/bin.toml"], "UTF-8"), (["validate", "{W}/nosuch"], "nosuch"), (["validate", "{W}/file.txt"], "file.txt"), (["calibrate", "--bogus"], "unrecognized"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--history-dtype", "x"], "--history-dtype"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--layers", "1000000000"], "--layers"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--estimate-nodes", "0"], "--estimate-nodes"),
    (["calibrate", "--out", "{W}/file.txt/x"], "is a file"), (["calibrate", "--out", "{W}"], "directory"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--wire", "int9"], "--wire"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--wire", "int8", "--exact"], "--exact keeps float32"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--wire", "auto", "--accuracy-budget", "nan"], "--accuracy-budget"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--wire", "int4", "--accuracy-budget", "0"], "--accuracy-budget"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--link-rate", "5xbit"], "--link-rate"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--link-rate", "0mbit"], "--link-rate"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--ranks-per-host", "2"], "--ranks-per-host"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--wire-accuracy", "{W}/nosuch"], "no such file"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--wire-accuracy", "{W}/bin.toml"], "not a JSON results file"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--wire-accuracy", "{W}/badrows.jsonl"], "not a JSON results file"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--wire-accuracy", "{W}"], "a folder"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--wire-accuracy", "{W}/notrows.jsonl"], "--wire-accuracy"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--seed", "-1"], "--seed"),
    (["--world", "4", "--stats", "1e9,1e9,16,4"], "--stats"), (["--world", "4", "--stats", "1000,10000,0,4"], "--stats"),
    (["--world", "4", "--stats", "1000,10000,16,0"], "num_classes"), (["--world", "4", "--stats", "1000,10000,16,4,5,6"], "--stats"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--accuracy-budget", "-1"], "--accuracy-budget"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--model", "user"], "model"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--wire", "auto", "--accuracy-budget", "inf"], "--accuracy-budget"),
    (["--world", "4", "--stats", "1000,10000,16,4", "--top", "x"], "--top"),
    (["--world", "4.5", "--stats", "1000,10000,16,4"], "--world"),
    (["validate"], "required"), (["validate", "{W}/badrows.jsonl"], "not a readable epoch results.json"),
    (["validate", "{W}/empty.jsonl"], "not a readable epoch results.json"), (["validate", "{W}"], "no stored epoch results"),
    (["calibrate", "--out", "{W}/bin.toml"], "never replaces a file of yours"),
    (["calibrate", "--out", "{W}/ds/profile.toml"], "inside a prepared"),
    (["calibrate", "--out", "{W}/plan/profile.toml"], "inside a gnnpipe partition plan"), (["calibrate", "--network", "full"], "unrecognized"),
]

BENCH = "gnnpipe-bench"
BENCH_CASES = [
    ([], "required"), (["bogus"], "invalid choice"), (["comm", "--out", "{W}/file.txt"], "is a file"),
    (["epoch", "--out", "{W}/file.txt/sub"], "is a file"), (["comm", "--only", "typo", "--out", "{NEW}"], "unknown name"),
    (["epoch", "--only", "typo", "--out", "{NEW}"], "unknown name"), (["memory", "--only", "typo", "--out", "{NEW}"], "unknown name"),
    (["overhead", "--only", "typo", "--out", "{NEW}"], "unknown name"), (["epoch", "--runs", "0", "--out", "{NEW}"], "--runs"),
    (["epoch", "--epochs", "0", "--out", "{NEW}"], "--epochs"), (["comm", "--measure", "abc", "--out", "{NEW}"], "--measure"),
    (["scale", "--sizes", "0", "--out", "{NEW}"], "--sizes"), (["scale", "--random-above", "-1", "--out", "{NEW}"], "--random-above"),
    (["scale", "--history-dtype", "x"], "--history-dtype"), (["comm", "--only", "--out", "{NEW}"], "--only"),
    # tta: every flag checked before a run (and before its results folder is made)
    (["tta", "--config", "nosuch", "--local", "--out", "{NEW}"], "--config 'nosuch'"),
    (["tta", "--seeds", "-1", "--local", "--out", "{NEW}"], "--seeds"), (["tta", "--seeds", "x", "--local"], "--seeds"),
    (["tta", "--modes", "bogus", "--local", "--out", "{NEW}"], "--modes"), (["tta", "--modes", "", "--local", "--out", "{NEW}"], "--modes"),
    (["tta", "--wires", "int9", "--local", "--out", "{NEW}"], "--wires"), (["tta", "--rates", "5xbit", "--out", "{NEW}"], "link rate"),
    (["tta", "--timing-epochs", "1", "--local", "--out", "{NEW}"], "--timing-epochs"),
    (["tta", "--epochs", "0", "--local", "--out", "{NEW}"], "--epochs"), (["tta", "--epochs", "x", "--local"], "--epochs"),
    (["tta", "--timeout", "-5", "--local", "--out", "{NEW}"], "--timeout"), (["tta", "--timeout", "nan", "--local", "--out", "{NEW}"], "--timeout"),
    (["tta", "--timeout", "inf", "--local", "--out", "{NEW}"], "--timeout"),
    (["tta", "--plot", "{W}/nosuchdir"], "no curves.jsonl"), (["tta", "--plot", "{W}/file.txt"], "no curves.jsonl"),
    (["tta", "--plot", "{W}"], "no curves.jsonl"),
    (["tta", "--local", "--out", "{W}/file.txt"], "is a file"), (["tta", "--local", "--out", "{W}/file.txt/sub"], "is a file"),
    (["tta", "--config", "tiny", "--local", "--quick", "--train-flags", "'unclosed", "--out", "{NEW}"], "--train-flags"),
    (["tta", "--config", "tiny", "--local", "--quick", "--train-flags", "--bogus 1", "--out", "{NEW}"], "--bogus"),
    (["tta", "--config", "tiny", "--local", "--quick", "--train-flags", "--layers 0", "--out", "{NEW}"], "layers"),
    (["tta", "--config", "tiny", "--modes", "graph,hybrid", "--local", "--quick", "--train-flags", "--exact-every -2",
      "--out", "{NEW}"], "exact_every"),
    (["tta", "--config", "tiny", "--local", "--quick", "--train-flags", "--wire int8 --exact", "--out", "{NEW}"], "--exact"),
    (["tta", "--bogus"], "unrecognized"),
    # arguments with line breaks (a fuzzer find): argparse echoes them, escaped, on one line
    (["tta", "\n", "0\n", "0\n"], "unrecognized arguments: \\n 0\\n"),
    # cluster: the job's gnnpipe-train flags and every sweep cell's are parsed before a namespace is made
    (["cluster", "--hosts", "0", "--", "--dataset", "sbm"], "hosts"), (["cluster", "--hosts", "300", "--", "--dataset", "sbm"], "hosts"),
    (["cluster", "--ranks-per-host", "0", "--", "--dataset", "sbm"], "ranks_per_host"),
    (["cluster", "--rate", "5xbit", "--", "--dataset", "sbm"], "link rate"), (["cluster", "--delay", "abc", "--", "--dataset", "sbm"], "delay"),
    (["cluster", "--timeout", "0", "--", "--dataset", "sbm"], "--timeout"), (["cluster", "--timeout", "nan", "--", "--dataset", "sbm"], "--timeout"),
    (["cluster", "--out", "{W}/file.txt", "--", "--dataset", "sbm"], "is a file"),
    (["cluster", "--out", "{W}/file.txt/x", "--", "--dataset", "sbm"], "is a file"),
    (["cluster", "--", "--bogus"], "--bogus"), (["cluster", "--", "--dataset", "sbm", "--layers", "0"], "layers"),
    (["cluster", "--", "--dataset", "sbm", "--mode", "graph", "--exact-every", "2"], "--exact-every"),
    (["cluster", "--"], "no gnnpipe-train arguments"), (["cluster"], "no gnnpipe-train arguments"), (["cluster", "--bogus"], "unrecognized"),
    (["cluster", "--sweep", "--rates", "5xbit", "--out", "{NEW}"], "link rate"),
    (["cluster", "--sweep", "--modes", "bogus", "--out", "{NEW}"], "mode must be"),
    (["cluster", "--sweep", "--graphs", "nosuch", "--out", "{NEW}"], "graph must be"),
    (["cluster", "--sweep", "--models", "nosuch", "--out", "{NEW}"], "model"),
    (["cluster", "--sweep", "--wires", "int9", "--out", "{NEW}"], "wire format"),
    (["cluster", "--sweep", "--layers", "0", "--out", "{NEW}"], "layers"), (["cluster", "--sweep", "--hidden", "0", "--out", "{NEW}"], "hidden"),
    (["cluster", "--sweep", "--epochs", "0", "--out", "{NEW}"], "epochs"), (["cluster", "--sweep", "--rates", "", "--out", "{NEW}"], "--rates"),
    (["cluster", "--sweep", "--models", ",", "--out", "{NEW}"], "--models"),
    (["cluster", "--sweep", "--out", "{W}/file.txt"], "is a file"),
    (["cluster", "--sweep", "--network", "bogus", "--out", "{NEW}"], "--network"),
    (["cluster", "--sweep", "--out", "{NEW}", "--", "--bogus"], "--bogus"),
    (["cluster", "--plot", "{W}/nosuch.jsonl"], "no such file"), (["cluster", "--plot", "{W}/bin.toml"], "rows.jsonl"),
    (["cluster", "--plot", "{W}"], "a folder"), (["cluster", "--plot", "{W}/empty.jsonl"], "no rows"),
    (["cluster", "--plot", "{W}/notrows.jsonl"], "not a sweep row"), (["cluster", "--plot", "{W}/badrows.jsonl"], "rows.jsonl"),
    # the rest of the benchmarks
    (["accuracy", "--seeds", "-1", "--out", "{NEW}"], "--seeds"), (["accuracy", "--only", "typo", "--out", "{NEW}"], "unknown configuration"),
    (["accuracy", "--epochs", "0", "--out", "{NEW}"], "--epochs"), (["accuracy", "--wire", "int9", "--out", "{NEW}"], "--wire"),
    (["accuracy", "--out", "{W}/file.txt"], "is a file"),
    (["report", "--doc", "{W}/nosuch.md", "--out", "{W}/nosuchresults"], "no"),
    (["report", "--out", "{W}/nosuchresults"], "no stored benchmark results"),
    (["epoch", "--runs", "-3", "--out", "{NEW}"], "--runs"), (["epoch", "--epochs", "1.5", "--out", "{NEW}"], "--epochs"),
    (["comm", "--wire", "int9", "--out", "{NEW}"], "--wire"), (["scale", "--sizes", "abc", "--out", "{NEW}"], "--sizes"),
    (["scale", "--method", "x", "--out", "{NEW}"], "--method"), (["overhead", "--runs", "0", "--out", "{NEW}"], "--runs"),
    (["memory", "--out", "{W}/file.txt/sub"], "is a file"), (["overhead", "--out", "{W}/file.txt"], "is a file"),
    (["epoch", "--out", "{W}/ds"], "inside a prepared"), (["comm", "--out", "{W}/ds/results"], "inside a prepared"),
    (["tta", "--local", "--out", "{W}/plan"], "inside a gnnpipe partition plan"),
    (["cluster", "--out", "{W}/ds/run", "--", "--dataset", "sbm"], "inside a prepared"),
    (["cluster", "--sweep", "--out", "{W}/plan/sw"], "inside a gnnpipe partition plan"),
]


def _cases() -> list[tuple[str, list[str], str | None]]:
    cases: list[tuple[str, list[str], str | None]] = []
    for argv, want in TRAIN_FLAG_CASES + TRAIN_DATA_CASES:
        base = [] if any(a in ("--dataset", "--resume") for a in argv) else TRAIN_OK
        cases.append((T, [*base, *argv] + ([] if "--out" in argv else ["--out", "{NEW}"]), want))
    for name, text in TOMLS.items():
        # No flags beside --config: a flag would override the TOML value under test.
        out = [] if text.startswith("out ") else ["--out", "{NEW}"]
        special = {"syntax": "not valid TOML", "table": "unknown field", "unknown_field": "unknown field",
                   "hidden_huge": "GiB", "nodes_huge": "GiB"}
        # the message names the file and the field
        want = special.get(name, f"{name}.toml: config field '{text.split('=')[0].strip()}'")
        cases.append((T, ["--config", f"{{T:{name}}}", *out], want))
    for argv, want in TRAIN_OUT_CASES:
        cases.append((T, [*TRAIN_OK, *argv], want))
    cases += [(DATA, a, w) for a, w in DATA_CASES]
    cases += [(PART, a, w) for a, w in PART_CASES]
    cases += [(PLAN, a, w) for a, w in PLAN_CASES]
    cases += [(BENCH, a, w) for a, w in BENCH_CASES]
    return cases


CASES = _cases()
#: Cases also run through the real console script (a process each): every CLI, every kind.
SUBPROCESS_SAMPLE = [0, 5, 61, len(TRAIN_FLAG_CASES) + 3, len(TRAIN_FLAG_CASES) + len(TRAIN_DATA_CASES),
                     len(TRAIN_FLAG_CASES) + len(TRAIN_DATA_CASES) + len(TOMLS) + 2]


def _case_id(c) -> str:
    cli, argv, _ = c
    return (cli.split("-")[1] + ":" + " ".join(argv).replace("{W}/", "").replace(" ".join(TRAIN_OK), "…"))[:90]


# ----------------------------------------------------------------------------- the world
def _build_world(w: Path) -> None:
    from gnnpipe.data import synthetic
    from gnnpipe.partition import build_plan

    w.mkdir(parents=True, exist_ok=True)
    g = synthetic.sbm(num_nodes=300, num_classes=4, avg_degree=6.0, num_features=8, seed=0)
    g.save(w / "ds")
    synthetic.sbm(num_nodes=300, num_classes=4, avg_degree=6.0, num_features=8, seed=1).save(w / "ds_other")
    for split in ("train", "val", "test"):
        z = np.zeros(g.num_nodes, dtype=bool)
        dataclasses.replace(g, **{f"{split}_mask": z}, validate=False, _hash=None).save(w / f"ds_no{split}")
    for name in ("ds_metalist", "ds_missing", "ds_trunc", "ds_evil", "ds_badformat", "ds_badjson", "ds_tampered"):
        shutil.copytree(w / "ds", w / name)
    (w / "ds_metalist" / "meta.json").write_text("[]")
    (w / "empty.jsonl").write_text("")
    (w / "badrows.jsonl").write_text('{"mode": "graph", "rate": "25mbit"}\nnot json\n')
    (w / "notrows.jsonl").write_text('[1, 2]\n')
    (w / "ds_missing" / "labels.npy").unlink()
    f = w / "ds_trunc" / "features.npy"
    f.write_bytes(f.read_bytes()[:100])
    meta = json.loads((w / "ds_evil" / "meta.json").read_text())
    (w / "ds_evil" / "meta.json").write_text(json.dumps({**meta, "name": "../../evil"}))
    (w / "ds_badformat" / "meta.json").write_text(json.dumps({**meta, "format": "other"}))
    (w / "ds_badjson" / "meta.json").write_text("{not json")
    lab = np.load(w / "ds_tampered" / "labels.npy")
    lab[0] = (lab[0] + 1) % 4
    np.save(w / "ds_tampered" / "labels.npy", lab)
    build_plan(g, parts=2, chunks=1, method="random", seed=0).save(w / "plan")
    build_plan(g, parts=1, chunks=1, method="contiguous", seed=0).save(w / "plan1")
    for name in ("plan_list", "plan_nostats", "plan_badcount"):
        shutil.copytree(w / "plan", w / name)
    (w / "plan_list" / "META.json").write_text("[1, 2]")
    (w / "plan_nostats" / "stats.json").unlink()
    pm = json.loads((w / "plan_badcount" / "META.json").read_text())
    (w / "plan_badcount" / "META.json").write_text(json.dumps({**pm, "num_parts": "two"}))
    (w / "file.txt").write_text("precious\n")
    (w / "link_to_file").symlink_to(w / "file.txt")
    (w / "foreign").mkdir()
    (w / "foreign" / "a.txt").write_text("mine\n")
    (w / "empty").mkdir()
    (w / "run_foreign_cfg").mkdir()
    (w / "run_foreign_cfg" / "config.json").write_text('{"a": 1}\n')
    tomls = w / "tomls"
    tomls.mkdir()
    small = dict(zip([a[2:].replace("-", "_") for a in TRAIN_OK[0::2]], TRAIN_OK[1::2]))
    small.pop("no_progress", None)
    for name, text in TOMLS.items():
        # The small run's settings first, so a case the checks missed would finish in
        # seconds (and fail the test) instead of training the default job.
        keys = {ln.split("=")[0].strip() for ln in text.splitlines() if "=" in ln}
        head = [f"{k} = {v if v.replace('.', '').isdigit() else repr(v).replace(chr(39), chr(34))}"
                for k, v in small.items() if k not in keys] + ["progress = false"] * ("progress" not in keys)
        body = text if not text.startswith("[") else text  # a table must come after the top-level keys
        (tomls / f"{name}.toml").write_text("\n".join(head + [body]) + "\n")
    from gnnpipe.cli.train import main as train_main

    with contextlib.redirect_stdout(open(os.devnull, "w")), contextlib.redirect_stderr(open(os.devnull, "w")):
        assert train_main([*TRAIN_OK, "--out", str(w / "run_done")]) == 0
        assert train_main([*TRAIN_OK, "--epochs", "2", "--checkpoint-every", "1", "--out", str(w / "run_ckpt")]) == 0
    for name in ("run_commit_list", "run_commit_cfg", "run_commit_noid", "run_damaged"):
        shutil.copytree(w / "run_ckpt", w / name)
    commit = w / "run_ckpt" / "checkpoints" / "epoch-1" / "COMMIT.json"
    c = json.loads(commit.read_text())
    (w / "run_commit_list" / "checkpoints" / "epoch-1" / "COMMIT.json").write_text("[1]")
    (w / "run_commit_cfg" / "checkpoints" / "epoch-1" / "COMMIT.json").write_text(json.dumps({**c, "config": [1]}))
    (w / "run_commit_noid" / "checkpoints" / "epoch-1" / "COMMIT.json").write_text(
        json.dumps({k: v for k, v in c.items() if k != "identity"}))
    (w / "run_damaged" / "checkpoints" / "epoch-1" / "rank0.pt").write_bytes(b"garbage")
    (w / "bin.toml").write_bytes(bytes(range(128, 256)) * 3)
    (w / "cwd").mkdir()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = tmp_path_factory.mktemp("world")
    _build_world(w)
    return w


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root``: (kind, size, mtime_ns); symlinks are not followed.

    The verified-hash cache a dataset folder may gain (``.verified.json``) is a cache, not
    data, and is left out.
    """
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            if n.startswith(".verified.json"):
                continue
            p = Path(dirpath) / n
            st = p.lstat()
            snap[str(p.relative_to(root))] = (st.st_mode >> 12, st.st_size if not p.is_dir() else 0, st.st_mtime_ns if not p.is_dir() else 0)
    return snap


def _expand(argv: list[str], w: Path, new: Path) -> list[str]:
    out = []
    for a in argv:
        if a.startswith("{T:"):
            a = str(w / "tomls" / f"{a[3:-1]}.toml")
        out.append(a.replace("{W}", str(w)).replace("{NEW}", str(new)))
    return out


def _out_of(argv: list[str]) -> str | None:
    return argv[argv.index("--out") + 1] if "--out" in argv else None


def _check(cli: str, argv: list[str], want: str | None, code: int, text: str, w: Path, before: dict, new: Path) -> None:
    assert code != 0, f"{cli} {argv}: exit 0\n{text}"
    assert "Traceback" not in text, f"{cli} {argv}:\n{text}"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert 1 <= len(lines) <= MAX_LINES, f"{cli} {argv}: {len(lines)} lines\n{text}"
    if want is not None:
        assert want in text, f"{cli} {argv}: {want!r} not in\n{text}"
    after = snapshot(w)
    out = _out_of(argv)
    skip = Path(out).resolve() if out else None

    def outside(rel: str) -> bool:
        if skip is None:
            return True
        p = (w / rel).resolve() if not (w / rel).is_symlink() else (w / rel)
        return not (p == skip or skip in p.parents)

    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and outside(k))
    assert not changed, f"{cli} {argv}: changed {changed}"
    assert not new.exists(), f"{cli} {argv}: created {new}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_bad_input(case, world, capsys, monkeypatch, tmp_path):
    cli, argv, want = case
    new = tmp_path / "new-out"
    argv = _expand(argv, world, new)
    monkeypatch.chdir(world / "cwd")
    monkeypatch.setenv("GNNPIPE_PARTITION_ROOT", str(world / "cwd" / "partition"))
    monkeypatch.setenv("GNNPIPE_DATA_ROOT", str(world / "cwd" / "datasets"))
    monkeypatch.setenv("GNNPIPE_DATASETS", str(world / "cwd" / "raw"))
    before = snapshot(world)
    mod, fn = ENTRY[cli].split(":")
    main = getattr(importlib.import_module(mod), fn)
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else 1
    cap = capsys.readouterr()
    _check(cli, argv, want, code, cap.out + cap.err, world, before, new)


@pytest.mark.parametrize("index", SUBPROCESS_SAMPLE)
def test_bad_input_console_script(index, world, tmp_path):
    cli, argv, want = CASES[index]
    new = tmp_path / "new-out"
    argv = _expand(argv, world, new)
    env = {**os.environ, "PYTHONPATH": str(HERE.parent), "GNNPIPE_PARTITION_ROOT": str(world / "cwd" / "partition"),
           "GNNPIPE_DATA_ROOT": str(world / "cwd" / "datasets"), "OMP_NUM_THREADS": "1"}
    before = snapshot(world)
    p = subprocess.run([str(BIN / cli), *argv], capture_output=True, text=True, timeout=120, env=env, cwd=world / "cwd")
    text = "\n".join(ln for ln in (p.stdout + p.stderr).splitlines() if "] INFO " not in ln)
    _check(cli, argv, want, p.returncode, text, world, before, new)


def tally() -> dict[str, int]:
    """Cases per CLI, and the suite's other fault cases, counted from the tables."""
    per = {}
    for cli, _, _ in CASES:
        per[cli] = per.get(cli, 0) + 1
    return per


if __name__ == "__main__":
    per = tally()
    for cli, n in per.items():
        print(f"{cli:18} {n}")
    print(f"{'in-process total':18} {len(CASES)}")
    print(f"{'console scripts':18} {len(SUBPROCESS_SAMPLE)}")
