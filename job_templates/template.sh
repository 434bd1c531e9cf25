# The shared body of the job templates (gns.sbatch, accordion.sbatch, static.sbatch), sourced by them with
# $tdir (the templates' directory) set.  `shockwave_template MODE TEMPLATE [train_cnn.py options]`:
#
# * on the submit host (run the template itself: job_templates/gns.sbatch): checks what the job needs and
#   says in one line what is missing, or submits the template with sbatch.  A job whose output file Slurm
#   cannot create (the submit directory is not yours, e.g. a root-owned checkout) fails before it runs, with
#   exit 0:53, no output file and no message: the check catches that on your terminal;
# * inside the job: finds python and the training script, then execs the wrapper (shockwave-run), which says
#   in the job's output where the job reports its progress.
#
# Environment (all optional; sbatch exports your environment by default):
#   SHOCKWAVE_PYTHON  python with slurm_shockwave and torch  (default: the checkout's .venv, found from the
#                     template's own path or $SLURM_SUBMIT_DIR, else python3 on PATH)
#   SHOCKWAVE_TRAIN   training script      (default: train_cnn.py next to the template)
#   SHOCKWAVE_STORE   event store root     (default: the site's, from $SHOCKWAVE_CONFIG or
#                     /etc/shockwave/config.toml; see README.md)

shockwave_error() {
    echo "shockwave: error: $*" >&2
}

shockwave_template() {
    mode=$1
    template=$2
    shift 2
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
    train="${SHOCKWAVE_TRAIN:-}"
    for c in "$tdir/train_cnn.py" "${SLURM_SUBMIT_DIR:-.}/train_cnn.py" \
             "${SLURM_SUBMIT_DIR:-.}/job_templates/train_cnn.py"; do
        [ -n "$train" ] && break
        [ -f "$c" ] && train=$c
    done
    if [ -z "$train" ] || [ ! -f "$train" ]; then
        shockwave_error "training script not found (${train:-train_cnn.py next to $tdir}); set SHOCKWAVE_TRAIN"
        return 2
    fi
    if [ -z "${SLURM_JOB_ID:-}" ]; then
        if [ ! -w . ]; then
            shockwave_error "cannot submit from $(pwd): Slurm writes the job's output file here and you" \
                "cannot write to it (the job would fail with exit 0:53 and no output); cd to a directory" \
                "of yours (e.g. cd ~) and run $template again"
            return 2
        fi
        command -v sbatch >/dev/null 2>&1 || { shockwave_error "sbatch not found: run this on a submit host"; return 2; }
        exec sbatch "$template" "$@"
    fi
    # exec: the wrapper must BE the batch shell so that it receives the B:USR1 signal itself
    exec "$py" -m slurm_shockwave.wrapper.cli -- "$py" "$train" --mode "$mode" "$@"
}
