#!/usr/bin/env python3
"""Measures the fraction of a core a rank uses while it waits on a link (its
progress polls, its sleeps' wake-ups), for tools/calibrate_sim.sh: two ranks
of rdmaflow_train all-reduce STEPS steps, first even, then with rank 1 a
FACTORx straggler, so that rank 0 spends most of the second run waiting. The
CPU rank 0 used (user + system, from getrusage) grows by the wait's share:
  wait_cpu = (cpu_waiting - cpu_even) / (wall_waiting - wall_even)
Over shared memory both ranks run under one `--local 2` launcher (rank 1's
CPU is the same in both runs: it sleeps its extra time); over a network link
each rank runs in its namespace host (tools/netns_hosts.sh, already up).
Prints the fraction (0..1).
  wait_cpu.py TRAIN_BIN shm
  wait_cpu.py TRAIN_BIN LINK MASTER_ADDR PORT   (ranks in namespace hosts 0, 1)
Environment: STEPS (40), FACTOR (20).

With --moving, the fraction of a core a rank uses while data it sends and
receives moves over the link (LinkProfile.moving_cpu): two ranks of
bench/allreduce_bench all-reduce 16 MiB over it (a ring of two: each rank
sends and receives all the time, and waits as rdmaflow's ranks do), first
ITERS_FEW then ITERS_MANY times (5 at least); the CPU rank 0 used grows by the extra
iterations' share:
  moving_cpu = (cpu_many - cpu_few) / (wall_many - wall_few)
(its reductions included: 16 MiB at memory speed, a few per cent of a
core at 1 Gbit/s)
  wait_cpu.py --moving ALLREDUCE_BENCH LINK MASTER_ADDR PORT
Environment: ITERS_FEW (5), ITERS_MANY (25)."""
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 600  # a run takes seconds; a hung rank is killed


def run_shm(train, common):
    """Wall and CPU seconds of a `--local 2` job (every process of it)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.monotonic()
    subprocess.run([train, "--local", "2"] + common, check=True, timeout=TIMEOUT_S,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return rusage_since(before, begin)


def rusage_since(before, begin):
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.monotonic() - begin, cpu


def run_hosts(command, master, port):
    """Wall and CPU seconds of rank 0 (rank 1 runs beside it)."""
    netns = os.path.join(ROOT, "tools", "netns_hosts.sh")
    started = {}
    try:
        for rank in (1, 0):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR=master,
                       MASTER_PORT=str(port))
            cmd = [netns, "exec", str(rank)] + command
            if rank == 0:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                begin = time.monotonic()
            started[rank] = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL)
        if started[0].wait(timeout=TIMEOUT_S) != 0:
            sys.exit("wait_cpu: rank 0 failed over %s" % master)
        # Rank 0's rusage is collected by its wait, before rank 1's.
        measured = rusage_since(before, begin)
        if started[1].wait(timeout=TIMEOUT_S) != 0:
            sys.exit("wait_cpu: rank 1 failed over %s" % master)
        return measured
    except subprocess.TimeoutExpired:
        sys.exit("wait_cpu: a rank ran past %d s" % TIMEOUT_S)
    finally:
        for p in started.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def share_of(first, second, what):
    """The CPU the second run's extra wall time took, as a fraction of a core."""
    (wall_a, cpu_a), (wall_b, cpu_b) = first, second
    if wall_b <= wall_a:
        sys.exit("wait_cpu: the %s run was not longer (%.2f s against %.2f s)" %
                 (what, wall_b, wall_a))
    return min(1.0, max(0.0, (cpu_b - cpu_a) / (wall_b - wall_a)))


def moving(argv):
    if len(argv) != 4:
        sys.exit("wait_cpu: --moving needs ALLREDUCE_BENCH LINK MASTER_ADDR PORT")
    bench, _, master, port = argv
    size = 16 << 20
    results = []
    counts = []
    for name, default in (("ITERS_FEW", "5"), ("ITERS_MANY", "25")):
        text = os.environ.get(name, default)
        if not text.isdigit() or int(text) < 5:
            sys.exit("wait_cpu: %s=%s: a whole number of iterations, 5 at least" % (name, text))
        counts.append(int(text))
    if counts[1] <= counts[0]:
        sys.exit("wait_cpu: ITERS_MANY (%d) must exceed ITERS_FEW (%d)" % (counts[1], counts[0]))
    for iters in counts:
        command = [bench, "--ranks=2", "--impls=rdmaflow", "--min_bytes=%d" % size,
                   "--max_bytes=%d" % size, "--max_iters=%d" % iters,
                   "--byte_budget=%d" % (size * iters),
                   "--params=tls=tcp,net_devices=eth0"]
        results.append(run_hosts(command, master, int(port) + len(results)))
    print("%.4f" % share_of(results[0], results[1], "longer all-reduce"))
    return 0


def main(argv):
    if argv and argv[0] == "--moving":
        return moving(argv[1:])
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    train, link = argv[0], argv[1]
    steps = os.environ.get("STEPS", "40")
    factor = os.environ.get("FACTOR", "20")
    results = []
    for slow in ("1", factor):
        common = ["--model", "lenet5", "--steps", steps, "--progress=false",
                  "--strategy", "allreduce", "--slow_rank", "1", "--slow_factor", slow]
        if link == "shm":
            results.append(run_shm(train, common))
        else:
            if len(argv) != 4:
                sys.exit("wait_cpu: a network link needs MASTER_ADDR and PORT")
            command = [train] + common + ["--transport_params", "tls=tcp,net_devices=eth0"]
            results.append(run_hosts(command, argv[2], int(argv[3]) + len(results)))
    print("%.4f" % share_of(results[0], results[1], "straggler's"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
