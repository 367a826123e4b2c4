#!/bin/sh
# config_errors.sh — malformed and invalid job files: each gets one message
# with file:line:col, what was expected, and status 78 (config) or 66
# (missing), and changes nothing on disk.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
mkdir "$T/w" && cd "$T/w" || exit 99

# bad STATUS LOCATION SUBSTRING DESC  (job file on stdin)
bad() {
    want=$1; where=$2; what=$3; desc=$4
    cat >job.yaml
    ls -A >"$T/before.lst"
    "$S" config check job.yaml >"$T/out.txt" 2>"$T/err.txt"
    got=$?
    ls -A >"$T/after.lst"
    lines=$(wc -l <"$T/err.txt")
    if [ "$got" -eq "$want" ] && grep -qF -- "job.yaml:$where:" "$T/err.txt" && grep -qF -- "$what" "$T/err.txt" &&
        [ "$lines" -eq 1 ] && cmp -s "$T/before.lst" "$T/after.lst"; then
        ok "$desc"
    else
        not_ok "$desc (status $got, want $want at job.yaml:$where with '$what')"
        diag "$(cat "$T/err.txt")"
    fi
    # train refuses it the same way, before any work
    "$S" train job.yaml --set train.steps=1 >/dev/null 2>"$T/err2.txt"
    got2=$?
    if [ "$got2" -ne "$want" ]; then not_ok "$desc: train gives the same status ($got2)"; fi
}

bad 78 1:1 "unknown key 'trian'; did you mean 'train'" "unknown section with a suggestion" <<'Y'
trian:
  steps: 10
Y
bad 78 2:3 "unknown key 'train.setps'; did you mean 'train.steps'" "unknown key with a suggestion" <<'Y'
train:
  setps: 10
Y
bad 78 1:1 "did you mean 'train.lr'" "a key in the wrong section is found" <<'Y'
lr: 0.001
Y
bad 78 3:3 "duplicate key 'train.steps' (first given at line 2)" "duplicate key" <<'Y'
train:
  steps: 10
  steps: 20
Y
bad 78 2:7 "train.lr: expected a number" "wrong type: text for a number" <<'Y'
train:
  lr: fast
Y
bad 78 2:15 "expected an integer in [1, 1048576], got '8.5'" "wrong type: fraction for an integer" <<'Y'
train:
  batch_size: 8.5
Y
bad 78 2:9 "overflows a 64-bit integer" "integer overflow" <<'Y'
train:
  seed: 123456789012345678901234567890
Y
bad 78 2:7 "overflows a double" "float overflow" <<'Y'
train:
  lr: 1e999
Y
bad 78 2:10 "out of range; expected an integer in [1, 1000000000000]" "out of range: zero steps" <<'Y'
train:
  steps: 0
Y
bad 78 2:10 "train.beta2: value 1.5 is out of range" "out of range: beta2 above 1" <<'Y'
train:
  beta2: 1.5
Y
bad 78 3:11 "model.n_embd (100) must be divisible by model.n_head (3)" "cross-field: n_embd not divisible by n_head" <<'Y'
model:
  n_head: 3
  n_embd: 100
Y
bad 78 2:15 "train.batch_size (8) is not a whole multiple of train.micro_batch (3)" "cross-field: batch not a multiple of micro_batch" <<'Y'
train:
  batch_size: 8
  micro_batch: 3
Y
bad 78 3:11 "train.min_lr (0.01) must not exceed train.lr" "cross-field: min_lr above lr" <<'Y'
train:
  lr: 0.001
  min_lr: 0.01
Y
bad 78 2:11 "expected one of tiny, gpt2-124m" "unknown preset" <<'Y'
model:
  preset: gpt5
Y
bad 78 2:13 "expected one of cosine, linear or constant" "unknown schedule" <<'Y'
train:
  schedule: exponential
Y
bad 78 1:8 "expected a mapping of keys (a section), got a list" "a section given as a list" <<'Y'
train: [1, 2]
Y
bad 78 1:1 "expected a mapping of sections" "a top-level list" <<'Y'
- model
- train
Y
bad 78 3:10 "YAML syntax error" "bad indentation" <<'Y'
train:
  lr: 1
    steps: 2
Y
bad 78 2:6 "YAML syntax error" "unclosed flow mapping" <<'Y'
train: {lr: 1
model: {}
Y
bad 78 3:1 "expected one YAML document, found a second one" "two documents" <<'Y'
train:
  lr: 0.001
---
train: {}
Y
bad 78 2:7 "got the quoted string \"0.1\"" "a quoted number" <<'Y'
train:
  lr: "0.1"
Y
bad 78 2:21 "expected true or false, got 'maybe'" "bad boolean" <<'Y'
sharding:
  offload: {params: maybe}
Y
bad 78 2:12 "expected one of exit or scontrol, got 'sbatch'" "preemption.requeue out of its set" <<'Y'
preemption:
  requeue: sbatch
Y
bad 78 2:9 "value 0 is out of range" "checkpoint.keep 0" <<'Y'
checkpoint:
  keep: 0
Y
bad 78 2:35 "(hint: 1 keeps a full copy on every rank: write false)" "reshard_after_forward 1" <<'Y'
sharding:
  reshard_after_forward: {blocks: 1}
Y
bad 78 2:19 "got 'KILL' (hint: SIGKILL and SIGSTOP cannot be caught)" "an uncatchable preemption signal" <<'Y'
preemption:
  signals: [USR1, KILL]
Y
bad 78 2:16 "preemption.exit_status: value 300 is out of range" "exit status above 255" <<'Y'
preemption:
  exit_status: 300
Y
bad 78 1:10 "threads: expected an integer in [0, 4096], got 'many'" "threads not a number" <<'Y'
threads: many
Y
bad 78 2:18 "expected a string as list item 2, got a list" "data list with a nested list" <<'Y'
data:
  train: [a.bin, [b.bin]]
Y
bad 78 3:20 "sharding.blocks_per_unit (3) exceeds model.n_layer (2)" "blocks_per_unit above n_layer" <<'Y'
model: {n_layer: 2}
sharding:
  blocks_per_unit: 3
Y
bad 78 1:14 "log.every: expected an integer" "log.every as a mapping" <<'Y'
log: {every: {}}
Y
bad 78 2:20 "model.attention is flash, which cannot run here: the job trains on the CPU" "flash attention on the CPU" <<'Y'
device: cpu
model: {attention: flash}
Y
bad 78 2:14 "model.attention is flash, which cannot run here: the head dimension is 32" "flash attention at head dimension 32" <<'Y'
model:
  attention: flash
  n_embd: 128
Y
bad 78 1:20 "model.attention: expected one of auto, flash or materialized, got 'fast'" "an unknown attention" <<'Y'
model: {attention: fast}
Y

# an empty job file is the defaults
: >empty.yaml
expect_status 0 "an empty job file is valid (all defaults)" "$S" config check empty.yaml
# a binary file
printf 'train:\0\001' >bin.yaml
expect_status 78 "a file with NUL bytes is refused" "$S" config check bin.yaml
done_testing
