#!/bin/sh
# cli.sh — the command line: help, version, usage errors and their exit
# statuses (shardrun(1), EXIT STATUS), the command table (help COMMAND,
# COMMAND --help, subcommand lists, options a command does not take,
# suggestions for commands, options and keys), --set, config show/check
# round trip, config keys, data prepare.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN

expect_status 0 "--help exits 0" "$S" --help
check "--help lists the commands" grep -q "config check" "$T/out"
expect_status 0 "--version exits 0" "$S" --version
check "--version prints the version" grep -Eq '^shardrun [0-9]+\.[0-9]+' "$T/out"
expect_status 64 "no command is a usage error" "$S"
expect_status 64 "an unknown command is a usage error" "$S" frobnicate
check "  ...and says so" grep -q "unknown command 'frobnicate'" "$T/err"
expect_status 64 "an unknown option is a usage error" "$S" train --frobnicate

# the command table drives dispatch, --help and the options each command
# takes: every usage line of --help is a command whose own --help works
"$S" --help | sed -n 's/^\(usage:\)\{0,1\} *shardrun \([a-z][a-z]*\)\( \([a-z][a-z]*\)\)\{0,1\} .*/\2 \4/p' >"$T/cmds"
check "--help lists the 17 usage lines of the 10 commands ($(wc -l <"$T/cmds"))" test "$(wc -l <"$T/cmds")" -eq 17
bad=""
while read -r cmd sub; do
    # shellcheck disable=SC2086
    "$S" $cmd $sub --help >"$T/h" 2>&1 && grep -q "^usage: shardrun $cmd${sub:+ $sub}" "$T/h" || bad="$bad $cmd${sub:+-$sub}"
    # shellcheck disable=SC2086
    "$S" help $cmd $sub >"$T/h2" 2>&1 && cmp -s "$T/h" "$T/h2" || bad="$bad help:$cmd${sub:+-$sub}"
done <"$T/cmds"
check "each command's --help and 'shardrun help COMMAND' print its usage, the same text${bad:+; not:$bad}" test -z "$bad"
expect_status 0 "shardrun help exits 0" "$S" help
check "  ...with every command (as --help)" sh -c "'$S' --help | cmp -s - '$T/out'"
expect_status 0 "shardrun help plan" "$S" help plan
check "  ...names plan's options only (--gpus-per-node, not --prompt)" \
    sh -c "grep -q -- '--gpus-per-node' '$T/out' && ! grep -q -- '--prompt' '$T/out' && ! grep -q 'shardrun train' '$T/out'"
expect_status 64 "help of an unknown command is 64" "$S" help trian
check "  ...with a suggestion" grep -q "did you mean 'train'" "$T/err"
expect_status 64 "ckpt alone is a usage error" "$S" ckpt
check "  ...that lists its subcommands with their usage" sh -c "grep -q 'expected a subcommand: list, verify, inspect, show or export' '$T/err' &&
    grep -q 'shardrun ckpt export CKPT -o' '$T/err' && grep -q 'shardrun ckpt verify PATH' '$T/err'"
expect_status 0 "ckpt --help prints the subcommands' usage" "$S" ckpt --help
check "  ...every one" sh -c "[ \$(grep -c 'shardrun ckpt ' '$T/out') = 5 ]"
expect_status 64 "a mistyped command is 64" "$S" trian
check "  ...suggesting the command" grep -q "unknown command 'trian'; did you mean 'train'" "$T/err"
expect_status 64 "another tool's command word (fit)" "$S" fit job.yaml
check "  ...suggests ours" grep -q "did you mean 'shardrun train'" "$T/err"
expect_status 64 "a subcommand typed alone (export)" "$S" export x
check "  ...suggests its command" grep -q "did you mean 'shardrun ckpt export'" "$T/err"
expect_status 64 "a mistyped subcommand (ckpt exprot)" "$S" ckpt exprot x
check "  ...suggests it" grep -q "did you mean 'ckpt export'" "$T/err"
expect_status 64 "a mistyped option (--promt)" "$S" sample x --promt hi
check "  ...suggests it" grep -q "did you mean '--prompt'" "$T/err"
expect_status 64 "an option the command does not take (report --ranks)" "$S" report m.jsonl --ranks 2
check "  ...names what report takes and where --ranks applies" \
    grep -q "report: takes -o only; --ranks applies to shardrun config check, config show and plan only" "$T/err"
