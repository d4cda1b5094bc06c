# test/lib.sh: what the test scripts share; each sources it first (`. "$(dirname "$0")/lib.sh"`).
# It moves to the repository root and sets:
#   CC, CFLAGS, PY      the compiler and flags (make test passes the Makefile's), the Python with
#                       Debian's torch and numpy
#   JOBS                how many programs a test's make builds at once (make -j$JOBS): the
#                       machine's cores, unless set
#   OMP_WAIT_POLICY     passive: libgomp's default spin-waiting makes every parallel region wait
#                       for a descheduled thread when the cores are busy with other work, and a
#                       tiny model's steps go from milliseconds to most of a second
# and gives:
#   need_python MODULES...   exits 77 (skipped) unless $PY imports them
#   fresh_dir NAME           $dir = build/NAME, emptied
#   build_train_cpu [FLAGS]  $dir/train_cpu from train_cpu.c with $CFLAGS and FLAGS
#   build_locked LOCK TARGETS...
#                            make -s -j$JOBS TARGETS, holding the lock build/LOCK.lock: tests that
#                            test/run.sh runs at once and that need the same programs build them
#                            once, the second waiting for the first
#   emu_train_gpu_setup      for the tests of build/emu/train_gpu: skipped without a C++ compiler or
#                            numpy; builds it and build/emu/train_gpu_race (build_locked); their
#                            environment
#   cut_run FROM TO STEP     TO = the -o folder FROM as a run killed after its checkpoint at STEP
#                            had left it: that checkpoint and state, main.log up to STEP
#   printed_after STEP FILE  what a training run printed (FILE) after STEP, without the timings,
#                            the "wrote"/"average" lines and the processes' lines that follow a
#                            run's first step: the part a resumed run must repeat
#   tiny_run_files MAXT C NTRAIN NVAL SEED
#                            a small random run in $dir: model.bin (V=97, 2 layers, 2 heads, C
#                            channels, context MAXT) with train.bin of NTRAIN tokens, val.bin of
#                            NVAL (seeds SEED and SEED+1), tok.bin (the 256 single bytes)
#   mpi_run N ARGS...        mpirun -np N ARGS, as this project's tests run it: one OpenMP thread
#                            per process (MPI_THREADS), no pinning to cores, more processes than
#                            cores allowed, as root too (CI runs as root, which Open MPI refuses
#                            unless told), copies between processes through shared memory without
#                            the kernel's cross-memory attach (which containers often forbid), and
#                            stopped after MPI_TIMEOUT seconds (default 300; exit status 124);
#                            the emulator's builds run without LeakSanitizer's check at exit
#                            (as test_train_gpu_emu runs them anyway): Open MPI holds memory to the
#                            end from plugins it has unloaded by then, which no suppression can name
#   launch NPROCS ARGS...    ARGS under mpi_run with NPROCS processes, or alone when NPROCS is 0,
#                            both stopped after MPI_TIMEOUT seconds
#   train_run NAME NPROCS ARGS...
#                            ./train_cpu with the options of the test's array common, -o $dir/NAME
#                            and ARGS, under launch; stdout in $dir/NAME.out, stderr in NAME.err; a
#                            failure told by the test's bad, with the end of stderr (status 1)
#   same_after_resume WHOLE RESUMED STEP LAST WHAT
#                            the run $dir/RESUMED (cut from $dir/WHOLE at STEP, then resumed) says it
#                            resumed from STEP, printed WHOLE's lines after STEP, and wrote WHOLE's
#                            checkpoint and state of step LAST and main.log; else the test's bad
#                            names WHAT
#   mpi_error NAME TEXT NPROCS ARGS...
#                            ARGS (under launch) fail within 120 s with exactly one line "error: ...",
#                            which holds TEXT (stdout and stderr in $dir/err_NAME.out and .err); else
#                            the test's bad. ARGS may hold "-np N PROGRAM ..." after a ":", mpirun's
#                            way of giving ranks different command lines
#   serving ERRFILE CMD...   the server CMD (told --serve 127.0.0.1:0) in the background, its stderr
#                            in ERRFILE, its id in pid and added to the array pids (for the test's
#                            trap to kill); waits up to 10 s for the line that names its port, which
#                            it sets in port (empty if the server stopped first or took longer);
#                            returns 2 when the build has no HTTP server (libmicrohttpd)
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O2 -fopenmp}
PY=${PYTHON:-/usr/bin/python3}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
mkdir -p build

need_python() {
  local m
  for m in "$@"; do
    if ! "$PY" -c "import $m" 2>/dev/null; then
      echo "skipped: $PY cannot import $m (bash test/setup.sh installs Debian's python3-$m)"
      exit 77
    fi
  done
}

fresh_dir() {
  dir=build/$1
  rm -rf "$dir"
  mkdir -p "$dir"
}

build_train_cpu() {
  $CC $CFLAGS "$@" -o "$dir/train_cpu" train_cpu.c -lm || { echo "FAIL: train_cpu does not build"; exit 1; }
}

