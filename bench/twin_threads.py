"""What the PyTorch twins whose cases name their thread count (torch_bert.py, torch_train.py) share: Debian's
OpenBLAS sizes its thread pool from OMP_NUM_THREADS when it loads, and a 2-thread run in a process started with
OMP_NUM_THREADS=1 is slower than a 1-thread one, so each thread count runs in a process started with
OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set to it."""
import os
import subprocess
import sys

THREAD_COUNTS = (1, 2)


def add_arguments(ap, example):
    """--threads (what compare.py passes; ignored), --only-threads N and --only NAME."""
    ap.add_argument("--threads", type=int, default=None, help="ignored: every case names its own thread count")
    ap.add_argument("--only-threads", type=int, default=None,
                    help="run in this process at this thread count (start it with OMP_NUM_THREADS set to it)")
    ap.add_argument("--only", metavar="NAME", help=f"with --only-threads: this case alone ({example})")


def run_each_thread_count(script, min_time):
    """Runs `script --only-threads N --min-time T` for every thread count, each in a process of its own."""
    for n in THREAD_COUNTS:
        env = dict(os.environ, OMP_NUM_THREADS=str(n), OPENBLAS_NUM_THREADS=str(n))
        subprocess.run([sys.executable, os.path.abspath(script), "--only-threads", str(n), "--min-time", str(min_time)],
                       env=env, check=True)


def check_only(script, only, names, threads):
    if only and only not in names:
        sys.exit(f"{script}: no case {only} at {threads} threads (the cases: {', '.join(names)})")


def dispatch(args, script, run):
    """With --only-threads N: run(N, min_time, only) in this process; else every count in a process of its own."""
    if args.only_threads:
        run(args.only_threads, args.min_time, args.only)
    else:
        run_each_thread_count(script, args.min_time)