expect_status 64 "ckpt list -o" "$S" ckpt list d -o x
check "  ...ckpt list takes no options" grep -q "ckpt list: takes no options; -o applies to" "$T/err"
expect_status 64 "train --ranks" "$S" train --ranks 2
check "  ...is refused before anything runs" grep -q "train: takes --set and --verbose only; --ranks applies" "$T/err"
# unknown keys: the closest key, and the names other trainers use
for kv in learning_rate:train.lr train.max_steps:train.steps model.block_size:model.seq_len n_layers:model.n_layer \
    max_iters:train.steps training.learning_rate:train.lr; do
    expect_status 78 "--set ${kv%%:*}=1 is 78" "$S" config show --set "${kv%%:*}=1"
    check "  ...suggesting ${kv#*:}" grep -q "did you mean '${kv#*:}'" "$T/err"
done
printf 'train:\n  max_steps: 10\n' >"$T/other.yaml"
expect_status 78 "max_steps in a job file" "$S" config check "$T/other.yaml"
check "  ...at its place, suggesting train.steps" grep -q "other.yaml:2:3: unknown key 'train.max_steps'; did you mean 'train.steps'" "$T/err"
expect_status 64 "--set without '=' is a usage error" "$S" config show --set train.lr
check "  ...naming the expected form" grep -q "expected key=value" "$T/err"
expect_status 64 "--set without an argument is a usage error" "$S" config show --set
expect_status 64 "config check without a file is a usage error" "$S" config check
expect_status 64 "train with two job files is a usage error" "$S" train a.yaml b.yaml
expect_status 64 "an unknown config subcommand is a usage error" "$S" config frob
expect_status 66 "a missing job file is status 66" "$S" config check "$T/missing.yaml"
check "  ...naming the file" grep -q "missing.yaml" "$T/err"
expect_status 78 "a bad --set value is a config error" "$S" config show --set train.lr=abc
check "  ...naming the --set argument" grep -q -- "--set train.lr=abc" "$T/err"
expect_status 78 "an unknown --set key is a config error" "$S" config show --set trian.lr=1
check "  ...with a suggestion" grep -q "did you mean 'train.lr'" "$T/err"
expect_status 78 "an out-of-range --set value is a config error" "$S" config show --set train.steps=0
expect_status 78 "a --set on a section needs a mapping" "$S" config show --set train=3
expect_status 0 "--set takes a YAML flow mapping for a section" "$S" config show --set 'train={lr: 0.002, steps: 7}'
check "  ...and applies both keys" sh -c "grep -q '  lr: 0.002' '$T/out' && grep -q '  steps: 7' '$T/out'"
expect_status 0 "checkpoint and preemption keys are accepted" "$S" config show --set preemption.requeue=scontrol \
    --set checkpoint.dir=/tmp/x --set checkpoint.keep=5 --set 'preemption.signals=[USR1, TERM]'
check "  ...and shown" sh -c "grep -q '  requeue: scontrol' '$T/out' && grep -q '  dir: \"/tmp/x\"' '$T/out' && grep -q '  signals: \[USR1, TERM\]' '$T/out'"
expect_status 78 "an uncatchable preemption signal is a config error" "$S" config show --set 'preemption.signals=[KILL]'
check "  ...with a hint" grep -q "SIGKILL and SIGSTOP cannot be caught" "$T/err"

