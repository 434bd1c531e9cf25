# The shared body of the job templates, sourced by them with $tdir (the templates' directory) set.
#
#   shockwave_template MODE TEMPLATE [train_cnn.py options]           gns/accordion/static.sbatch
#   shockwave_launch TEMPLATE SCRIPT LAUNCHER MODULES [options]       torchrun/torchrun_2nodes/lightning/hf.sbatch
#
# LAUNCHER: `python` (one process), `torchrun` (one torchrun on this node, one worker per GPU of the job) or
# `torchrun-nodes` (srun starts one torchrun per node of the job, c10d rendezvous on the first node); MODULES: the
# python modules SCRIPT needs (space-separated, e.g. "torch lightning").
#
# * on the submit host (run the template itself: job_templates/gns.sbatch): checks what the job needs and
#   says in one line what is missing, or submits the template with sbatch.  A job whose output file Slurm
#   cannot create (the submit directory is not yours, e.g. a root-owned checkout) fails before it runs, with
#   exit 0:53, no output file and no message: the check catches that on your terminal;
# * inside the job: finds python and the training script, checks them again, then execs the wrapper
#   (shockwave-run), which says in the job's output where the job reports its progress.
#
# The checks (exit 2 with one line): a python with slurm_shockwave and the framework modules (else how to install
# them: pip install 'slurm-shockwave[frameworks]'), the training script, a writable submit directory, and the
# template's --signal (its #SBATCH line, or $SBATCH_SIGNAL): it must be B:<the wrapper's signal> (USR1 unless
# SHOCKWAVE_CHECKPOINT_SIGNAL says otherwise), USR1 or USR2.  Without B: Slurm signals every process of the job:
# torchrun's agent does not handle USR1/USR2 and dies of it (so do a srun step's tasks without a handler yet);
# TERM, INT or KILL would end the job instead of asking it to checkpoint.  With B: only the batch shell gets it, which
# is the wrapper (exec'd); it writes the checkpoint request file that every rank polls, so the ranks never receive
# the signal itself (NCCL's or Lightning's own use of USR1 does not matter).
#
# Environment (all optional; sbatch exports your environment by default):
#   SHOCKWAVE_PYTHON  python with slurm_shockwave (and the framework)  (default: the checkout's .venv, found from
#                     the template's own path or $SLURM_SUBMIT_DIR, else python3 on PATH)
#   SHOCKWAVE_TRAIN   training script      (default: SCRIPT next to the template)
#   SHOCKWAVE_STORE   event store root     (default: the site's, from $SHOCKWAVE_CONFIG or
#                     /etc/shockwave/config.toml; see README.md)
#   SHOCKWAVE_RDZV_PORT  torchrun-nodes: the rendezvous port on the first node (default: a free one)

shockwave_error() {
    echo "shockwave: error: $*" >&2
}

# sets $py: a python that imports slurm_shockwave and every module of $1
shockwave_find_python() {
    mods="slurm_shockwave $1"
    imports=$(printf 'import %s;' $mods)
    py="${SHOCKWAVE_PYTHON:-}"
    if [ -z "$py" ]; then
        for c in "$tdir/../.venv/bin/python" "${SLURM_SUBMIT_DIR:-.}/.venv/bin/python" \
                 "${SLURM_SUBMIT_DIR:-.}/../.venv/bin/python" python3; do
            if "$c" -c 'import slurm_shockwave' 2>/dev/null; then py=$c; break; fi
        done
    fi
    if [ -z "$py" ] || ! "$py" -c 'import slurm_shockwave' 2>/dev/null; then
        shockwave_error "no python with slurm_shockwave found (looked for .venv next to $tdir and" \
            "${SLURM_SUBMIT_DIR:-.}); run 'bash .ci/setup' in the checkout or set SHOCKWAVE_PYTHON"
        return 2
    fi
    if ! "$py" -c "$imports" 2>/dev/null; then
        missing=""
        for m in $1; do "$py" -c "import $m" 2>/dev/null || missing="$missing $m"; done
        shockwave_error "$py cannot import${missing} (needed by $2): pip install 'slurm-shockwave[frameworks]'" \
            "into that python, or set SHOCKWAVE_PYTHON to one that has it"
        return 2
    fi
}

# sets $train: the training script $1 (SHOCKWAVE_TRAIN, else next to the template or in the submit directory)
shockwave_find_train() {
    train="${SHOCKWAVE_TRAIN:-}"
    for c in "$tdir/$1" "${SLURM_SUBMIT_DIR:-.}/$1" "${SLURM_SUBMIT_DIR:-.}/job_templates/$1"; do
        [ -n "$train" ] && break
        [ -f "$c" ] && train=$c
    done
    if [ -z "$train" ] || [ ! -f "$train" ]; then
        shockwave_error "training script not found (${train:-$1 next to $tdir}); set SHOCKWAVE_TRAIN"
        return 2
    fi
}