build_locked() {
  local lock=build/$1.lock; shift
  flock "$lock" make -s -j"$JOBS" "$@"
}

emu_train_gpu_setup() {
  if ! command -v "${CXX:-g++}" >/dev/null; then echo "skipped: no C++ compiler (${CXX:-g++})"; exit 77; fi
  need_python numpy
  build_locked emu_train_gpu train_gpu_emu build/emu/train_gpu_race ||
    { echo "FAIL: build/emu/train_gpu or build/emu/train_gpu_race does not build"; exit 1; }
  export ASAN_OPTIONS=detect_leaks=0
  # the emulator honours CUDA_VISIBLE_DEVICES as CUDA does: a GPU machine's setting (a scheduler's)
  # must not hide its emulated GPUs
  unset CUDA_VISIBLE_DEVICES
}

cut_run() {
  local from=$1 to=$2 step; step=$(printf '%08d' "$3")
  mkdir -p "$to"
  cp "$from/model_$step.bin" "$from/state_$step.bin" "$to/" || exit 1
  awk -F'[: ]' -v s="$3" '$2 <= s' "$from/main.log" >"$to/main.log"   # lines "s:STEP ..."
}

printed_after() {
  awk -v s="$1" '$1 == "step" && $2 + 0 > s && $2 ~ /\// {on=1} on' "$2" |
    sed -E 's/ \| [0-9.]+ ms \| .*$//' | grep -v -e '^average' -e '^wrote' -e '^rank [0-9]* ('
}

tiny_run_files() {
  local ref="$PY dev/reference/gpt2_ref.py"
  $ref make-model --model "$dir/model.bin" --tokens "$dir/train.bin" --V 97 --maxT "$1" --L 2 \
    --NH 2 --C "$2" --ntokens "$3" --seed "$5" >/dev/null || exit 1
  $ref make-tokens --out "$dir/val.bin" --V 97 --n "$4" --seed $(($5 + 1)) >/dev/null || exit 1
  $ref make-tokenizer --out "$dir/tok.bin" >/dev/null || exit 1
}

mpi_run() {
  local n=$1; shift
  OMP_NUM_THREADS=${MPI_THREADS:-1} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} \
    timeout "${MPI_TIMEOUT:-300}" mpirun -np "$n" --bind-to none --oversubscribe "$@"
}

launch() {
  local np=$1; shift
  if [ "$np" = 0 ]; then timeout "${MPI_TIMEOUT:-300}" "$@"; else mpi_run "$np" "$@"; fi
}

train_run() {
  local name=$1 np=$2; shift 2
  local cmd=(./train_cpu "${common[@]}" -o "$dir/$name" "$@")
  launch "$np" "${cmd[@]}" >"$dir/$name.out" 2>"$dir/$name.err" ||
    { bad "$name: ${cmd[*]} (processes: $np) exited with $?:"; tail -5 "$dir/$name.err"; return 1; }
}

same_after_resume() {
  local whole=$dir/$1 resumed=$dir/$2 step=$3 last f; last=$(printf '%08d' "$4")
  grep -q "resumed from .* at step $step" "$resumed.out" || bad "$5 did not resume from step $step"
  diff <(printed_after "$step" "$whole.out") <(printed_after "$step" "$resumed.out") ||
    bad "$5 printed other losses or samples after step $step than the uninterrupted run"
  for f in "model_$last.bin" "state_$last.bin" main.log; do
    cmp -s "$whole/$f" "$resumed/$f" || bad "$f differs between the uninterrupted run and $5"
  done
}

mpi_error() {
  local name=$1 pattern=$2 np=$3; shift 3
  local out=$dir/err_$name start=$SECONDS rc
  MPI_TIMEOUT=120 launch "$np" "$@" >"$out.out" 2>"$out.err"
  rc=$?
  local lines; lines=$(grep -c '^error: ' "$out.err")  # "error: [rank R of N: ]MESSAGE"
  if [ $rc -eq 124 ]; then bad "$name: still running after 120 s (a hang)"
  elif [ $rc -eq 0 ]; then bad "$name: exited 0"
  elif [ "$lines" != 1 ]; then bad "$name: $lines error lines, not 1:"; cat "$out.err"
  elif ! grep '^error: ' "$out.err" | grep -qF -- "$pattern"; then bad "$name: the error is not '$pattern':"; cat "$out.err"
  else echo "ok: $name: exit $rc in $((SECONDS - start)) s: $(grep '^error: ' "$out.err")"
  fi
}

serving() {
  local err=$1; shift
  : > "$err"  # there before the first look, whenever the server's shell opens it
  "$@" 2> "$err" &
  pid=$!; pids+=("$pid"); port=""
  for _ in $(seq 200); do
    port=$(sed -n 's|^serving .* on http://127\.0\.0\.1:\([0-9]*\)/v1 .*|\1|p' "$err")
    [ -n "$port" ] || ! kill -0 "$pid" 2>/dev/null && break
    sleep 0.05
  done
  ! grep -q "this build has no HTTP server" "$err" || return 2
}