# config show -> config check round trip, and show is a fixed point
expect_status 0 "config show of the default job" "$S" config show
cp "$T/out" "$T/shown.yaml"
check "  ...fills in every section" sh -c "for s in model train data log threads comm sharding checkpoint preemption; do grep -q \"^\$s:\" '$T/shown.yaml' || exit 1; done"
expect_status 0 "config check accepts config show's output" "$S" config check "$T/shown.yaml"
"$S" config show "$T/shown.yaml" | sed 1d >"$T/again.yaml"
sed 1d "$T/shown.yaml" >"$T/shown-body.yaml"
check "config show of config show's output is identical" cmp -s "$T/shown-body.yaml" "$T/again.yaml"
printf 'model:\n  preset: gpt2-124m\n  n_layer: 2\n' >"$T/preset.yaml"
expect_status 0 "a preset with an explicit override" "$S" config show "$T/preset.yaml"
check "  ...explicit keys win over the preset" sh -c "grep -q '  n_layer: 2' '$T/out' && grep -q '  n_embd: 768' '$T/out' && grep -q '  vocab_size: 50257' '$T/out'"

# sharding and comm keys that cannot work in this run
expect_status 78 "offload in a CPU run is refused" "$S" train --set sharding.offload.params=true --set train.steps=1
check "  ...with 'offload needs a GPU run'" grep -q "offload needs a GPU run" "$T/err"
expect_status 78 "comm.backend nccl in a CPU run is refused" "$S" train --set comm.backend=nccl --set train.steps=1
expect_status 78 "a comm.interface that does not exist is refused" "$S" train --set comm.interface=nosuchif0 --set train.steps=1
check "  ...naming it" grep -q "comm.interface 'nosuchif0'" "$T/err"
expect_status 78 "a mesh that does not fit one rank is refused" "$S" train --set sharding.mesh.replicate=2 --set train.steps=1
expect_status 78 "a malformed sharding section is refused" "$S" config check /dev/stdin <<'Y'
sharding:
  mesh: 2
Y
# launch rules without a PMIx server
expect_status 78 "srun without --mpi=pmix (4 tasks) is a launch error" env SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=0 "$S" train --set train.steps=1
check "  ...saying so (task 0)" grep -q "launched by srun without --mpi=pmix" "$T/err"
expect_status 78 "  ...and task 2 exits 78 too" env SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=2 "$S" train --set train.steps=1
check "  ...without repeating the message (one message per step)" test ! -s "$T/err"
expect_status 0 "a one-task srun step runs as one process" env SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=1 "$S" train --set train.steps=1 --set model.n_layer=1 --set train.eval_every=0
check "  ...logging rank 0/1" grep -q "rank 0/1 local 0/1" "$T/err"

