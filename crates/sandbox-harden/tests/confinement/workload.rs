//! A notebook's worth of system use, hardened: whatever the seccomp allow-list refuses by mistake
//! shows up here as a failing step, not in a user's session. (numpy, pandas and matplotlib run in
//! the zygote's own workload test, `runtime/test_hardened.py`; this one needs only the standard
//! library of `python3`.)

use serde_json::json;

use crate::{MAX_OPEN_FILES, Session, run_hardened, succeeded};

const WORKLOAD: &str = r#"
import asyncio, concurrent.futures, mmap, multiprocessing, resource, select, shutil, signal
import sqlite3, subprocess, tempfile, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
steps = []

# Threads: glibc tries clone3 first, gets ENOSYS, and falls back to clone, whose flags the filter
# reads.
ctypes.set_errno(0)
assert libc.syscall(ctypes.c_long(P["clone3"]), None, ctypes.c_long(0)) == -1
assert ctypes.get_errno() == errno.ENOSYS, ctypes.get_errno()
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    assert sum(pool.map(lambda n: n * n, range(100))) == 328350
thread = threading.Thread(target=time.sleep, args=(0.01,)); thread.start(); thread.join()
try:    # glibc 2.35+ registers rseq at start-up and switches it off if the kernel refuses
    assert ctypes.c_uint.in_dll(libc, "__rseq_size").value > 0
except ValueError:
    pass
steps.append("threads")

# bash pipelines with coreutils, tar and gzip.
script = r'''
set -euo pipefail
printf 'b,2\na,1\nc,3\n' > data.csv
cat data.csv | grep -v '^#' | sed 's/,/ /' | awk '{print $2, $1}' | sort -n | head -2 > sorted.txt
tar czf data.tgz data.csv sorted.txt && tar tzf data.tgz | sort | tr '\n' ' '
gzip -k data.csv && gunzip -c data.csv.gz | wc -l
find . -name 'sorted.txt' | xargs cat
mkdir -p d/e && cp -p data.csv d/e/ && mv d/e/data.csv d/e/x.csv && ls d/e && rm -r d
cut -d, -f1 data.csv | tr a-z A-Z | paste -sd, -
(sleep 0.01 &) ; wait; ulimit -n; echo "$(( $(date +%s) > 0 ))"
'''
run = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True)
assert run.returncode == 0, run.stderr
assert run.stdout.split("\n") == ["data.csv sorted.txt 3", "1 a", "2 b", "x.csv", "B,A,C",
                                  str(P["files"]), "1", ""], run.stdout
steps.append("bash")

# fork, and multiprocessing with the fork start method.
pid = os.fork()
if pid == 0:
    os._exit(7)
assert os.waitpid(pid, 0)[1] == 7 << 8
ctx = multiprocessing.get_context("fork")
parent, child = ctx.Pipe()
process = ctx.Process(target=child.send, args=("from child",))
process.start(); assert parent.recv() == "from child"; process.join()
assert process.exitcode == 0
# Pool and Queue need POSIX semaphores: files in the session's own /dev/shm.
with ctx.Pool(2) as pool:
    assert pool.map(abs, [-1, -2, -3]) == [1, 2, 3]
queue = ctx.Queue(); process = ctx.Process(target=queue.put, args=(5,)); process.start()
assert queue.get(timeout=10) == 5; process.join()
steps.append("multiprocessing")

# AF_UNIX sockets, sqlite3 in a file (WAL), select, poll, epoll, eventfd, memfd.
a, b = socket.socketpair(); a.sendall(b"x"); assert b.recv(1) == b"x"
with sqlite3.connect("db.sqlite") as con:
    assert con.execute("pragma journal_mode=wal").fetchone()[0] == "wal"
    con.execute("create table t(x)"); con.executemany("insert into t values (?)", [(1,), (2,)])
assert sqlite3.connect("db.sqlite").execute("select sum(x) from t").fetchone()[0] == 3
r, w = os.pipe(); os.write(w, b"x")
assert select.select([r], [], [], 1)[0] == [r]
poller = select.poll(); poller.register(r); assert poller.poll(1000)
epoll = select.epoll(); epoll.register(r, select.EPOLLIN); assert epoll.poll(1); epoll.close()
efd = os.eventfd(0); os.eventfd_write(efd, 3); assert os.eventfd_read(efd) == 3
mfd = os.memfd_create("toolgate"); os.write(mfd, b"x"); assert os.pread(mfd, 1, 0) == b"x"
steps.append("ipc")

# Files: tempfile, copytree, mmap, statx, chmod, a FIFO, close_range.
with tempfile.TemporaryDirectory() as d:
    open(os.path.join(d, "f"), "w").write("x"); os.mkdir(os.path.join(d, "sub"))
    shutil.copytree(d, "copy"); assert sorted(os.listdir("copy")) == ["f", "sub"]
shutil.rmtree("copy")
with open("m.bin", "w+b") as f:
    f.write(b"\0" * 4096); f.flush()
    with mmap.mmap(f.fileno(), 4096) as m:
        m[0] = 1; m.flush()
assert open("m.bin", "rb").read(1) == b"\x01"
assert libc.statx(-100, b"m.bin", 0, 0x7ff, ctypes.create_string_buffer(256)) == 0
os.chmod("m.bin", 0o640); os.mkfifo("fifo"); os.unlink("fifo")
fd = os.dup(0)
assert libc.close_range(fd, fd, 0) == 0, ctypes.get_errno()
steps.append("files")

# Time, signals (SIGINT becomes KeyboardInterrupt), timers, limits, CPUs, randomness.
time.sleep(0.01)
# Python leaves SIGINT ignored when it starts with it ignored (a test run started in the
# background of a script), as the runtime does not: it installs its own handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
try:
    os.kill(os.getpid(), signal.SIGINT); time.sleep(5)
    raise AssertionError("no KeyboardInterrupt")
except KeyboardInterrupt:
    pass
signal.signal(signal.SIGALRM, lambda *_: None)
signal.setitimer(signal.ITIMER_REAL, 0.01); time.sleep(0.05)
assert resource.getrlimit(resource.RLIMIT_NOFILE) == (P["files"], P["files"])
assert len(os.sched_getaffinity(0)) >= 1; os.cpu_count()
assert len(os.urandom(16)) == 16
os.nice(1)
steps.append("process")

async def main():
    await asyncio.sleep(0.01)
    child = await asyncio.create_subprocess_exec("/bin/true")
    return await child.wait()
assert asyncio.run(main()) == 0
steps.append("asyncio")
print(" ".join(steps))
"#;

#[test]
fn a_notebook_workload_runs_under_the_allow_list() {
    let session = Session::new();
    let params = json!({
        "clone3": libc::SYS_clone3,
        "files": MAX_OPEN_FILES,
    });
    let stdout = succeeded(run_hardened(&session.spec(false), WORKLOAD, &params));
    assert_eq!(
        stdout.trim(),
        "threads bash multiprocessing ipc files process asyncio"
    );
}