# the template's --signal ($SBATCH_SIGNAL, else its #SBATCH line) must be B:<the wrapper's signal>, USR1 or USR2
shockwave_check_signal() {
    spec="${SBATCH_SIGNAL:-}"
    [ -n "$spec" ] || spec=$(sed -n 's/^#SBATCH  *--signal=\([^ ]*\).*/\1/p' "$1" 2>/dev/null | head -n 1)
    [ -n "$spec" ] || return 0
    want="${SHOCKWAVE_CHECKPOINT_SIGNAL:-USR1}"
    want="${want#SIG}"
    case "$spec" in
        B:*|*B:*) ;;
        *) shockwave_error "--signal=$spec goes to every process of the job: torchrun's agent (and a task" \
               "without its handler yet) dies of USR1/USR2; use --signal=B:$want@<seconds> (the batch shell =" \
               "shockwave-run, which passes the request to every rank)"
           return 2 ;;
    esac
    sig=${spec#*B:}
    sig=${sig%%@*}
    sig=${sig#SIG}
    case "$sig" in
        USR1|USR2|10|12) ;;
        *) shockwave_error "--signal=$spec would end the job instead of asking it to checkpoint; use" \
               "--signal=B:$want@<seconds>"
           return 2 ;;
    esac
    case "$sig" in 10) sig=USR1 ;; 12) sig=USR2 ;; esac
    if [ "$sig" != "$want" ]; then
        shockwave_error "--signal=$spec but shockwave-run listens for $want: set SHOCKWAVE_CHECKPOINT_SIGNAL=$sig" \
            "or use --signal=B:$want@<seconds>"
        return 2
    fi
}

# on the submit host: submit the template (after the check of the current directory); in the job: return
shockwave_submit() {
    if [ -z "${SLURM_JOB_ID:-}" ]; then
        if [ ! -w . ]; then
            shockwave_error "cannot submit from $(pwd): Slurm writes the job's output file here and you" \
                "cannot write to it (the job would fail with exit 0:53 and no output); cd to a directory" \
                "of yours (e.g. cd ~) and run $1 again"
            return 2
        fi
        command -v sbatch >/dev/null 2>&1 || { shockwave_error "sbatch not found: run this on a submit host"; return 2; }
        exec sbatch "$@"
    fi
}

# GPUs of this job on this node (the workers torchrun starts here), at least 1
shockwave_gpus_here() {
    n="${SLURM_GPUS_ON_NODE:-}"
    case "$n" in ''|*[!0-9]*) n=$(echo "${CUDA_VISIBLE_DEVICES:-}" | tr ',' '\n' | grep -c .) ;; esac
    [ "$n" -ge 1 ] 2>/dev/null || n=1
    echo "$n"
}

shockwave_template() {
    mode=$1
    template=$2
    shift 2
    shockwave_pre="--mode $mode"  # the program's first options (not sbatch's)
    shockwave_launch "$template" train_cnn.py python "torch" "$@"
}

shockwave_launch() {
    template=$1
    script=$2
    launcher=$3
    modules=$4
    shift 4
    shockwave_find_python "$modules" "$script" || return 2
    shockwave_find_train "$script" || return 2
    shockwave_check_signal "$template" || return 2
    shockwave_submit "$template" "$@" || return 2
    pre=${shockwave_pre:-}
    # exec: the wrapper must BE the batch shell so that it receives the B:USR1 signal itself
    case "$launcher" in
        python)
            exec "$py" -m slurm_shockwave.wrapper.cli -- "$py" "$train" $pre "$@" ;;
        torchrun)  # torchrun = python -m torch.distributed.run, of the same python
            exec "$py" -m slurm_shockwave.wrapper.cli -- "$py" -m torch.distributed.run --standalone \
                --nproc_per_node="$(shockwave_gpus_here)" "$train" $pre "$@" ;;
        torchrun-nodes)
            nodes="${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}"
            head=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" 2>/dev/null | head -n 1)
            addr=$(scontrol show node "$head" 2>/dev/null | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p' | head -n 1)
            # the batch shell runs on the first node: a port free there now
            port="${SHOCKWAVE_RDZV_PORT:-$("$py" -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')}"
            exec "$py" -m slurm_shockwave.wrapper.cli -- srun --nodes="$nodes" --ntasks-per-node=1 --kill-on-bad-exit=1 \
                "$py" -m torch.distributed.run --nnodes="$nodes" --nproc_per_node="$(shockwave_gpus_here)" \
                --rdzv_backend=c10d --rdzv_endpoint="${addr:-$head}:$port" \
                --rdzv_id="${SLURM_JOB_ID}-${SLURM_RESTART_COUNT:-0}" "$train" $pre "$@" ;;
        *)
            shockwave_error "unknown launcher $launcher in $template"
            return 2 ;;
    esac
}