# the shipped default job and examples are valid (config check opens the
# shards a job names, as train does: stand-ins at the examples' paths, a
# GPT-2 shard of 1,025 tokens and a byte-level one)
mkdir -p "$T/ex/fineweb10B" && (cd "$T/ex" && python3 -c '
import struct
for name, magic, n in (("fineweb10B/fineweb_train_000001.bin", 20240520, 1025),
                       ("fineweb10B/fineweb_val_000000.bin", 20240520, 1025),
                       ("train.bin", 20240520, 300), ("val.bin", 20240520, 300)):
    open(name, "wb").write(struct.pack("<3i", magic, 1, n) + bytes(1012) + bytes(2 * n))')
here=$(pwd)
cd "$T/ex" || exit 99
for j in "$SR_SRCDIR"/etc/shardrun.yaml "$SR_SRCDIR"/etc/examples/*.yaml; do
    expect_status 0 "shipped job $(basename "$j") passes config check" "$S" config check "$j"
done
cd "$here" || exit 99
"$S" config show "$SR_SRCDIR/etc/shardrun.yaml" | sed 1d >"$T/etc.yaml"
"$S" config show | sed 1d >"$T/embedded.yaml"
check "the embedded default job is etc/shardrun.yaml" cmp -s "$T/etc.yaml" "$T/embedded.yaml"

# --set: after the job file too, later ones win, and they are validated with the file
printf 'train:\n  steps: 5\n' >"$T/five.yaml"
expect_status 0 "--set after the job file" "$S" config show "$T/five.yaml" --set train.steps=6 --set train.steps=7
check "  ...the last --set wins over the file" grep -q '^  steps: 7$' "$T/out"
expect_status 78 "--set is checked across fields with the file" "$S" config check "$T/five.yaml" --set model.n_head=3
check "  ...naming the --set" grep -q -- "--set model.n_head=3" "$T/err"

expect_status 0 "config keys lists the schema" "$S" config keys
check "  ...every key of the shown job appears" sh -c "
    sed -n 's/^ *\\([a-z_0-9]*\\): .*/\\1/p' '$T/shown-body.yaml' | while read k; do grep -q \"\\(^\\|\\.\\)\$k \" '$T/out' || { echo \"# missing \$k\"; exit 1; }; done"

# data prepare
printf 'hello shardrun\n' >"$T/a.txt"
printf 'second file\n' >"$T/b.txt"
expect_status 0 "data prepare writes a shard" "$S" data prepare -o "$T/d.bin" "$T/a.txt" "$T/b.txt"
check "  ...1024-byte header + 2 bytes per input byte" test "$(wc -c <"$T/d.bin")" -eq $((1024 + 2 * 27))
check "  ...with llm.c's magic 20240520" sh -c "od -An -t d4 -N 12 '$T/d.bin' | tr -s ' ' | grep -q '20240520 1 27'"
expect_status 66 "data prepare with a missing input is status 66" "$S" data prepare -o "$T/e.bin" "$T/a.txt" "$T/nope.txt"
check "  ...and writes nothing" sh -c "! ls '$T' | grep -q '^e.bin'"
expect_status 73 "data prepare into a missing directory is status 73" "$S" data prepare -o "$T/no/dir/x.bin" "$T/a.txt"
expect_status 64 "data prepare without inputs is a usage error" "$S" data prepare -o "$T/f.bin"

# small things a new user meets
expect_status 64 "--set KEY VALUE (no =) is a usage error, not a missing job file" "$S" train --set train.lr 3e-4
check "  ...naming the missing '=' with the fix" grep -q -- "--set train.lr: expected key=value, with no space around '=' (hint: --set train.lr=3e-4)" "$T/err"
"$S" train --set train.steps=1 --set train.batch_size=1 --set train.micro_batch=1 --set model.n_embd=64 \
    --set model.seq_len=32 >"$T/one.out" 2>"$T/one.err"
check "one sequence, one step: singular words on the start line" grep -q 'batch 1 sequence/step = .*; 1 step;' "$T/one.err"
check "a preset with a dimension changed is named custom, with what changed" \
    grep -q 'model custom (tiny with n_embd, seq_len changed): gpt2, n_layer 4' "$T/one.err"
"$S" train --set train.steps=1 --set train.batch_size=2 --set model.seq_len=256 >"$T/two.out" 2>"$T/two.err"
check "  ...and by the preset's name when nothing changed" grep -q 'model tiny: gpt2, n_layer 4' "$T/two.err"
"$S" train --set train.steps=1 --set train.batch_size=1 --set train.micro_batch=1 --set model.n_embd=64 \
    --set model.seq_len=32 --set checkpoint.dir="$T/new/a/ck" --set checkpoint.every_steps=1 >"$T/ck.out" 2>"$T/ck.err"
check "a missing checkpoint.dir and its parents are created, with one notice naming them" \
    sh -c "[ \$(grep -c 'checkpoint: created' '$T/ck.err') = 1 ] && grep -q 'checkpoint: created $T/new, $T/new/a, $T/new/a/ck (checkpoint.dir did not exist)' '$T/ck.err' && [ -d '$T/new/a/ck/step_00000001' ]"
done_testing
